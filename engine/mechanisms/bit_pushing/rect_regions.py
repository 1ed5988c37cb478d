"""The regions of the attribute-mean maps (Cormode, Markov & Srinivas, EDBT 2024, Section 4.3): a
coarse grid level or any partition given as rectangles, the region of every location, a map painted
from per-region values, and the server's view of a user (its region is public)."""

from __future__ import annotations

import numpy as np

from ...core.errors import ParamError
from ...core.grid import Domain

MAX_EDGES = 4097  # distinct x (or y) rectangle edges handled exactly


def grid_rects(domain: Domain, level: int) -> np.ndarray:
    """Rectangles (metres) of the ``2^level x 2^level`` grid, region id ``iy * 2^level + ix``
    (``iy = 0`` the south row, like every grid of the engine)."""
    if not (isinstance(level, (int, np.integer)) and 0 <= level <= domain.depth):
        raise ParamError(
            f"region level must be an integer in 0..{domain.depth} (the map's resolution depth); got {level}"
        )
    k = 1 << level
    side = domain.side / k
    iy, ix = np.divmod(np.arange(k * k), k)
    x0 = domain.x0 + ix * side
    y0 = domain.y0 + iy * side
    return np.column_stack([x0, y0, x0 + side, y0 + side])


def check_rects(rects) -> np.ndarray:
    r = np.atleast_2d(np.asarray(rects, dtype=np.float64))
    if r.ndim != 2 or r.shape[1] != 4 or r.shape[0] == 0:
        raise ParamError("regions must be a non-empty (k, 4) array of rectangles (x0, y0, x1, y1) in metres")
    if not np.isfinite(r).all():
        raise ParamError("region rectangles must have finite coordinates")
    if ((r[:, 2] <= r[:, 0]) | (r[:, 3] <= r[:, 1])).any():
        raise ParamError("every region rectangle needs x1 > x0 and y1 > y0")
    return r


def assign_regions(xy: np.ndarray, rects) -> np.ndarray:
    """Region id of each point: the first rectangle containing it (half-open
    ``[x0, x1) x [y0, y1)``), -1 if none. Exact: points are located among the
    rectangles' distinct edges, so the cost is O(n log k + E^2), E the edge count."""
    r = check_rects(rects)
    xy = np.asarray(xy, dtype=np.float64)
    ex = np.unique(r[:, [0, 2]])
    ey = np.unique(r[:, [1, 3]])
    if ex.size > MAX_EDGES or ey.size > MAX_EDGES:
        raise ParamError(f"too many distinct region edges ({max(ex.size, ey.size)}); at most {MAX_EDGES} per axis")
    # label image over the elementary slabs between consecutive edges; first rectangle wins
    label = np.full((ey.size - 1, ex.size - 1), -1, dtype=np.int64)
    i0 = np.searchsorted(ex, r[:, 0])
    i1 = np.searchsorted(ex, r[:, 2])
    j0 = np.searchsorted(ey, r[:, 1])
    j1 = np.searchsorted(ey, r[:, 3])
    for k in range(r.shape[0] - 1, -1, -1):  # reverse order: earlier rectangles overwrite later ones
        label[j0[k] : j1[k], i0[k] : i1[k]] = k
    ix = np.searchsorted(ex, xy[:, 0], side="right") - 1
    iy = np.searchsorted(ey, xy[:, 1], side="right") - 1
    ok = (ix >= 0) & (ix < ex.size - 1) & (iy >= 0) & (iy < ey.size - 1)
    out = np.full(xy.shape[0], -1, dtype=np.int64)
    out[ok] = label[iy[ok], ix[ok]]
    return out


def paint_regions(domain: Domain, rects, region_values, fill: float = 0.0) -> np.ndarray:
    """Grid ``[iy, ix]`` whose cells carry the value of the region containing the
    cell centre (``fill`` outside every region and where the value is not finite)."""
    xs, ys = domain.cell_centers()
    X, Y = np.meshgrid(xs, ys)  # rows = y
    ids = assign_regions(np.column_stack([X.ravel(), Y.ravel()]), rects)
    vals = np.asarray(region_values, dtype=np.float64)
    out = np.full(ids.size, float(fill))
    ok = ids >= 0
    out[ok] = vals[ids[ok]]
    out[~np.isfinite(out)] = fill
    return out.reshape(domain.n, domain.n)


class RegionCandidates:
    """Server view of a user: its region is public, so the attacker's belief about
    the location is uniform over the region (a lattice of points in the rectangle;
    the whole domain for a user outside every region). Picklable (no closure)."""

    def __init__(self, user_region: np.ndarray, rects: np.ndarray, domain_rect: np.ndarray, lattice: int = 4):
        self.user_region = user_region
        self.rects = rects
        self.domain_rect = domain_rect
        self.lattice = lattice

    def __call__(self, user_indices) -> list[tuple[np.ndarray, np.ndarray]]:
        t = (np.arange(self.lattice) + 0.5) / self.lattice
        out = []
        for u in np.atleast_1d(np.asarray(user_indices, dtype=np.int64)):
            reg = self.user_region[u] if 0 <= u < self.user_region.size else -1
            x0, y0, x1, y1 = self.rects[reg] if reg >= 0 else self.domain_rect
            X, Y = np.meshgrid(x0 + t * (x1 - x0), y0 + t * (y1 - y0))
            pts = np.column_stack([X.ravel(), Y.ravel()])
            out.append((pts, np.full(pts.shape[0], 1.0 / pts.shape[0])))
        return out
