"""Zipped Shapefile, the one format read through GDAL: fiona with ``driver="ESRI Shapefile"`` on
members extracted under fixed names to a private directory, sizes and ratios checked from the zip's
headers first, GDAL's network and VRT access off."""

from __future__ import annotations

import io
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from ...core.errors import DataError, ParamError, shown_bytes, shown_list, shown_text
from .columns import find_columns
from .crs import safe_crs
from .geojson import attr_columns
from .reading import LOOKS, ReadContext, looks_like
from .upload_limits import EXPANSION, MAX_RATIO, MAX_ZIP_ENTRIES, RATIO_FLOOR, MiB
from .vector import read_vector

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


def read_shapefile(data: bytes, c: ReadContext):
    looks = looks_like(data)
    if looks != "zip":
        raise c.refuse(f"its bytes are {LOOKS[looks]}")
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


def _shapefile_members(z: zipfile.ZipFile, c: ReadContext) -> dict:
    """The Shapefile's members by extension, after every check that needs only the zip's headers."""
    infos = [
        i
        for i in z.infolist()
        if not i.is_dir() and "__MACOSX" not in i.filename and not PurePosixPath(i.filename).name.startswith(".")
    ]
    members = [i.filename for i in infos]
    shps = [i for i in infos if i.filename.lower().endswith(".shp")]
    if not shps:
        raise DataError(f"{c.name} holds no Shapefile (.shp); it contains: {shown_list(members)}")
    if len(shps) > 1:
        raise DataError(
            f"{c.name} holds several Shapefiles ({shown_list(i.filename for i in shps)}): upload one per zip"
        )
    stem = shps[0].filename[:-4].lower()
    parts = {
        i.filename[len(stem) :].lower(): i
        for i in infos
        if i.filename.lower().startswith(stem) and i.filename[len(stem) :].lower() in _SHP_PARTS
    }
    shown = shown_text(PurePosixPath(shps[0].filename).name, 40)
    for part in (".shx", ".dbf"):
        if part not in parts:
            raise DataError(f"{c.name}: the Shapefile {shown!r} lacks its {part} file")
    total = 0
    for info in parts.values():
        member = shown_text(info.filename, 40)
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
                f"{c.name}: the member {member!r} would expand {ratio:,.0f} times (to {shown_bytes(info.file_size)}), "
                f"more than the {MAX_RATIO} times allowed for large members (a zip bomb?)"
            )
        total += info.file_size
    budget = EXPANSION * c.max_bytes
    if total > budget:
        raise DataError(
            f"{c.name} would unpack to {shown_bytes(total)}, over the limit of {shown_bytes(budget)} ({EXPANSION} times the "
            "file limit)"
        )
    if c.max_vertices:  # a file of regions: a record takes up to 84 bytes, a ring 4 and a vertex up to 32 (x, y, z, m)
        rows = max((parts[".shx"].file_size - 100) // 8, 0)
        most = 100 + 84 * rows + 33 * c.max_vertices
        c.check_geometry_bytes(parts[".shp"].file_size, most, "its .shp file, from the zip's headers")
    return parts


def _extract_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, c: ReadContext) -> int:
    """Copy one member to ``dest`` in chunks, never past the size its header declares."""
    member = shown_text(info.filename, 40)
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


def _read_extracted(tmp: Path, parts: dict, c: ReadContext):
    import fiona
    import geopandas as gpd
    import pandas as pd
    import shapely
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
            declared = safe_crs(text, f"{c.name}'s .prj file")
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
            used = find_columns(fields, attr_columns(c), roles=c.roles, notes=c.notes, seen=c.fields)
        keep = list(dict.fromkeys(used[r] for r in c.roles if used[r] is not None))  # a column may name two roles
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
    return read_vector(gdf, declared, used, c)
