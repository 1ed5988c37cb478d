"""What every reader of the user's files shares: the limits (read from the environment at each call),
the check of a file's type from its bytes, the reading context :class:`_Ctx` (name, limits, notes,
the messages that refuse a file), column matching by name, and CRS authority codes."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from ...core.errors import DataError, ParamError
from ..dataset import MAX_POINTS

MiB = 1 << 20
DEFAULT_MAX_MB = 200  # Streamlit's default upload limit
DEFAULT_MAX_POINTS = 5_000_000
DEFAULT_REGION_VERTICES = 1_000_000  # a polygon file of regions: vertices in all (HEATMAP_MAX_REGION_VERTICES)
DEFAULT_REGION_PARTS = 50_000  # polygons in all, each part of a MultiPolygon one (HEATMAP_MAX_REGION_PARTS)
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
# a polygon file of regions: its id and name columns (read by :mod:`.polygons`, never by a point reader)
REGION_NAMES = {"region_id": ("id", "regionid", "code", "geoid", "fid"), "region_name": ("name", "regionname", "label")}
REGION_ROLES = tuple(REGION_NAMES)
ROLE_WORD = {"lat": "latitude", "lon": "longitude", "user_id": "user id", "region_id": "id", "region_name": "name"}
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
    polygons: str  # "centroid" or "reject" (points), "keep" (a file of regions)
    layer: str | None
    max_bytes: int
    max_points: int
    notes: list = field(default_factory=list)
    order: str = ""  # how degrees were read, for the swap note ("" after a CRS conversion)
    roles: tuple = ATTRS  # the attribute columns a vector reader looks for
    fields: list = field(default_factory=list)  # the file's attribute columns, as read
    unit: str = "locations"  # what max_points counts
    setting: str = "HEATMAP_MAX_POINTS"  # the variable that sets max_points ("": a fixed limit)
    max_vertices: int = 0  # a file of regions (:func:`region_limits`); 0 for a file of locations
    max_parts: int = 0

    def refuse(self, why: str) -> DataError:
        return DataError(f"{self.name} is not a readable {WHAT[self.kind]}: {why}")

    def too_many(self, n: int, what: str) -> DataError:
        setting = f" ({self.setting})" if self.setting else ""
        return DataError(
            f"{self.name} holds {n:,} {what}, over the limit of {self.max_points:,} {self.unit} per file{setting}"
        )

    def check_region_size(self, vertices: int, parts: int, how: str = "") -> None:
        """Refuse a file of regions over :func:`region_limits` (``how``: how the figures were found)."""
        note = f"; {how}" if how else ""
        if vertices > self.max_vertices:
            raise DataError(
                f"{self.name} holds {vertices:,} vertices ({how or 'in all'}), over the limit of "
                f"{self.max_vertices:,} for a file of regions (HEATMAP_MAX_REGION_VERTICES): simplify its polygons"
            )
        if parts > self.max_parts:
            raise DataError(
                f"{self.name} holds {parts:,} polygons (each part of a MultiPolygon counts{note}), over the limit of "
                f"{self.max_parts:,} for a file of regions (HEATMAP_MAX_REGION_PARTS): merge or drop the small ones"
            )

    def check_geometry_bytes(self, nbytes: int, most: int, where: str) -> None:
        """Refuse a file of regions whose encoded geometries (``nbytes`` in ``where``) take more than the
        ``most`` bytes the limits allow, before they are decoded."""
        if self.max_vertices and nbytes > most:
            raise DataError(
                f"{self.name}: its geometries take {_size(nbytes)} ({where}), more than {self.max_vertices:,} "
                f"vertices in {self.max_parts:,} polygons can (HEATMAP_MAX_REGION_VERTICES, "
                "HEATMAP_MAX_REGION_PARTS): simplify its polygons"
            )

    def wkb_most(self, rows: int) -> int:
        """The most bytes of WKB the region limits allow for ``rows`` geometries: a header of 9 bytes per
        geometry and per polygon, 4 per ring and up to 32 per vertex (x, y, z, m), a ring holding at least 4."""
        return 9 * rows + 9 * self.max_parts + 33 * self.max_vertices


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


def region_limits() -> tuple[int, int]:
    """(most vertices, most polygon parts) of a file of regions, from ``HEATMAP_MAX_REGION_VERTICES`` and
    ``HEATMAP_MAX_REGION_PARTS``: its area weights cost time in proportion to them."""
    vertices = int(_env_number("HEATMAP_MAX_REGION_VERTICES", DEFAULT_REGION_VERTICES))
    parts = int(_env_number("HEATMAP_MAX_REGION_PARTS", DEFAULT_REGION_PARTS))
    return max(vertices, 4), max(parts, 1)


def memory_budget(size: int) -> int:
    """Bytes parsing a file of ``size`` bytes may take: ``HEATMAP_PARSE_MEMORY_FACTOR`` (default 4) times the
    file plus ``HEATMAP_PARSE_MEMORY_MB`` (default 200)."""
    factor = _env_number("HEATMAP_PARSE_MEMORY_FACTOR", 4.0)
    return int(factor * size + _env_number("HEATMAP_PARSE_MEMORY_MB", 200.0) * MiB)


# ------------------------------------------------------------------ columns
class MissingColumns(DataError):
    """The file has no column named like a latitude or a longitude; ``available`` lists its columns, so a
    caller can offer them to choose from."""

    def __init__(self, available: list, message: str):
        super().__init__(message)
        self.available = list(available)


def _find_columns(
    available: list, columns: dict | None, roles=ROLES, notes: list | None = None, seen: list | None = None
) -> dict:
    """Map each role to a column name, or None. ``lat``/``lon`` are required when in ``roles``.
    ``seen``: filled with the available columns (a picker offers them)."""
    columns = dict(columns or {})
    known = ROLES + tuple(r for r in REGION_ROLES if r in roles)
    unknown = sorted(set(columns) - set(known), key=str)
    if unknown:
        raise ParamError(f"unknown column role(s) {_list(unknown)}; use some of: {', '.join(known)}")
    available = [str(c) for c in available]
    if seen is not None:
        seen[:] = available
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
        found = [n for n in {**NAMES, **REGION_NAMES}[role] if n in by_norm]
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
            raise MissingColumns(
                available,
                "could not find the "
                + " and ".join(ROLE_WORD[r] for r in missing)
                + " column: looked for lat/latitude/y and lon/lng/long/longitude/x; the file's columns are: "
                + _list(available)
                + ". Name them explicitly (columns={'lat': ..., 'lon': ...}).",
            )
        if out["lat"] == out["lon"]:
            raise DataError(f"latitude and longitude cannot both be the column {_short(out['lat'], 40)!r}")
    for role in ROLES:
        out.setdefault(role, None)
    return out


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


CRS_FORMS = "an EPSG code such as EPSG:27700, or a PROJ string such as +proj=utm +zone=36 +units=km +datum=WGS84"
# where each door takes the CRS of a file that declares none: a file of locations, a polygon file of regions
CRS_WHERE = {
    "points": "the upload's CRS field, or --data-opt crs=... on the command line",
    "regions": "the regions' CRS field, or --regions-crs on the command line",
}


def _check_crs(crs):
    """The CRS an analyst gives for coordinates a file does not georeference: an authority code, or a PROJ
    string of a projection's parameters (:func:`.crs.proj_string_crs`: nothing that names a file)."""
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    if crs in (None, ""):
        return None
    if isinstance(crs, CRS):
        return crs
    text = str(crs).strip()
    if text.startswith("+"):
        from .crs import proj_string_crs

        try:
            return proj_string_crs(text, "the CRS given")
        except CRSError:
            raise ParamError(f"PROJ could not read the CRS {_short(text, 80)!r}: give {CRS_FORMS}") from None
    out = _named_crs(f"EPSG:{text}" if text.isdigit() else text)
    if out is None:
        raise ParamError(f"unknown CRS {_short(text, 60)!r}: give {CRS_FORMS}")
    return out


def _is_wgs84(crs) -> bool:
    return crs is not None and (crs.equals("EPSG:4326", ignore_axis_order=True) or crs.equals("OGC:CRS84"))


def _deg(v: float, pos: str, neg: str) -> str:
    return f"{abs(v):.4f}°{pos if v >= 0 else neg}"
