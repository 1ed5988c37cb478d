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
The public region of a user's file is read off its points unless ``bbox`` is given:
``meta.bbox_from_data`` is then True, which the engine reports as side information.

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
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import struct
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from ...core.errors import DataError, ParamError
from ...core.params import Param
from ..dataset import MAX_POINTS, Dataset, DatasetMeta, make_dataset

MiB = 1 << 20
DEFAULT_MAX_MB = 200  # Streamlit's default upload limit
DEFAULT_MAX_POINTS = 5_000_000
EXPANSION = 10  # unpacked zip members / decoded Parquet columns: at most this many times the file limit
MAX_RATIO = 200  # a zip member over RATIO_FLOOR may expand at most this many times
RATIO_FLOOR = 16 * MiB
MAX_COLUMNS = 1000
MAX_ZIP_ENTRIES = 1000
GPKG_STEPS = 10_000  # SQLite may run 10,000 x (GPKG_STEPS + max_points / 10) instructions on a GeoPackage
NAME_CHARS = 80

# GDAL configuration for the one GDAL read (the Shapefile): no network, no VRT, no external SQLite access
GDAL_SAFE = {
    "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ".heatmap-none",  # /vsicurl/ treats every URL as missing
    "GDAL_HTTP_MAX_RETRY": "0",
    "GDAL_HTTP_TIMEOUT": "1",
    "GDAL_HTTP_CONNECTTIMEOUT": "1",
    "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",
    "OGR_SQLITE_ALLOW_EXTERNAL_ACCESS": "NO",
    "GDAL_SKIP": "VRT OGR_VRT",  # effective only if fiona registers its drivers here; the explicit driver is the guard
}

KINDS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".geojson": "geojson",
    ".json": "geojson",
    ".parquet": "parquet",
    ".geoparquet": "parquet",
    ".zip": "shapefile",
    ".gpkg": "gpkg",
}
WHAT = {
    "csv": "CSV table",
    "geojson": "GeoJSON",
    "parquet": "GeoParquet or Parquet file",
    "shapefile": "zipped Shapefile",
    "gpkg": "GeoPackage",
}
SUPPORTED = (
    "CSV (.csv/.tsv/.txt), GeoJSON (.geojson/.json), GeoParquet (.parquet), zipped Shapefile (.zip), GeoPackage (.gpkg)"
)

NAMES = {
    "lat": ("lat", "latitude", "y", "latdeg", "decimallatitude"),
    "lon": ("lon", "lng", "long", "longitude", "x", "londeg", "decimallongitude"),
    "user_id": ("userid", "user", "uid", "personid", "deviceid"),
    "value": ("value",),
    "flag": ("flag",),
    "weight": ("weight",),
}
ROLES = tuple(NAMES)
ATTRS = ("user_id", "value", "flag", "weight")
ROLE_WORD = {"lat": "latitude", "lon": "longitude", "user_id": "user id"}
_TRUE = {"1", "true", "t", "yes", "y", "positive", "pos"}
_FALSE = {"0", "false", "f", "no", "n", "negative", "neg", ""}
_BLANK = {"", "na", "nan", "null", "none"}

# what a file's first bytes say it is (for the message when they are not what its name says)
_LOOKS = {
    "sqlite": "a SQLite database (a GeoPackage is named .gpkg)",
    "parquet": "a Parquet file (named .parquet)",
    "zip": "a zip archive (named .zip)",
    "gzip": "gzip-compressed data (unpack it first)",
    "pdf": "a PDF document",
    "png": "a PNG image",
    "xml": "XML or HTML (for example an OGR VRT or KML file), which is not read",
    "json": "JSON (a GeoJSON file is named .geojson)",
    "binary": "binary data",
    "text": "text",
}


def _looks_like(data: bytes) -> str:
    if data.startswith(b"SQLite format 3\0"):
        return "sqlite"
    if data[:4] == b"PAR1":
        return "parquet"
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:5] == b"%PDF-":
        return "pdf"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "text"  # UTF-16 with a byte-order mark
    head = data[:4096]
    if b"\0" in head:
        return "binary"
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if head[:1] == b"<":
        return "xml"
    if head[:1] in (b"{", b"["):
        return "json"
    return "text"


@dataclass
class _Ctx:
    """One load: the file's name and kind, the caller's options and what was noted."""

    name: str
    kind: str
    columns: dict | None
    crs: object  # pyproj CRS or None
    polygons: str
    layer: str | None
    max_bytes: int
    max_points: int
    notes: list = field(default_factory=list)
    order: str = ""  # how degrees were read, for the swap note ("" after a CRS conversion)

    def refuse(self, why: str) -> DataError:
        return DataError(f"{self.name} is not a readable {WHAT[self.kind]}: {why}")

    def too_many(self, n: int, what: str) -> DataError:
        return DataError(
            f"{self.name} holds {n:,} {what}, over the limit of {self.max_points:,} locations per file "
            "(HEATMAP_MAX_POINTS)"
        )


def _short(s, n: int = NAME_CHARS) -> str:
    """A user-supplied string for a message: control characters replaced, at most ``n`` characters."""
    s = re.sub(r"[\x00-\x1f\x7f]", "?", str(s))
    return s if len(s) <= n else s[: n - 16] + "…" + s[-15:]


def _norm(name) -> str:
    return re.sub(r"[\s_\-.]", "", str(name).strip().lower())


def _size(b: int) -> str:
    return f"{b / MiB:,.1f} MB" if b >= 100_000 else f"{b:,} bytes"


def _list(cols) -> str:
    cols = [repr(_short(c, 40)) for c in cols]
    return ", ".join(cols[:30]) + (f" ... ({len(cols)} in all)" if len(cols) > 30 else "") if cols else "(none)"


def _env_number(var: str, default: float) -> float:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        v = float(raw.replace("_", ""))
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise ParamError(f"the environment variable {var} must be a positive number (it is {_short(raw, 40)!r})")
    return v


def upload_limits() -> tuple[int, int]:
    """(largest file in bytes, most locations per file) from ``HEATMAP_MAX_UPLOAD_MB`` and ``HEATMAP_MAX_POINTS``."""
    max_bytes = int(_env_number("HEATMAP_MAX_UPLOAD_MB", DEFAULT_MAX_MB) * MiB)
    max_points = min(int(_env_number("HEATMAP_MAX_POINTS", DEFAULT_MAX_POINTS)), MAX_POINTS)
    return max_bytes, max(max_points, 1)


