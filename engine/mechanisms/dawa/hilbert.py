"""The Hilbert curve through a 2^L x 2^L grid: DAWA's 2-D input is the cells read in this order, so that
most contiguous intervals of the order are spatially compact (Li et al. 2014, Section 5)."""

from __future__ import annotations

import numpy as np


def hilbert_xy(depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell coordinates ``(ix, iy)`` of positions ``0 .. 4^depth - 1`` along the Hilbert curve of a
    ``2^depth x 2^depth`` grid (the classic distance-to-coordinates walk, vectorised): consecutive
    positions are edge-adjacent cells and every cell is visited once."""
    n = 1 << int(depth)
    t = np.arange(n * n, dtype=np.int64)
    x = np.zeros_like(t)
    y = np.zeros_like(t)
    s = 1
    while s < n:
        rx = (t >> 1) & 1
        ry = (t ^ rx) & 1
        # rotate the quadrant so the sub-curve joins its neighbours
        flip = (ry == 0) & (rx == 1)
        x = np.where(flip, s - 1 - x, x)
        y = np.where(flip, s - 1 - y, y)
        swap = ry == 0
        x, y = np.where(swap, y, x), np.where(swap, x, y)
        x = x + s * rx
        y = y + s * ry
        t = t >> 2
        s <<= 1
    return x, y


def hilbert_order(depth: int) -> np.ndarray:
    """Flat row-major indices (``iy * n + ix``) of the cells in Hilbert order: ``grid.ravel()[order]``
    is the 1-D vector DAWA partitions; ``out.ravel()[order] = vec`` maps a vector back."""
    x, y = hilbert_xy(depth)
    return y * (1 << int(depth)) + x
