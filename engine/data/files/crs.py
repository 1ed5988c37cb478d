"""CRS definitions from an uploaded file (a GeoParquet ``geo`` CRS, a Shapefile's ``.prj``, a GeoPackage's
``gpkg_spatial_ref_sys``), accepted only when they name no file or network resource.

PROJ opens whatever file a definition names when a transformation is built: a WKT ``BOUNDCRS`` whose
``PARAMETERFILE`` is a server path, a ``+nadgrids=``/``+geoidgrids=`` in a WKT1 ``EXTENSION``, a PROJJSON
parameter whose value is a string, a geoid or deformation model. A hostile upload could so make the server
read (or block forever on) any path. A definition is therefore checked twice: its text before PROJ sees it
(no token that can name a file, grid or URL), and what PROJ parsed (every parameter a number, no geoid or
deformation model, no PROJ-string operation). Authority codes (``EPSG:27700``) refer to PROJ's own database
and pass; a PROJ string the analyst types (``+proj=utm +zone=36 +units=km``, for a grid no EPSG code names) is
read only when every one of its keys is among :data:`PROJ_KEYS`, which name numbers and PROJ's built-in
ellipsoids, datums and units, never a file (:func:`proj_string_crs`); its grids are looked up only in PROJ's data folder (never a folder an upload is written to), with
PROJ's network access off.
"""

from __future__ import annotations

import json
import re

from ...core.errors import DataError, ParamError, shown_text

# Web Mercator's WKT1 from GDAL carries "+nadgrids=@null": PROJ's built-in null grid, no file
_NULL_GRID = re.compile(r"(?i)\+nadgrids=@null\b")
_FILE_TOKENS = re.compile(
    r"(?i)parameterfile|geoid_?model|deformation|nadgrids|geoidgrids|gridshift|tinshift|pipeline|init\s*="
    r"|://|\bfile:|dataset_"
)
_MODEL_KEYS = ("geoid_model", "geoid_models", "deformation_models")


def _refuse(where: str) -> DataError:
    return DataError(
        f"{where} names a file, grid or network resource in its CRS definition, which is never read: "
        "give the CRS as an authority code (e.g. EPSG:27700), or write the file again with a plain CRS"
    )


def _opens_nothing(node) -> bool:
    """Whether a parsed CRS (PROJJSON) refers to no file: numeric parameters, no models, no PROJ strings."""
    if isinstance(node, list):
        return all(_opens_nothing(v) for v in node)
    if not isinstance(node, dict):
        return True
    if any(k in node for k in _MODEL_KEYS):
        return False
    for p in node.get("parameters") or ():
        if not isinstance(p, dict) or isinstance(p.get("value"), str):
            return False
    method = node.get("method")
    if isinstance(method, dict) and "proj" in str(method.get("name", "")).lower():
        return False  # "PROJ-based operation method: +proj=..." runs a PROJ string
    return all(_opens_nothing(v) for v in node.values())


def safe_crs(definition, where: str):
    """A pyproj CRS from an uploaded WKT string or PROJJSON dict, or a DataError naming ``where`` when it
    names a file or resource. Unparseable definitions raise pyproj's CRSError for the caller's message."""
    from pyproj import CRS

    if isinstance(definition, dict):  # PROJJSON names its schema by URL, which PROJ never fetches
        definition = {k: v for k, v in definition.items() if k != "$schema"}
    text = json.dumps(definition) if isinstance(definition, dict) else str(definition)
    if _FILE_TOKENS.search(_NULL_GRID.sub("", text)):
        raise _refuse(where)
    crs = CRS.from_json_dict(definition) if isinstance(definition, dict) else CRS.from_wkt(text)
    if not _opens_nothing(crs.to_json_dict()):
        raise _refuse(where)
    return crs


# what a PROJ string may hold: a projection's own parameters, numbers, and names of PROJ's built-in tables
PROJ_KEYS = frozenset(
    "proj zone south lat_0 lon_0 lat_1 lat_2 lat_ts lonc alpha gamma k k_0 x_0 y_0 h a b rf f R es e ellps datum "
    "towgs84 units to_meter pm axis no_defs no_uoff no_rot over type wktext approx".split()
)
_PROJ_TOKEN = re.compile(r"\+([A-Za-z_][A-Za-z0-9_]*)(?:=([A-Za-z0-9_.,:+-]{1,80}))?")
# PROJ "projections" that are coordinate operations: they read grids or models, or chain other steps
_OPERATIONS = frozenset(
    "pipeline hgridshift vgridshift xyzgridshift gridshift tinshift deformation defmodel push pop".split()
)


def proj_string_crs(text: str, where: str):
    """A pyproj CRS from a PROJ string, or a DataError naming ``where`` when it holds a key outside
    :data:`PROJ_KEYS` or an operation (see the module's note); an unparseable string raises pyproj's CRSError."""
    from pyproj import CRS

    tokens = str(text).split()
    parsed = [_PROJ_TOKEN.fullmatch(t) for t in tokens]
    bad = [t for t, m in zip(tokens, parsed) if m is None or m.group(1) not in PROJ_KEYS]
    if bad or not tokens:
        held = f" holds {bad[0].partition('=')[0][:40]!r}" if bad else " is empty"
        raise DataError(
            f"{where}{held}: a PROJ string here holds only a projection's parameters, as +key=value with a number "
            "or a name of PROJ's own ellipsoids, datums and units, never a file, grid or network resource"
        )
    if any(m.group(1) == "proj" and (m.group(2) or "") in _OPERATIONS for m in parsed):
        raise _refuse(where)
    parsed_crs = CRS.from_proj4(" ".join(tokens)).to_json_dict()
    parsed_crs["name"] = " ".join(tokens)  # PROJ names it "unknown": its notes and messages quote the string
    return safe_crs(parsed_crs, where)


def proj_offline() -> None:
    """PROJ never fetches grids from the network (pyproj's default; made explicit for every process that
    reads uploads)."""
    import pyproj.network

    pyproj.network.set_network_enabled(False)


_CRS_CODE = re.compile(r"(?i)urn:ogc:def:crs:[a-z0-9_]+:[0-9.]*:[a-z0-9_.]+|[a-z0-9_]+:[a-z0-9_.]+")


def named_crs(s):
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


def check_crs(crs):
    """The CRS an analyst gives for coordinates a file does not georeference: an authority code, or a PROJ
    string of a projection's parameters (:func:`proj_string_crs`: nothing that names a file)."""
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    if crs in (None, ""):
        return None
    if isinstance(crs, CRS):
        return crs
    text = str(crs).strip()
    if text.startswith("+"):
        try:
            return proj_string_crs(text, "the CRS given")
        except CRSError:
            raise ParamError(f"PROJ could not read the CRS {shown_text(text, 80)!r}: give {CRS_FORMS}") from None
    out = named_crs(f"EPSG:{text}" if text.isdigit() else text)
    if out is None:
        raise ParamError(f"unknown CRS {shown_text(text, 60)!r}: give {CRS_FORMS}")
    return out


def is_wgs84(crs) -> bool:
    return crs is not None and (crs.equals("EPSG:4326", ignore_axis_order=True) or crs.equals("OGC:CRS84"))
