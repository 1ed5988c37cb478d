"""The user's own files: CSV, GeoJSON, GeoParquet, zipped Shapefile and GeoPackage.

``load_file(path_or_bytes, filename, columns=None, crs=None, ...)`` is used by the
dashboard's upload widget (bytes + file name) and by the CLI (a path). Any CRS a file
declares is reprojected to WGS84. Every problem becomes a :class:`DataError` whose
message says what is wrong and how to fix it; whatever was *assumed* (a CRS, centroids
for polygons, dropped empty geometries) is listed in ``meta.extra["notes"]`` and in the
description.

Columns are found by name (case and spaces ignored): latitude ``lat``, ``latitude``,
``y``; longitude ``lon``, ``lng``, ``long``, ``longitude``, ``x``; optional ``user_id``
(also ``user``, ``userid``, ``uid``), ``value``, ``flag`` and ``weight``; or
mapped explicitly with ``columns={"lat": ..., "lon": ..., "user_id": ..., ...}``.
Two columns that name the same role the same way (``lat`` and ``LAT``) are refused;
when several synonyms are present (``lat`` and ``y``) the first in that list is used
and the others are named in a note.
The public region of a user's file is read off its points unless ``bbox`` is given: the points'
bounding box rounded outward to a coarse grid (:func:`engine.data.projection.public_frame`), never the
exact box, whose edges are four people's coordinates; ``meta.bbox_from_data`` is then True, which the
engine reports as side information, and ``meta.extra["region_frame"]`` says which grid.

Files come from possibly hostile users of a shared server, so:

- each file's type is verified from its bytes before it is parsed (GeoJSON: JSON whose
  top-level ``type`` is a FeatureCollection, Feature or geometry; GeoPackage: the SQLite
  header and a ``gpkg_contents`` table; Parquet: ``PAR1`` at both ends; zipped
  Shapefile: a zip whose ``.shp`` starts with the file code 9994; CSV: text), and a file
  whose bytes are not what its name says (e.g. an OGR VRT named ``.gpkg``) is refused;
- GDAL never picks a reader. GeoJSON is parsed with :mod:`json`, Parquet with pyarrow,
  GeoPackage with :mod:`sqlite3` (read-only queries under an authorizer, no views);
  only the Shapefile goes through GDAL, via fiona with ``driver="ESRI Shapefile"``, on
  members extracted under fixed names to a private directory, with GDAL's network
  and VRT access off (:data:`GDAL_SAFE`);
- sizes are checked before anything is expanded (Parquet metadata, zip headers, feature
  counts), and messages never carry a library's own text, which could quote a line of a
  file or a server path.

Limits, read from the environment at each call:

- ``HEATMAP_MAX_UPLOAD_MB`` (default 200, Streamlit's own default): the largest file;
- ``HEATMAP_MAX_POINTS`` (default 5,000,000; at most the engine's 20,000,000): the most
  locations in one file.

Unpacked zip members and decoded Parquet columns may take at most :data:`EXPANSION`
times the file limit; a zip member over 16 MiB may be at most :data:`MAX_RATIO` times
its compressed size.

Silently wrong inputs get a note: when every coordinate is within ±90° a swap of
latitude and longitude cannot be detected, so the note gives the median location to
check; a cluster across the antimeridian gets a region that crosses it (see
:func:`engine.data.projection.lon_extent`).

Layout: this module is the entry point (:func:`load_file`, the registry's ``file`` source); one
reader per format (:mod:`.tables` for CSV, :mod:`.geojson`, :mod:`.parquet`, :mod:`.gpkg`,
:mod:`.shapefile`), the steps the vector readers share (:mod:`.vector`) and the limits, type
checks, reading context and column matching (:mod:`.common`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...core.errors import DataError, ParamError
from ...core.params import Param
from ..dataset import Dataset, DatasetMeta, make_dataset
from .common import KINDS, SUPPORTED, _check_crs, _Ctx, _deg, _short, _size, upload_limits
from .crs import proj_offline
from .geojson import _read_geojson
from .gpkg import _read_gpkg
from .parquet import _read_parquet
from .shapefile import _read_shapefile
from .tables import _read_csv

proj_offline()


# ------------------------------------------------------------------ entry point
def load_file(
    path_or_bytes: str | os.PathLike | bytes,
    filename: str | None = None,
    columns: dict | None = None,
    max_bytes: int | None = None,
    crs=None,
    polygons: str = "centroid",
    bbox: tuple[float, float, float, float] | None = None,
    layer: str | None = None,
    max_points: int | None = None,
) -> Dataset:
    """Read the user's file into a Dataset (see the module docstring).

    ``crs``: the CRS of the coordinates when the file does not say, as an authority code
    (e.g. ``"EPSG:27700"`` for a CSV of British National Grid eastings/northings).
    ``polygons``: ``"centroid"`` replaces polygon and line features by their centroids
    (noted), ``"reject"`` refuses them. ``bbox``: a public region (lon_min, lat_min,
    lon_max, lat_max) instead of the data's extent. ``layer``: the GeoPackage layer when
    it holds several. ``max_bytes``/``max_points``: limits instead of the environment's."""
    if polygons not in ("centroid", "reject"):
        raise ParamError("polygons must be 'centroid' or 'reject'")
    env_bytes, env_points = upload_limits()
    max_bytes = env_bytes if max_bytes is None else int(max_bytes)
    max_points = env_points if max_points is None else int(max_points)
    path = None
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data: bytes | None = bytes(path_or_bytes)
        if not filename:
            raise ParamError("a file name (with its extension) is needed with raw bytes")
        size = len(data)
    else:
        path = Path(path_or_bytes)
        data = None
        filename = filename or path.name
        if not path.is_file():
            raise DataError(f"no file at {_short(path, 200)}")
        size = path.stat().st_size
    name = _short(Path(filename).name)
    ext = Path(filename).suffix.lower()
    if ext == ".shp":
        raise DataError(f"{name}: upload a Shapefile as one .zip holding its .shp, .shx, .dbf and .prj files")
    if ext not in KINDS:
        raise DataError(
            f"{name}: unsupported file type {_short(ext or '(no extension)', 20)!r}; supported: {SUPPORTED}"
        )
    if size > max_bytes:
        raise DataError(f"{name} is {_size(size)}, over the limit of {_size(max_bytes)} (HEATMAP_MAX_UPLOAD_MB)")
    if size == 0:
        raise DataError(f"{name} is empty")
    c = _Ctx(name, KINDS[ext], columns, _check_crs(crs), polygons, layer, max_bytes, max_points)
    try:
        if data is None:
            try:
                data = path.read_bytes()
            except OSError:
                raise DataError(f"{name} could not be read from disk") from None
        lon, lat, attrs, used = READERS[c.kind](data, c)
        return _finish(c, lon, lat, attrs, used, bbox)
    except (DataError, ParamError):
        raise
    except MemoryError:
        raise DataError(f"{name} is too large to read into memory") from None
    except RecursionError:
        raise c.refuse("it is nested too deeply") from None
    except Exception:
        # a library's own message may quote a line of a file or a server path: never shown
        raise c.refuse("its contents could not be parsed") from None


