"""The frequency oracle each HDG group reports through: optimized local hashing (OLH; Wang, Blocki, Li,
Jha, "Locally differentially private protocols for frequency estimation", USENIX Security 2017,
Section 4.4), the oracle HDG's paper uses, and optimized unary encoding (OUE, the same paper, Section
4.3), which the authors' public code runs instead.

OLH with hash range ``g = round(e^eps + 1)``: a user holding category ``v`` of ``k`` draws a hash
function ``H`` from a universal family onto ``[g]``, keeps ``x = H(v)`` with probability
``p = e^eps / (e^eps + g - 1)`` and otherwise reports one of the ``g - 1`` other values uniformly;
it sends ``(H, y)``. The server counts, per category ``w``, the users whose report *supports* it,
``S(w) = #{j : H_j(w) = y_j}``. A holder of ``w`` supports it with probability ``p``; anyone else
with ``q = 1/g`` (``H(w)`` is uniform and independent of ``H(v)`` and of the perturbation). With an
ideal (fully random) hash family a user's support indicators are independent across categories
(``H(w)`` for ``w != v`` are independent uniforms), so for ``n`` users, ``c_w`` of them in ``w``,

    S(w) ~ Binomial(c_w, p) + Binomial(n - c_w, q), independently over w,            (aggregate law)

the same law as unary encoding's report sums with its own ``p, q`` (OUE: ``p = 1/2``,
``q = 1/(e^eps + 1)``). The run's noise source draws that law directly
(``NoiseSource.report_counts``, exact on OS entropy in secure mode; no per-user hashing);
tests/test_hdg.py checks it against a per-user simulation. A real universal family (e.g.
Carter-Wegman, :func:`olh_reports`) is pairwise independent, which is all the estimate's mean and
variance need: the unbiased count ``c_hat(w) = (S(w) - n q) / (p - q)`` has

    Var[c_hat(w)] = (n q (1 - q) + c_w (p (1 - p) - q (1 - q))) / (p - q)^2,          (Wang et al., Eq. 7)

about ``n 4 e^eps / (e^eps - 1)^2`` (as a fraction of n: ``4 e^eps / (n (e^eps - 1)^2)``) for both
oracles when ``c_w`` is small.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.errors import ParamError
from ...core.noise import unary_encoding_pq

ORACLES = ("olh", "oue")
CW_PRIME = 2_147_483_647  # 2^31 - 1: the Carter-Wegman family ((a v + b) mod P) mod g


def olh_range(eps: float) -> int:
    """OLH's hash range ``g = round(e^eps + 1)`` (Wang et al.'s optimum, an integer), at least 2."""
    return max(2, int(round(math.exp(eps) + 1.0)))


def oracle_pq(oracle: str, eps: float) -> tuple[float, float]:
    """``(p, q)``: the probabilities that a user's report supports its own category and any other one."""
    if oracle == "olh":
        g = olh_range(eps)
        return math.exp(eps) / (math.exp(eps) + g - 1), 1.0 / g
    if oracle == "oue":
        return unary_encoding_pq(eps)
    raise ParamError(f"unknown frequency oracle {oracle!r}; known: {', '.join(ORACLES)}")


def unbias(support, n: int, p: float, q: float) -> np.ndarray:
    """Unbiased counts ``(S - n q) / (p - q)``."""
    return (np.asarray(support, dtype=np.float64) - n * q) / (p - q)


def count_variance(n: int, counts, p: float, q: float) -> np.ndarray:
    """The variance of the unbiased count of each category (module docstring)."""
    c = np.asarray(counts, dtype=np.float64)
    return (n * q * (1 - q) + c * (p * (1 - p) - q * (1 - q))) / (p - q) ** 2


# ------------------------------------------------------------------ one user's report
def olh_reports(rng: np.random.Generator, cells, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OLH reports of users holding ``cells``, as a device makes them: a Carter-Wegman hash
    ``H(v) = ((a v + b) mod P) mod g`` per user (``a`` in 1..P-1, ``b`` in 0..P-1) and the perturbed
    value ``y``. Returns ``(a, b, y)``."""
    v = np.asarray(cells, dtype=np.int64)
    g = olh_range(eps)
    p = math.exp(eps) / (math.exp(eps) + g - 1)
    a = rng.integers(1, CW_PRIME, v.shape)
    b = rng.integers(0, CW_PRIME, v.shape)
    x = cw_hash(a, b, v, g)
    other = rng.integers(0, g - 1, v.shape)
    y = np.where(rng.random(v.shape) < p, x, other + (other >= x))  # uniform over the g - 1 values != x
    return a, b, y


def cw_hash(a, b, v, g: int) -> np.ndarray:
    """``((a v + b) mod P) mod g`` elementwise (int64: a, b < 2^31 and v < 2^31 cannot overflow)."""
    return ((np.asarray(a, dtype=np.int64) * np.asarray(v, dtype=np.int64) + b) % CW_PRIME) % g


def olh_support(a, b, y, k: int, eps: float) -> np.ndarray:
    """The server's support counts over categories ``0..k-1`` from per-user reports (each user's hash
    evaluated on every category: ``n x k`` work, for tests and small cases)."""
    h = cw_hash(np.asarray(a)[:, None], np.asarray(b)[:, None], np.arange(k)[None, :], olh_range(eps))
    return (h == np.asarray(y)[:, None]).sum(axis=0)


def support_likelihood(oracle: str, eps: float, k: int, cell: int, rng: np.random.Generator) -> np.ndarray:
    """One user's fresh report on a grid of ``k`` cells, as the likelihood of each cell given it (up to a
    constant): OLH ``p`` where the report supports the cell, ``(1 - p)/(g - 1)`` elsewhere; OUE ``p (1 -
    q)/(q (1 - p))`` where its bit is set, 1 elsewhere. The server's view of that user."""
    if oracle == "olh":
        a, b, y = olh_reports(rng, np.array([cell]), eps)
        g = olh_range(eps)
        p = math.exp(eps) / (math.exp(eps) + g - 1)
        hit = cw_hash(a, b, np.arange(k), g) == y
        return np.where(hit, p, (1 - p) / (g - 1))
    p, q = unary_encoding_pq(eps)
    bits = rng.random(k) < q
    bits[cell] = rng.random() < p
    return np.where(bits, p * (1 - q) / (q * (1 - p)), 1.0)
