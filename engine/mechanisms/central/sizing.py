"""The hierarchical histogram's default height from a noisy count of the total (the tree's root).

Qardaji, Yang, Li (ICDE 2013, Guideline 1) size a uniform grid at m = sqrt(N eps / c), c = 10:
finer cells hold counts the Laplace noise swamps, coarser ones blur the data. A tree's leaves
face the same trade-off on a map: at the run's full resolution their noise (a share of eps) is
above Identity's, and a map whose cells the noise swamps is worse than a uniform one. So the
default leaves are the Guideline 1 grid, snapped to a power of two (nearest in ratio), the
upper levels then refine nothing the noise does not allow; below 1.5 leaves per side the tree is
its root alone, i.e. the uniform map. N is not public: ``HEIGHT_COUNT_SHARE`` of eps buys a
Laplace count of the root, which the constrained inference then uses as the root's measurement
(combined with the root's own when the split measures it), so the budget is not lost.
"""

from __future__ import annotations

import math

import numpy as np

HEIGHT_COUNT_SHARE = 0.05
GUIDELINE_C = 10.0  # Qardaji et al. 2013, Guideline 1


def height_rule(n_hat: float, eps: float, depth: int) -> int:
    """log2 of the leaves per side for ``n_hat`` users at ``eps``: Guideline 1's m, nearest power
    of two, at most ``depth``; 0 (one leaf, the uniform map) when m < 1.5."""
    m = math.sqrt(max(float(n_hat), 0.0) * float(eps) / GUIDELINE_C)
    if m < 1.5:
        return 0
    return int(min(int(depth), max(1, round(math.log2(m)))))


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
