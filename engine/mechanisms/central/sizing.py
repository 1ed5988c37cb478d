"""The hierarchical histogram's default height from a noisy count of the total (the tree's root).

Qardaji, Yang, Li (ICDE 2013, Guideline 1) size a uniform grid at m = sqrt(N eps / c), c = 10:
finer cells hold counts the Laplace noise swamps, coarser ones blur the data. A tree's leaves
face the same trade-off on a map: at the run's full resolution their noise (a share of eps) is
above Identity's, and a map whose cells the noise swamps is worse than a uniform one. A tree's
upper levels carry the coarse structure, so its leaves can be finer than a flat grid's: the
default leaves are ``HEIGHT_FACTOR`` = 2 times Guideline 1's m per side, the nearest power of two,
at most the output's; the tree is its root alone (the uniform map) when m < 1.5. Measured
(range queries at 256 x 256, DPBench's rectangles, 10 seeds): at 10^4 points, eps 1, leaves of
Guideline 1's 32 gave 1.13x the full-height tree's error, twice that (64) 0.76x; at 10^6 points,
eps 0.1, 128 gave 2.1x and 256 (twice 97, capped) 1.0x; on maps at eps 0.1 every height from 2x
Guideline 1 down beat the full-height tree (BENCHMARKS.md, "defaults on data nobody tuned them on").

N is not public: ``HEIGHT_COUNT_SHARE`` of eps buys a Laplace count n_hat of the root, which the
constrained inference then uses as the root's measurement (combined with the root's own when the
split measures it), so the budget is not lost. The rule sizes the tree for the users the count is
sure of, n_hat - 2 sd (sd = sqrt 2 / eps_count): at 200 users and eps 0.1 the count's sd (283)
exceeds the users, and a tree sized on a count that noise pushed up put its mass in a few
random leaves (1.44x the uniform map's EMD).
"""

from __future__ import annotations

import math

import numpy as np

HEIGHT_COUNT_SHARE = 0.05
GUIDELINE_C = 10.0  # Qardaji et al. 2013, Guideline 1
HEIGHT_FACTOR = 2.0


def height_rule(n_hat: float, eps: float, depth: int) -> int:
    """log2 of the leaves per side for the count ``n_hat`` (drawn at ``HEIGHT_COUNT_SHARE`` of eps)
    at ``eps``: ``HEIGHT_FACTOR`` times Guideline 1's m for n_hat - 2 sd, the nearest power of two,
    at most ``depth``; 0 (one leaf, the uniform map) when m < 1.5."""
    sure = float(n_hat) - 2.0 * math.sqrt(2.0) / (HEIGHT_COUNT_SHARE * float(eps))
    m = math.sqrt(max(sure, 0.0) * float(eps) / GUIDELINE_C)
    if m < 1.5:
        return 0
    return int(min(int(depth), max(1, round(math.log2(HEIGHT_FACTOR * m)))))


def root_count(total: float, eps: float, noise) -> tuple[float, float]:
    """(noisy total, eps spent): a Laplace count of the root at ``HEIGHT_COUNT_SHARE`` of eps."""
    e = HEIGHT_COUNT_SHARE * float(eps)
    return float(noise.add_laplace(np.array([float(total)]), 1.0 / e)[0]), e


def merge_root(noisy_root: np.ndarray, var_root: float, n_hat: float, eps_count: float) -> tuple[np.ndarray, float]:
    """The root's two measurements (the split's, variance ``var_root``, inf if not measured, and the
    count's) combined by inverse variance: the least-squares estimate the constrained inference needs."""
    v = 2.0 / eps_count**2
    if not math.isfinite(var_root):
        return np.full(noisy_root.shape, n_hat), v
    w = v / (v + var_root)
    return w * noisy_root + (1 - w) * n_hat, 1.0 / (1.0 / v + 1.0 / var_root)
