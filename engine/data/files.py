"""The user's own files: CSV, GeoJSON, GeoParquet, zipped Shapefile (and GeoPackage).

``load_file(path_or_bytes, filename, columns=None, max_bytes=..., crs=None)`` is used by
the dashboard's upload widget (bytes + file name) and by the CLI (a path). Any CRS
geopandas can read is reprojected to WGS84. Every problem becomes a
:class:`DataError` whose message says what is wrong and how to fix it; whatever was
*assumed* (a CRS, centroids for polygons, dropped empty geometries) is listed in
``meta.extra["notes"]`` and in the description.

Columns are found by name (case and spaces ignored): latitude ``lat``, ``latitude``,
``y``; longitude ``lon``, ``lng``, ``long``, ``longitude``, ``x``; optional ``user_id``
(also ``user``, ``userid``, ``uid``), ``value``, ``flag`` and ``weight``; or
mapped explicitly with ``columns={"lat": ..., "lon": ..., "user_id": ..., ...}``.
The public region of a user's file is read off its points unless ``bbox`` is given:
``meta.bbox_from_data`` is then True, which the engine reports as side information.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError, ParamError
from ..params import Param
from .dataset import Dataset, DatasetMeta, make_dataset

MiB = 1 << 20
MAX_FILE_BYTES = 200 * MiB  # Streamlit's default upload limit
ZIP_EXPANSION = 20  # uncompressed zip contents may be at most this many times max_bytes

KINDS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".geojson": "vector",
    ".json": "vector",
    ".parquet": "parquet",
    ".geoparquet": "parquet",
    ".zip": "shapefile",
    ".gpkg": "vector",
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
_TRUE = {"1", "true", "t", "yes", "y", "positive", "pos"}
_FALSE = {"0", "false", "f", "no", "n", "negative", "neg", ""}


def _norm(name) -> str:
    return re.sub(r"[\s_\-.]", "", str(name).strip().lower())


def _find_columns(available: list, columns: dict | None, need_coords: bool) -> dict:
    """Map each role (lat, lon, user_id, value, flag, weight) to a column name, or None."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(ROLES))
    if unknown:
        raise ParamError(f"unknown column role(s) {', '.join(unknown)}; use some of: {', '.join(ROLES)}")
    by_norm = {}
    for c in available:
        by_norm.setdefault(_norm(c), c)
    out = {}
    for role in ROLES:
        given = columns.get(role)
        if given not in (None, ""):
            if given in available:
                out[role] = given
            elif _norm(given) in by_norm:
                out[role] = by_norm[_norm(given)]
            else:
                raise DataError(f"the {role} column {given!r} is not in the file; its columns are: {_list(available)}")
            continue
        out[role] = next((by_norm[n] for n in NAMES[role] if n in by_norm), None)
    if need_coords:
        missing = [r for r in ("lat", "lon") if out[r] is None]
        if missing:
            raise DataError(
                "could not find the "
                + " and ".join("latitude" if r == "lat" else "longitude" for r in missing)
                + " column: looked for lat/latitude/y and lon/lng/long/longitude/x; the file's columns are: "
                + _list(available)
                + ". Name them explicitly (columns={'lat': ..., 'lon': ...})."
            )
        if out["lat"] == out["lon"]:
            raise DataError(f"latitude and longitude cannot both be the column {out['lat']!r}")
    return out


def _size(b: int) -> str:
    return f"{b / MiB:,.1f} MB" if b >= 100_000 else f"{b:,} bytes"


def _list(cols) -> str:
    cols = [str(c) for c in cols]
    return ", ".join(cols[:30]) + (f" ... ({len(cols)} columns)" if len(cols) > 30 else "") if cols else "(none)"


