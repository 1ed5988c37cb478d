"""MWEM's two steps on a grid of cells (Hardt, Ligett, McSherry, NIPS 2012): the exponential mechanism over
rectangle queries and the multiplicative-weights update. Rectangles are ``(x0, y0, x1, y1)`` of whole cells,
half-open, on ``grid[iy, ix]``."""

from __future__ import annotations

import math

import numpy as np

try:  # numba: the updates loop over the cells of a rectangle; the numpy loop below is the fallback
    import numba

    njit = numba.njit(cache=True, nogil=True)
except ImportError:  # pragma: no cover - numba is in requirements

    def njit(f):
        return f


def rect_answers(grid: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """Each rectangle's sum of ``grid`` (a summed-area table)."""
    s = np.zeros((grid.shape[0] + 1, grid.shape[1] + 1))
    s[1:, 1:] = np.cumsum(np.cumsum(grid, axis=0), axis=1)
    x0, y0, x1, y1 = (np.asarray(rects, dtype=np.int64)[:, k] for k in range(4))
    return s[y1, x1] - s[y0, x1] - s[y1, x0] + s[y0, x0]


def exponential_mechanism(scores: np.ndarray, epsilon: float, noise, sensitivity: float = 1.0) -> int:
    """The index of one score, drawn with probability proportional to exp(epsilon x score / (2 sensitivity))
    (McSherry and Talwar's exponential mechanism; epsilon-DP when one person moves every score by at most
    ``sensitivity``).

    Seeded mode: exactly that law, as the arg max of epsilon score / (2 sensitivity) plus independent Gumbel(0, 1)
    draws from the run's stream. Secure mode: OpenDP's report-noisy-max with exponential noise of scale
    2 sensitivity / epsilon (``make_noisy_max`` under max divergence, whose privacy map gives epsilon for scores
    that may move either way), a selection with the same guarantee and a slightly different law
    (permute-and-flip), on the OS entropy source."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    if not (s.size and np.isfinite(s).all()):
        raise ValueError("the exponential mechanism needs finite scores")
    if getattr(noise, "secure", False):
        import opendp.prelude as dp

        dp.enable_features("contrib")
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
        meas = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=2.0 * sensitivity / float(epsilon))
        return int(meas(s.tolist()))
    g = noise.rng.gumbel(size=s.size)
    return int(np.argmax(float(epsilon) * s / (2.0 * sensitivity) + g))


MAX_EXPONENT = 300.0  # e^300 ~ 1e130: an update's factor stays finite however wild a measurement is


@njit
def _passes(B, rects, meas, n_hat, passes):
    """``passes`` sweeps of the multiplicative-weights update over the measured rectangles, in order, on B scaled
    to total ``n_hat``. Kept as B times a scale: an update touches only its rectangle's cells, and B is brought
    back to total ``n_hat`` after each sweep, or sooner when its total drifts far."""
    total = B.sum()
    scale = n_hat / total
    for _ in range(passes):
        for r in range(rects.shape[0]):
            x0, y0, x1, y1 = rects[r, 0], rects[r, 1], rects[r, 2], rects[r, 3]
            inside = 0.0
            for iy in range(y0, y1):
                for ix in range(x0, x1):
                    inside += B[iy, ix]
            if inside >= total * (1.0 - 1e-12):  # the rectangle holds all the mass: the scaling undoes the update
                continue
            z = min(max((meas[r] - scale * inside) / (2.0 * n_hat), -MAX_EXPONENT), MAX_EXPONENT)
            factor = math.exp(z)
            for iy in range(y0, y1):
                for ix in range(x0, x1):
                    B[iy, ix] *= factor
            before = total
            total += (factor - 1.0) * inside  # the mass outside the rectangle is unchanged
            if total < 1e-6 * before:  # most of the mass was inside and shrank: sum again, not by difference
                total = B.sum()
            if total < 1e-100 or total > 1e100:
                B *= n_hat / total
                total = n_hat
            scale = n_hat / total
        B *= scale
        total = n_hat
        scale = 1.0
    return B


def mw_update(A: np.ndarray, rects: np.ndarray, measurements: np.ndarray, n_hat: float, passes: int = 1) -> np.ndarray:
    """The multiplicative-weights update of Hardt et al. for each measured rectangle q with noisy answer m, in
    order, repeated ``passes`` times: A(x) <- A(x) exp(q(x) (m - q(A)) / (2 n)), then A scaled back to total n
    (``n_hat``). Returns a new grid. The exponent is clipped to +-300 (a measurement more than 600 n off the map's
    answer, possible only when noise dwarfs a tiny total), which keeps the numbers finite."""
    B = np.array(A, dtype=np.float64)
    r = np.ascontiguousarray(np.asarray(rects, dtype=np.int64).reshape(-1, 4))
    m = np.ascontiguousarray(np.asarray(measurements, dtype=np.float64).ravel())
    if r.shape[0] == 0 or passes < 1:
        return B
    return _passes(B, r, m, float(n_hat), int(passes))
