"""Counting and spreading on the map: the locations inside the domain, counts on a square grid,
rectangles in output-cell units (a uniform grid, AG's sub-cells) and in metres, and the spreading of
rectangles' values over the output cells they overlap (the uniformity assumption)."""

from __future__ import annotations

import math

import numpy as np

from ...core.grid import Domain


def points_in_domain(data, domain: Domain) -> tuple[np.ndarray, np.ndarray | None]:
    """Locations inside the domain and their weights (None = unit weights)."""
    inside = domain.inside(data.xy)
    xy = data.xy[inside]
    w = None if data.weight is None else np.asarray(data.weight, dtype=np.float64)[inside]
    return xy, w


def bin_square(xy: np.ndarray, w: np.ndarray | None, domain: Domain, m: int) -> np.ndarray:
    """Counts on an m x m grid over the domain (m need not be a power of two), grid[iy, ix]."""
    s = m / domain.side
    ix = np.clip(((xy[:, 0] - domain.x0) * s).astype(np.int64), 0, m - 1)
    iy = np.clip(((xy[:, 1] - domain.y0) * s).astype(np.int64), 0, m - 1)
    return np.bincount(iy * m + ix, weights=w, minlength=m * m).astype(np.float64).reshape(m, m)


def cells_to_metres(rects: np.ndarray, domain: Domain) -> np.ndarray:
    """Rectangles in output-cell units -> metres."""
    out = np.asarray(rects, dtype=np.float64) * domain.cell
    out[:, [0, 2]] += domain.x0
    out[:, [1, 3]] += domain.y0
    return out


def uniform_grid_rects(m: int, n: int) -> np.ndarray:
    """The m x m uniform grid as rectangles in units of output cells (n per side), row-major [iy, ix]."""
    edges = np.arange(m + 1, dtype=np.float64) * n / m
    x0, y0 = np.meshgrid(edges[:-1], edges[:-1])
    x1, y1 = np.meshgrid(edges[1:], edges[1:])
    return np.stack([x0.ravel(), y0.ravel(), x1.ravel(), y1.ravel()], axis=1)


try:  # numba: one pass over the rectangles; the numpy loop below is the fallback
    import numba

    @numba.njit(cache=True, nogil=True)
    def _spread_numba(x0, y0, x1, y1, v, n, out):
        for r in range(x0.shape[0]):
            w = x1[r] - x0[r]
            h = y1[r] - y0[r]
            if w <= 0.0 or h <= 0.0:
                continue
            dens = v[r] / (w * h)
            i0 = max(int(math.floor(x0[r])), 0)
            i1 = min(int(math.ceil(x1[r])), n)
            j0 = max(int(math.floor(y0[r])), 0)
            j1 = min(int(math.ceil(y1[r])), n)
            for j in range(j0, j1):
                oy = min(y1[r], j + 1.0) - max(y0[r], float(j))
                if oy <= 0.0:
                    continue
                for i in range(i0, i1):
                    ox = min(x1[r], i + 1.0) - max(x0[r], float(i))
                    if ox > 0.0:
                        out[j, i] += dens * ox * oy

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in requirements
    HAVE_NUMBA = False


def ag_subcell_rects(owner: np.ndarray, offsets: np.ndarray, m2: np.ndarray, m1: int, n: int) -> np.ndarray:
    """AG's second-level cells as rectangles ``(x0, y0, x1, y1)`` in output-cell units:
    cell ``t`` is sub-cell ``t - offsets[owner[t]]`` (row-major) of the ``m2 x m2`` split of
    first-level cell ``owner[t]`` of the ``m1 x m1`` grid over ``n`` output cells."""
    local = np.arange(owner.size) - offsets[owner]
    m2o = m2[owner]
    ly, lx = np.divmod(local, m2o)
    cx, cy = owner % m1, owner // m1
    unit = n / m1
    return np.column_stack(
        [(cx + lx / m2o) * unit, (cy + ly / m2o) * unit, (cx + (lx + 1) / m2o) * unit, (cy + (ly + 1) / m2o) * unit]
    )


def spread_rects(rects: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Spread each rectangle's value uniformly over the n x n output cells it overlaps,
    in proportion to the overlap area (the uniformity assumption).

    ``rects`` are ``(x0, y0, x1, y1)`` in units of output cells (0..n); returns ``grid[iy, ix]``.
    Mass is conserved for rectangles inside the grid.
    """
    r = np.ascontiguousarray(rects, dtype=np.float64).reshape(-1, 4)
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    out = np.zeros((n, n), dtype=np.float64)
    if HAVE_NUMBA:
        _spread_numba(
            np.ascontiguousarray(r[:, 0]),
            np.ascontiguousarray(r[:, 1]),
            np.ascontiguousarray(r[:, 2]),
            np.ascontiguousarray(r[:, 3]),
            v,
            n,
            out,
        )
        return out
    for (x0, y0, x1, y1), val in zip(r, v):  # pragma: no cover - fallback
        if x1 <= x0 or y1 <= y0:
            continue
        i = np.arange(max(int(np.floor(x0)), 0), min(int(np.ceil(x1)), n))
        j = np.arange(max(int(np.floor(y0)), 0), min(int(np.ceil(y1)), n))
        ox = np.clip(np.minimum(x1, i + 1.0) - np.maximum(x0, i), 0, None)
        oy = np.clip(np.minimum(y1, j + 1.0) - np.maximum(y0, j), 0, None)
        out[np.ix_(j, i)] += val / ((x1 - x0) * (y1 - y0)) * np.outer(oy, ox)
    return out