# ------------------------------------------------------------------ entry point
def load_file(
    path_or_bytes: str | os.PathLike | bytes,
    filename: str | None = None,
    columns: dict | None = None,
    max_bytes: int = MAX_FILE_BYTES,
    crs: str | None = None,
    polygons: str = "centroid",
    bbox: tuple[float, float, float, float] | None = None,
) -> Dataset:
    """Read the user's file into a Dataset (see the module docstring).

    ``crs``: the CRS of the coordinates when the file does not say (e.g. ``"EPSG:27700"``
    for a CSV of British National Grid eastings/northings). ``polygons``: ``"centroid"``
    replaces polygon and line features by their centroids (noted), ``"reject"`` refuses them.
    ``bbox``: a public region (lon_min, lat_min, lon_max, lat_max) instead of the data's extent."""
    if polygons not in ("centroid", "reject"):
        raise ParamError("polygons must be 'centroid' or 'reject'")
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data: bytes | None = bytes(path_or_bytes)
        path = None
        if not filename:
            raise ParamError("a file name (with its extension) is needed with raw bytes")
        size = len(data)
    else:
        path = Path(path_or_bytes)
        data = None
        filename = filename or path.name
        if not path.is_file():
            raise DataError(f"no file at {path}")
        size = path.stat().st_size
    name = Path(filename).name
    ext = Path(name).suffix.lower()
    if ext == ".shp":
        raise DataError(f"{name}: upload a Shapefile as one .zip holding its .shp, .shx, .dbf and .prj files")
    if ext not in KINDS:
        raise DataError(f"{name}: unsupported file type {ext or '(no extension)'!r}; supported: {SUPPORTED}")
    if size > max_bytes:
        raise DataError(f"{name} is {_size(size)}, over the limit of {_size(max_bytes)}")
    if size == 0:
        raise DataError(f"{name} is empty")
    crs = _check_crs(crs)
    notes: list[str] = []
    try:
        if KINDS[ext] == "csv":
            raw = data if data is not None else path.read_bytes()
            lon, lat, attrs, used = _read_csv(raw, name, columns, crs, notes)
        else:
            with tempfile.TemporaryDirectory(prefix="heatmap-upload-") as tmp:
                src = path
                if data is not None:
                    src = Path(tmp) / f"upload{ext}"
                    src.write_bytes(data)
                lon, lat, attrs, used = _read_vector(src, ext, name, columns, crs, polygons, max_bytes, notes)
    except (DataError, ParamError):
        raise
    except MemoryError:
        raise DataError(f"{name} is too large to read into memory") from None
    return _finish(name, lon, lat, attrs, used, notes, bbox)


def _check_crs(crs):
    if crs in (None, ""):
        return None
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    try:
        return CRS.from_user_input(crs)
    except CRSError as exc:
        raise ParamError(f"unknown CRS {crs!r} ({exc}); use e.g. EPSG:4326 or EPSG:27700") from None


def _finish(name, lon, lat, attrs, used, notes, bbox) -> Dataset:
    if bbox is not None:
        bbox = tuple(float(v) for v in bbox)
        if len(bbox) != 4 or not (bbox[2] > bbox[0] and bbox[3] > bbox[1]):
            raise ParamError("bbox must be (lon_min, lat_min, lon_max, lat_max) with some width and height")
    n = lon.size
    if n == 0:
        raise DataError(f"{name} has no locations")
    if n == 1:
        raise DataError(f"{name} has a single location: a heatmap needs a region with several")
    if bbox is None and np.ptp(lon) == 0 and np.ptp(lat) == 0:
        raise DataError(f"{name}: all {n:,} locations are the same point, so the region has no width or height")
    desc = f"Uploaded file {name}: {n:,} locations."
    if notes:
        desc += " " + " ".join(notes)
    meta = DatasetMeta(
        name=name,
        source=f"file:{name}",
        citation="the user's own file",
        license="the user's own data",
        description=desc,
        bbox=bbox or (0.0, 0.0, 0.0, 0.0),
        bbox_from_data=bbox is None,
        value_name=str(used.get("value") or ""),
        flag_name=str(used.get("flag") or ""),
        extra={"notes": notes, "columns": {k: v for k, v in used.items() if v is not None}},
    )
    try:
        return make_dataset(lon, lat, meta, **attrs)
    except DataError as exc:
        raise DataError(f"{name}: {exc}") from None


# ------------------------------------------------------------------ CSV
def _read_csv(raw: bytes, name: str, columns, crs, notes):
    import pandas as pd

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        notes.append("The file is not UTF-8: read as Latin-1.")
    if not text.strip():
        raise DataError(f"{name} is empty")
    sample = text[: 64 * 1024]
    try:
        sep = csv.Sniffer().sniff(sample.split("\n", 1)[0] + "\n", delimiters=",;\t|").delimiter
    except csv.Error:
        sep = "\t" if name.lower().endswith(".tsv") else ","
    try:
        df = pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError(f"{name} has no header and no rows") from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise DataError(f"{name} is not a readable CSV table: {str(exc).strip()}") from None
    if len(df) == 0:
        raise DataError(f"{name} has a header but no data rows")
    used = _find_columns(list(df.columns), columns, need_coords=True)
    lat = _coord_column(df[used["lat"]], used["lat"], "latitude")
    lon = _coord_column(df[used["lon"]], used["lon"], "longitude")
    lon, lat = _to_wgs84_table(lon, lat, used, crs, notes)
    attrs = _attributes(df, used, csv_strings=True)
    return lon, lat, attrs, used


