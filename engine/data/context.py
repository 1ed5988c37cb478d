"""A dataset's public context: the streets, landmarks and boundaries its publisher ships beside it.

Context is drawn under a heatmap so a reader can tell where it is; it is public (it ships with the data's
open source, or the analyst adds it) and is never given to a mechanism. Lon/lat paths and named points.

:func:`load_context` reads the analyst's own layer (roads, districts) from a GeoJSON file with the hardened
GeoJSON parsing of :mod:`engine.data.files.geojson` (the standard library's json, type and size checks, no
GDAL): lines and polygon outlines become paths, points become named points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..core.errors import DataError
from .builtin import _read, example_file

MAX_FEATURES = 20_000  # a context layer is drawn in the browser: more would slow every map
MAX_VERTICES = 400_000


@dataclass(frozen=True)
class Context:
    label: str  # what the layer is, for the legend ("1854 streets and water pumps")
    paths: list[list[list[float]]] = field(default_factory=list)  # lines and polygon rings, [[lon, lat], ...]
    points: list[tuple[str, float, float]] = field(default_factory=list)  # (name, lon, lat)


def _lines(gdf) -> list[list[list[float]]]:
    out = []
    for g in gdf.to_crs(4326).geometry:
        parts = getattr(g, "geoms", [g])
        for part in parts:
            ring = getattr(part, "exterior", part)
            out.append(np.round(np.asarray(ring.coords)[:, :2], 7).tolist())
    return out


@lru_cache(maxsize=4)
def builtin_context(source: str) -> Context | None:
    """The public context bundled with a libpysal dataset (John Snow's 1854 streets and water pumps; the
    Prenzlauer Berg boundary), or None."""
    if source == "snow_cholera":
        streets = _read(example_file("snow_maps", "Soho_Network.shp"))
        pumps = _read(example_file("snow_maps", "SohoWater.shp")).to_crs(4326)
        pts = [("pump", round(float(p.x), 7), round(float(p.y), 7)) for p in pumps.geometry]
        return Context("1854 streets and water pumps (Snow's map, as libpysal ships it)", _lines(streets), pts)
    if source == "berlin_airbnb":
        bound = _read(example_file("berlin", "prenz_bound.zip"), layer_zip=True)
        return Context("Prenzlauer Berg boundary (as libpysal ships it)", _lines(bound))
    return None


def load_context(data: bytes, filename: str, max_bytes: int | None = None) -> Context:
    """The analyst's context layer from GeoJSON bytes (WGS84, or a CRS the file declares, reprojected).
    Every problem is a :class:`DataError` that names the file and says what is wrong."""
    import json

    from .files.common import _Ctx, _looks_like, _short, _size, upload_limits
    from .files.geojson import _BadGeometry, _geojson_crs, _shape

    name = _short(filename)
    limit = upload_limits()[0] if max_bytes is None else int(max_bytes)
    if not filename.lower().endswith((".geojson", ".json")):
        raise DataError(f"{name}: a context layer is read from a GeoJSON file (.geojson)")
    if len(data) > limit:
        raise DataError(f"{name} is {_size(len(data))}, over the limit of {_size(limit)}")
    if _looks_like(data) != "json":
        raise DataError(f"{name} is not a GeoJSON file")
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise DataError(f"{name} is not valid GeoJSON (UTF-8 JSON)") from None
    kind = obj.get("type") if isinstance(obj, dict) else None
    feats = obj.get("features") if kind == "FeatureCollection" else [obj] if kind == "Feature" else None
    if not isinstance(feats, list) or not feats:
        raise DataError(f"{name} holds no GeoJSON features")
    if len(feats) > MAX_FEATURES:
        raise DataError(f"{name} holds {len(feats):,} features; a context layer may hold {MAX_FEATURES:,}")
    c = _Ctx(name, "geojson", None, None, "centroid", None, limit, MAX_VERTICES)
    declared = _geojson_crs(obj, c)
    geoms = []
    for i, f in enumerate(feats):
        g = f.get("geometry") if isinstance(f, dict) else None
        if g is None:
            continue
        try:
            geoms.append(_shape(g))
        except _BadGeometry:
            raise DataError(f"{name}: feature {i + 1} has an invalid geometry") from None
    return _as_context(geoms, declared, name)


def _as_context(geoms, declared, name: str) -> Context:
    import geopandas as gpd

    if not geoms:
        raise DataError(f"{name}: every feature has an empty geometry")
    gs = gpd.GeoSeries(geoms, crs=declared if declared is not None else 4326)
    try:
        gs = gs.to_crs(4326)
    except Exception:
        raise DataError(f"{name}: could not convert its coordinates to WGS84") from None
    paths, points = [], []
    for g in gs.explode(index_parts=False):
        if g is None or g.is_empty:
            continue
        if g.geom_type == "Point":
            points.append(("", round(g.x, 7), round(g.y, 7)))
        elif g.geom_type == "Polygon":
            paths += [np.round(np.asarray(r.coords)[:, :2], 7).tolist() for r in (g.exterior, *g.interiors)]
        elif g.geom_type == "LineString":
            paths.append(np.round(np.asarray(g.coords)[:, :2], 7).tolist())
    if sum(len(p) for p in paths) > MAX_VERTICES:
        raise DataError(f"{name} has over {MAX_VERTICES:,} vertices: simplify it for a context layer")
    return Context(f"your layer {name}", paths, points)
