"""The analyst's own regions (districts, postcodes): a polygon file read through the same hardened readers
as a file of locations (GeoJSON, GeoParquet, GeoPackage, zipped Shapefile; see :mod:`engine.data.files`),
with an id column and a name column chosen by the caller or found by name (``id``/``code``/``geoid``,
``name``/``label``). A CSV holds no polygons and is refused. Nothing here reads any location data.

A file of regions costs time and memory in proportion to its vertices and polygons, which a short file can
hold many of (a comb's teeth, a MultiPolygon of specks): at most ``HEATMAP_MAX_REGION_VERTICES`` (default
1,000,000) vertices and ``HEATMAP_MAX_REGION_PARTS`` (default 50,000) polygons, each part of a MultiPolygon
one, refused from the size of the file's geometries before they are decoded where the format tells it
(GeoParquet's footer, the zip's headers, GeoPackage blobs, GeoJSON's nested lists), and counted again once
decoded. :func:`load_polygons_isolated` reads a file in a child process under the memory and time budgets
of :mod:`.isolate` (what the dashboard and the command line use)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import DataError, shown_bytes, shown_text
from .columns import REGION_ROLES
from .crs import check_crs
from .reading import KINDS, ReadContext
from .reproject import check_size
from .upload_limits import region_limits, upload_limits

POLYGON_KINDS = ("geojson", "parquet", "gpkg", "shapefile")
MAX_REGIONS = 50_000
ADVICE = "simplify its polygons (fewer vertices) or upload fewer regions"


@dataclass(frozen=True)
class PolygonFile:
    """Regions read from a file: WGS84 shapely polygons, their ids and names (strings, ids unique),
    the columns they came from and what was assumed (``notes``)."""

    geoms: np.ndarray  # object array of shapely (Multi)Polygons, lon/lat
    ids: tuple[str, ...]
    names: tuple[str, ...]
    id_column: str | None
    name_column: str | None
    notes: tuple[str, ...]
    fields: tuple[str, ...] = ()  # every attribute column of the file (for an id or name picker)
    sha256: str = ""  # of the file's bytes: with its base name, how a release names this public input
    name: str = "the regions"  # the file's name, for messages
    digest: str = ""  # the file's SHA-256 and the options read with: what the regions built from it are kept by
    size: int = 0  # bytes of the file: building its regions gets the memory and time a file this size gets


def load_polygons(
    path_or_bytes: str | os.PathLike | bytes,
    filename: str | None = None,
    id_column: str | None = None,
    name_column: str | None = None,
    layer: str | None = None,
    crs=None,
    max_bytes: int | None = None,
) -> PolygonFile:
    """Read a polygon file. ``id_column`` / ``name_column``: the columns naming each region (found by
    name when not given; without an id column the features are numbered 1, 2, ...; without a name
    column the id is the name). Ids must be unique. Every problem is a :class:`DataError`."""
    env_bytes, _ = upload_limits()
    max_bytes = env_bytes if max_bytes is None else int(max_bytes)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        if not filename:
            raise DataError("a file name (with its extension) is needed with raw bytes")
    else:
        path = Path(path_or_bytes)
        filename = filename or path.name
        if not path.is_file():
            raise DataError(f"no file at {shown_text(path, 200)}")
        if path.stat().st_size > max_bytes:
            raise DataError(
                f"{shown_text(path.name)} is {shown_bytes(path.stat().st_size)}, over the limit of {shown_bytes(max_bytes)}"
            )
        try:
            data = path.read_bytes()
        except OSError:
            raise DataError(f"{shown_text(path.name)} could not be read from disk") from None
    name = shown_text(Path(filename).name)
    kind = KINDS.get(Path(filename).suffix.lower())
    if kind not in POLYGON_KINDS:
        raise DataError(
            f"{name}: regions are read from GeoJSON (.geojson), GeoParquet (.parquet), GeoPackage (.gpkg) or a "
            "zipped Shapefile (.zip)"
        )
    if len(data) > max_bytes:
        raise DataError(
            f"{name} is {shown_bytes(len(data))}, over the limit of {shown_bytes(max_bytes)} (HEATMAP_MAX_UPLOAD_MB)"
        )
    if not data:
        raise DataError(f"{name} is empty")
    cols = {k: v for k, v in (("region_id", id_column), ("region_name", name_column)) if v}
    c = ReadContext(name, kind, cols, check_crs(crs), "keep", layer, max_bytes, MAX_REGIONS, roles=REGION_ROLES)
    c.unit, c.setting = "regions", ""  # the engine's fixed limit on regions: no setting raises it
    c.max_vertices, c.max_parts = region_limits()
    from . import READERS

    try:
        gdf, used = READERS[kind](data, c)
    except DataError:
        raise
    except MemoryError:
        raise DataError(f"{name} is too large to read into memory") from None
    except Exception:
        raise c.refuse("its contents could not be parsed") from None
    sha256 = hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256(repr((sha256, id_column, name_column, layer, str(crs or ""))).encode()).hexdigest()
    return _named(gdf, used, c, sha256, digest, len(data))


def load_polygons_isolated(path_or_bytes, filename: str | None = None, **kwargs) -> PolygonFile:
    """:func:`load_polygons` in a child process under the memory and time budgets of :mod:`.isolate`."""
    from .isolate import file_source, run_isolated

    source, name, size = file_source(path_or_bytes, filename)
    return run_isolated(load_polygons, (source, filename), size, name, kwargs, advice=ADVICE).result


def _named(gdf, used: dict, c: ReadContext, sha256: str, digest: str, size: int) -> PolygonFile:
    import shapely

    idc, namec = used.get("region_id"), used.get("region_name")
    n = len(gdf)
    ids = [_label(v) for v in gdf[idc]] if idc else [str(i + 1) for i in range(n)]
    if idc is None:
        c.notes.append("No id column: the regions are numbered 1, 2, ... in the file's order.")
    if any(not v for v in ids):
        raise DataError(f"{c.name}: {sum(not v for v in ids)} region(s) have an empty id in column {shown_text(idc)!r}")
    if len(set(ids)) != n:
        dup = next(v for v in ids if ids.count(v) > 1)
        raise DataError(f"{c.name}: the id {shown_text(dup, 40)!r} names several regions; ids must be unique")
    names = [_label(v) or i for v, i in zip(gdf[namec], ids)] if namec else list(ids)
    geoms = gdf.geometry.to_numpy()
    check_size(geoms, c)
    bad = ~shapely.is_valid(geoms)  # a self-touching ring, overlapping parts: a wrong area unless repaired
    if bad.any():
        geoms = geoms.copy()
        geoms[bad] = shapely.make_valid(geoms[bad], method="structure", keep_collapsed=False)
    return PolygonFile(
        np.asarray(geoms, dtype=object),
        tuple(ids),
        tuple(names),
        idc,
        namec,
        tuple(c.notes),
        tuple(c.fields),
        sha256,
        c.name,
        digest,
        size,
    )


def _label(v) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return ""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return shown_text(str(v).strip(), 120)