# ------------------------------------------------------------------ columns
def _find_columns(available: list, columns: dict | None, roles=ROLES, notes: list | None = None) -> dict:
    """Map each role to a column name, or None. ``lat``/``lon`` are required when in ``roles``."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(ROLES), key=str)
    if unknown:
        raise ParamError(f"unknown column role(s) {_list(unknown)}; use some of: {', '.join(ROLES)}")
    available = [str(c) for c in available]
    by_norm: dict[str, list] = {}
    for c in available:
        by_norm.setdefault(_norm(c), []).append(c)

    def one(cols: list, role: str) -> str:
        if len(cols) > 1:
            raise DataError(
                f"the file has {len(cols)} columns that could be the {ROLE_WORD.get(role, role)} ({_list(cols)}): "
                "rename or remove the extra one(s)"
            )
        return cols[0]

    out = {}
    for role in roles:
        given = columns.get(role)
        if given not in (None, ""):
            given = str(given)
            if given in available:
                out[role] = one([c for c in available if c == given], role)
            elif _norm(given) in by_norm:
                out[role] = one(by_norm[_norm(given)], role)
            else:
                raise DataError(
                    f"the {role} column {_short(given, 40)!r} is not in the file; its columns are: {_list(available)}"
                )
            continue
        found = [n for n in NAMES[role] if n in by_norm]
        out[role] = one(by_norm[found[0]], role) if found else None
        if len(found) > 1 and notes is not None:
            others = [c for n in found[1:] for c in by_norm[n]]
            notes.append(
                f"Column {_short(out[role], 40)!r} was used as the {ROLE_WORD.get(role, role)}; "
                f"{_list(others)} also looked like one and {'was' if len(others) == 1 else 'were'} not used."
            )
    if "lat" in roles:
        missing = [r for r in ("lat", "lon") if out[r] is None]
        if missing:
            raise DataError(
                "could not find the "
                + " and ".join(ROLE_WORD[r] for r in missing)
                + " column: looked for lat/latitude/y and lon/lng/long/longitude/x; the file's columns are: "
                + _list(available)
                + ". Name them explicitly (columns={'lat': ..., 'lon': ...})."
            )
        if out["lat"] == out["lon"]:
            raise DataError(f"latitude and longitude cannot both be the column {_short(out['lat'], 40)!r}")
    for role in ROLES:
        out.setdefault(role, None)
    return out


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


_CRS_CODE = re.compile(r"(?i)urn:ogc:def:crs:[a-z0-9_]+:[0-9.]*:[a-z0-9_.]+|[a-z0-9_]+:[a-z0-9_.]+")


def _named_crs(s):
    """A CRS from an authority code (``EPSG:27700``, ``urn:ogc:def:crs:EPSG::3857``,
    ``OGC:CRS84``), or None. Nothing else is passed to PROJ, which could read a file for
    other forms (``+init=``, grids)."""
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    if not isinstance(s, str) or not _CRS_CODE.fullmatch(s.strip()):
        return None
    try:
        return CRS.from_user_input(s.strip())
    except CRSError:
        return None


def _check_crs(crs):
    from pyproj import CRS

    if crs in (None, ""):
        return None
    if isinstance(crs, CRS):
        return crs
    text = str(crs).strip()
    out = _named_crs(f"EPSG:{text}" if text.isdigit() else text)
    if out is None:
        raise ParamError(f"unknown CRS {_short(text, 60)!r}: give an authority code such as EPSG:4326 or EPSG:27700")
    return out


def _is_wgs84(crs) -> bool:
    return crs is not None and (crs.equals("EPSG:4326", ignore_axis_order=True) or crs.equals("OGC:CRS84"))


def _deg(v: float, pos: str, neg: str) -> str:
    return f"{abs(v):.4f}°{pos if v >= 0 else neg}"


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


# ------------------------------------------------------------------ tables (CSV, plain Parquet)
def _line(i: int) -> str:
    return f"line {i + 2}"  # a CSV's data row i is on this line (after the header)


def _row(i: int) -> str:
    return f"row {i + 1}"


def _read_csv(data: bytes, c: _Ctx):
    import pandas as pd

    looks = _looks_like(data)
    if looks != "text":
        raise c.refuse(f"its bytes are {_LOOKS[looks]}")
    text = _decode_text(data, c)
    if not text.strip():
        raise DataError(f"{c.name} is empty")
    rows = text.rstrip("\r\n").count("\n")  # lines after the header: at least the number of rows
    if rows > c.max_points:
        raise c.too_many(rows, "lines after its header")
    first = text.split("\n", 1)[0]
    try:
        sep = csv.Sniffer().sniff(first[: 64 * 1024] + "\n", delimiters=",;\t|").delimiter
    except csv.Error:
        sep = "\t" if c.name.lower().endswith(".tsv") else ","
    reader = csv.reader(io.StringIO(text), delimiter=sep, skipinitialspace=True)
    try:
        header = next(reader)
        if len(header) > MAX_COLUMNS:
            raise c.refuse(f"it has {len(header):,} columns, over the limit of {MAX_COLUMNS:,}")
        # a row with more fields than the header shifts its values into the wrong columns
        for row in reader:
            if len(row) > len(header):
                raise c.refuse(
                    f"line {reader.line_num} has {len(row)} fields where the header has {len(header)} "
                    "(check the separator and the quoting)"
                )
    except csv.Error:
        raise c.refuse(
            f"line {reader.line_num} cannot be split into fields (a field is over 131,072 characters or badly quoted)"
        ) from None
    except StopIteration:
        raise DataError(f"{c.name} has no header and no rows") from None
    used = _find_columns(header, c.columns, notes=c.notes)
    keep = sorted({header.index(used[r]) for r in ROLES if used[r] is not None})
    try:
        df = pd.read_csv(
            io.StringIO(text),
            sep=sep,
            dtype=str,
            keep_default_na=False,
            skipinitialspace=True,
            index_col=False,
            usecols=keep,
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{c.name} has no header and no rows") from None
    except (pd.errors.ParserError, ValueError, csv.Error):
        raise c.refuse("its rows cannot be split into fields (check the separator and the quoting)") from None
    df.columns = [header[i] for i in keep]
    if len(df) == 0:
        raise DataError(f"{c.name} has a header but no data rows")
    if len(df) > c.max_points:
        raise c.too_many(len(df), "rows")
    lat = _coord_column(df[used["lat"]], used["lat"], "latitude", _line)
    lon = _coord_column(df[used["lon"]], used["lon"], "longitude", _line)
    lon, lat = _to_wgs84_table(lon, lat, used, c, _line)
    return lon, lat, _attributes(df, used, csv_strings=True), used


def _decode_text(data: bytes, c: _Ctx) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise c.refuse("it starts like UTF-16 text but is not valid UTF-16") from None
        c.notes.append("The file is UTF-16: read as such.")
        return text
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        c.notes.append("The file is not UTF-8: read as Latin-1.")
        return data.decode("latin-1")


def _coord_column(s, col, what, where) -> np.ndarray:
    import pandas as pd

    if s.dtype.kind in "iuf":
        out = s.to_numpy(dtype=np.float64)
        if np.isnan(out).any():
            i = int(np.argmax(np.isnan(out)))
            raise DataError(
                f"{int(np.isnan(out).sum()):,} row(s) have no {what} (column {_short(col, 40)!r}; first at {where(i)})"
            )
    else:
        raw = s.astype(str).str.strip()
        missing = raw.str.lower().isin(_BLANK)
        if missing.any():
            i = int(np.argmax(missing.to_numpy()))
            raise DataError(
                f"{int(missing.sum()):,} row(s) have no {what} (column {_short(col, 40)!r}; first at {where(i)}): "
                "remove them or fill them in"
            )
        # a decimal comma (European spreadsheets) is read as a point when nothing else is ambiguous
        num = pd.to_numeric(raw, errors="coerce")
        if num.isna().any() and raw.str.fullmatch(r"-?\d+,\d+").any():
            num = pd.to_numeric(raw.str.replace(",", ".", regex=False), errors="coerce")
        bad = num.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(
                f"the {what} column {_short(col, 40)!r} has a non-numeric value {_short(raw.iloc[i], 40)!r} at {where(i)}"
            )
        out = num.to_numpy(dtype=np.float64)
    if not np.isfinite(out).all():
        i = int(np.argmax(~np.isfinite(out)))
        raise DataError(f"the {what} column {_short(col, 40)!r} has a non-finite value at {where(i)}")
    return out


def _degrees(lon, lat) -> np.ndarray:
    return (np.abs(lat) <= 90) & (np.abs(lon) <= 180)


def _to_wgs84_table(lon, lat, used, c: _Ctx, where):
    """Coordinates of a table: WGS84 degrees unless ``c.crs`` says otherwise; catch projected
    coordinates mistaken for degrees, swapped columns and mixed units with specific messages."""
    crs = c.crs
    if crs is not None and not _is_wgs84(crs):
        from pyproj import Transformer

        t = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
        # for a projected CRS the "lon" column holds eastings (x) and "lat" northings (y)
        lon, lat = t.transform(lon, lat)
        lon, lat = np.asarray(lon, float), np.asarray(lat, float)
        if not np.isfinite(lon).all() or not np.isfinite(lat).all():
            raise DataError(f"some coordinates are outside the area of {crs.name} and cannot be converted")
        c.notes.append(f"Coordinates converted from {crs.name} to WGS84.")
        return lon, lat
    ok = _degrees(lon, lat)
    if ok.all():
        if _norm(used["lat"]) == "y" or _norm(used["lon"]) == "x":
            c.notes.append("Columns x/y read as longitude/latitude in WGS84 degrees.")
        c.order = f"columns {_short(used['lat'], 40)!r} (latitude) and {_short(used['lon'], 40)!r} (longitude)"
        return lon, lat
    big = (np.abs(lon) > 360) | (np.abs(lat) > 360)
    if big.all():
        raise DataError(
            f"the coordinates are not degrees (x up to {np.abs(lon).max():,.0f}, y up to {np.abs(lat).max():,.0f}): "
            "they look like a projected CRS in metres. Give the file's CRS (e.g. EPSG:27700 for British National "
            "Grid, EPSG:3857 for web Mercator) or convert them to WGS84 latitude/longitude."
        )
    if big.any():
        i = int(np.argmax(big))
        raise DataError(
            f"the coordinates mix units: {int(ok.sum()):,} rows look like degrees but {where(i)} has "
            f"({lon[i]:,.2f}, {lat[i]:,.2f}); a file must use one CRS throughout"
        )
    i = int(np.argmax(~ok))
    if (np.abs(lat) > 90).mean() > 0.5 and (np.abs(lat) <= 180).all() and (np.abs(lon) <= 90).all():
        raise DataError(
            f"latitude {lat[i]} at {where(i)} is beyond ±90 degrees while every longitude is within ±90: "
            f"the columns {_short(used['lat'], 40)!r} and {_short(used['lon'], 40)!r} look swapped "
            "(map them with columns=...)"
        )
    if np.abs(lat[i]) > 90:
        raise DataError(f"latitude {lat[i]} at {where(i)} is beyond ±90 degrees")
    raise DataError(f"longitude {lon[i]} at {where(i)} is beyond ±180 degrees")


def _attributes(df, used, csv_strings: bool) -> dict:
    import pandas as pd

    attrs = {}
    for role in ATTRS:
        col = used.get(role)
        if col is None:
            continue
        s = df[col]
        label = f"the {ROLE_WORD.get(role, role)} column {_short(col, 40)!r}"
        if role == "user_id":
            if s.dtype.kind == "f" and not np.isfinite(s.to_numpy()).all():
                raise DataError(f"{label} has missing or non-finite values")
            attrs[role] = s.to_numpy() if s.dtype.kind in "iuf" else s.astype(str).to_numpy()
            continue
        if role == "flag":
            attrs[role] = _flag(s, label)
            continue
        if s.dtype.kind in "iufb" and not csv_strings:
            raw, blank = s, s.isna()
        else:  # text (pandas' object or string dtypes)
            raw = s.astype(str).str.strip()
            blank = s.isna() | raw.str.lower().isin(_BLANK)
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & ~blank
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise DataError(f"{label} has a non-numeric value {_short(raw.iloc[i], 40)!r} at row {i + 1}")
        v = num.to_numpy(dtype=np.float64)
        if np.isinf(v).any():
            raise DataError(f"{label} has an infinite value at row {int(np.argmax(np.isinf(v))) + 1}")
        if role == "weight":
            if np.isnan(v).any():
                raise DataError(f"{label} has missing values (first at row {int(np.argmax(np.isnan(v))) + 1})")
            if (v < 0).any():
                raise DataError(f"{label} has negative values")
            if not (v > 0).any():
                raise DataError(f"every weight in {label} is 0: the map would be empty")
        attrs[role] = v
    return attrs


def _flag(s, label) -> np.ndarray:
    if s.dtype == bool:
        return s.to_numpy()
    if s.dtype.kind in "iuf":
        v = s.to_numpy(dtype=np.float64)
        ok = np.isnan(v) | np.isin(v, (0, 1))
        if not ok.all():
            i = int(np.argmax(~ok))
            raise DataError(f"{label} must be 0/1 or true/false; row {i + 1} has {v[i]}")
        return np.nan_to_num(v, nan=0) == 1
    low = s.astype(str).str.strip().str.lower()
    t = low.isin(_TRUE).to_numpy()
    f = low.isin(_FALSE | _BLANK).to_numpy()
    if not (t | f).all():
        i = int(np.argmax(~(t | f)))
        raise DataError(f"{label} must be 0/1, true/false or yes/no; row {i + 1} has {_short(s.iloc[i], 40)!r}")
    return t


# ------------------------------------------------------------------ GeoJSON (stdlib json, no GDAL)
_GEOMETRIES = ("Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon", "GeometryCollection")
_NESTING = {"MultiPoint": 1, "LineString": 1, "MultiLineString": 2, "Polygon": 2, "MultiPolygon": 3}


class _BadGeometry(Exception):
    pass


def _position(p) -> tuple[float, float]:
    """A GeoJSON position: a list of 2 to 4 numbers, the first two finite (x, y)."""
    if isinstance(p, list) and 2 <= len(p) <= 4 and all(type(v) in (int, float) for v in p):
        try:
            x, y = float(p[0]), float(p[1])
        except OverflowError:  # an integer beyond float range
            raise _BadGeometry("coordinate") from None
        if math.isfinite(x) and math.isfinite(y):
            return x, y
    raise _BadGeometry("coordinate")


def _positions(a, depth: int):
    if not isinstance(a, list):
        raise _BadGeometry("coordinate")
    return [_position(p) for p in a] if depth == 1 else [_positions(p, depth - 1) for p in a]


def _shape(g, depth: int = 0):
    """A shapely geometry from a validated GeoJSON geometry object (not a Point)."""
    import shapely.geometry

    if not isinstance(g, dict) or g.get("type") not in _GEOMETRIES:
        raise _BadGeometry("geometry")
    if g["type"] == "GeometryCollection":
        parts = g.get("geometries")
        if not isinstance(parts, list) or depth > 3:
            raise _BadGeometry("geometry")
        return shapely.geometry.GeometryCollection([_shape(p, depth + 1) for p in parts])
    if g["type"] == "Point":
        return shapely.geometry.Point(_position(g.get("coordinates")))
    coords = _positions(g.get("coordinates"), _NESTING[g["type"]])
    try:
        return shapely.geometry.shape({"type": g["type"], "coordinates": coords})
    except Exception:  # too few positions for a line or ring
        raise _BadGeometry("geometry") from None


def _geojson_crs(obj: dict, c: _Ctx):
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
    crs = _named_crs(label)
    if crs is None:
        shown = f" {_short(label, 60)!r}" if isinstance(label, str) else ""
        raise DataError(
            f'{c.name} declares a CRS{shown} in its "crs" member that is not a known CRS: give an authority code '
            '(e.g. "urn:ogc:def:crs:EPSG::27700"), or remove the member if the coordinates are WGS84 '
            "longitude/latitude"
        )
    return crs


def _read_geojson(data: bytes, c: _Ctx):
    import geopandas as gpd
    import pandas as pd
    import shapely

    looks = _looks_like(data)
    if looks != "json":
        raise c.refuse(f"its bytes are {_LOOKS[looks]}" if looks != "text" else "it is text that is not JSON")
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
    declared = _geojson_crs(obj, c)
    geoms = np.full(len(feats), None, dtype=object)
    props, pi, px, py = [], [], [], []
    count = 0  # points, counting each point of a MultiPoint
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
            geoms[i] = _shape(g)
            count += len(geoms[i].geoms) if geoms[i].geom_type == "MultiPoint" else 1
        except _BadGeometry as exc:
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
    used = _find_columns(list(keys), _attr_columns(c), roles=ATTRS, notes=c.notes)
    cols = {used[r]: [p.get(used[r]) for p in props] for r in ATTRS if used[r] is not None}
    gdf = gpd.GeoDataFrame(pd.DataFrame(cols, index=range(len(feats))), geometry=gpd.GeoSeries(geoms))
    return _vector(gdf, declared, used, c)


def _attr_columns(c: _Ctx) -> dict:
    return {k: v for k, v in (c.columns or {}).items() if k not in ("lat", "lon")}


# ------------------------------------------------------------------ vector files: shared steps
def _vector(gdf, declared, used, c: _Ctx):
    if len(gdf) == 0:
        raise DataError(f"{c.name} holds no features")
    gdf = _drop_empty(gdf, c)
    gdf = _set_crs(gdf, declared, c)
    gdf = _points_only(gdf, c)
    if _is_wgs84(gdf.crs):
        c.order = "coordinates (x read as longitude, y as latitude)"
    else:
        try:
            gdf = gdf.to_crs(4326)
        except Exception:
            raise DataError(f"{c.name}: could not convert from {gdf.crs.name} to WGS84") from None
        c.notes.append("Coordinates converted to WGS84.")
    lon = gdf.geometry.x.to_numpy(dtype=np.float64)
    lat = gdf.geometry.y.to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    if bad.any():
        raise DataError(f"{c.name}: {int(bad.sum())} feature(s) have coordinates that cannot be converted to WGS84")
    return lon, lat, _attributes(gdf, used, csv_strings=False), used


def _set_crs(gdf, declared, c: _Ctx):
    crs = c.crs
    if crs is not None:
        if declared is not None and not declared.equals(crs):
            raise DataError(
                f"{c.name} declares the CRS {declared.name} but {crs.name} was given: remove one of the two"
            )
        return gdf.set_crs(crs, allow_override=True)
    if declared is not None:
        return gdf.set_crs(declared, allow_override=True)
    b = gdf.total_bounds
    in_degrees = (
        np.all(np.isfinite(b)) and abs(b[1]) <= 90 and abs(b[3]) <= 90 and abs(b[0]) <= 180 and abs(b[2]) <= 180
    )
    kind = {
        "geojson": 'GeoJSON without a "crs" member',
        "shapefile": f"{c.name} without a CRS (no .prj)",
    }.get(c.kind, f"{c.name} without a CRS")
    if not in_degrees:
        raise DataError(
            f"{kind}, and its coordinates are not degrees (x from {b[0]:,.0f} to {b[2]:,.0f}): the CRS is unknown. "
            "Give the file's CRS (e.g. EPSG:27700) or include it in the file (.prj for a Shapefile)."
        )
    if c.kind == "geojson":
        c.notes.append("The GeoJSON has no CRS: WGS84 longitude/latitude assumed (the GeoJSON standard, RFC 7946).")
    else:
        c.notes.append(f"{c.name} has no CRS: its coordinates are within degree ranges, so WGS84 was assumed.")
    return gdf.set_crs(4326, allow_override=True)


def _drop_empty(gdf, c: _Ctx):
    geom = gdf.geometry
    empty = (geom.isna() | geom.is_empty).to_numpy()
    if empty.all():
        raise DataError(f"{c.name}: every feature has an empty geometry")
    if empty.any():
        c.notes.append(f"{int(empty.sum())} feature(s) without geometry were dropped.")
        gdf = gdf[~empty]
    return gdf


def _points_only(gdf, c: _Ctx):
    types = gdf.geometry.geom_type
    multi = types == "MultiPoint"
    if multi.any():
        n0 = len(gdf)
        gdf = gdf.explode(index_parts=False, ignore_index=True)
        gdf = gdf[~gdf.geometry.is_empty]
        c.notes.append(
            f"{int(multi.sum())} MultiPoint feature(s) split into their points "
            f"({len(gdf) - n0 + int(multi.sum())} points; each keeps its feature's attributes)."
        )
        types = gdf.geometry.geom_type
    other = types != "Point"
    if other.any():
        kinds = ", ".join(sorted(set(types[other])))
        if c.polygons == "reject":
            raise DataError(
                f"{c.name} holds {int(other.sum()):,} non-point feature(s) ({kinds}); locations must be points. "
                "Convert them to points, or allow centroids."
            )
        # centroids in a local metric CRS (a centroid in degrees is distorted)
        metric = gdf.estimate_utm_crs() if gdf.crs.is_geographic else gdf.crs
        cent = gdf.geometry[other.to_numpy()].to_crs(metric).centroid.to_crs(gdf.crs)
        gdf = gdf.copy()
        gdf.loc[other.to_numpy(), gdf.geometry.name] = cent.to_numpy()
        c.notes.append(f"{int(other.sum()):,} {kinds} feature(s) were replaced by their centroids.")
    return gdf


# ------------------------------------------------------------------ Parquet (pyarrow, no GDAL)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}
_GEO_ENCODINGS = {"wkb", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon"}


def _read_parquet(data: bytes, c: _Ctx):
    import geopandas as gpd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data[:4] != b"PAR1":
        raise c.refuse(f"its bytes are {_LOOKS[_looks_like(data)]}")
    if data[-4:] == b"PARE":
        raise c.refuse("it is an encrypted Parquet file")
    if len(data) < 12 or data[-4:] != b"PAR1":
        raise c.refuse("it has no Parquet footer (truncated or corrupt)")
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        md, schema = pf.metadata, pf.schema_arrow
    except Exception:
        raise c.refuse("its footer cannot be read (corrupt)") from None
    # sizes from the footer, before any row is read
    if md.num_rows > c.max_points:
        raise c.too_many(md.num_rows, "rows")
    if md.num_rows == 0:
        raise DataError(f"{c.name} has no rows")
    if len(schema.names) > MAX_COLUMNS:
        raise c.refuse(f"it has {len(schema.names):,} columns, over the limit of {MAX_COLUMNS:,}")
    geo = _geo_metadata(schema, c)
    if geo is None:
        used = _find_columns(schema.names, c.columns, notes=c.notes)
        read = [used[r] for r in ROLES if used[r] is not None]
    else:
        geom_col, declared = geo
        used = _find_columns([n for n in schema.names if n != geom_col], _attr_columns(c), roles=ATTRS, notes=c.notes)
        read = [geom_col] + [used[r] for r in ATTRS if used[r] is not None]
    _check_decoded_size(data, pf, read, c)
    if geo is None:
        try:
            df = pf.read(columns=read).to_pandas()
        except Exception:
            raise c.refuse("its columns cannot be decoded") from None
        c.notes.append("Parquet file without GeoParquet metadata: read as a table of coordinates.")
        lat = _coord_column(df[used["lat"]], used["lat"], "latitude", _row)
        lon = _coord_column(df[used["lon"]], used["lon"], "longitude", _row)
        lon, lat = _to_wgs84_table(lon, lat, used, c, _row)
        return lon, lat, _attributes(df, used, csv_strings=False), used
    try:
        gdf = gpd.read_parquet(io.BytesIO(data), columns=read)
    except Exception:
        raise c.refuse("its geometry column cannot be decoded") from None
    attrs = gdf.drop(columns=[gdf.geometry.name])
    gdf = gpd.GeoDataFrame(attrs, geometry=gpd.GeoSeries(gdf.geometry.to_numpy(), index=attrs.index))
    return _vector(gdf, declared, used, c)


def _geo_metadata(schema, c: _Ctx):
    """(primary geometry column, declared CRS or None) from GeoParquet's "geo" metadata, or None without it."""
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    raw = (schema.metadata or {}).get(b"geo")
    if raw is None:
        return None
    try:
        geo = json.loads(raw)
    except (ValueError, RecursionError):
        raise c.refuse('its GeoParquet "geo" metadata is not valid JSON') from None
    col = geo.get("primary_column") if isinstance(geo, dict) else None
    meta = geo["columns"].get(col) if isinstance(col, str) and isinstance(geo.get("columns"), dict) else None
    if not isinstance(meta, dict) or col not in schema.names:
        raise c.refuse('its GeoParquet "geo" metadata does not name a geometry column of the file')
    enc = meta.get("encoding", "WKB")
    if not isinstance(enc, str) or enc.lower() not in _GEO_ENCODINGS:
        raise c.refuse(f"its geometry encoding {_short(enc, 30)!r} is not one of GeoParquet's")
    if "crs" not in meta:
        return col, CRS.from_user_input("OGC:CRS84")  # the GeoParquet default
    crs = meta["crs"]
    if crs is None:
        return col, None  # "unknown" in GeoParquet's terms
    try:
        if isinstance(crs, dict):
            return col, CRS.from_json_dict(crs)
        if isinstance(crs, str):
            return col, _named_crs(crs) or CRS.from_wkt(crs)
    except (CRSError, ValueError, TypeError, KeyError):
        pass
    raise DataError(
        f"{c.name} declares a CRS in its GeoParquet metadata that is not understood: write the file again "
        "with a known CRS (e.g. EPSG:4326)"
    )