def _finish(c: _Ctx, lon, lat, attrs, used, bbox) -> Dataset:
    if bbox is not None:
        bbox = tuple(float(v) for v in bbox)
        if len(bbox) != 4 or not (bbox[2] > bbox[0] and bbox[3] > bbox[1]):
            raise ParamError("bbox must be (lon_min, lat_min, lon_max, lat_max) with some width and height")
    n = lon.size
    if n == 0:
        raise DataError(f"{c.name} has no locations")
    if n > c.max_points:
        raise c.too_many(n, "locations")
    if n == 1:
        raise DataError(f"{c.name} has a single location: a heatmap needs a region with several")
    if bbox is None and np.ptp(lon) == 0 and np.ptp(lat) == 0:
        raise DataError(f"{c.name}: all {n:,} locations are the same point, so the region has no width or height")
    # Rule: a swap cannot be seen when the longitudes are also valid latitudes (all within ±90);
    # latitudes are always valid longitudes. The note gives the median location to check.
    if c.order and np.isfinite(lon).all() and np.abs(lon).max() <= 90 and np.abs(lat).max() <= 90:
        c.notes.append(
            f"Every coordinate is within ±90°, so the {c.order} would also be valid swapped and a swap of latitude "
            f"and longitude cannot be detected: the median location is read as {_deg(float(np.median(lat)), 'N', 'S')}, "
            f"{_deg(float(np.median(lon)), 'E', 'W')}. If that is the wrong place, swap them."
        )
    desc = f"Uploaded file {c.name}: {n:,} locations."
    if c.notes:
        desc += " " + " ".join(c.notes)
    meta = DatasetMeta(
        name=c.name,
        source=f"file:{c.name}",
        citation="the user's own file",
        license="the user's own data",
        description=desc,
        bbox=bbox or (0.0, 0.0, 0.0, 0.0),
        bbox_from_data=bbox is None,
        value_name=_short(used.get("value") or ""),
        flag_name=_short(used.get("flag") or ""),
        extra={"notes": c.notes, "columns": {k: v for k, v in used.items() if v is not None}},
    )
    try:
        return make_dataset(lon, lat, meta, **attrs)
    except DataError as exc:
        raise DataError(f"{c.name}: {exc}") from None


