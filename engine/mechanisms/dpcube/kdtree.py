"""DPCube's second phase (Xiao, Xiong, Fan, Goryczka, Li, Transactions on Data Privacy 2014): a kd-tree partition
of the noisy cell histogram into near-uniform rectangles, and the two-level least squares that makes the
partition counts consistent with the cell histogram. Everything here reads noisy counts only."""

from __future__ import annotations

import numpy as np


def summed_area_tables(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Summed-area tables of the counts and of their squares."""
    s = np.zeros((c.shape[0] + 1, c.shape[1] + 1))
    s2 = np.zeros_like(s)
    s[1:, 1:] = np.cumsum(np.cumsum(c, axis=0), axis=1)
    s2[1:, 1:] = np.cumsum(np.cumsum(c * c, axis=0), axis=1)
    return s, s2


def box_sum(t: np.ndarray, r0, c0, r1, c1):
    return t[r1, c1] - t[r0, c1] - t[r1, c0] + t[r0, c0]


def estimated_sse(s, s2, r0, c0, r1, c1, var1: float):
    """The rectangle's squared deviation from uniform (about its mean), estimated from noisy counts: their
    squared deviation minus (k - 1) var1, its expectation under the noise alone (k cells of variance var1),
    floored at 0. Vectorised over arrays of rectangles."""
    k = (r1 - r0) * (c1 - c0)
    tot = box_sum(s, r0, c0, r1, c1)
    sse = box_sum(s2, r0, c0, r1, c1) - tot * tot / k
    return np.maximum(sse - (k - 1) * var1, 0.0)


def kd_partition(noisy: np.ndarray, var1: float, var2: float) -> np.ndarray:
    """The kd-tree partition of a grid of noisy counts (noise variance ``var1`` each) into rectangles of cells
    ``(r0, c0, r1, c1)`` (half-open rows and columns), each to be measured with noise variance ``var2``.

    Top-down from the whole grid: a rectangle's cost is its estimated squared deviation from uniform
    (:func:`estimated_sse`) plus ``var2``, the noise its measured count brings. It is split in two, across
    either axis at any cell boundary, where the two halves' costs sum lowest, if that sum is below its own cost;
    otherwise it is a leaf of the partition."""
    c = np.asarray(noisy, dtype=np.float64)
    s, s2 = summed_area_tables(c)
    leaves = []
    stack = [(0, 0, c.shape[0], c.shape[1])]
    while stack:
        r0, c0, r1, c1 = stack.pop()
        own = float(estimated_sse(s, s2, r0, c0, r1, c1, var1)) + var2
        best, split = own, None
        if r1 - r0 > 1:  # rows: the halves r0..p and p..r1
            p = np.arange(r0 + 1, r1)
            cost = estimated_sse(s, s2, r0, c0, p, c1, var1) + estimated_sse(s, s2, p, c0, r1, c1, var1) + 2 * var2
            j = int(np.argmin(cost))
            if cost[j] < best:
                best, split = float(cost[j]), ((r0, c0, int(p[j]), c1), (int(p[j]), c0, r1, c1))
        if c1 - c0 > 1:
            p = np.arange(c0 + 1, c1)
            cost = estimated_sse(s, s2, r0, c0, r1, p, var1) + estimated_sse(s, s2, r0, p, r1, c1, var1) + 2 * var2
            j = int(np.argmin(cost))
            if cost[j] < best:
                best, split = float(cost[j]), ((r0, c0, r1, int(p[j])), (r0, int(p[j]), r1, c1))
        if split is None:
            leaves.append((r0, c0, r1, c1))
        else:
            stack.extend(split)
    return np.array(sorted(leaves), dtype=np.int64).reshape(-1, 4)


def consistent_totals(y: np.ndarray, cell_sums: np.ndarray, cells: np.ndarray, var1: float, var2: float):
    """The least-squares totals of partitions measured twice: directly (``y``, variance ``var2``) and as the sum
    of their ``cells`` noisy cell counts (``cell_sums``, variance cells x var1). For the two-level tree (a
    partition over its cells) the least-squares estimate of the total is the inverse-variance mean of the two
    (Hay et al.'s constrained inference on that tree). Returns (totals, their variances ignoring that the
    partition was chosen from the same cell counts)."""
    v_cells = np.asarray(cells, dtype=np.float64) * var1
    w = v_cells / (v_cells + var2)  # the weight of the direct measurement
    return w * np.asarray(y) + (1.0 - w) * np.asarray(cell_sums), 1.0 / (1.0 / var2 + 1.0 / v_cells)
