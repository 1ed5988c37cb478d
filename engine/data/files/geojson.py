"""GeoJSON, parsed with the standard library's :mod:`json` (no GDAL): the FeatureCollection, Feature or
geometry at the top level, its declared CRS, nesting and size limits."""

from __future__ import annotations

import json
import math

import numpy as np

from ...core.errors import DataError, shown_bytes, shown_text
from .columns import find_columns
from .crs import named_crs
from .reading import LOOKS, ReadContext, looks_like
from .upload_limits import MAX_COLUMNS, memory_budget
from .vector import read_vector

# ------------------------------------------------------------------ GeoJSON (stdlib json, no GDAL)
_GEOMETRIES = ("Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon", "GeometryCollection")
_NESTING = {"MultiPoint": 1, "LineString": 1, "MultiLineString": 2, "Polygon": 2, "MultiPolygon": 3}


class BadGeometry(Exception):
    pass


def _position(p) -> tuple[float, float]:
    """A GeoJSON position: a list of 2 to 4 numbers, the first two finite (x, y)."""
    if isinstance(p, list) and 2 <= len(p) <= 4 and all(type(v) in (int, float) for v in p):
        try:
            x, y = float(p[0]), float(p[1])
        except OverflowError:  # an integer beyond float range
            raise BadGeometry("coordinate") from None
        if math.isfinite(x) and math.isfinite(y):
            return x, y
    raise BadGeometry("coordinate")


def _positions(a, depth: int):
    if not isinstance(a, list):
        raise BadGeometry("coordinate")
    return [_position(p) for p in a] if depth == 1 else [_positions(p, depth - 1) for p in a]


def geojson_shape(g, depth: int = 0):
    """A shapely geometry from a validated GeoJSON geometry object (not a Point)."""
    import shapely.geometry

    if not isinstance(g, dict) or g.get("type") not in _GEOMETRIES:
        raise BadGeometry("geometry")
    if g["type"] == "GeometryCollection":
        parts = g.get("geometries")
        if not isinstance(parts, list) or depth > 3:
            raise BadGeometry("geometry")
        return shapely.geometry.GeometryCollection([geojson_shape(p, depth + 1) for p in parts])
    if g["type"] == "Point":
        return shapely.geometry.Point(_position(g.get("coordinates")))
    coords = _positions(g.get("coordinates"), _NESTING[g["type"]])
    try:
        return shapely.geometry.shape({"type": g["type"], "coordinates": coords})
    except Exception:  # too few positions for a line or ring
        raise BadGeometry("geometry") from None


def geojson_crs(obj: dict, c: ReadContext):
    """The CRS a GeoJSON declares in the old (2008) ``crs`` member, or None."""
    member = obj.get("crs")
    if member is None:
        return None
    if isinstance(member, dict) and member.get("type") == "link":
        raise DataError(
            f'{c.name} gives its CRS as a link, which is not followed: name it ("crs": {{"type": "name", '
            '"properties": {"name": "urn:ogc:def:crs:EPSG::27700"}}) or remove the member'
        )
    props = member.get("properties") if isinstance(member, dict) else None
    label = props.get("name") if isinstance(props, dict) and member.get("type") == "name" else None
    crs = named_crs(label)
    if crs is None:
        shown = f" {shown_text(label, 60)!r}" if isinstance(label, str) else ""
        raise DataError(
            f'{c.name} declares a CRS{shown} in its "crs" member that is not a known CRS: give an authority code '
            '(e.g. "urn:ogc:def:crs:EPSG::27700"), or remove the member if the coordinates are WGS84 '
            "longitude/latitude"
        )
    return crs


def parse_memory(data: bytes) -> int:
    """Roughly the bytes :func:`json.loads` and the reader take for ``data``, from a count of its brackets
    and commas (C speed, no decoding): a list ~120 bytes, an object ~250, a value ~32, two copies of the text."""
    return 120 * data.count(b"[") + 250 * data.count(b"{") + 32 * data.count(b",") + 2 * len(data)


