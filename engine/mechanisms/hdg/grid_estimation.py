"""HDG's server side on two attributes (x, y): the guideline for the granularities, Norm-Sub, the
consistency step between the 1-D and 2-D grids, and the response matrix (see :mod:`.mechanism`).

Arrays hold *fractions* of the users (each grid's estimate from its own group, summing to 1 after
Norm-Sub): ``fx``, ``fy`` the 1-D grids (``g1`` cells along x and along y), ``f2[iy, ix]`` the 2-D
grid (``g2 x g2``), ``m[iy, ix]`` the response matrix (``g1 x g1``). ``g2`` divides ``g1``: each
2-D cell covers ``b x b`` response-matrix cells, ``b = g1 / g2``.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.errors import ParamError

ALPHA1 = 0.7  # the guideline's constants (the paper's values)
ALPHA2 = 0.03
GROUPS = 3  # m = d + d (d - 1) / 2 grids for d = 2 attributes: two 1-D grids and one 2-D grid


def guideline(n: int, eps: float, alpha1: float = ALPHA1, alpha2: float = ALPHA2, m: int = GROUPS):
    """The paper's granularities for ``n`` users in ``m`` groups at ``eps`` (real numbers):

    g1 = (n (e^eps - 1)^2 alpha1^2 / (2 m e^eps))^(1/3),
    g2 = sqrt(2 alpha2 (e^eps - 1) sqrt(n / (m e^eps))).

    Each balances a grid's noise error, which grows with the cells a query sums (each cell's estimate
    has variance about 4 m e^eps / (n (e^eps - 1)^2) from a group of n/m users), against its
    non-uniformity error, which falls as the cells shrink (alpha1, alpha2: how far the data are from
    uniform inside a 1-D and a 2-D cell)."""
    e = math.exp(eps)
    g1 = (n * (e - 1) ** 2 * alpha1**2 / (2 * m * e)) ** (1 / 3)
    g2 = math.sqrt(2 * alpha2 * (e - 1) * math.sqrt(n / (m * e)))
    return g1, g2


def power_of_two(g: float, cap: int) -> int:
    """The power of two nearest ``g`` (ties to the smaller), at least 2 and at most ``cap``: the map has
    2^L cells per side, so such grids nest in it and in each other."""
    if cap < 2:
        raise ParamError("HDG needs a map of at least 2 x 2 cells")
    lo = 2 ** max(1, math.floor(math.log2(max(g, 2.0))))
    best = lo if g - lo <= 2 * lo - g else 2 * lo
    return int(min(best, cap))


def norm_sub(f: np.ndarray, total: float = 1.0) -> np.ndarray:
    """Norm-Sub (Wang et al., "Locally differentially private frequency estimation with consistency",
    NDSS 2020): negative estimates become 0 and one constant delta is subtracted from the positive
    ones so that the total is ``total``: ``max(f - delta, 0)`` with ``sum max(f - delta, 0) = total``,
    found exactly from the sorted values (the Euclidean projection onto the scaled simplex)."""
    flat = np.asarray(f, dtype=np.float64).ravel()
    s = np.sort(flat)[::-1]
    k = np.arange(1, s.size + 1)
    delta = (np.cumsum(s) - total) / k
    kept = int(np.flatnonzero(s - delta > 0)[-1])  # s[0] - delta[0] = total > 0: never empty
    return np.maximum(flat - delta[kept], 0.0).reshape(np.shape(f))


def consistency(fx: np.ndarray, fy: np.ndarray, f2: np.ndarray) -> None:
    """Make the 1-D grids and the 2-D grid agree on each attribute's coarse intervals (in place).

    For attribute x, interval I (one 2-D column, ``b`` cells of the 1-D grid): the 1-D grid's estimate
    T1(I) sums ``b`` cells, the 2-D grid's T2(I) sums ``g2``; the cells' estimates have equal variance
    (groups of equal size), so the weighted average with weights inverse to the variances is

        T(I) = (T1 / b + T2 / g2) / (1 / b + 1 / g2),

    and each grid's cells in I move by the same share of the difference: ``(T - T1) / b`` each in the
    1-D grid, ``(T - T2) / g2`` each in the 2-D grid. Then the same for y. When both grids sum to 1 the
    y step leaves the x marginals as they are (its changes to a 2-D column sum to 0)."""
    g2 = f2.shape[0]
    b = fx.size // g2
    for f1, axis in ((fx, 0), (fy, 1)):
        t1 = f1.reshape(g2, b).sum(axis=1)
        t2 = f2.sum(axis=axis)
        t = (t1 / b + t2 / g2) / (1 / b + 1 / g2)
        f1 += np.repeat((t - t1) / b, b)
        f2 += np.expand_dims((t - t2) / g2, axis)


def post_process(fx, fy, f2, rounds: int, tol: float = 0.0):
    """Norm-Sub on every grid, then up to ``rounds`` times the consistency step followed by Norm-Sub (the
    consistency step can make cells negative; Norm-Sub last, so every released cell is >= 0), stopping
    once a round moves the three grids by less than ``tol`` in L1. Returns the grids and the rounds run."""
    fx, fy, f2 = norm_sub(fx), norm_sub(fy), norm_sub(f2)
    done = 0
    while done < rounds:
        done += 1
        before = np.concatenate([fx, fy, f2.ravel()])
        consistency(fx, fy, f2)
        fx, fy, f2 = norm_sub(fx), norm_sub(fy), norm_sub(f2)
        if np.abs(np.concatenate([fx, fy, f2.ravel()]) - before).sum() < tol:
            break
    return fx, fy, f2, done


def _fit(sums: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The factor that scales each group of cells to its target: 1 where the group is all zero (no
    shape to scale: the reference code skips such a cell)."""
    return np.divide(target, sums, out=np.ones_like(sums), where=sums > 0)


def response_matrix(fx, fy, f2, max_sweeps: int, tol: float) -> tuple[np.ndarray, int]:
    """The ``g1 x g1`` response matrix from the grids by the paper's iterative update: start uniform,
    then in each sweep scale every column to its x cell's frequency, every row to its y cell's and
    every ``b x b`` block to its 2-D cell's (iterative proportional fitting: its limit is the matrix
    of least relative entropy to the uniform one that matches every grid). Stops when a sweep moves the
    matrix by less than ``tol`` in L1, or after ``max_sweeps``. Returns the matrix and the sweeps run."""
    g1, g2 = fx.size, f2.shape[0]
    b = g1 // g2
    m = np.full((g1, g1), 1.0 / g1**2)
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        before = m.copy()
        m *= _fit(m.sum(axis=0), fx)[None, :]
        m *= _fit(m.sum(axis=1), fy)[:, None]
        blocks = m.reshape(g2, b, g2, b)
        blocks *= _fit(blocks.sum(axis=(1, 3)), f2)[:, None, :, None]
        if np.abs(m - before).sum() < tol:
            break
    return m, sweeps
