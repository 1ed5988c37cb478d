"""CRS definitions from an uploaded file (a GeoParquet ``geo`` CRS, a Shapefile's ``.prj``, a GeoPackage's
``gpkg_spatial_ref_sys``), accepted only when they name no file or network resource.

PROJ opens whatever file a definition names when a transformation is built: a WKT ``BOUNDCRS`` whose
``PARAMETERFILE`` is a server path, a ``+nadgrids=``/``+geoidgrids=`` in a WKT1 ``EXTENSION``, a PROJJSON
parameter whose value is a string, a geoid or deformation model. A hostile upload could so make the server
read (or block forever on) any path. A definition is therefore checked twice: its text before PROJ sees it
(no token that can name a file, grid or URL), and what PROJ parsed (every parameter a number, no geoid or
deformation model, no PROJ-string operation). Authority codes (``EPSG:27700``) refer to PROJ's own database
and pass; its grids are looked up only in PROJ's data folder (never a folder an upload is written to), with
PROJ's network access off.
"""

from __future__ import annotations

import json
import re

from ...core.errors import DataError

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


def proj_offline() -> None:
    """PROJ never fetches grids from the network (pyproj's default; made explicit for every process that
    reads uploads)."""
    import pyproj.network

    pyproj.network.set_network_enabled(False)