def _check_decoded_size(data: bytes, pf, read: list, c: _Ctx) -> None:
    """Refuse a Parquet file whose read columns would decode to more than EXPANSION times the
    file limit, from the footer (fixed-width values) and, for dictionary-encoded strings
    (where a short file can repeat a long value), from the dictionary and its indices."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    budget = EXPANSION * c.max_bytes
    md, total, dict_cols = pf.metadata, 0, set()
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for j in range(rg.num_columns):
            col = rg.column(j)
            top = next((r for r in read if col.path_in_schema == r or col.path_in_schema.startswith(r + ".")), None)
            if top is None:
                continue
            kind = col.physical_type
            if kind == "BYTE_ARRAY":
                if "DELTA_BYTE_ARRAY" in col.encodings:
                    raise c.refuse(
                        f"the column {_short(top, 40)!r} uses the DELTA_BYTE_ARRAY encoding, whose decoded size "
                        "cannot be checked before reading: write the file again with default settings"
                    )
                if col.has_dictionary_page:
                    if top != col.path_in_schema:
                        raise c.refuse(f"the nested column {_short(top, 40)!r} holds dictionary-encoded strings")
                    dict_cols.add(top)
                total += col.total_uncompressed_size
            elif kind == "FIXED_LEN_BYTE_ARRAY":
                total += col.num_values * max(pf.schema.column(j).length, 1)
            else:
                total += col.num_values * _WIDTH.get(kind, 8)
    if total <= budget and dict_cols:
        names = sorted(dict_cols)
        t = pq.ParquetFile(pa.BufferReader(data), read_dictionary=names).read(columns=names)
        for name in names:
            for chunk in t.column(name).chunks:
                if pa.types.is_dictionary(chunk.type):
                    lengths = pc.binary_length(chunk.dictionary)
                    total += pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0
    if total > budget:
        raise DataError(
            f"{c.name} would take {_size(total)} once decoded, over the limit of {_size(budget)} "
            f"({EXPANSION} times the file limit)"
        )


# ------------------------------------------------------------------ GeoPackage (sqlite3, no GDAL)
_ENVELOPE = (0, 32, 48, 48, 64)  # bytes of the envelope in a GeoPackage geometry header, by its indicator


def _read_gpkg(data: bytes, c: _Ctx):
    import sqlite3

    if not data.startswith(b"SQLite format 3\0"):
        raise c.refuse(f"its bytes are {_LOOKS[_looks_like(data)]}")
    con = sqlite3.connect(":memory:")
    steps, budget = [0], GPKG_STEPS + c.max_points // 10

    def progress():  # called every 10,000 SQLite instructions: a bound on the work a hostile file can cause
        steps[0] += 1
        return steps[0] > budget

    try:
        try:
            con.deserialize(data)
            con.execute("PRAGMA trusted_schema = OFF")
        except sqlite3.Error:
            raise c.refuse("it is a damaged SQLite database") from None
        con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        con.set_authorizer(_gpkg_authorizer)
        con.set_progress_handler(progress, 10_000)
        return _gpkg_layer(con, c)
    except sqlite3.Error:
        if steps[0] > budget:
            raise c.refuse("reading it takes too many steps") from None
        raise c.refuse("its tables cannot be read (damaged, or not a GeoPackage's layout)") from None
    finally:
        con.close()


def _gpkg_authorizer(action, arg1, arg2, db, trigger):
    """Only reads: SELECT, reading columns, count(), PRAGMA table_info (no writes, ATTACH or other functions)."""
    import sqlite3

    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() == "count":
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and str(arg1).lower() == "table_info":
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _quote(ident: str) -> str:
    return '"' + str(ident).replace('"', '""') + '"'


def _gpkg_layer(con, c: _Ctx):
    import geopandas as gpd
    import pandas as pd
    import shapely

    tables = {str(n): (t, s or "") for n, t, s in con.execute("SELECT name, type, sql FROM sqlite_master")}
    for t in ("gpkg_contents", "gpkg_geometry_columns", "gpkg_spatial_ref_sys"):
        if tables.get(t, ("",))[0] != "table":
            raise c.refuse(f"it is a SQLite database without the GeoPackage table {t}")
    contents = [(str(n), str(d)) for n, d in con.execute("SELECT table_name, data_type FROM gpkg_contents")]
    layers = [n for n, d in contents if d.lower() == "features"]
    if not layers:
        raise DataError(f"{c.name} holds no vector (features) layer; its contents are: {_list(n for n, _ in contents)}")
    if c.layer not in (None, ""):
        if c.layer not in layers:
            raise DataError(f"{c.name} has no layer named {_short(c.layer, 40)!r}; its layers are: {_list(layers)}")
        layer = c.layer
    elif len(layers) > 1:
        raise DataError(
            f"{c.name} holds {len(layers)} layers ({_list(layers)}): choose one with layer=NAME (on the command "
            "line: --data-opt layer=NAME), or save the layer you want in a file of its own"
        )
    else:
        layer = layers[0]
    shown = _short(layer, 40)
    kind, sql = tables.get(layer, ("", ""))
    if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
        raise DataError(
            f"{c.name}: the layer {shown!r} is not a plain table (a view or virtual table), which is not read: "
            "save it as a table"
        )
    geo = con.execute("SELECT column_name, srs_id FROM gpkg_geometry_columns WHERE table_name = ?", (layer,)).fetchall()
    cols = [str(r[1]) for r in con.execute(f"PRAGMA table_info({_quote(layer)})")]
    if len(geo) != 1 or str(geo[0][0]) not in cols:
        raise c.refuse(f"the layer {shown!r} has no registered geometry column")
    gcol, srs_id = str(geo[0][0]), geo[0][1]
    if len(cols) > MAX_COLUMNS:
        raise c.refuse(f"the layer {shown!r} has {len(cols):,} columns, over the limit of {MAX_COLUMNS:,}")
    declared = _gpkg_crs(con, srs_id, shown, c)
    n = con.execute(f"SELECT COUNT(*) FROM {_quote(layer)}").fetchone()[0]
    if n > c.max_points:
        raise c.too_many(n, "features")
    if n == 0:
        raise DataError(f"{c.name}: the layer {shown!r} holds no features")
    used = _find_columns([x for x in cols if x != gcol], _attr_columns(c), roles=ATTRS, notes=c.notes)
    keep = [used[r] for r in ATTRS if used[r] is not None]
    cur = con.execute(f"SELECT {', '.join(_quote(x) for x in [gcol, *keep])} FROM {_quote(layer)}")
    budget, total, rows = EXPANSION * c.max_bytes, 0, []
    while batch := cur.fetchmany(10_000):
        total += sum(len(v) for r in batch for v in r if isinstance(v, (bytes, str)))
        if total > budget:
            raise DataError(f"{c.name}: the layer {shown!r} holds over {_size(budget)} of data, too much to read")
        rows.extend(batch)
    wkb, srs = _gpkg_geometries([r[0] for r in rows], c)
    if srs and srs != {srs_id}:
        raise DataError(f"{c.name}: features of the layer {shown!r} give CRSs (srs_id) that differ from the layer's")
    try:
        geoms = shapely.from_wkb(wkb)
    except Exception:
        raise c.refuse(f"a geometry of the layer {shown!r} is not valid") from None
    df = pd.DataFrame({k: [r[i + 1] for r in rows] for i, k in enumerate(keep)}, index=range(len(rows)))
    return _vector(gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geoms)), declared, used, c)


def _gpkg_geometries(blobs, c: _Ctx):
    """WKB (or None when empty) of each GeoPackage geometry blob, and the srs_ids they give."""
    out, srs = np.full(len(blobs), None, dtype=object), set()
    for i, b in enumerate(blobs):
        if b is None:
            continue
        flags = b[3] if isinstance(b, bytes) and len(b) >= 8 and b[:3] == b"GP\x00" else 0xFF
        if flags & 0x20 or (flags >> 1) & 7 > 4:  # extended (non-standard) types; unknown envelopes
            raise c.refuse(f"feature {i + 1} does not hold a standard GeoPackage geometry")
        srs.add(struct.unpack("<i" if flags & 1 else ">i", b[4:8])[0])
        if not flags & 0x10:  # not the empty geometry
            out[i] = b[8 + _ENVELOPE[(flags >> 1) & 7] :]
    return out, srs


def _gpkg_crs(con, srs_id, shown: str, c: _Ctx):
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    if srs_id in (0, -1):
        return None  # the GeoPackage's "undefined" geographic / Cartesian systems
    row = con.execute(
        "SELECT definition, organization, organization_coordsys_id FROM gpkg_spatial_ref_sys WHERE srs_id = ?",
        (srs_id,),
    ).fetchone()
    if row is not None:
        definition, org, code = row
        try:
            return CRS.from_wkt(str(definition))
        except CRSError:
            pass
        if str(org).upper() == "EPSG" and isinstance(code, int):
            try:
                return CRS.from_epsg(code)
            except CRSError:
                pass
    raise DataError(
        f"{c.name}: the CRS of the layer {shown!r} (srs_id {_short(srs_id, 20)}) is missing from the file or not "
        "understood: save the file again with a known CRS (e.g. EPSG:4326)"
    )


# ------------------------------------------------------------------ zipped Shapefile (fiona, explicit driver)
_SHP_PARTS = (".shp", ".shx", ".dbf", ".prj", ".cpg")


def _zip_entries(data: bytes) -> int | None:
    """The number of entries an archive's end record declares (before zipfile reads them all), or None."""
    tail_at = max(0, len(data) - 22 - 65535)
    i = data.rfind(b"PK\x05\x06", tail_at)
    if i < 0 or len(data) - i < 22:
        return None
    n = struct.unpack("<H", data[i + 10 : i + 12])[0]
    if n == 0xFFFF and i >= 20 and data[i - 20 : i - 16] == b"PK\x06\x07":  # zip64: the count is elsewhere
        at = struct.unpack("<Q", data[i - 12 : i - 4])[0]
        if data[at : at + 4] != b"PK\x06\x06" or at + 40 > len(data):
            return None
        n = struct.unpack("<Q", data[at + 32 : at + 40])[0]
    return n