READERS = {
    "csv": _read_csv,
    "geojson": _read_geojson,
    "parquet": _read_parquet,
    "gpkg": _read_gpkg,
    "shapefile": _read_shapefile,
}


# ------------------------------------------------------------------ registry
def _load_registered(path, lat, lon, user_id, value, flag, weight, crs, polygons, layer, bbox=""):
    if not path:
        raise ParamError("give the path of the file to load (path=...)")
    frame = _parse_frame(bbox) if bbox else None
    cols = {
        k: v for k, v in dict(lat=lat, lon=lon, user_id=user_id, value=value, flag=flag, weight=weight).items() if v
    }
    from .isolate import load_file_isolated

    return load_file_isolated(
        path, columns=cols or None, crs=crs or None, polygons=polygons, layer=layer or None, bbox=frame
    )


def _parse_frame(text: str) -> tuple[float, float, float, float]:
    try:
        vals = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        vals = ()
    if len(vals) != 4 or not np.isfinite(vals).all():
        raise ParamError(f"bbox is lon_min,lat_min,lon_max,lat_max in degrees (got {_short(text, 60)!r})")
    return vals


def _register() -> None:
    from ..registry import Source, add

    add(
        Source(
            key="file",
            label="Your own file",
            kind="file",
            description=f"Read your own locations: {SUPPORTED}, in any CRS (converted to WGS84).",
            loader=_load_registered,
            params=(
                Param("path", "str", "", "path of the file"),
                Param("lat", "str", "", "latitude column (empty: found by name)"),
                Param("lon", "str", "", "longitude column (empty: found by name)"),
                Param("user_id", "str", "", "user id column (optional)"),
                Param("value", "str", "", "numeric attribute column (optional)"),
                Param("flag", "str", "", "binary attribute column (optional)"),
                Param("weight", "str", "", "weight column (optional)"),
                Param("crs", "str", "", "CRS of the coordinates when the file does not say (e.g. EPSG:27700)"),
                Param(
                    "polygons",
                    "choice",
                    "centroid",
                    "polygons and lines: use centroids or reject",
                    choices=("centroid", "reject"),
                ),
                Param("layer", "str", "", "GeoPackage layer to read when the file holds several"),
                Param(
                    "bbox",
                    "str",
                    "",
                    "public region lon_min,lat_min,lon_max,lat_max (empty: the locations' box rounded outward to a "
                    "coarse grid)",
                ),
            ),
            citation="the user's own file",
            license="the user's own data",
        )
    )


_register()
