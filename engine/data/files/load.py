"""The entry point of the user's files: :func:`load_file` checks the name, size and limits, picks the
reader for the file's kind and builds the Dataset (see the package docstring)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...core.errors import DataError, ParamError, shown_bytes, shown_text
from ..dataset import Dataset, DatasetMeta, make_dataset
from .crs import check_crs, proj_offline
from .delimited import read_csv
from .geojson import read_geojson
from .gpkg import read_gpkg
from .parquet import read_parquet
from .reading import KINDS, SUPPORTED, ReadContext
from .shapefile import read_shapefile
from .upload_limits import upload_limits

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
            raise DataError(f"no file at {shown_text(path, 200)}")
        size = path.stat().st_size
    name = shown_text(Path(filename).name)
    ext = Path(filename).suffix.lower()
    if ext == ".shp":
        raise DataError(f"{name}: upload a Shapefile as one .zip holding its .shp, .shx, .dbf and .prj files")
    if ext not in KINDS:
        raise DataError(
            f"{name}: unsupported file type {shown_text(ext or '(no extension)', 20)!r}; supported: {SUPPORTED}"
        )
    if size > max_bytes:
        raise DataError(
            f"{name} is {shown_bytes(size)}, over the limit of {shown_bytes(max_bytes)} (HEATMAP_MAX_UPLOAD_MB)"
        )
    if size == 0:
        raise DataError(f"{name} is empty")
    c = ReadContext(name, KINDS[ext], columns, check_crs(crs), polygons, layer, max_bytes, max_points)
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


def _finish(c: ReadContext, lon, lat, attrs, used, bbox) -> Dataset:
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
        value_name=shown_text(used.get("value") or ""),
        flag_name=shown_text(used.get("flag") or ""),
        extra={"notes": c.notes, "columns": {k: v for k, v in used.items() if v is not None}},
    )
    try:
        return make_dataset(lon, lat, meta, **attrs)
    except DataError as exc:
        raise DataError(f"{c.name}: {exc}") from None


READERS = {
    "csv": read_csv,
    "geojson": read_geojson,
    "parquet": read_parquet,
    "gpkg": read_gpkg,
    "shapefile": read_shapefile,
}


def _deg(v: float, pos: str, neg: str) -> str:
    return f"{abs(v):.4f}°{pos if v >= 0 else neg}"