def _coord_column(s, col, what) -> np.ndarray:
    import pandas as pd

    raw = s.astype(str).str.strip()
    missing = (raw == "") | raw.str.lower().isin(("na", "nan", "null", "none"))
    if missing.any():
        i = int(np.argmax(missing.to_numpy()))
        raise DataError(
            f"{int(missing.sum()):,} row(s) have no {what} (column {col!r}; first at line {i + 2}): "
            "remove them or fill them in"
        )
    # a decimal comma (European spreadsheets) is read as a point when nothing else is ambiguous
    num = pd.to_numeric(raw, errors="coerce")
    if num.isna().any() and raw.str.fullmatch(r"-?\d+,\d+").any():
        num = pd.to_numeric(raw.str.replace(",", ".", regex=False), errors="coerce")
    bad = num.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"the {what} column {col!r} has a non-numeric value {raw.iloc[i]!r} at line {i + 2}")
    out = num.to_numpy(dtype=np.float64)
    if not np.isfinite(out).all():
        i = int(np.argmax(~np.isfinite(out)))
        raise DataError(f"the {what} column {col!r} has a non-finite value at line {i + 2}")
    return out


def _degrees(lon, lat) -> np.ndarray:
    return (np.abs(lat) <= 90) & (np.abs(lon) <= 180)


def _to_wgs84_table(lon, lat, used, crs, notes):
    """Coordinates of a table: WGS84 degrees unless ``crs`` says otherwise; catch projected
    coordinates mistaken for degrees, swapped columns and mixed units with specific messages."""
    if crs is not None:
        if not crs.equals("EPSG:4326"):
            from pyproj import Transformer

            t = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
            # for a projected CRS the "lon" column holds eastings (x) and "lat" northings (y)
            lon, lat = t.transform(lon, lat)
            lon, lat = np.asarray(lon, float), np.asarray(lat, float)
            if not np.isfinite(lon).all() or not np.isfinite(lat).all():
                raise DataError(f"some coordinates are outside the area of {crs.name} and cannot be converted")
            notes.append(f"Coordinates converted from {crs.name} to WGS84.")
        return lon, lat
    ok = _degrees(lon, lat)
    if ok.all():
        if _norm(used["lat"]) == "y" or _norm(used["lon"]) == "x":
            notes.append("Columns x/y read as longitude/latitude in WGS84 degrees.")
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
            f"the coordinates mix units: {int(ok.sum()):,} rows look like degrees but line {i + 2} has "
            f"({lon[i]:,.2f}, {lat[i]:,.2f}); a file must use one CRS throughout"
        )
    i = int(np.argmax(~ok))
    if (np.abs(lat) > 90).mean() > 0.5 and (np.abs(lat) <= 180).all() and (np.abs(lon) <= 90).all():
        raise DataError(
            f"latitude {lat[i]} at line {i + 2} is beyond ±90 degrees while every longitude is within ±90: "
            f"the columns {used['lat']!r} and {used['lon']!r} look swapped (map them with columns=...)"
        )
    if np.abs(lat[i]) > 90:
        raise DataError(f"latitude {lat[i]} at line {i + 2} is beyond ±90 degrees")
    raise DataError(f"longitude {lon[i]} at line {i + 2} is beyond ±180 degrees")


def _attributes(df, used, csv_strings: bool) -> dict:
    import pandas as pd

    attrs = {}
    for role in ("user_id", "value", "flag", "weight"):
        col = used.get(role)
        if col is None:
            continue
        s = df[col]
        if role == "user_id":
            attrs[role] = s.astype(str).to_numpy() if s.dtype == object else s.to_numpy()
        elif role == "flag":
            attrs[role] = _flag(s, col)
        else:
            raw = s.astype(str).str.strip() if csv_strings or s.dtype == object else s
            num = pd.to_numeric(raw, errors="coerce")
            blank = raw.isin(("", "na", "NA", "nan", "NaN", "null", "None")) if s.dtype == object else s.isna()
            bad = num.isna() & ~blank
            if bad.any():
                i = int(np.argmax(bad.to_numpy()))
                raise DataError(f"the {role} column {col!r} has a non-numeric value {raw.iloc[i]!r} at row {i + 1}")
            attrs[role] = num.to_numpy(dtype=np.float64)
            if role == "weight":
                if np.isnan(attrs[role]).any():
                    raise DataError(f"the weight column {col!r} has missing values")
                if (attrs[role] < 0).any():
                    raise DataError(f"the weight column {col!r} has negative values")
    return attrs