def _read_shapefile(data: bytes, c: _Ctx):
    looks = _looks_like(data)
    if looks != "zip":
        raise c.refuse(f"its bytes are {_LOOKS[looks]}")
    n = _zip_entries(data)
    if n is None:
        raise DataError(f"{c.name} is not a valid zip archive (corrupt, truncated or not a zip)")
    if n > MAX_ZIP_ENTRIES:
        raise DataError(f"{c.name} holds {n:,} files, more than the {MAX_ZIP_ENTRIES:,} a zipped Shapefile may have")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error):
        raise DataError(f"{c.name} is not a valid zip archive (corrupt, truncated or not a zip)") from None
    with z, tempfile.TemporaryDirectory(prefix="heatmap-shp-") as tmp:
        parts = _shapefile_members(z, c)
        for ext, info in parts.items():
            _extract_member(z, info, Path(tmp) / f"layer{ext}", c)
        return _read_extracted(Path(tmp), parts, c)


def _shapefile_members(z: zipfile.ZipFile, c: _Ctx) -> dict:
    """The Shapefile's members by extension, after every check that needs only the zip's headers."""
    infos = [
        i
        for i in z.infolist()
        if not i.is_dir() and "__MACOSX" not in i.filename and not PurePosixPath(i.filename).name.startswith(".")
    ]
    members = [i.filename for i in infos]
    shps = [i for i in infos if i.filename.lower().endswith(".shp")]
    if not shps:
        raise DataError(f"{c.name} holds no Shapefile (.shp); it contains: {_list(members)}")
    if len(shps) > 1:
        raise DataError(f"{c.name} holds several Shapefiles ({_list(i.filename for i in shps)}): upload one per zip")
    stem = shps[0].filename[:-4].lower()
    parts = {
        i.filename[len(stem) :].lower(): i
        for i in infos
        if i.filename.lower().startswith(stem) and i.filename[len(stem) :].lower() in _SHP_PARTS
    }
    shown = _short(PurePosixPath(shps[0].filename).name, 40)
    for part in (".shx", ".dbf"):
        if part not in parts:
            raise DataError(f"{c.name}: the Shapefile {shown!r} lacks its {part} file")
    total = 0
    for info in parts.values():
        member = _short(info.filename, 40)
        path = PurePosixPath(info.filename.replace("\\", "/"))
        if path.is_absolute() or ".." in path.parts or ":" in info.filename:
            raise DataError(f"{c.name}: the member {member!r} has an unsafe path (absolute, or with '..')")
        if info.flag_bits & 0x1:
            raise DataError(f"{c.name}: the member {member!r} is encrypted; upload an unencrypted zip")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise DataError(
                f"{c.name}: the member {member!r} uses a compression method other than deflate: zip it again with "
                "standard settings"
            )
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_FLOOR and ratio > MAX_RATIO:
            raise DataError(
                f"{c.name}: the member {member!r} would expand {ratio:,.0f} times (to {_size(info.file_size)}), "
                f"more than the {MAX_RATIO} times allowed for large members (a zip bomb?)"
            )
        total += info.file_size
    budget = EXPANSION * c.max_bytes
    if total > budget:
        raise DataError(
            f"{c.name} would unpack to {_size(total)}, over the limit of {_size(budget)} ({EXPANSION} times the "
            "file limit)"
        )
    return parts


