"""The HDMM mechanism for range queries on the map: a Kronecker product of p-Identity strategies optimised for
the workload (:mod:`.strategy`), cached per (grid, workload) on disk, Laplace noise, least squares."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ...core.accounting import Ledger
from ...core.cache import data_free
from ...core.epsilon import check_epsilon
from ...core.grid import Domain
from ...core.params import Param
from ...core.workload import RangeWorkload
from ...metrics.lower_bound import rmse_bound
from ..base import Mechanism, Release, register
from ..capabilities import AuditPlan
from ..common import UNIT_PARAM, bound_contributions, curator_communication, curator_diagnostics, curator_view
from ..dawa.mechanism import workload_rects
from ..noise_model import NoiseModel, part
from .strategy import (
    INIT_SEED,
    default_p,
    expected_error,
    gram_inverse,
    iterations,
    kron_answers,
    kron_least_squares,
    optimise,
    pseudo_inverse,
    strategy_matrix,
)

WORKLOADS = ("all ranges", "squares")
STRATEGY_VERSION = 1  # part of the cached strategy's key: raise it when the optimisation changes


def workload_of(domain: Domain, params: dict) -> RangeWorkload:
    """The workload HDMM optimises for: all the ranges of the grid (exact, implicit), or random squares
    drawn as the Range queries page and DAWA draw them (:func:`engine.mechanisms.dawa.mechanism.workload_rects`:
    public parameters and seed, partly covered cells counted whole)."""
    if params["workload"] == "all ranges":
        return RangeWorkload.all_ranges(domain.n)
    return RangeWorkload.rectangles(workload_rects(domain, params), domain.n)


def strategy_p(domain: Domain, params: dict) -> int:
    p = int(params["p"])
    return default_p(domain.n) if p == 0 else p


def strategy_for(w: RangeWorkload, p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(Θ_y, Θ_x)`` optimised for ``w`` with ``p`` extra rows per axis: computed once per machine from
    public inputs alone (:func:`engine.core.cache.data_free`)."""
    name = f"{w.key()}|p={p}|iter={iterations(w.n, p)}|seed={INIT_SEED}|v{STRATEGY_VERSION}"
    key = hashlib.sha256(name.encode()).hexdigest()[:32]

    def compute():
        ty, tx, rounds = optimise(w, p)
        return {"theta_y": ty, "theta_x": tx, "rounds": np.array(rounds)}

    a = data_free("hdmm_strategy", key, compute)
    return a["theta_y"], a["theta_x"]


