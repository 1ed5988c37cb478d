"""The SVD lower bound on the error of any matrix mechanism for a workload (Li and Miklau, "An adaptive
mechanism for accurate query answering under differential privacy", PVLDB 5(6), 2012; "Optimal error of
query sets under the differentially-private matrix mechanism", ICDT 2013).

A matrix mechanism answers a workload ``W`` (``q`` queries over ``N`` cells) by measuring a strategy ``A``
with noise of data-independent scale and answering ``W A^+ y``: a linear unbiased estimate. Its expected
total squared error is ``c ||A||^2 tr(W^T W (A^T A)^-1)``, where ``c`` and the norm depend on the noise.

**The version used here: ε-DP with Laplace noise, as HDMM uses it.** Li and Miklau state the bound for
(ε, δ)-DP with Gaussian noise, where ``||A||`` is the largest column L2 norm ``||A||_2`` and
``c = 2 ln(2/δ) / ε^2``. Under ε-DP the Laplace mechanism adds noise of scale ``||A||_1 / ε`` (``||A||_1``
the largest column L1 norm: the strategy's sensitivity when neighbours differ in one cell by 1, i.e.
add/remove of one record, or of one user whose locations weigh 1 in total), variance
``2 ||A||_1^2 / ε^2`` per strategy query, so

    TSE(W, A) = (2 / ε^2) ||A||_1^2 tr(W^T W (A^T A)^-1)
              >= (2 / ε^2) ||A||_2^2 tr(W^T W (A^T A)^-1)        (||A||_1 >= ||A||_2 column by column)
              >= (2 / ε^2) (sum_i σ_i(W))^2 / N.

The last step is the SVD bound itself: with ``M = A^T A / ||A||_2^2``, ``diag(M) <= 1`` so ``tr M <= N``,
and Cauchy-Schwarz on ``tr((W^T W)^{1/2}) = tr(M^{1/2} . M^{-1/2} (W^T W)^{1/2})`` gives
``(sum σ_i)^2 = tr((W^T W)^{1/2})^2 <= tr(M) tr(W^T W M^-1)``. So ``2 / ε^2`` is the privacy constant here,
and the bound holds for every strategy, weighted rows and several noise scales included (a tree with a
budget per level is a strategy with weighted rows). It is not attained in general under ε-DP (the step
``||A||_1 >= ||A||_2`` is strict as soon as a cell is in several strategy queries); it is attained by the
Laplace mechanism on the cells for the identity workload and on the total for the total query.

What it bounds: the expected squared error of linear unbiased estimates with data-independent noise.
A mechanism outside that class (biased: spreading counts evenly over coarse cells, clipping, thresholding;
or data-dependent: a partition chosen from the data) can go below it, and often does on sparse data.

Per query, ``RMSE >= sqrt((2 / ε^2) (sum σ_i)^2 / (N q))`` (:func:`rmse_bound`). The factor
``(sum σ_i)^2 / N`` depends on the workload alone: it is computed once per workload and kept on disk
(:func:`engine.core.cache.data_free`). Singular values: for all ranges of an ``n x n`` grid, those of a
Kronecker product are the products of the factors', so ``sum σ_i = (sum_j sqrt(λ_j))^2`` with ``λ`` the
eigenvalues of the 1-D all-range Gram matrix; for rectangles, the square roots of the eigenvalues of the
``q x q`` matrix ``W W^T`` (:meth:`engine.core.workload.RangeWorkload.row_gram`), or of ``W^T W`` when the
grid has fewer cells than there are queries.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.cache import data_free
from ..core.epsilon import check_epsilon
from ..core.errors import ParamError
from ..core.workload import ALL_RANGES, RangeWorkload, all_range_gram

LAPLACE_CONSTANT = "2 / eps^2"  # the privacy constant of the ε-DP (Laplace) version, see the module docstring
MAX_GRAM = 20_000  # the larger side of an eigenproblem this module solves (q x q or N x N)


def _nuclear_norm_sq(w: RangeWorkload) -> float:
    """``(sum_i σ_i(W))^2``."""
    if w.kind == ALL_RANGES:
        lam = np.linalg.eigvalsh(all_range_gram(w.n))
        return float(np.sqrt(np.clip(lam, 0.0, None)).sum() ** 4)
    if w.queries <= w.cells:
        gram = w.row_gram()
    elif w.cells <= MAX_GRAM:
        d = w.dense()
        gram = d.T @ d
    else:
        raise ParamError(f"the lower bound needs an eigenproblem of at most {MAX_GRAM:,} rows")
    if len(gram) > MAX_GRAM:
        raise ParamError(f"the lower bound is computed for at most {MAX_GRAM:,} queries (got {w.queries:,})")
    lam = np.linalg.eigvalsh(gram)
    return float(np.sqrt(np.clip(lam, 0.0, None)).sum() ** 2)


def svd_bound_factor(w: RangeWorkload) -> float:
    """``(sum_i σ_i(W))^2 / N``: the SVD bound without its privacy constant, computed once per workload
    (kept on disk)."""
    arrays = data_free("svd_bound", w.key(), lambda: {"factor": np.array(_nuclear_norm_sq(w) / w.cells)})
    return float(arrays["factor"])


def tse_bound(w: RangeWorkload, epsilon: float) -> float:
    """The least expected total squared error of any ε-DP matrix mechanism on ``w`` (module docstring)."""
    return 2.0 / check_epsilon(epsilon) ** 2 * svd_bound_factor(w)


def rmse_bound(w: RangeWorkload, epsilon: float) -> float:
    """The least root-mean-squared error per query of any ε-DP matrix mechanism on ``w``."""
    return math.sqrt(tse_bound(w, epsilon) / w.queries)