def _extract_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, c: _Ctx) -> int:
    """Copy one member to ``dest`` in chunks, never past the size its header declares."""
    member = _short(info.filename, 40)
    written = 0
    try:
        with z.open(info) as src, open(dest, "wb") as out:
            while chunk := src.read(MiB):
                written += len(chunk)
                if written > info.file_size:
                    raise DataError(f"{c.name}: the member {member!r} holds more data than its header declares")
                out.write(chunk)
    except zipfile.BadZipFile:
        raise DataError(f"{c.name} is a corrupt zip archive: {member!r} fails its checksum") from None
    except (zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError):
        raise DataError(f"{c.name} is a corrupt zip archive: {member!r} cannot be unpacked") from None
    return written


def _read_extracted(tmp: Path, parts: dict, c: _Ctx):
    import fiona
    import geopandas as gpd
    import pandas as pd
    import shapely
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    for ext in (".shp", ".shx"):
        head = (tmp / f"layer{ext}").read_bytes()[:100]
        if len(head) < 100 or struct.unpack(">i", head[:4])[0] != 9994:
            raise c.refuse(f"its {ext} member is not a Shapefile {ext} (it does not start with the file code 9994)")
    dbf = (tmp / "layer.dbf").read_bytes()[:32]
    if len(dbf) < 32 or struct.unpack("<H", dbf[8:10])[0] < 33:
        raise c.refuse("its .dbf member is not a dBASE table")
    declared = None
    if ".prj" in parts:
        text = (tmp / "layer.prj").read_bytes().decode("utf-8", "replace").strip()
        try:
            declared = CRS.from_wkt(text)
        except CRSError:
            raise DataError(
                f"{c.name}: its .prj file does not describe a CRS that PROJ understands: export the Shapefile again, "
                "or remove the .prj and give the CRS"
            ) from None
    try:
        with fiona.Env(**GDAL_SAFE), fiona.open(tmp / "layer.shp", driver="ESRI Shapefile") as col:
            if col.driver != "ESRI Shapefile":  # never another reader
                raise c.refuse("GDAL did not open it as a Shapefile")
            if len(col) > c.max_points:
                raise c.too_many(len(col), "features")
            fields = list(col.schema["properties"])
            used = _find_columns(fields, _attr_columns(c), roles=ATTRS, notes=c.notes)
        keep = [used[r] for r in ATTRS if used[r] is not None]
        skip = [f for f in fields if f not in keep]
        geoms, pi, px, py, vals = [], [], [], [], {k: [] for k in keep}
        with fiona.Env(**GDAL_SAFE), fiona.open(tmp / "layer.shp", driver="ESRI Shapefile", ignore_fields=skip) as col:
            for i, f in enumerate(col):
                if i >= c.max_points:
                    raise c.too_many(i + 1, "features")
                g = f.geometry
                if g is not None and g.type == "Point":  # most files: no shapely object per feature
                    pi.append(i)
                    px.append(g.coordinates[0])
                    py.append(g.coordinates[1])
                    geoms.append(None)
                else:
                    geoms.append(None if g is None else shapely.geometry.shape(g))
                for k in keep:
                    vals[k].append(f.properties.get(k))
    except (DataError, ParamError):
        raise
    except Exception:
        raise c.refuse("the Shapefile inside cannot be read (a damaged .shp, .shx or .dbf)") from None
    geoms = np.array(geoms, dtype=object)
    if pi:
        geoms[np.asarray(pi)] = shapely.points(px, py)
    gdf = gpd.GeoDataFrame(pd.DataFrame(vals, index=range(len(geoms))), geometry=gpd.GeoSeries(geoms))
    return _vector(gdf, declared, used, c)


READERS = {
    "csv": _read_csv,
    "geojson": _read_geojson,
    "parquet": _read_parquet,
    "gpkg": _read_gpkg,
    "shapefile": _read_shapefile,
}


# ------------------------------------------------------------------ registry
def _load_registered(path, lat, lon, user_id, value, flag, weight, crs, polygons, layer):
    if not path:
        raise ParamError("give the path of the file to load (path=...)")
    cols = {
        k: v for k, v in dict(lat=lat, lon=lon, user_id=user_id, value=value, flag=flag, weight=weight).items() if v
    }
    return load_file(path, columns=cols or None, crs=crs or None, polygons=polygons, layer=layer or None)


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
            ),
            citation="the user's own file",
            license="the user's own data",
        )
    )


_register()
