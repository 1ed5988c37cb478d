"""Polygons carried from one coordinate system to another with their edges kept on course (a file of
regions: its CRS to WGS84, :mod:`.vector`; WGS84 to a map's metric CRS, :mod:`engine.data.region_geometry`), and
the count of a file of regions' vertices and polygons against its limits."""

from __future__ import annotations

import numpy as np

from ...core.errors import DataError
from .reading import ReadContext
from .upload_limits import region_limits


def check_size(geoms, c: ReadContext, how: str = "") -> None:
    """Refuse regions with more vertices or polygons than the limits (``how``: how they were counted)."""
    import shapely

    vertices = int(shapely.get_num_coordinates(geoms).sum())
    parts = int(shapely.get_num_geometries(geoms).sum())
    c.check_region_size(vertices, parts, how)


def reproject(geoms: np.ndarray, fn, tol: float, name: str) -> np.ndarray:
    """The polygons of ``geoms`` (parts that are not polygons dropped) through the coordinate map ``fn`` (an
    (n, 2) array to an (n, 2) array), edges kept on their course: an edge is straight where it is drawn,
    and its image is bent, so each is split into the equal steps that keep the image of its middle within
    ``tol`` (in ``fn``'s units) of the straight line between the images of its ends. The bend of a short
    step grows with the square of its length: an edge whose middle strays by e takes sqrt(4 e / tol) steps.
    The vertices this gives are counted against ``HEATMAP_MAX_REGION_VERTICES`` before they are made.
    One Polygon or MultiPolygon (empty: none) per geometry."""
    import shapely

    parts, index = shapely.get_parts(geoms, return_index=True)
    parts, inner = shapely.get_parts(parts, return_index=True)  # a GeometryCollection may hold MultiPolygons
    poly = (shapely.get_type_id(parts) == 3) & ~shapely.is_empty(parts)
    parts, index = parts[poly], index[inner][poly]
    out = np.full(len(geoms), None, dtype=object)
    out[:] = shapely.from_wkt("MULTIPOLYGON EMPTY")
    if not parts.size:
        return out
    _, xy, (ring_off, poly_off) = shapely.to_ragged_array(parts)
    xy = xy[:, :2]
    last = np.zeros(len(xy), dtype=bool)
    last[ring_off[1:] - 1] = True  # a ring's closing vertex starts no edge
    e = np.flatnonzero(~last)
    mid = fn((xy[e] + xy[e + 1]) / 2)
    ends = fn(xy)
    bend = np.hypot(*(mid - (ends[e] + ends[e + 1]) / 2).T)
    if not (np.isfinite(ends).all() and np.isfinite(bend).all()):
        raise DataError(f"{name}: some of its coordinates cannot be converted to the map's coordinates")
    steps = np.maximum(np.ceil(np.sqrt(4 * bend / tol)), 1).astype(np.int64)
    limit = region_limits()[0]
    total = int(steps.sum()) + len(ring_off) - 1
    if total > limit:
        raise DataError(
            f"{name}: its edges, split so that they keep their course on the map, would take {total:,} vertices, "
            f"over the limit of {limit:,} (HEATMAP_MAX_REGION_VERTICES): simplify its polygons"
        )
    if total == len(xy):  # no edge bends enough to split
        new, new_off = ends, ring_off
    else:
        ring = np.searchsorted(ring_off, e, side="right") - 1
        new_off = np.concatenate([[0], np.cumsum(np.bincount(ring, weights=steps, minlength=len(ring_off) - 1) + 1)])
        new_off = new_off.astype(np.int64)
        src = np.repeat(e, steps)
        t = (np.arange(src.size) - np.repeat(np.cumsum(steps) - steps, steps)) / np.repeat(steps, steps)
        at = np.arange(src.size) + np.repeat(ring, steps)  # each earlier ring has one closing vertex more
        pts = np.empty((total, 2))
        pts[at] = xy[src] + (xy[src + 1] - xy[src]) * t[:, None]
        pts[new_off[1:] - 1] = pts[new_off[:-1]]
        new = fn(pts)
    polys = shapely.from_ragged_array(shapely.GeometryType.POLYGON, new, (new_off, poly_off))
    out = shapely.multipolygons(polys, indices=index, out=out)
    one = shapely.get_num_geometries(out) == 1
    out[one] = shapely.get_geometry(out[one], 0)
    return out