def read_geojson(data: bytes, c: ReadContext):
    import geopandas as gpd
    import pandas as pd
    import shapely

    looks = looks_like(data)
    if looks != "json":
        raise c.refuse(f"its bytes are {LOOKS[looks]}" if looks != "text" else "it is text that is not JSON")
    need, budget = parse_memory(data), memory_budget(len(data))
    if need > budget:
        raise DataError(
            f"{c.name} would need about {shown_bytes(need)} of memory to parse as GeoJSON (each position and object "
            f"takes many times its text), over the limit of {shown_bytes(budget)} (HEATMAP_PARSE_MEMORY_FACTOR times the "
            "file plus HEATMAP_PARSE_MEMORY_MB): convert it to CSV or GeoParquet"
        )
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise c.refuse("it is not UTF-8 text (GeoJSON is UTF-8)") from None
    except json.JSONDecodeError as exc:
        raise c.refuse(f"it is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind not in ("FeatureCollection", "Feature", *_GEOMETRIES):
        raise c.refuse('its top-level "type" is not FeatureCollection, Feature or a GeoJSON geometry')
    if kind == "FeatureCollection":
        feats = obj.get("features")
        if not isinstance(feats, list):
            raise c.refuse('its "features" member is not a list')
    else:
        feats = [obj if kind == "Feature" else {"type": "Feature", "geometry": obj, "properties": None}]
    if len(feats) > c.max_points:
        raise c.too_many(len(feats), "features")
    if not feats:
        raise DataError(f"{c.name} holds no features")
    declared = geojson_crs(obj, c)
    geoms = np.full(len(feats), None, dtype=object)
    props, pi, px, py = [], [], [], []
    count = 0  # points, counting each point of a MultiPoint
    parts = vertices = 0  # a file of regions: counted from the nested lists, before any geometry is built
    for i, f in enumerate(feats):
        if not isinstance(f, dict) or f.get("type") != "Feature":
            raise DataError(f"{c.name}: feature {i + 1} is not a GeoJSON Feature object")
        p = f.get("properties")
        if p is not None and not isinstance(p, dict):
            raise DataError(f'{c.name}: feature {i + 1} has "properties" that are not an object')
        props.append(p or {})
        g = f.get("geometry")
        try:
            if g is None:
                continue
            if isinstance(g, dict) and g.get("type") == "Point":
                x, y = _position(g.get("coordinates"))
                pi.append(i)
                px.append(x)
                py.append(y)
                count += 1
                continue
            if c.max_vertices:
                more = _polygon_extent(g)
                parts, vertices = parts + more[0], vertices + more[1]
                c.check_region_size(vertices, parts, "counted before decoding")
            geoms[i] = geojson_shape(g)
            count += len(geoms[i].geoms) if geoms[i].geom_type == "MultiPoint" else 1
        except BadGeometry as exc:
            raise DataError(
                f"{c.name}: feature {i + 1} has an invalid {exc.args[0]}"
                + (
                    ": a position must be [longitude, latitude] with two finite numbers"
                    if exc.args[0] == "coordinate"
                    else " (an unknown type, or too few positions for its type)"
                )
            ) from None
        if count > c.max_points:
            raise c.too_many(count, "points")
    if pi:
        geoms[np.asarray(pi)] = shapely.points(px, py)
    keys = dict.fromkeys(k for p in props for k in p)
    if len(keys) > MAX_COLUMNS:
        raise c.refuse(f"its features have {len(keys):,} property names, over the limit of {MAX_COLUMNS:,}")
    used = find_columns(list(keys), attr_columns(c), roles=c.roles, notes=c.notes, seen=c.fields)
    cols = {used[r]: [p.get(used[r]) for p in props] for r in c.roles if used[r] is not None}
    gdf = gpd.GeoDataFrame(pd.DataFrame(cols, index=range(len(feats))), geometry=gpd.GeoSeries(geoms))
    return read_vector(gdf, declared, used, c)


def _polygon_extent(g) -> tuple[int, int]:
    """(polygons, vertices) of a GeoJSON Polygon or MultiPolygon from its nested lists (0, 0 for the rest)."""
    kind, coords = (g.get("type"), g.get("coordinates")) if isinstance(g, dict) else (None, None)
    if not isinstance(coords, list) or kind not in ("Polygon", "MultiPolygon"):
        return 0, 0
    polys = [coords] if kind == "Polygon" else [p for p in coords if isinstance(p, list)]
    return len(polys), sum(len(r) for p in polys for r in p if isinstance(r, list))


def attr_columns(c: ReadContext) -> dict:
    return {k: v for k, v in (c.columns or {}).items() if k not in ("lat", "lon")}