@part
@dataclass(frozen=True, eq=False)
class KronCovariance:
    """The covariance of HDMM's cells, ``rows (x) cols``: the least squares' ``(2 / eps^2) M_y`` over the grid's
    rows and ``M_x`` over its columns (``M = (A^T A)^-1`` of each axis's public strategy)."""

    rows: np.ndarray
    cols: np.ndarray

    def variance(self, cell_weights: np.ndarray) -> float:
        """The noise variance of ``a . density``: ``sum(a o (rows a cols))``, over the rows and columns ``a``
        touches only."""
        n = self.cols.shape[0]
        a = np.asarray(cell_weights, dtype=np.float64).reshape(n, n)
        r, c = np.flatnonzero(a.any(axis=1)), np.flatnonzero(a.any(axis=0))
        sub = a[np.ix_(r, c)]
        return float(np.sum(sub * (self.rows[np.ix_(r, r)] @ sub @ self.cols[np.ix_(c, c)])))

    def block_variance(self, k: int) -> np.ndarray:
        """Every ``k`` x ``k`` block's noise variance in one pass: ``1^T cov_block 1`` per block row and column."""
        sums = np.kron(np.eye(self.cols.shape[0] // k), np.ones(k))  # block-sum operator along one axis
        per_axis = [np.einsum("bi,ij,bj->b", sums, c, sums) for c in (self.rows, self.cols)]
        return np.outer(per_axis[0], per_axis[1]).ravel()  # block (by, bx), row-major as the blocks are


@register
class Hdmm(Mechanism):
    """HDMM, the high-dimensional matrix mechanism (McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of
    high-dimensional statistical queries under differential privacy", PVLDB 11(10), 2018), for the 2-D range
    queries of the map.

    The paper's text was not reachable from the project's corpora; its definitions are restated here as the
    paper gives them (section numbers from memory of the paper: Section 2 the matrix mechanism, Section 5
    OPT_0 with p-Identity strategies, Section 6 OPT_⊗ for Kronecker products and unions of them, Section 7
    measurement and reconstruction), and checked against the figure its authors' README prints (all 2-D
    ranges of 256 x 256, p = 16 per axis: RMSE 32.69 at ε = sqrt(2); ``python -m engine bench hdmm``).

    1. Workload W (``workload``): ``all ranges`` (default) is every rectangle of the grid, the Kronecker
       product of the 1-D all-range workload with itself, handled through its Gram matrix ``R (x) R`` (never
       materialised); ``squares`` is ``workload_queries`` random squares drawn as the Range queries page and
       DAWA draw them (sides ``side_min_pct`` to ``side_max_pct`` of the map's side, ``workload_seed``), whose
       Gram matrix is handled exactly in its union-of-Kronecker form ``sum_k (cy_k cy_k^T) (x) (cx_k cx_k^T)``
       (no marginal approximation).
    2. Strategy (Sections 5-6): ``A = A(Θ_y) (x) A(Θ_x)``, each factor a p-Identity strategy
       ``[I; Θ] D`` with ``p`` extra rows (``p = 0``: ``n / 16``, the paper's default), its columns of L1
       norm 1, chosen by L-BFGS-B on the closed-form expected error ``tr(W^T W (A^T A)^-1)`` and its
       gradient; for all ranges the error factorises per axis, for squares the axes are optimised in turn.
       Data-free: optimised once per (grid, workload, p) and kept on disk.
    3. Measurement: the ``(n + p)^2`` answers ``A x`` get Laplace(1/ε) each (``||A||_1 = 1``).
    4. Reconstruction (Section 7): least squares ``x_hat = A^+ y = (A_y^+ (x) A_x^+) y``, two small matrix
       products. The map is ``x_hat`` (unbiased; negative cells are kept, not clipped).

    Threat model: a trusted curator sees every location and publishes the map; the adversary sees the map
    (and the strategy, which is public). Guarantee: ε-DP (central) under add/remove user (add/remove record
    with ``unit = record``): under ``unit = user`` each of a person's k locations counts 1/k (the central
    baselines' bounding, :func:`engine.mechanisms.common.bound_contributions`), so one person moves
    the histogram by at most 1 in L1 and the strategy answers by at most ``||A||_1 = 1``; the Laplace
    mechanism at scale 1/ε then gives ε-DP, and least squares is post-processing. ``python -m engine audit
    hdmm`` checks it empirically.

    Departures: the paper's p-Identity optimisation starts from a random Θ; here its seed is a fixed public
    constant (the strategy is then the same on every machine, and cacheable), a second start from contiguous
    blocks is run too and the better kept, or the identity (Θ = 0) when neither beats it (from the random start
    alone a 16-cell axis with p = 1 ends 4 % above the identity's error); L-BFGS-B stops after at most 2,000
    iterations, fewer on large grids (50 at 1,024 cells, p = 64: about 4 % above convergence). The squares
    workload counts a square's partly covered cells whole (DAWA's convention), while the pages answer them by
    area. The paper's marginals and union-of-Kronecker strategies (OPT_M, OPT_+) are not offered: for one 2-D
    range workload OPT_⊗ is the paper's own choice.

    Standard error: the least-squares estimate has covariance ``(2 / ε^2) M_y (x) M_x`` with
    ``M = (A_i^T A_i)^-1`` (public), so a cell's variance is ``(2 / ε^2) M_y[iy, iy] M_x[ix, ix]``
    (``Release.noise``, one unit per cell), exact. Cells are correlated (they share strategy answers): the noise
    model's covariance (:class:`KronCovariance`) holds the two factors ``(2 / ε^2) M_y`` and ``M_x``, from which
    :mod:`engine.regions.margins` computes a region's exact variance ``a^T (M_y (x) M_x) a``.
    """

    key = "hdmm"
    data_independent = True
    margin = "closed form"
    margin_note = "the least squares' Kronecker covariance, from the public strategy"
    planner = "exact"
    audit_plan = AuditPlan(
        depth=5,
        note="a 32 x 32 map, the smallest whose optimised strategy is not the identity (p = 2 extra rows per axis; "
        "at 16 x 16 and below p = 1 and Θ = 0 is best): the target cell's estimate moves by exactly 1 with the "
        "person",
    )
    label = "HDMM (McKenna et al., workload-optimised matrix mechanism)"
    family = "central"
    guarantee = "epsilon-DP (central) under add/remove user (add/remove record with unit = record)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the released map and the (public) strategy."
    summary = (
        "Chooses, before seeing any data, the linear queries whose noisy answers best serve the range workload (a "
        "Kronecker product of p-Identity strategies), adds Laplace noise to them and reconstructs the map by least "
        "squares."
    )
    paper = (
        "McKenna, Miklau, Hay, Machanavajjhala. Optimizing error of high-dimensional statistical queries under "
        "differential privacy. PVLDB 11(10), 2018"
    )
    equations = (
        "Section 5 (OPT_0: p-Identity strategies, closed-form error and gradient), Section 6 (OPT_⊗: Kronecker "
        "products, unions of Kronecker workloads), Section 7 (least squares through the Kronecker structure)"
    )
    params = (
        UNIT_PARAM,
        Param(
            "workload",
            "choice",
            "all ranges",
            "the range queries the strategy is optimised for: every rectangle of the grid, or random squares as on "
            "the Range queries page",
            choices=WORKLOADS,
        ),
        Param(
            "p",
            "int",
            0,
            "extra rows of each axis's p-Identity strategy (0: n / 16, the paper's default)",
            min=0,
            max=1024,
        ),
        Param(
            "workload_queries",
            "int",
            1000,
            "random squares in the workload",
            min=10,
            max=20_000,
            log=True,
            shown_if=(("workload", "squares"),),
        ),
        Param(
            "side_min_pct",
            "float",
            2.0,
            "smallest square side, % of the map's side (the pages' default range is 2-10 %)",
            min=0.1,
            max=100.0,
            shown_if=(("workload", "squares"),),
        ),
        Param(
            "side_max_pct",
            "float",
            10.0,
            "largest square side, % of the map's side",
            min=0.1,
            max=100.0,
            shown_if=(("workload", "squares"),),
        ),
        Param(
            "workload_seed",
            "int",
            0,
            "seed of the (public) random squares",
            min=0,
            max=2**31 - 1,
            shown_if=(("workload", "squares"),),
        ),
    )
    matrix_class = True
    dp_outputs = ("noise",)

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        x = bounded.data.true_histogram(domain).astype(np.float64)
        p = strategy_p(domain, params)
        w = workload_of(domain, params)
        ctx.progress(0.1, "optimising the strategy (once per grid and workload)")
        theta_y, theta_x = strategy_for(w, p)
        ctx.check_cancelled()
        Ay, Ax = strategy_matrix(theta_y), strategy_matrix(theta_x)
        y = ctx.noise.add_laplace(kron_answers(Ay, Ax, x), 1.0 / eps)
        ledger = Ledger()
        ledger.spend(
            "strategy queries",
            eps,
            note=f"Laplace(1/eps) on the {y.size:,} answers of a strategy of L1 sensitivity 1; {bounded.short}",
        )
        ctx.progress(0.8, "least squares")
        est = kron_least_squares(pseudo_inverse(theta_y), pseudo_inverse(theta_x), y)
        My, Mx = gram_inverse(theta_y), gram_inverse(theta_x)
        var = 2.0 / eps**2
        stderr = np.sqrt(var * np.outer(np.diag(My), np.diag(Mx)))
        expected = math.sqrt(var * expected_error(w, theta_y, theta_x) / w.queries)
        bound = rmse_bound(w, eps)
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "workload": params["workload"],
                "workload_queries": int(w.queries),
                "p": p,
                "strategy_queries": int(y.size),
                "expected_rmse": expected,
                "svd_bound_rmse": bound,
                "expected_over_bound": expected / bound,
            }
        )
        basis = (
            "least squares of Laplace(1/eps) strategy answers: (2/eps^2) M_y[iy,iy] M_x[ix,ix], M = (A^T A)^-1 of "
            "each axis's strategy; cells correlated through it (regions: the exact Kronecker form)"
        )
        return Release(
            density=est,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the map (and the public strategy)"),
            diagnostics=diag,
            noise=NoiseModel.of_cells(est, stderr, basis, covariance=KronCovariance(var * My, Mx)),
        )
