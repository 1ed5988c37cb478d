"""A dataset's public context: the streets, landmarks and boundaries its publisher ships beside it.

Context is drawn under a heatmap so a reader can tell where it is; it is public (it ships with the data's
open source, or the analyst adds it) and is never given to a mechanism. Lon/lat paths and named points.

:func:`load_context` reads the analyst's own layer (roads, districts) from a GeoJSON file with the hardened
GeoJSON parsing of :mod:`engine.data.files.geojson` (the standard library's json, type and size checks, no
GDAL): lines and polygon outlines become paths, points become named points. A file whose parse would take
more memory than its budget, or whose brackets show more positions than a layer may draw, is refused before
it is decoded; :func:`load_context_isolated` reads it in a child process under the memory and time budgets
of :mod:`engine.data.files.isolate` (what the dashboard uses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..core.errors import DataError
from .builtin import example_file, read_bundled

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
        streets = read_bundled(example_file("snow_maps", "Soho_Network.shp"))
        pumps = read_bundled(example_file("snow_maps", "SohoWater.shp")).to_crs(4326)
        pts = [("pump", round(float(p.x), 7), round(float(p.y), 7)) for p in pumps.geometry]
        return Context("1854 streets and water pumps (Snow's map, as libpysal ships it)", _lines(streets), pts)
    if source == "berlin_airbnb":
        bound = read_bundled(example_file("berlin", "prenz_bound.zip"), layer_zip=True)
        return Context("Prenzlauer Berg boundary (as libpysal ships it)", _lines(bound))
    return None


def load_context(data: bytes, filename: str, max_bytes: int | None = None) -> Context:
    """The analyst's context layer from GeoJSON bytes (WGS84, or a CRS the file declares, reprojected).
    Every problem is a :class:`DataError` that names the file and says what is wrong."""
    import json

    from ..core.errors import shown_bytes, shown_text
    from .files.geojson import BadGeometry, geojson_crs, geojson_shape
    from .files.reading import ReadContext, looks_like
    from .files.upload_limits import upload_limits

    name = shown_text(filename)
    limit = upload_limits()[0] if max_bytes is None else int(max_bytes)
    if not filename.lower().endswith((".geojson", ".json")):
        raise DataError(f"{name}: a context layer is read from a GeoJSON file (.geojson)")
    if len(data) > limit:
        raise DataError(f"{name} is {shown_bytes(len(data))}, over the limit of {shown_bytes(limit)}")
    if looks_like(data) != "json":
        raise DataError(f"{name} is not a GeoJSON file")
    _check_before_decoding(data, name)
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
    c = ReadContext(name, "geojson", None, None, "centroid", None, limit, MAX_VERTICES)
    declared = geojson_crs(obj, c)
    geoms = []
    for i, f in enumerate(feats):
        g = f.get("geometry") if isinstance(f, dict) else None
        if g is None:
            continue
        try:
            geoms.append(geojson_shape(g))
        except BadGeometry:
            raise DataError(f"{name}: feature {i + 1} has an invalid geometry") from None
    return _as_context(geoms, declared, name)


def load_context_isolated(data: bytes, filename: str) -> Context:
    """:func:`load_context` in a child process under the memory and time budgets of a file its size."""
    from ..core.errors import shown_text
    from .files.isolate import run_isolated

    advice = "simplify it (fewer vertices) or keep the layer's main roads"
    return run_isolated(load_context, (bytes(data), filename), len(data), shown_text(filename), advice=advice).result


def _check_before_decoding(data: bytes, name: str) -> None:
    """Refuse from the text alone: a parse needing more memory than the file's budget (the estimate the
    GeoJSON reader of locations uses), or more '[' than a layer within the limits holds: a position opens
    one, and each of its at most three enclosing lists (line or ring, polygon, parts) and a feature's
    bounding box or a list in its properties one more."""
    from ..core.errors import shown_bytes
    from .files.geojson import parse_memory
    from .files.upload_limits import memory_budget

    need, budget = parse_memory(data), memory_budget(len(data))
    if need > budget:
        raise DataError(
            f"{name} would need about {shown_bytes(need)} of memory to read, over the limit of {shown_bytes(budget)} "
            "(HEATMAP_PARSE_MEMORY_FACTOR times the file plus HEATMAP_PARSE_MEMORY_MB): simplify it for a context layer"
        )
    most = 4 * (MAX_VERTICES + MAX_FEATURES) + 1
    if (found := data.count(b"[")) > most:
        raise DataError(
            f"{name} holds {found:,} '[' (lists of coordinates), more than the {most:,} of a layer of "
            f"{MAX_VERTICES:,} vertices and {MAX_FEATURES:,} features, the most a context layer may draw: simplify it"
        )


def _as_context(geoms, declared, name: str) -> Context:
    import geopandas as gpd
    import shapely

    if not geoms:
        raise DataError(f"{name}: every feature has an empty geometry")
    gs = gpd.GeoSeries(geoms, crs=declared if declared is not None else 4326)
    try:
        gs = gs.to_crs(4326)
    except Exception:
        raise DataError(f"{name}: could not convert its coordinates to WGS84") from None
    if int(shapely.get_num_coordinates(gs.to_numpy()).sum()) > MAX_VERTICES:
        raise DataError(f"{name} has over {MAX_VERTICES:,} vertices: simplify it for a context layer")
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
