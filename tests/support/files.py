"""Input files as the dashboard and the command line receive them: bytes of CSV, GeoPackage, GeoParquet, zipped
Shapefile and GeoJSON, built here so that each test states only what its file holds."""

from __future__ import annotations

import io
import json
import sqlite3
import struct
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import shapely
from pyproj import CRS


def csv_bytes(n: int = 400, seed: int = 0, marker: int | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    rows = [f"{2.3 + a:.6f},{48.85 + b:.6f}" for a, b in rng.normal(0, 0.01, (n, 2))]
    if marker is None:
        return ("lon,lat\n" + "\n".join(rows) + "\n").encode()
    return ("lon,lat,value\n" + "\n".join(f"{r},{marker}" for r in rows) + "\n").encode()


PARIS = (2.35, 48.86)


def cloud(centre, n=400, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.01, (n, 2)) + centre


def csv(points: np.ndarray, head=("lon", "lat")) -> bytes:
    rows = "\n".join(f"{a:.6f},{b:.6f}" for a, b in points)
    return f"{head[0]},{head[1]}\n{rows}\n".encode()


UTM36_KM = "+proj=utm +zone=36 +units=km +datum=WGS84"  # UTM zone 36N in kilometres: West Nile's grid


def burkitt_csv(n: int = 300, seed: int = 0) -> bytes:
    """Case locations on the Burkitt data's local grid (kilometres): X 255-335, Y 247-399, no CRS."""
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(255, 335, n), rng.uniform(247, 399, n)
    return ("x,y\n" + "\n".join(f"{a:.2f},{b:.2f}" for a, b in zip(x, y)) + "\n").encode()


def km_squares_shapefile(tmp_path) -> bytes:
    """Four districts on the same grid (kilometres) as a zipped Shapefile without its .prj."""
    import geopandas as gpd
    import shapely

    boxes = [shapely.box(x, y, x + 45, y + 80) for x in (250, 295) for y in (240, 320)]
    g = gpd.GeoDataFrame({"code": ["SW", "NW", "SE", "NE"]}, geometry=boxes)
    d = tmp_path / "shp"
    d.mkdir()
    with warnings.catch_warnings():  # the missing .prj is the point
        warnings.simplefilter("ignore")
        g.to_file(d / "districts.shp")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for p in d.iterdir():
            if p.suffix != ".prj":
                z.write(p, p.name)
    return buf.getvalue()


LON = np.linspace(-0.15, -0.07, 20)


LAT = np.linspace(51.50, 51.55, 20)


WGS84_WKT = CRS.from_epsg(4326).to_wkt("WKT1_GDAL")


def geoparquet(gdf, geo_edit=None) -> bytes:
    buf = io.BytesIO()
    gdf.to_parquet(buf)
    if geo_edit is None:
        return buf.getvalue()
    t = pq.read_table(io.BytesIO(buf.getvalue()))
    meta = dict(t.schema.metadata)
    meta[b"geo"] = geo_edit(json.loads(meta[b"geo"]))
    out = io.BytesIO()
    pq.write_table(t.replace_schema_metadata(meta), out)
    return out.getvalue()


def gp_blob(geom, srs_id=4326) -> bytes:
    """A GeoPackage geometry: 'GP', version 0, flags (little endian, no envelope), srs_id, WKB."""
    return b"GP\x00\x01" + struct.pack("<i", srs_id) + shapely.to_wkb(geom, byte_order=1)


def gpkg(layers=None, srs=(4326, "EPSG", 4326, WGS84_WKT), layer_srs=None, sql=(), app_id=0x47504B47) -> bytes:
    """A GeoPackage built with sqlite3: ``layers`` maps a name to rows of (geometry blob, properties)."""
    if layers is None:
        layers = {"pts": [(gp_blob(shapely.Point(x, y)), {}) for x, y in zip(LON, LAT)]}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.gpkg"
        con = sqlite3.connect(path)
        con.execute(f"PRAGMA application_id = {app_id}")
        con.execute(
            "CREATE TABLE gpkg_spatial_ref_sys (srs_name TEXT, srs_id INTEGER PRIMARY KEY, organization TEXT, "
            "organization_coordsys_id INTEGER, definition TEXT, description TEXT)"
        )
        con.execute("INSERT INTO gpkg_spatial_ref_sys VALUES ('undefined', -1, 'NONE', -1, 'undefined', '')")
        con.execute("INSERT INTO gpkg_spatial_ref_sys VALUES ('undefined', 0, 'NONE', 0, 'undefined', '')")
        if srs is not None:
            con.execute("INSERT INTO gpkg_spatial_ref_sys VALUES ('s', ?, ?, ?, ?, '')", srs)
        con.execute("CREATE TABLE gpkg_contents (table_name TEXT PRIMARY KEY, data_type TEXT, identifier TEXT)")
        con.execute(
            "CREATE TABLE gpkg_geometry_columns (table_name TEXT, column_name TEXT, geometry_type_name TEXT, "
            "srs_id INTEGER, z INTEGER, m INTEGER)"
        )
        for name, rows in layers.items():
            cols = sorted({k for _, p in rows for k in p})
            defs = "".join(f', "{k}"' for k in cols)
            con.execute(f'CREATE TABLE "{name}" (fid INTEGER PRIMARY KEY, geom BLOB{defs})')
            for blob, p in rows:
                con.execute(
                    f'INSERT INTO "{name}" (geom{defs}) VALUES (?{", ?" * len(cols)})',
                    [blob, *(p.get(k) for k in cols)],
                )
            con.execute("INSERT INTO gpkg_contents VALUES (?, 'features', ?)", (name, name))
            sid = srs[0] if layer_srs is None and srs is not None else layer_srs
            con.execute("INSERT INTO gpkg_geometry_columns VALUES (?, 'geom', 'POINT', ?, 0, 0)", (name, sid))
        for s in sql:
            con.execute(s)
        con.commit()
        con.close()
        return path.read_bytes()


def zip_of(members: dict, compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def shapefile_parts(gdf) -> dict:
    with tempfile.TemporaryDirectory() as d:
        gdf.to_file(Path(d) / "points.shp")
        return {p.name: p.read_bytes() for p in Path(d).iterdir()}


def user_id_csv(n_users: int = 2000, per_user: int = 10, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    homes = rng.normal(0, 0.02, (n_users, 2))
    rows = []
    for u, (a, b) in enumerate(homes):
        for p in rng.normal(0, 0.002, (per_user, 2)):
            rows.append(f"{u},{-0.12 + a + p[0]:.6f},{51.5 + b + p[1]:.6f}")
    return ("user_id,lon,lat\n" + "\n".join(rows) + "\n").encode()


def districts_geojson() -> bytes:
    """Four districts (quarters of the synthetic city's public region) with a code and a name."""
    import shapely

    from engine.run import load_dataset

    x0, y0, x1, y1 = load_dataset("synthetic:polycentric", {"n": 20000}).meta.bbox
    xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
    boxes = [(x0, y0, xm, ym), (xm, y0, x1, ym), (x0, ym, xm, y1), (xm, ym, x1, y1)]
    feats = [
        {
            "type": "Feature",
            "properties": {"code": f"Q{i + 1}", "quarter": f"Quarter {i + 1}", "area_rank": 4 - i},
            "geometry": shapely.geometry.mapping(shapely.box(*b)),
        }
        for i, b in enumerate(boxes)
    ]
    return json.dumps({"type": "FeatureCollection", "features": feats}).encode()
