"""GeoPackage, read with :mod:`sqlite3` (no GDAL): read-only queries under an authorizer, no views, the
layer, its geometry blobs and their CRS."""

from __future__ import annotations

import struct

import numpy as np

from ...core.errors import DataError, shown_bytes, shown_list, shown_text
from .columns import find_columns
from .crs import safe_crs
from .geojson import attr_columns
from .reading import LOOKS, ReadContext, looks_like
from .upload_limits import EXPANSION, GPKG_STEPS, MAX_COLUMNS
from .vector import read_vector

# ------------------------------------------------------------------ GeoPackage (sqlite3, no GDAL)
_ENVELOPE = (0, 32, 48, 48, 64)  # bytes of the envelope in a GeoPackage geometry header, by its indicator


def read_gpkg(data: bytes, c: ReadContext):
    import sqlite3

    if not data.startswith(b"SQLite format 3\0"):
        raise c.refuse(f"its bytes are {LOOKS[looks_like(data)]}")
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


def _gpkg_layer(con, c: ReadContext):
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
        raise DataError(
            f"{c.name} holds no vector (features) layer; its contents are: {shown_list(n for n, _ in contents)}"
        )
    if c.layer not in (None, ""):
        if c.layer not in layers:
            raise DataError(
                f"{c.name} has no layer named {shown_text(c.layer, 40)!r}; its layers are: {shown_list(layers)}"
            )
        layer = c.layer
    elif len(layers) > 1:
        raise DataError(
            f"{c.name} holds {len(layers)} layers ({shown_list(layers)}): choose one with layer=NAME (on the command "
            "line: --data-opt layer=NAME), or save the layer you want in a file of its own"
        )
    else:
        layer = layers[0]
    shown = shown_text(layer, 40)
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
    used = find_columns([x for x in cols if x != gcol], attr_columns(c), roles=c.roles, notes=c.notes, seen=c.fields)
    keep = [used[r] for r in c.roles if used[r] is not None]
    cur = con.execute(f"SELECT {', '.join(_quote(x) for x in [gcol, *keep])} FROM {_quote(layer)}")
    budget, total, rows = EXPANSION * c.max_bytes, 0, []
    while batch := cur.fetchmany(10_000):
        total += sum(len(v) for r in batch for v in r if isinstance(v, (bytes, str)))
        if total > budget:
            raise DataError(f"{c.name}: the layer {shown!r} holds over {shown_bytes(budget)} of data, too much to read")
        rows.extend(batch)
    wkb, srs = _gpkg_geometries([r[0] for r in rows], c)
    nbytes = sum(len(w) for w in wkb if w is not None)
    c.check_geometry_bytes(nbytes, c.wkb_most(len(rows)), f"the layer {shown!r}'s geometry blobs")
    if srs and srs != {srs_id}:
        raise DataError(f"{c.name}: features of the layer {shown!r} give CRSs (srs_id) that differ from the layer's")
    try:
        geoms = shapely.from_wkb(wkb)
    except Exception:
        raise c.refuse(f"a geometry of the layer {shown!r} is not valid") from None
    df = pd.DataFrame({k: [r[i + 1] for r in rows] for i, k in enumerate(keep)}, index=range(len(rows)))
    return read_vector(gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geoms)), declared, used, c)


def _gpkg_geometries(blobs, c: ReadContext):
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


def _gpkg_crs(con, srs_id, shown: str, c: ReadContext):
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
            return safe_crs(str(definition), f"{c.name}'s layer {shown!r}")
        except CRSError:
            pass
        if str(org).upper() == "EPSG" and isinstance(code, int):
            try:
                return CRS.from_epsg(code)
            except CRSError:
                pass
    raise DataError(
        f"{c.name}: the CRS of the layer {shown!r} (srs_id {shown_text(srs_id, 20)}) is missing from the file or not "
        "understood: save the file again with a known CRS (e.g. EPSG:4326)"
    )