def _flag(s, col) -> np.ndarray:
    if s.dtype == bool:
        return s.to_numpy()
    if s.dtype.kind in "iuf":
        v = s.to_numpy(dtype=np.float64)
        ok = np.isnan(v) | np.isin(v, (0, 1))
        if not ok.all():
            i = int(np.argmax(~ok))
            raise DataError(f"the flag column {col!r} must be 0/1 or true/false; row {i + 1} has {v[i]}")
        return np.nan_to_num(v, nan=0) == 1
    low = s.astype(str).str.strip().str.lower()
    t = low.isin(_TRUE).to_numpy()
    f = low.isin(_FALSE | {"nan", "none", "null", "na"}).to_numpy()
    if not (t | f).all():
        i = int(np.argmax(~(t | f)))
        raise DataError(f"the flag column {col!r} must be 0/1, true/false or yes/no; row {i + 1} has {s.iloc[i]!r}")
    return t


# ------------------------------------------------------------------ vector files
def _read_vector(src: Path, ext: str, name: str, columns, crs, polygons, max_bytes, notes):
    import geopandas as gpd

    if KINDS[ext] == "shapefile":
        uri = _shapefile_in_zip(src, name, max_bytes)
        what = "zipped Shapefile"
    else:
        uri = str(src)
        what = {".geojson": "GeoJSON", ".json": "GeoJSON", ".gpkg": "GeoPackage"}.get(ext, "GeoParquet")
    try:
        if KINDS[ext] == "parquet":
            try:
                gdf = gpd.read_parquet(src)
            except ValueError as exc:
                if "geo" not in str(exc).lower():
                    raise
                return _parquet_table(src, name, columns, crs, notes)
        else:
            gdf = gpd.read_file(uri)
    except (DataError, ParamError):
        raise
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{name} is not a readable {what}: {msg}") from None
    if len(gdf) == 0:
        raise DataError(f"{name} holds no features")
    if "geometry" not in gdf or gdf.geometry is None:
        raise DataError(f"{name} holds no geometry column")
    gdf = _drop_empty(gdf, name, notes)
    gdf = _set_crs(gdf, src, ext, name, crs, notes)
    gdf = _points_only(gdf, name, polygons, notes)
    if not gdf.crs.equals("EPSG:4326"):
        try:
            gdf = gdf.to_crs(4326)
        except Exception as exc:
            raise DataError(f"{name}: could not convert from {gdf.crs.name} to WGS84 ({exc})") from None
        notes.append("Coordinates converted to WGS84.")
    lon = gdf.geometry.x.to_numpy(dtype=np.float64)
    lat = gdf.geometry.y.to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    if bad.any():
        raise DataError(f"{name}: {int(bad.sum())} feature(s) have coordinates that cannot be converted to WGS84")
    props = [c for c in gdf.columns if c != gdf.geometry.name]
    used = _find_columns(props, {k: v for k, v in (columns or {}).items() if k not in ("lat", "lon")}, False)
    used["lat"] = used["lon"] = None
    return lon, lat, _attributes(gdf, used, csv_strings=False), used


def _parquet_table(src, name, columns, crs, notes):
    import pandas as pd

    df = pd.read_parquet(src)
    notes.append("Parquet file without GeoParquet metadata: read as a table of coordinates.")
    if len(df) == 0:
        raise DataError(f"{name} has no rows")
    used = _find_columns(list(df.columns), columns, need_coords=True)
    lat = _coord_column(df[used["lat"]].astype(str), used["lat"], "latitude")
    lon = _coord_column(df[used["lon"]].astype(str), used["lon"], "longitude")
    lon, lat = _to_wgs84_table(lon, lat, used, crs, notes)
    return lon, lat, _attributes(df, used, csv_strings=False), used


def _shapefile_in_zip(src: Path, name: str, max_bytes: int) -> str:
    if not zipfile.is_zipfile(src):
        raise DataError(f"{name} is not a valid zip archive (corrupt or not a zip)")
    try:
        with zipfile.ZipFile(src) as z:
            infos = [i for i in z.infolist() if not i.is_dir()]
            total = sum(i.file_size for i in infos)
            if total > ZIP_EXPANSION * max_bytes:
                raise DataError(f"{name} unpacks to {_size(total)}, too large to read")
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, zlib.error, EOFError, NotImplementedError) as exc:
        raise DataError(f"{name} is a corrupt zip archive ({exc})") from None
    if bad is not None:
        raise DataError(f"{name} is a corrupt zip archive: {bad} fails its checksum")
    members = [i.filename for i in infos if "__MACOSX" not in i.filename and not Path(i.filename).name.startswith(".")]
    shps = [m for m in members if m.lower().endswith(".shp")]
    if not shps:
        raise DataError(f"{name} holds no Shapefile (.shp); it contains: {_list(members)}")
    if len(shps) > 1:
        raise DataError(f"{name} holds several Shapefiles ({_list(shps)}): upload one layer per zip")
    stem = shps[0][:-4]
    lower = {m.lower() for m in members}
    for part in (".shx", ".dbf"):
        if (stem + part).lower() not in lower:
            raise DataError(f"{name}: the Shapefile {Path(shps[0]).name} lacks its {part} file")
    return f"zip://{src}!{shps[0]}"


