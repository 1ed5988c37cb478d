"""The area-weight matrix of polygons over a grid (:mod:`engine.data.region_geometry`), exact and in time linear in
the polygons' edges and the grid's columns they cross, whatever their shape.

Intersecting each polygon with each cell it crosses costs the polygon's size per cell: a comb whose teeth
cross every cell of a 256 x 256 grid made that 65,536 intersections of a 4,000-vertex polygon. Here no
polygon is intersected. By Green's theorem, in grid units (cell ``(i, j)`` is ``[i, i+1] x [j, j+1]``)
the area of a polygon P inside the cell is

    area(P ∩ cell) = - Σ over the edges e of P, oriented (exterior counter-clockwise, holes clockwise),
                       of ∫ over e, u in [i, i+1], of clamp(v_e(u) - j, 0, 1) du

(at abscissa u, the part of the cell's column below each edge, signed by the edge's direction, adds up
to the part inside P). Each edge is cut where it crosses a column line, the bottom or the top of the
grid. A piece of width w from height ``lo`` to ``hi`` (rows ``m = floor(lo)`` to ``M = floor(hi)``) adds,
with ``G(x) = 0, x^2 / 2, x - 1/2`` for ``x < 0``, in ``[0, 1]``, ``> 1``, ``w / (hi - lo) (G(hi - j) -
G(lo - j))`` to row j of its column: w to every row below m, a ramp falling by ``w / (hi - lo)`` a row
between m and M, and its own terms at m and M. A piece that crosses at most one row line is cut there
instead (the ramp's slope would be large). Constants and slopes below a row are summed down each column
of the polygon's bounding box. Pieces below the grid add nothing, pieces above it w to the whole column.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import ParamError
from ..core.grid import Domain

MAX_PAIRS = 20_000_000  # (region, cell) pairs of the regions' bounding boxes; pieces of their edges
CELLS = 1 << 20  # (region, cell) pairs summed at once (a region's alone when larger)
STEP = 1 << 16  # edge pieces, and cells, handled at once: bounds the memory of a step
EPS = 1e-9  # a share below this is rounding, not area


def area_weights(geoms: np.ndarray, domain: Domain):
    """The sparse area-weight matrix (regions x cells, row-major cells) of polygons in the domain's metric CRS:
    the share of each cell's area inside each polygon. Parts that are not polygons (the lines a repaired
    polygon may carry) have no area and are ignored."""
    from scipy import sparse

    n = domain.n
    reg, u0, v0, u1, v1 = _edges(geoms, domain)
    R = len(geoms)
    box = _boxes(reg, u0, v0, u1, v1, R, n)
    sizes = box[:, 2] * box[:, 3]
    if int(sizes.sum()) > MAX_PAIRS:
        raise ParamError(
            f"the regions cover {int(sizes.sum()):,} (region, cell) pairs, over the limit of {MAX_PAIRS:,}: "
            "choose a coarser grid or fewer regions"
        )
    # the pieces of an edge: one per column it spans (each cut at most three times more)
    est = (np.ceil(np.clip(np.maximum(u0, u1), 0, n)) - np.floor(np.clip(np.minimum(u0, u1), 0, n))).astype(np.int64)
    est = np.maximum(est, 1)
    if int(est.sum()) > MAX_PAIRS:
        raise ParamError(
            f"the regions' edges cross the grid's columns {int(est.sum()):,} times, over the limit of {MAX_PAIRS:,}: "
            "simplify the polygons or choose a coarser grid"
        )
    rows, cols, vals = [], [], []
    first = 0
    while first < R:  # regions in runs of at most CELLS cells (one region alone when larger)
        last = first + max(int(np.searchsorted(np.cumsum(sizes[first:]), CELLS, side="right")), 1)
        lo, hi = np.searchsorted(reg, [first, last])
        edges = (reg[lo:hi], u0[lo:hi], v0[lo:hi], u1[lo:hi], v1[lo:hi], est[lo:hi])
        r, c, v = _chunk(*edges, box, first, last, n)
        rows.append(r)
        cols.append(c)
        vals.append(v)
        first = last
    return sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(R, n * n))


def _edges(geoms, domain: Domain):
    """Every non-vertical edge of the polygons, oriented, in grid units: (region, u0, v0, u1, v1), by region."""
    import shapely

    parts, index = shapely.get_parts(geoms, return_index=True)
    parts, inner = shapely.get_parts(parts, return_index=True)  # a GeometryCollection may hold MultiPolygons
    region = index[inner]
    poly = shapely.get_type_id(parts) == 3
    parts = shapely.orient_polygons(parts[poly])  # exteriors counter-clockwise, holes clockwise
    rings, ri = shapely.get_rings(parts, return_index=True)
    xy, ci = shapely.get_coordinates(rings, return_index=True)
    same = ci[1:] == ci[:-1]
    a, b = xy[:-1][same], xy[1:][same]
    reg = region[poly][ri[ci[:-1][same]]]
    u0, u1 = (a[:, 0] - domain.x0) / domain.cell, (b[:, 0] - domain.x0) / domain.cell
    v0, v1 = (a[:, 1] - domain.y0) / domain.cell, (b[:, 1] - domain.y0) / domain.cell
    keep = u0 != u1  # a vertical edge adds no area
    return reg[keep], u0[keep], v0[keep], u1[keep], v1[keep]


def _boxes(reg, u0, v0, u1, v1, R: int, n: int) -> np.ndarray:
    """Per region, its block of the grid: first column, first row, columns, rows (the top one a row of
    pieces above its cells, possibly the grid's top, row n); no columns when it misses the grid."""
    box = np.zeros((R, 4), dtype=np.int64)
    if reg.size == 0:
        return box
    starts = np.flatnonzero(np.r_[True, reg[1:] != reg[:-1]])
    who = reg[starts]
    umin = np.minimum.reduceat(np.minimum(u0, u1), starts)
    umax = np.maximum.reduceat(np.maximum(u0, u1), starts)
    vmin = np.minimum.reduceat(np.minimum(v0, v1), starts)
    vmax = np.maximum.reduceat(np.maximum(v0, v1), starts)
    c0 = np.clip(np.floor(umin), 0, n - 1)
    c1 = np.clip(np.ceil(umax) - 1, 0, n - 1)
    j0 = np.clip(np.floor(vmin), 0, n)
    j1 = np.clip(np.floor(vmax), 0, n)
    miss = (umax <= 0) | (umin >= n) | (vmax <= 0) | (vmin >= n)
    box[who, 0], box[who, 1] = c0, j0
    box[who, 2] = np.where(miss, 0, c1 - c0 + 1)
    box[who, 3] = np.where(miss, 0, j1 - j0 + 1)
    return box


def _chunk(reg, u0, v0, u1, v1, est, box, first: int, last: int, n: int):
    """(region, cell, share) of the regions first..last-1, whose edges these are: per block, a constant and
    a slope summed down each column from the rows above (``sums``) and each row's own terms (``own``)."""
    sizes = box[first:last, 2] * box[first:last, 3]
    off = np.concatenate([[0], np.cumsum(sizes)])
    sums = np.zeros((2, int(off[-1])))
    own = np.zeros(int(off[-1]))
    ends = np.cumsum(est)
    start = 0
    while start < est.size:  # edges in runs of at most STEP pieces (one edge alone when larger)
        done = ends[start - 1] if start else 0
        stop = start + max(int(np.searchsorted(ends[start:] - done, STEP, side="right")), 1)
        g, col, slot, which, value = _terms(u0[start:stop], v0[start:stop], u1[start:stop], v1[start:stop], n)
        g = reg[start:stop][g] - first
        at = off[g] + (col - box[first + g, 0]) * box[first + g, 3] + (slot - box[first + g, 1])
        for k, target in ((0, sums[0]), (1, sums[1]), (2, own)):
            pick = which == k
            if pick.any():  # summed over the span these terms touch, not the whole run
                lo = int(at[pick].min())
                add = np.bincount(at[pick] - lo, weights=value[pick])
                target[lo : lo + add.size] += add
        start = stop
    return _cells(sums, own, box[first:last], off, first, n)


def _split(p: dict, level) -> dict:
    """The pieces ``p`` cut where their height crosses ``level`` (one, or one per piece; NaN: none)."""
    level = np.broadcast_to(np.asarray(level, dtype=np.float64), p["va"].shape)
    cut = np.flatnonzero((np.minimum(p["va"], p["vb"]) < level) & (level < np.maximum(p["va"], p["vb"])))
    if not cut.size:
        return p
    t = (level[cut] - p["va"][cut]) / (p["vb"][cut] - p["va"][cut])
    at = p["a"][cut] + t * (p["b"][cut] - p["a"][cut])
    rest = {k: v[cut].copy() for k, v in p.items()}
    rest["a"], rest["va"] = at, level[cut]
    p = {k: v.copy() for k, v in p.items()}
    p["b"][cut], p["vb"][cut] = at, level[cut]
    return {k: np.concatenate([p[k], rest[k]]) for k in p}


def _terms(u0, v0, u1, v1, n: int):
    """The edges' terms: per term its edge, column, row (``slot``; n: above the grid), kind (0: a constant
    and 1: a slope, for the rows below the slot; 2: the slot's own row) and value (module docstring)."""
    sign = -np.sign(u1 - u0)
    lo, hi = np.clip(np.minimum(u0, u1), 0, n), np.clip(np.maximum(u0, u1), 0, n)
    c0 = np.minimum(np.floor(lo), n - 1).astype(np.int64)
    k = np.where(hi > lo, np.ceil(hi).astype(np.int64) - c0, 0)
    e = np.repeat(np.arange(k.size), k)
    col = c0[e] + np.arange(e.size) - np.repeat(np.cumsum(k) - k, k)
    a, b = np.maximum(lo[e], col), np.minimum(hi[e], col + 1)  # each piece's span in its column
    slope = (v1 - v0) / (u1 - u0)
    p = {"e": e, "col": col, "a": a, "b": b, "va": v0[e] + (a - u0[e]) * slope[e], "vb": v0[e] + (b - u0[e]) * slope[e]}
    p = _split(_split(p, 0.0), float(n))  # at the grid's bottom and top
    lo_v, hi_v = np.minimum(p["va"], p["vb"]), np.maximum(p["va"], p["vb"])
    m, M = np.floor(lo_v), np.floor(hi_v)
    gentle = M - m <= 1
    p = _split(p, np.where(gentle & (lo_v < M), M, np.nan))  # at the one row line a gentle piece crosses
    w = (p["b"] - p["a"]) * sign[p["e"]]
    lo_v, hi_v = np.minimum(p["va"], p["vb"]), np.maximum(p["va"], p["vb"])
    m, M = np.floor(lo_v), np.floor(hi_v)
    out = []  # (piece, slot, kind, value) per term

    def term(pick, slot, kind, value):
        i = np.flatnonzero(pick)
        out.append(
            (i, np.broadcast_to(slot, pick.shape)[i], np.full(i.size, kind), np.broadcast_to(value, pick.shape)[i])
        )

    inside = (hi_v > 0) & (w != 0)
    above = inside & (lo_v >= n)
    gentle = inside & ~above & (M - m <= 1)  # now within one row: its width below, its trapezoid in it
    steep = inside & ~above & (M - m > 1)
    term(above, n, 0, w)
    r = np.floor((lo_v + hi_v) / 2)
    term(gentle, r, 0, w)
    term(gentle & (r < n), r, 2, w * ((lo_v + hi_v) / 2 - r))
    c = w / np.where(steep, hi_v - lo_v, 1.0)
    term(steep, m, 0, w)
    term(steep, m, 2, c * ((hi_v - m - 0.5) - (lo_v - m) ** 2 / 2))
    term(steep & (M < n), M, 2, c * (hi_v - M) ** 2 / 2)
    # the ramp c (hi - j - 1/2) over rows m < j < M: on for the rows below M, off for those below m + 1
    term(steep, M, 0, c * (hi_v - 0.5))
    term(steep, M, 1, c)
    term(steep, m + 1, 0, -c * (hi_v - 0.5))
    term(steep, m + 1, 1, -c)
    i, slot, kind, value = (np.concatenate(x) for x in zip(*out))
    return p["e"][i], p["col"][i], slot.astype(np.int64), kind, value


def _cells(sums, own, box, off, first: int, n: int):
    """(region, cell, share) from the blocks' terms: each cell takes the constants less its row times the
    slopes of the terms above it in its column (a cumulative sum from the block's top, column by column),
    and its own terms; in runs of whole columns of at most about STEP cells."""
    ends = np.cumsum(np.repeat(box[:, 3], box[:, 2]))  # one column of a block after another
    out, lo = [], 0
    while lo < own.size:
        hi = int(ends[min(np.searchsorted(ends, lo + STEP, side="right"), ends.size) - 1])
        hi = hi if hi > lo else int(ends[np.searchsorted(ends, lo, side="right")])
        i = np.arange(lo, hi)
        g = np.searchsorted(off, i, side="right") - 1
        row = box[g, 1] + (i - off[g]) % box[g, 3]
        col_end = ends[np.searchsorted(ends, lo, side="right") : np.searchsorted(ends, hi, side="left") + 1] - lo
        height = np.diff(np.concatenate([[0], col_end]))
        above = []
        for k in (0, 1):
            after = np.cumsum(sums[k][lo:hi][::-1])[::-1]  # from here to the run's last column's top
            below_next = np.append(after, 0.0)[col_end]  # what the next columns hold, to take off
            above.append(after - sums[k][lo:hi] - np.repeat(below_next, height))
        share = above[0] - row * above[1] + own[lo:hi]
        at = np.flatnonzero((share > EPS) & (row < n))  # the row above the grid holds no cells
        ga = g[at]
        col = box[ga, 0] + (at + lo - off[ga]) // box[ga, 3]
        out.append((ga + first, row[at] * n + col, np.minimum(share[at], 1.0)))
        lo = hi
    if not out:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    return tuple(np.concatenate(x) for x in zip(*out))