def _set_crs(gdf, src: Path, ext: str, name: str, crs, notes):
    declared = gdf.crs
    if ext in (".geojson", ".json") and declared is not None:
        # GeoJSON readers report WGS84 whether or not the file says so (RFC 7946 makes it the default)
        with open(src, "rb") as f:
            head = f.read(256 * 1024)
        if not re.search(rb'"crs"\s*:', head):
            declared = None
    if crs is not None:
        if declared is not None and not declared.equals(crs):
            raise DataError(f"{name} declares the CRS {declared.name} but {crs.name} was given: remove one of the two")
        return gdf.set_crs(crs, allow_override=True)
    if declared is not None:
        return gdf
    b = gdf.total_bounds
    in_degrees = (
        np.all(np.isfinite(b)) and abs(b[1]) <= 90 and abs(b[3]) <= 90 and abs(b[0]) <= 180 and abs(b[2]) <= 180
    )
    kind = 'GeoJSON without a "crs" member' if ext in (".geojson", ".json") else f"{name} without a CRS (no .prj)"
    if not in_degrees:
        raise DataError(
            f"{kind}, and its coordinates are not degrees (x from {b[0]:,.0f} to {b[2]:,.0f}): the CRS is unknown. "
            "Give the file's CRS (e.g. EPSG:27700) or include it in the file (.prj for a Shapefile)."
        )
    if ext in (".geojson", ".json"):
        notes.append("The GeoJSON has no CRS: WGS84 longitude/latitude assumed (the GeoJSON standard, RFC 7946).")
    else:
        notes.append(f"{name} has no CRS: its coordinates are within degree ranges, so WGS84 was assumed.")
    return gdf.set_crs(4326, allow_override=True)


def _drop_empty(gdf, name: str, notes):
    geom = gdf.geometry
    empty = (geom.isna() | geom.is_empty).to_numpy()
    if empty.all():
        raise DataError(f"{name}: every feature has an empty geometry")
    if empty.any():
        notes.append(f"{int(empty.sum())} feature(s) without geometry were dropped.")
        gdf = gdf[~empty]
    return gdf


def _points_only(gdf, name: str, polygons: str, notes):
    types = gdf.geometry.geom_type
    multi = types == "MultiPoint"
    if multi.any():
        n0 = len(gdf)
        gdf = gdf.explode(index_parts=False, ignore_index=True)
        notes.append(
            f"{int(multi.sum())} MultiPoint feature(s) split into their points ({len(gdf) - n0 + int(multi.sum())} "
            "points; each keeps its feature's attributes)."
        )
        types = gdf.geometry.geom_type
    other = types != "Point"
    if other.any():
        kinds = ", ".join(sorted(set(types[other])))
        if polygons == "reject":
            raise DataError(
                f"{name} holds {int(other.sum()):,} non-point feature(s) ({kinds}); locations must be points. "
                "Convert them to points, or allow centroids."
            )
        # centroids in a local metric CRS (a centroid in degrees is distorted)
        metric = gdf.estimate_utm_crs() if gdf.crs.is_geographic else gdf.crs
        cent = gdf.geometry[other.to_numpy()].to_crs(metric).centroid.to_crs(gdf.crs)
        gdf = gdf.copy()
        gdf.loc[other.to_numpy(), gdf.geometry.name] = cent.to_numpy()
        notes.append(f"{int(other.sum()):,} {kinds} feature(s) were replaced by their centroids.")
    return gdf


# ------------------------------------------------------------------ registry
def _load_registered(path, lat, lon, user_id, value, flag, weight, crs, polygons):
    if not path:
        raise ParamError("give the path of the file to load (path=...)")
    cols = {
        k: v for k, v in dict(lat=lat, lon=lon, user_id=user_id, value=value, flag=flag, weight=weight).items() if v
    }
    return load_file(path, columns=cols or None, crs=crs or None, polygons=polygons)


def _register() -> None:
    from .registry import Source, add

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
            ),
            citation="the user's own file",
            license="the user's own data",
        )
    )


_register()
