"""Uploads from a hostile user.

Every bad file goes through ``load_file`` twice, as the dashboard calls it (bytes and a
file name) and as the CLI does (a path), and must give a DataError/ParamError with a
specific message, without a logged traceback or a server path in the message. OGR VRT
files that point at a file on the server's disk or at a URL on a local listener must be
refused without any request reaching the listener; decompression bombs are refused by
the size checks before anything is expanded.
"""

from __future__ import annotations

import http.server
import io
import json
import logging
import sqlite3
import struct
import tempfile
import threading
import zipfile
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shapely

from engine.core.errors import NAME_CHARS, DataError, ParamError
from engine.data.files import load_file
from engine.data.files import shapefile as files_shapefile
from engine.data.files.upload_limits import DEFAULT_MAX_POINTS, upload_limits
from engine.data.projection import lon_extent
from tests.support.files import LAT, LON, geoparquet, gp_blob, gpkg, shapefile_parts, zip_of


# ------------------------------------------------------------------ file makers
def csv_text(text: str):
    return lambda: text.encode()


def table(**cols) -> bytes:
    return pd.DataFrame(cols).to_csv(index=False).encode()


def points(n=20, crs=4326, **props):
    g = gpd.GeoDataFrame(props or None, geometry=gpd.points_from_xy(LON[:n], LAT[:n]), crs=4326)
    return g.to_crs(crs)


def pt(x, y):
    return {"type": "Point", "coordinates": [x, y]}


def feat(geom, props=None):
    return {"type": "Feature", "geometry": geom, "properties": props if props is not None else {}}


def fc(features, **extra) -> bytes:
    return json.dumps({"type": "FeatureCollection", "features": features, **extra}).encode()


def good_features(**props_per_row):
    """The 20 London points as features; ``props_per_row`` maps a property to its 20 values."""
    return [feat(pt(x, y), {k: v[i] for k, v in props_per_row.items()}) for i, (x, y) in enumerate(zip(LON, LAT))]


def parquet(df) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue()


def shapefile(gdf=None, drop=(), replace=None, rename=None) -> bytes:
    parts = shapefile_parts(points() if gdf is None else gdf)
    parts = {k: v for k, v in parts.items() if Path(k).suffix not in drop}
    for suffix, data in (replace or {}).items():
        parts[f"points{suffix}"] = data
    for old, new in (rename or {}).items():
        parts[new] = parts.pop(old)
    return zip_of(parts)


def with_flag_bits(data: bytes, bits: int) -> bytes:
    """Set general-purpose flag bits on every entry (local and central headers)."""
    out = bytearray(data)
    for sig, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = out.find(sig)
        while i >= 0:
            out[i + at] |= bits
            i = out.find(sig, i + 4)
    return bytes(out)


VRT = (
    "<OGRVRTDataSource><OGRVRTLayer name='s'><SrcDataSource>{src}</SrcDataSource><SrcLayer>{layer}</SrcLayer>"
    "<GeometryType>wkbPoint</GeometryType><GeometryField encoding='PointFromColumns' x='lon' y='lat'/>"
    "</OGRVRTLayer></OGRVRTDataSource>"
)
LOCAL_VRT = VRT.format(src="/nonexistent/places.csv", layer="places").encode()


def sqlite_plain() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        con = sqlite3.connect(Path(d) / "x.db")
        con.execute("CREATE TABLE t (a)")
        con.commit()
        con.close()
        return (Path(d) / "x.db").read_bytes()


def real_parquet() -> bytes:
    return parquet(pd.DataFrame({"lat": LAT, "lon": LON}))


MAGIC = {
    "vrt": lambda: LOCAL_VRT,
    "html": lambda: b"<!DOCTYPE html><html><body>hi</body></html>",
    "zip": lambda: zip_of({"a.txt": b"hello"}),
    "parquet": real_parquet,
    "sqlite": sqlite_plain,
    "gzip": lambda: b"\x1f\x8b\x08\x00" + bytes(20),
    "pdf": lambda: b"%PDF-1.4\n%\xe2\xe3\n1 0 obj",
    "png": lambda: b"\x89PNG\r\n\x1a\n" + bytes(20),
    "json": lambda: fc(good_features()),
    "binary": lambda: b"lat,lon\x00\x01\x02\x03",
}
SAYS = {
    "vrt": "XML or HTML",
    "html": "XML or HTML",
    "zip": "a zip archive",
    "parquet": "a Parquet file",
    "sqlite": "a SQLite database",
    "gzip": "gzip-compressed",
    "pdf": "a PDF document",
    "png": "a PNG image",
    "json": "JSON (a GeoJSON file",
    "binary": "binary data",
}


def _magic_cases():
    """Each format's name on every other kind of bytes."""
    own = {".csv": None, ".geojson": "json", ".gpkg": "sqlite", ".parquet": "parquet", ".zip": "zip"}
    return [
        (f"magic-{ext[1:]}-is-{kind}", f"x{ext}", maker, SAYS[kind], {})
        for ext, mine in own.items()
        for kind, maker in MAGIC.items()
        if kind != mine
    ]


def huge_nesting():
    return b"[" * 100_000 + b"]" * 100_000


def many_columns_csv():
    header = ",".join(["lat", "lon"] + [f"c{i}" for i in range(1001)])
    row = ",".join(["51.5", "-0.1"] + ["0"] * 1001)
    return f"{header}\n{row}\n{row}\n".encode()


def parquet_dictionary_bomb():
    """A string column repeating one 100 kB value 1,000 times: 100 MB once decoded, tiny on disk."""
    big = "5" * 100_000
    lat = pa.DictionaryArray.from_arrays(pa.array(np.zeros(1000, dtype=np.int32)), pa.array([big]))
    t = pa.table({"lat": lat, "lon": pa.array(np.linspace(0, 1, 1000))})
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


def zip_ratio_bomb():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        parts = shapefile_parts(points())
        for k, v in parts.items():
            if not k.endswith(".dbf"):
                z.writestr(k, v)
        with z.open("points.dbf", "w") as f:
            for _ in range(40):
                f.write(bytes(1 << 20))
    return buf.getvalue()


def gdf_with(**props):
    return points(**{k: list(v) for k, v in props.items()})


# (id, file name, bytes maker, expected message fragment, load_file keyword arguments)
CASES = [
    # ---- CSV: coordinates
    (
        "csv-non-numeric-lat",
        "x.csv",
        csv_text("lat,lon\n51.5,-0.1\nabc,-0.2\n"),
        "non-numeric value 'abc' at line 3",
        {},
    ),
    ("csv-missing-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\n,-0.2\n"), "have no latitude", {}),
    ("csv-missing-lon", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,\n"), "have no longitude", {}),
    ("csv-null-word-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\nNULL,-0.2\n"), "have no latitude", {}),
    ("csv-nan-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\nnan,-0.2\n"), "have no latitude", {}),
    ("csv-inf-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\ninf,-0.2\n"), "non-finite value at line 3", {}),
    ("csv-minus-inf-lon", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,-inf\n"), "non-finite value at line 3", {}),
    ("csv-overflow-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\n1e999,-0.2\n"), "non-finite value", {}),
    ("csv-hex-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\n0x1A,-0.2\n"), "non-numeric value '0x1A'", {}),
    ("csv-bool-lat", "x.csv", csv_text("lat,lon\n51.5,-0.1\ntrue,-0.2\n"), "non-numeric value 'true'", {}),
    ("csv-lat-95", "x.csv", csv_text("lat,lon\n51.5,-0.1\n95,-0.2\n"), "latitude 95 at line 3 is beyond", {}),
    ("csv-lat-minus-91", "x.csv", csv_text("lat,lon\n51.5,-0.1\n-91,-0.2\n"), "beyond ±90", {}),
    ("csv-lon-190", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,190\n"), "longitude 190 at line 3 is beyond", {}),
    ("csv-swapped-detectable", "x.csv", csv_text("lat,lon\n120,51.5\n130,51.6\n"), "look swapped", {}),
    ("csv-projected-no-crs", "x.csv", csv_text("x,y\n530000,180000\n531000,181000\n"), "projected CRS", {}),
    ("csv-mixed-units", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n180000,530000\n"), "mix units", {}),
    ("csv-single-location", "x.csv", csv_text("lat,lon\n51.5,-0.1\n"), "single location", {}),
    ("csv-same-point", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.5,-0.1\n51.5,-0.1\n"), "same point", {}),
    (
        "csv-under-a-metre",
        "x.csv",
        csv_text("lat,lon\n51.5,-0.1\n51.500000001,-0.100000001\n"),
        "span less than a metre",
        {},
    ),
    (
        "csv-crs-out-of-area",
        "x.csv",
        csv_text("x,y\n1e12,1e12\n2e12,2e12\n"),
        "outside the area",
        {"crs": "EPSG:27700"},
    ),
    # ---- CSV: structure
    ("csv-header-only", "x.csv", csv_text("lat,lon\n"), "no data rows", {}),
    ("csv-header-then-blank-lines", "x.csv", csv_text("lat,lon\n\n\n"), "no data rows", {}),
    (
        "csv-no-coordinate-columns",
        "x.csv",
        csv_text("a,b\n1,2\n3,4\n"),
        "could not find the latitude and longitude",
        {},
    ),
    ("csv-no-longitude-column", "x.csv", csv_text("lat,b\n1,2\n3,4\n"), "could not find the longitude column", {}),
    ("csv-newlines-only", "x.csv", csv_text("\n\n"), "is empty", {}),
    ("csv-whitespace-only", "x.csv", csv_text("  \n\t\n"), "is empty", {}),
    ("csv-duplicate-lat", "x.csv", csv_text("lat,lon,lat\n1,2,3\n2,3,4\n"), "2 columns that could be the latitude", {}),
    ("csv-duplicate-lat-case", "x.csv", csv_text("lat,lon,LAT\n1,2,3\n2,3,4\n"), "could be the latitude", {}),
    ("csv-duplicate-lon-spaces", "x.csv", csv_text("lat,lon, Lon \n1,2,3\n2,3,4\n"), "could be the longitude", {}),
    (
        "csv-duplicate-weight",
        "x.csv",
        csv_text("lat,lon,weight,Weight\n51.5,-0.1,1,2\n51.6,-0.2,1,2\n"),
        "could be the weight",
        {},
    ),
    (
        "csv-duplicate-user",
        "x.csv",
        csv_text("lat,lon,user_id,UserId\n51.5,-0.1,1,2\n51.6,-0.2,1,2\n"),
        "could be the user id",
        {},
    ),
    (
        "csv-duplicate-mapped",
        "x.csv",
        csv_text("a,a,b\n51.5,51.5,-0.1\n51.6,51.6,-0.2\n"),
        "could be the latitude",
        {"columns": {"lat": "a", "lon": "b"}},
    ),
    ("csv-extra-field", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2,7\n"), "line 3 has 3 fields where", {}),
    ("csv-extra-field-first-row", "x.csv", csv_text("lat,lon\n51.5,-0.1,7\n51.6,-0.2\n"), "has 3 fields where", {}),
    (
        "csv-unquoted-comma",
        "x.csv",
        csv_text("name,lat,lon\nSmith,51.5,-0.1\nSmith, John,51.6,-0.2\n"),
        "4 fields where the header has 3",
        {},
    ),
    ("csv-unterminated-quote", "x.csv", csv_text('lat,lon\n"51.5,-0.1\n52,1\n'), "cannot be split into fields", {}),
    ("csv-1003-columns", "x.csv", many_columns_csv, "1,003 columns, over the limit of 1,000", {}),
    (
        "csv-huge-field",
        "x.csv",
        lambda: b"lat,lon,note\n51.5,-0.1," + b"a" * 200_000 + b"\n51.6,-0.2,b\n",
        "cannot be split into fields",
        {},
    ),
    ("csv-nul-bytes", "x.csv", lambda: b"lat,lon\n51.5,-0.1\x00\n", "binary data", {}),
    ("csv-bad-utf16", "x.csv", lambda: b"\xff\xfe" + "lat,lon\n".encode("utf-16-le") + b"\x00", "not valid UTF-16", {}),
    ("tsv-binary", "x.tsv", lambda: bytes(range(256)), "binary data", {}),
    ("txt-xml", "x.txt", lambda: LOCAL_VRT, "XML or HTML", {}),
    # ---- CSV: attributes
    ("csv-weight-negative", "x.csv", csv_text("lat,lon,weight\n51.5,-0.1,1\n51.6,-0.2,-1\n"), "negative values", {}),
    ("csv-weight-inf", "x.csv", csv_text("lat,lon,weight\n51.5,-0.1,inf\n51.6,-0.2,1\n"), "infinite value", {}),
    ("csv-weight-nan", "x.csv", csv_text("lat,lon,weight\n51.5,-0.1,nan\n51.6,-0.2,1\n"), "missing values", {}),
    ("csv-weight-blank", "x.csv", csv_text("lat,lon,weight\n51.5,-0.1,\n51.6,-0.2,1\n"), "missing values", {}),
    ("csv-weight-all-zero", "x.csv", csv_text("lat,lon,weight\n51.5,-0.1,0\n51.6,-0.2,0.0\n"), "is 0", {}),
    ("csv-weight-text", "x.csv", csv_text("lat,lon,weight\n51.5,-0.1,heavy\n51.6,-0.2,1\n"), "value 'heavy'", {}),
    ("csv-value-text", "x.csv", csv_text("lat,lon,value\n51.5,-0.1,old\n51.6,-0.2,1\n"), "non-numeric value 'old'", {}),
    ("csv-value-inf", "x.csv", csv_text("lat,lon,value\n51.5,-0.1,-inf\n51.6,-0.2,1\n"), "infinite value", {}),
    ("csv-flag-maybe", "x.csv", csv_text("lat,lon,flag\n51.5,-0.1,maybe\n51.6,-0.2,1\n"), "must be 0/1", {}),
    ("csv-flag-two", "x.csv", csv_text("lat,lon,flag\n51.5,-0.1,2\n51.6,-0.2,1\n"), "must be 0/1", {}),
    # ---- CSV: options
    (
        "csv-mapped-column-missing",
        "x.csv",
        csv_text("a,b\n1,2\n3,4\n"),
        "'nope' is not in the file",
        {"columns": {"lat": "nope", "lon": "b"}},
    ),
    ("csv-unknown-role", "x.csv", csv_text("a,b\n1,2\n3,4\n"), "unknown column role", {"columns": {"latitude": "a"}}),
    ("csv-lat-is-lon", "x.csv", csv_text("a,b\n1,2\n3,4\n"), "cannot both be", {"columns": {"lat": "a", "lon": "a"}}),
    (
        "csv-crs-init-file",
        "x.csv",
        csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n"),
        "never a file, grid or network resource",
        {"crs": "+init=/etc/passwd:x"},
    ),
    (
        "csv-crs-unknown-code",
        "x.csv",
        csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n"),
        "unknown CRS",
        {"crs": "EPSG:999999"},
    ),
    ("csv-crs-path", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n"), "unknown CRS", {"crs": "/etc/passwd"}),
    (
        "csv-polygons-option",
        "x.csv",
        csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n"),
        "polygons must be",
        {"polygons": "x"},
    ),
    ("csv-bad-bbox", "x.csv", csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n"), "bbox must be", {"bbox": (1, 1, 0, 0)}),
    (
        "csv-over-size-limit",
        "x.csv",
        csv_text("lat,lon\n51.5,-0.1\n51.6,-0.2\n"),
        "over the limit of 10 bytes",
        {"max_bytes": 10},
    ),
    (
        "csv-over-points-limit",
        "x.csv",
        lambda: table(lat=LAT, lon=LON),
        "20 lines after its header, over the limit of 5",
        {"max_points": 5},
    ),
    # ---- names and extensions
    ("ext-xlsx", "sheet.xlsx", lambda: b"PK\x03\x04", "unsupported file type '.xlsx'", {}),
    ("ext-none", "data", lambda: b"lat,lon\n", "'(no extension)'", {}),
    ("ext-kml", "x.kml", lambda: b"<kml/>", "unsupported file type '.kml'", {}),
    ("ext-vrt", "x.vrt", lambda: LOCAL_VRT, "unsupported file type '.vrt'", {}),
    ("ext-shp-alone", "points.shp", lambda: b"x", "as one .zip", {}),
    ("empty-geojson", "x.geojson", lambda: b"", "is empty", {}),
    ("empty-gpkg", "x.gpkg", lambda: b"", "is empty", {}),
    # ---- GeoJSON
    (
        "geojson-broken-json",
        "x.geojson",
        lambda: b'{"type": "FeatureCollection", "features": [',
        "not valid JSON (line 1",
        {},
    ),
    ("geojson-not-utf8", "x.geojson", lambda: b'{"type": "Feature", "properties": {"n": "caf\xe9"}}', "not UTF-8", {}),
    ("geojson-array", "x.geojson", lambda: b"[1, 2]", 'top-level "type"', {}),
    ("geojson-no-type", "x.geojson", lambda: b'{"features": []}', 'top-level "type"', {}),
    ("geojson-topology", "x.json", lambda: b'{"type": "Topology", "objects": {}}', 'top-level "type"', {}),
    ("geojson-type-not-string", "x.geojson", lambda: b'{"type": 5}', 'top-level "type"', {}),
    (
        "geojson-features-not-list",
        "x.geojson",
        lambda: b'{"type": "FeatureCollection", "features": {}}',
        "is not a list",
        {},
    ),
    ("geojson-no-features", "x.geojson", lambda: fc([]), "holds no features", {}),
    ("geojson-feature-not-object", "x.geojson", lambda: fc([1, 2]), "feature 1 is not a GeoJSON Feature", {}),
    ("geojson-feature-wrong-type", "x.geojson", lambda: fc([pt(0, 51)]), "is not a GeoJSON Feature", {}),
    ("geojson-properties-list", "x.geojson", lambda: fc([feat(pt(0, 51), [1])]), "not an object", {}),
    (
        "geojson-nan-coordinate",
        "x.geojson",
        lambda: b'{"type": "Point", "coordinates": [NaN, 1]}',
        "invalid coordinate",
        {},
    ),
    (
        "geojson-infinity-literal",
        "x.geojson",
        lambda: fc([feat(pt(0, 51)), feat({"type": "Point", "coordinates": [float("inf"), 1]})]),
        "feature 2 has an invalid coordinate",
        {},
    ),
    (
        "geojson-overflow-number",
        "x.geojson",
        lambda: b'{"type": "Point", "coordinates": [1e999, 2]}',
        "invalid coordinate",
        {},
    ),
    (
        "geojson-huge-integer",
        "x.geojson",
        lambda: b'{"type": "Point", "coordinates": [1' + b"0" * 400 + b", 2]}",
        "invalid coordinate",
        {},
    ),
    (
        "geojson-string-coordinate",
        "x.geojson",
        lambda: fc([feat({"type": "Point", "coordinates": ["a", 2]})]),
        "invalid coordinate",
        {},
    ),
    (
        "geojson-bool-coordinate",
        "x.geojson",
        lambda: fc([feat({"type": "Point", "coordinates": [True, 2]})]),
        "invalid coordinate",
        {},
    ),
    (
        "geojson-null-coordinate",
        "x.geojson",
        lambda: fc([feat({"type": "Point", "coordinates": [None, 2]})]),
        "invalid coordinate",
        {},
    ),
    (
        "geojson-one-element",
        "x.geojson",
        lambda: fc([feat({"type": "Point", "coordinates": [1]}), feat(pt(1, 3))]),
        "invalid coordinate",
        {},
    ),
    (
        "geojson-five-elements",
        "x.geojson",
        lambda: fc([feat({"type": "Point", "coordinates": [1, 2, 3, 4, 5]})]),
        "invalid coordinate",
        {},
    ),
    (
        "geojson-point-nested",
        "x.geojson",
        lambda: fc([feat({"type": "Point", "coordinates": [[1, 2]]})]),
        "invalid coordinate",
        {},
    ),
    ("geojson-coordinates-missing", "x.geojson", lambda: fc([feat({"type": "Point"})]), "invalid coordinate", {}),
    (
        "geojson-multipoint-bad",
        "x.geojson",
        lambda: fc([feat({"type": "MultiPoint", "coordinates": [[1, 2], [3]]})]),
        "invalid coordinate",
        {},
    ),
    (
        "geojson-line-one-point",
        "x.geojson",
        lambda: fc([feat({"type": "LineString", "coordinates": [[1, 2]]})]),
        "invalid geometry",
        {},
    ),
    (
        "geojson-ring-too-short",
        "x.geojson",
        lambda: fc([feat({"type": "Polygon", "coordinates": [[[0, 0], [1, 0]]]})]),
        "invalid geometry",
        {},
    ),
    (
        "geojson-unknown-geometry",
        "x.geojson",
        lambda: fc([feat({"type": "Circle", "coordinates": [0, 0]})]),
        "invalid geometry",
        {},
    ),
    ("geojson-geometry-number", "x.geojson", lambda: fc([feat(5)]), "invalid geometry", {}),
    (
        "geojson-collection-too-deep",
        "x.geojson",
        lambda: fc([feat(json.loads('{"type":"GeometryCollection","geometries":[' * 6 + "]}" * 6))]),
        "invalid geometry",
        {},
    ),
    ("geojson-nesting-bomb", "x.json", huge_nesting, "nested too deeply", {}),
    (
        "geojson-all-null-geometry",
        "x.geojson",
        lambda: fc([feat(None), feat(None)]),
        "every feature has an empty geometry",
        {},
    ),
    (
        "geojson-crs-unknown-code",
        "x.geojson",
        lambda: fc(good_features(), crs={"type": "name", "properties": {"name": "EPSG:999999"}}),
        "not a known CRS",
        {},
    ),
    (
        "geojson-crs-path",
        "x.geojson",
        lambda: fc(good_features(), crs={"type": "name", "properties": {"name": "/etc/passwd"}}),
        "not a known CRS",
        {},
    ),
    (
        "geojson-crs-init",
        "x.geojson",
        lambda: fc(good_features(), crs={"type": "name", "properties": {"name": "+init=epsg:4326"}}),
        "not a known CRS",
        {},
    ),
    ("geojson-crs-number", "x.geojson", lambda: fc(good_features(), crs=5), "not a known CRS", {}),
    (
        "geojson-crs-no-name",
        "x.geojson",
        lambda: fc(good_features(), crs={"type": "name", "properties": {}}),
        "not a known CRS",
        {},
    ),
    (
        "geojson-crs-link",
        "x.geojson",
        lambda: fc(good_features(), crs={"type": "link", "properties": {"href": "http://127.0.0.1:9/crs"}}),
        "as a link, which is not followed",
        {},
    ),
    (
        "geojson-projected-no-crs",
        "x.geojson",
        lambda: fc([feat(pt(530000, 180000)), feat(pt(531000, 181000))]),
        'GeoJSON without a "crs" member',
        {},
    ),
    (
        "geojson-crs-conflict",
        "x.geojson",
        lambda: points(crs=27700).to_json(to_wgs84=False).encode(),
        "declares the CRS",
        {"crs": "EPSG:3857"},
    ),
    (
        "geojson-polygons-rejected",
        "x.geojson",
        lambda: fc([feat({"type": "Polygon", "coordinates": [[[0, 51], [1, 51], [1, 52], [0, 51]]]}), feat(pt(0, 51))]),
        "non-point feature",
        {"polygons": "reject"},
    ),
    (
        "geojson-over-points-limit",
        "x.geojson",
        lambda: fc(good_features()),
        "20 features, over the limit of 5",
        {"max_points": 5},
    ),
    (
        "geojson-multipoint-over-limit",
        "x.geojson",
        lambda: fc([feat({"type": "MultiPoint", "coordinates": [[0, 51]] * 10})]),
        "10 points, over the limit of 5",
        {"max_points": 5},
    ),
    ("geojson-single-location", "x.geojson", lambda: fc([feat(pt(0, 51))]), "single location", {}),
    (
        "geojson-under-a-metre",
        "x.geojson",
        lambda: fc([feat(pt(0, 51)), feat(pt(1e-9, 51 + 1e-9))]),
        "span less than a metre",
        {},
    ),
    ("geojson-weight-all-zero", "x.geojson", lambda: fc(good_features(weight=[0] * 20)), "is 0", {}),
    ("geojson-weight-negative", "x.geojson", lambda: fc(good_features(weight=[-1] * 20)), "negative values", {}),
    ("geojson-weight-string", "x.geojson", lambda: fc(good_features(weight=["a"] * 20)), "non-numeric value 'a'", {}),
    ("geojson-weight-huge", "x.geojson", lambda: fc(good_features(weight=[1] * 19 + [10**400])), "infinite value", {}),
    ("geojson-value-object", "x.geojson", lambda: fc(good_features(value=[{"a": 1}] * 20)), "non-numeric value", {}),
    ("geojson-flag-bad", "x.geojson", lambda: fc(good_features(flag=["perhaps"] * 20)), "must be 0/1", {}),
    (
        "geojson-duplicate-weight",
        "x.geojson",
        lambda: fc(good_features(weight=[1] * 20, Weight=[2] * 20)),
        "could be the weight",
        {},
    ),
    (
        "geojson-1001-properties",
        "x.geojson",
        lambda: fc([feat(pt(0, 51), {f"p{i}": i for i in range(1001)}), feat(pt(1, 52))]),
        "1,001 property names",
        {},
    ),
    ("geojson-text", "x.geojson", lambda: b"lat,lon\n1,2\n", "text that is not JSON", {}),
    # ---- Parquet
    ("parquet-truncated", "x.parquet", lambda: real_parquet()[:-40], "no Parquet footer", {}),
    ("parquet-fake", "x.parquet", lambda: b"PAR1 not really parquet", "no Parquet footer", {}),
    ("parquet-bad-footer", "x.parquet", lambda: b"PAR1" + bytes(40) + b"PAR1", "footer cannot be read", {}),
    ("parquet-encrypted", "x.parquet", lambda: b"PAR1" + bytes(40) + b"PARE", "encrypted", {}),
    (
        "parquet-no-rows",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": pd.Series([], dtype=float), "lon": pd.Series([], dtype=float)})),
        "has no rows",
        {},
    ),
    ("parquet-over-points-limit", "x.parquet", real_parquet, "20 rows, over the limit of 5", {"max_points": 5}),
    (
        "parquet-no-coordinates",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})),
        "could not find the latitude",
        {},
    ),
    (
        "parquet-string-coordinates",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": ["51.5", "north"], "lon": ["0", "1"]})),
        "non-numeric value 'north' at row 2",
        {},
    ),
    (
        "parquet-nan-coordinate",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": [51.5, np.nan], "lon": [0.0, 1.0]})),
        "have no latitude",
        {},
    ),
    (
        "parquet-inf-coordinate",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": [51.5, np.inf], "lon": [0.0, 1.0]})),
        "non-finite value at row 2",
        {},
    ),
    (
        "parquet-duplicate-lat",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": LAT, "LAT": LAT, "lon": LON})),
        "could be the latitude",
        {},
    ),
    (
        "parquet-weight-inf",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": LAT, "lon": LON, "weight": [np.inf] * 20})),
        "infinite value",
        {},
    ),
    (
        "parquet-weight-zero",
        "x.parquet",
        lambda: parquet(pd.DataFrame({"lat": LAT, "lon": LON, "weight": [0.0] * 20})),
        "is 0",
        {},
    ),
    (
        "parquet-1001-columns",
        "x.parquet",
        lambda: parquet(pd.DataFrame({f"c{i}": [1.0] for i in range(1001)})),
        "1,001 columns",
        {},
    ),
    (
        "parquet-dictionary-bomb",
        "x.parquet",
        parquet_dictionary_bomb,
        "once decoded, over the limit",
        {"max_bytes": 1 << 20},
    ),
    (
        "geoparquet-geo-not-json",
        "x.parquet",
        lambda: geoparquet(points(), lambda g: b"{not json"),
        '"geo" metadata is not valid JSON',
        {},
    ),
    (
        "geoparquet-no-primary",
        "x.parquet",
        lambda: geoparquet(points(), lambda g: json.dumps({**g, "primary_column": "nope"}).encode()),
        "does not name a geometry column",
        {},
    ),
    (
        "geoparquet-bad-encoding",
        "x.parquet",
        lambda: geoparquet(
            points(),
            lambda g: json.dumps(
                {**g, "columns": {"geometry": {**g["columns"]["geometry"], "encoding": "WKT"}}}
            ).encode(),
        ),
        "geometry encoding 'WKT'",
        {},
    ),
    (
        "geoparquet-bogus-crs",
        "x.parquet",
        lambda: geoparquet(
            points(),
            lambda g: json.dumps(
                {**g, "columns": {"geometry": {**g["columns"]["geometry"], "crs": {"type": "nonsense"}}}}
            ).encode(),
        ),
        "that is not understood",
        {},
    ),
    (
        "geoparquet-crs-string-path",
        "x.parquet",
        lambda: geoparquet(
            points(),
            lambda g: json.dumps(
                {**g, "columns": {"geometry": {**g["columns"]["geometry"], "crs": "+init=/etc/passwd:x"}}}
            ).encode(),
        ),
        "names a file, grid or network resource",
        {},
    ),
    (
        "geoparquet-bad-wkb",
        "x.parquet",
        lambda: parquet_with_geo(pd.DataFrame({"geometry": [b"\x01\x02", b"\x03"]})),
        "geometry column cannot be decoded",
        {},
    ),
    ("geoparquet-weight-zero", "x.parquet", lambda: geoparquet(gdf_with(weight=[0.0] * 20)), "is 0", {}),
    (
        "geoparquet-projected-unknown-crs",
        "x.parquet",
        lambda: geoparquet(
            points(crs=27700),
            lambda g: json.dumps({**g, "columns": {"geometry": {**g["columns"]["geometry"], "crs": None}}}).encode(),
        ),
        "without a CRS, and its coordinates are not degrees",
        {},
    ),
    # ---- GeoPackage
    ("gpkg-plain-sqlite", "x.gpkg", sqlite_plain, "without the GeoPackage table gpkg_contents", {}),
    ("gpkg-truncated", "x.gpkg", lambda: gpkg()[:3000], "is not a readable GeoPackage", {}),
    (
        "gpkg-garbage-after-header",
        "x.gpkg",
        lambda: b"SQLite format 3\x00" + bytes(range(256)) * 20,
        "is not a readable GeoPackage",
        {},
    ),
    (
        "gpkg-two-layers",
        "x.gpkg",
        lambda: gpkg({"alpha": [(gp_blob(shapely.Point(0, 51)), {})], "beta": [(gp_blob(shapely.Point(1, 52)), {})]}),
        "holds 2 layers ('alpha', 'beta'): choose one with layer=",
        {},
    ),
    ("gpkg-unknown-layer", "x.gpkg", gpkg, "no layer named 'nope'; its layers are: 'pts'", {"layer": "nope"}),
    (
        "gpkg-bogus-srs",
        "x.gpkg",
        lambda: gpkg(srs=(99999, "NONE", 99999, "nonsense")),
        "is missing from the file or not understood",
        {},
    ),
    (
        "gpkg-missing-srs",
        "x.gpkg",
        lambda: gpkg(srs=None, layer_srs=4326),
        "is missing from the file or not understood",
        {},
    ),
    (
        "gpkg-view-layer",
        "x.gpkg",
        lambda: gpkg(
            sql=[
                "CREATE VIEW v AS SELECT * FROM pts",
                "INSERT INTO gpkg_contents VALUES ('v', 'features', 'v')",
                "INSERT INTO gpkg_geometry_columns VALUES ('v', 'geom', 'POINT', 4326, 0, 0)",
            ]
        ),
        "not a plain table",
        {"layer": "v"},
    ),
    (
        "gpkg-recursive-view",
        "x.gpkg",
        lambda: gpkg(
            sql=[
                "DELETE FROM gpkg_contents",
                "DELETE FROM gpkg_geometry_columns",
                "CREATE VIEW v AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x AS fid, NULL AS geom FROM c",
                "INSERT INTO gpkg_contents VALUES ('v', 'features', 'v')",
                "INSERT INTO gpkg_geometry_columns VALUES ('v', 'geom', 'POINT', 4326, 0, 0)",
            ]
        ),
        "not a plain table",
        {},
    ),
    (
        "gpkg-attributes-only",
        "x.gpkg",
        lambda: gpkg(sql=["UPDATE gpkg_contents SET data_type = 'attributes'"]),
        "holds no vector (features) layer",
        {},
    ),
    ("gpkg-empty-layer", "x.gpkg", lambda: gpkg({"pts": []}), "holds no features", {}),
    ("gpkg-over-points-limit", "x.gpkg", gpkg, "20 features, over the limit of 5", {"max_points": 5}),
    (
        "gpkg-not-a-gp-blob",
        "x.gpkg",
        lambda: gpkg({"pts": [(shapely.to_wkb(shapely.Point(0, 51)), {}), (b"xx", {})]}),
        "does not hold a standard GeoPackage geometry",
        {},
    ),
    (
        "gpkg-bad-wkb",
        "x.gpkg",
        lambda: gpkg({"pts": [(b"GP\x00\x01" + struct.pack("<i", 4326) + b"\x01\x01\x00\x00", {})] * 2}),
        "is not valid",
        {},
    ),
    (
        "gpkg-extended-blob",
        "x.gpkg",
        lambda: gpkg({"pts": [(b"GP\x00\x21" + struct.pack("<i", 4326) + b"\x00" * 21, {})] * 2}),
        "standard GeoPackage geometry",
        {},
    ),
    (
        "gpkg-text-geometry",
        "x.gpkg",
        lambda: gpkg({"pts": [("POINT (0 51)", {}), ("POINT (1 52)", {})]}),
        "does not hold a standard GeoPackage geometry",
        {},
    ),
    (
        "gpkg-mixed-srs",
        "x.gpkg",
        lambda: gpkg({"pts": [(gp_blob(shapely.Point(0, 51)), {}), (gp_blob(shapely.Point(1, 52), srs_id=3857), {})]}),
        "differ from the layer's",
        {},
    ),
    (
        "gpkg-weight-all-zero",
        "x.gpkg",
        lambda: gpkg({"pts": [(gp_blob(shapely.Point(x, y)), {"weight": 0}) for x, y in zip(LON, LAT)]}),
        "is 0",
        {},
    ),
    (
        "gpkg-undefined-srs-projected",
        "x.gpkg",
        lambda: gpkg(
            {"pts": [(gp_blob(shapely.Point(530000 + i, 180000), -1), {}) for i in range(3)]}, srs=None, layer_srs=-1
        ),
        "without a CRS, and its coordinates are not degrees",
        {},
    ),
    ("gpkg-json-bytes", "x.gpkg", lambda: fc(good_features()), "JSON", {}),
    # ---- zipped Shapefile
    (
        "zip-vrt-as-shp",
        "x.zip",
        lambda: shapefile(replace={".shp": LOCAL_VRT}),
        ".shp member is not a Shapefile .shp",
        {},
    ),
    (
        "zip-vrt-as-shx",
        "x.zip",
        lambda: shapefile(replace={".shx": LOCAL_VRT}),
        ".shx member is not a Shapefile .shx",
        {},
    ),
    ("zip-truncated", "x.zip", lambda: shapefile()[:200], "not a valid zip archive", {}),
    ("zip-no-shp", "x.zip", lambda: zip_of({"readme.txt": b"hello"}), "holds no Shapefile", {}),
    ("zip-empty-archive", "x.zip", lambda: zip_of({}), "holds no Shapefile", {}),
    (
        "zip-only-macos-junk",
        "x.zip",
        lambda: zip_of({"__MACOSX/x.shp": b"1", ".hidden.shp": b"1"}),
        "holds no Shapefile",
        {},
    ),
    (
        "zip-two-shapefiles",
        "x.zip",
        lambda: zip_of({f"{s}.{e}": b"1" for s in "ab" for e in ("shp", "shx", "dbf")}),
        "several Shapefiles",
        {},
    ),
    ("zip-no-shx", "x.zip", lambda: shapefile(drop=(".shx",)), "lacks its .shx", {}),
    ("zip-no-dbf", "x.zip", lambda: shapefile(drop=(".dbf",)), "lacks its .dbf", {}),
    (
        "zip-traversal",
        "x.zip",
        lambda: shapefile(
            rename={"points.shp": "../points.shp", "points.shx": "../points.shx", "points.dbf": "../points.dbf"}
        ),
        "unsafe path",
        {},
    ),
    (
        "zip-absolute",
        "x.zip",
        lambda: zip_of({"/abs/p.shp": b"1", "/abs/p.shx": b"1", "/abs/p.dbf": b"1"}),
        "unsafe path",
        {},
    ),
    (
        "zip-drive-letter",
        "x.zip",
        lambda: zip_of({"C:/p.shp": b"1", "C:/p.shx": b"1", "C:/p.dbf": b"1"}),
        "unsafe path",
        {},
    ),
    ("zip-encrypted-flag", "x.zip", lambda: with_flag_bits(shapefile(), 1), "is encrypted", {}),
    (
        "zip-bzip2",
        "x.zip",
        lambda: zip_of(shapefile_parts(points()), zipfile.ZIP_BZIP2),
        "compression method other than deflate",
        {},
    ),
    (
        "zip-lzma",
        "x.zip",
        lambda: zip_of(shapefile_parts(points()), zipfile.ZIP_LZMA),
        "compression method other than deflate",
        {},
    ),
    ("zip-ratio-bomb", "x.zip", zip_ratio_bomb, "would expand", {}),
    (
        "zip-unpacked-over-limit",
        "x.zip",
        lambda: shapefile(replace={".dbf": bytes(100_000)}),
        "would unpack to 0.1 MB, over the limit of 20,000 bytes",
        {"max_bytes": 2000},
    ),
    ("zip-1001-entries", "x.zip", lambda: zip_of({f"f{i}.txt": b"" for i in range(1001)}), "holds 1,001 files", {}),
    (
        "zip-bogus-prj",
        "x.zip",
        lambda: shapefile(replace={".prj": b"GEOGCS[nonsense"}),
        ".prj file does not describe a CRS",
        {},
    ),
    ("zip-empty-prj", "x.zip", lambda: shapefile(replace={".prj": b""}), ".prj file does not describe a CRS", {}),
    (
        "zip-path-prj",
        "x.zip",
        lambda: shapefile(replace={".prj": b"+init=/etc/passwd:x"}),
        ".prj file names a file, grid or network resource",
        {},
    ),
    ("zip-no-prj-projected", "x.zip", lambda: shapefile(points(crs=27700), drop=(".prj",)), "no .prj", {}),
    ("zip-bad-dbf", "x.zip", lambda: shapefile(replace={".dbf": b"not a dbf"}), ".dbf member is not a dBASE table", {}),
    (
        "zip-garbage-shp-records",
        "x.zip",
        lambda: shapefile(replace={".shp": shapefile_parts(points())["points.shp"][:100] + bytes(range(256)) * 3}),
        "every feature has an empty geometry",
        {},
    ),
    (
        "zip-damaged-shx",
        "x.zip",
        lambda: shapefile(replace={".shx": shapefile_parts(points())["points.shx"][:100] + bytes(range(256)) * 3}),
        "the Shapefile inside cannot be read",
        {},
    ),
    ("zip-over-points-limit", "x.zip", shapefile, "20 features, over the limit of 5", {"max_points": 5}),
    ("zip-weight-negative", "x.zip", lambda: shapefile(gdf_with(weight=[-1.0] * 20)), "negative values", {}),
    ("zip-weight-all-zero", "x.zip", lambda: shapefile(gdf_with(weight=[0.0] * 20)), "is 0", {}),
    *_magic_cases(),
]


def parquet_with_geo(df) -> bytes:
    t = pa.Table.from_pandas(df, preserve_index=False)
    geo = {"version": "1.0.0", "primary_column": "geometry", "columns": {"geometry": {"encoding": "WKB"}}}
    t = t.replace_schema_metadata({**(t.schema.metadata or {}), b"geo": json.dumps(geo).encode()})
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


def _load(mode, tmp_path, filename, data, **kw):
    if mode == "bytes":
        return load_file(data, filename, **kw)
    path = tmp_path / "upload" / filename
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return load_file(path, **kw)


def test_the_table_has_distinct_cases():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 120


@pytest.mark.parametrize("mode", ["bytes", "path"])
@pytest.mark.parametrize("case_id, filename, make, fragment, kw", CASES, ids=[c[0] for c in CASES])
def test_bad_upload_gets_a_specific_message(case_id, filename, make, fragment, kw, mode, tmp_path, caplog):
    data = make()
    with caplog.at_level(logging.DEBUG), pytest.raises((DataError, ParamError)) as err:
        _load(mode, tmp_path, filename, data, **kw)
    msg = str(err.value)
    assert fragment in msg
    assert str(tmp_path) not in msg and tempfile.gettempdir() + "/" not in msg  # no server path
    assert "Traceback" not in msg
    assert not [r for r in caplog.records if r.exc_info], "the loader logged a traceback"


# ------------------------------------------------------------------ VRT: server files and URLs
class _Listener:
    def __init__(self):
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.path)
                body = b"lon,lat\n12.3456789,45.6789012\n12.4,45.7\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self):
                seen.append(self.path)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    with _Listener() as lst:
        yield lst


def _containers(vrt: bytes) -> dict:
    """The VRT under every name an upload may have."""
    return {
        "v.gpkg": vrt,
        "v.geojson": vrt,
        "v.json": vrt,
        "v.csv": vrt,
        "v.parquet": vrt,
        "v.zip": zip_of({"v.shp": vrt, "v.shx": vrt, "v.dbf": vrt}),
    }


@pytest.mark.parametrize("mode", ["bytes", "path"])
def test_vrt_uploads_never_read_server_files_or_urls(listener, tmp_path, mode):
    secret = tmp_path / "server_side" / "secret_places.csv"
    secret.parent.mkdir()
    secret.write_text("lon,lat,who\n12.3456789,45.6789012,TOPSECRET-ROW\n12.4567891,45.7890123,x\n")
    url = f"http://127.0.0.1:{listener.port}/x.csv"
    vrts = {
        "server-file": VRT.format(src=secret, layer="secret_places"),
        "server-file-csv-prefix": VRT.format(src=f"CSV:{secret}", layer="secret_places"),
        "http-url": VRT.format(src=url, layer="x"),
        "vsicurl": VRT.format(src=f"/vsicurl/{url}", layer="x"),
        "csv-vsicurl": VRT.format(src=f"CSV:/vsicurl/{url}", layer="x"),
    }
    for vrt_name, vrt in vrts.items():
        for filename, data in _containers(vrt.encode()).items():
            with pytest.raises(DataError) as err:
                _load(mode, tmp_path, filename, data)
            msg = str(err.value)
            assert "is not a readable" in msg, (vrt_name, filename, msg)
            assert ("XML" in msg) or ("not a Shapefile .shp" in msg), (vrt_name, filename, msg)
            for leaked in (str(secret), "secret_places", "TOPSECRET", "12.345", "45.678", "12.456", "45.789"):
                assert leaked not in msg, (vrt_name, filename, msg)
    assert listener.requests == []


def test_broken_files_never_echo_their_lines(tmp_path):
    marker = "MARKER-LINE-7f3a"
    broken_json = ('{"type": "FeatureCollection", "features": [\n{"type": "Feature", ' + marker + "}\n]}").encode()
    with pytest.raises(DataError) as err:
        load_file(broken_json, "b.geojson")
    assert marker not in str(err.value) and "not valid JSON (line 2" in str(err.value)
    # a GeoPackage whose layer name and tables are garbage past a valid header
    blob = gpkg()
    damaged = blob[:1024] + (marker.encode() * 400)[: len(blob) - 1024]
    with pytest.raises(DataError) as err:
        load_file(damaged, "d.gpkg")
    assert marker not in str(err.value) and "is not a readable GeoPackage" in str(err.value)


def test_a_url_in_a_geojson_crs_is_not_fetched(listener):
    url = f"http://127.0.0.1:{listener.port}/crs.json"
    for crs in ({"type": "link", "properties": {"href": url}}, {"type": "name", "properties": {"name": url}}):
        with pytest.raises(DataError, match="CRS"):
            load_file(fc(good_features(), crs=crs), "c.geojson")
    assert listener.requests == []


def test_shapefiles_are_read_with_the_shapefile_driver_only(monkeypatch):
    import fiona

    drivers = []
    real_open = fiona.open

    def spy(path, *args, **kw):
        drivers.append(kw.get("driver"))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(fiona, "open", spy)
    ds = load_file(shapefile(), "ok.zip")
    assert len(ds) == 20 and drivers and set(drivers) == {"ESRI Shapefile"}


# ------------------------------------------------------------------ bombs
def _fail(*args, **kwargs):
    raise AssertionError("the pre-check should have refused the file before this reader ran")


def test_parquet_row_bomb_is_refused_from_its_metadata(tmp_path, monkeypatch):
    path = tmp_path / "bomb.parquet"
    chunk = pa.table({"lat": pa.array(np.full(1_000_000, 51.5)), "lon": pa.array(np.full(1_000_000, -0.1))})
    with pq.ParquetWriter(path, chunk.schema) as w:
        for _ in range(25):
            w.write_table(chunk)
    assert path.stat().st_size < 1_000_000  # 25M rows in well under a megabyte
    monkeypatch.setattr(pq.ParquetFile, "read", _fail)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", _fail)
    monkeypatch.setattr(pq, "read_table", _fail)
    monkeypatch.setattr(gpd, "read_parquet", _fail)
    for load in (lambda: load_file(path), lambda: load_file(path.read_bytes(), "bomb.parquet")):
        with pytest.raises(DataError, match="25,000,000 rows, over the limit of 5,000,000 locations"):
            load()


def test_zip_bomb_is_refused_from_its_headers(tmp_path, monkeypatch):
    path = tmp_path / "bomb.zip"
    zero = bytes(1 << 24)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, data in shapefile_parts(points()).items():
            if not name.endswith(".dbf"):
                z.writestr(name, data)
        with z.open("points.dbf", "w", force_zip64=True) as f:
            for _ in range(3 * 64):  # 3 GiB of zeros
                f.write(zero)
    with zipfile.ZipFile(path) as z:
        assert z.getinfo("points.dbf").file_size == 3 << 30
    assert path.stat().st_size < 20 * (1 << 20)
    monkeypatch.setattr(files_shapefile, "_extract_member", _fail)
    for load in (lambda: load_file(path), lambda: load_file(path.read_bytes(), "bomb.zip")):
        with pytest.raises(DataError, match="would expand|would unpack"):
            load()
    # within the size limits the ratio alone refuses it
    with pytest.raises(DataError, match=r"would expand [\d,]+ times \(to 3,072.0 MB\)"):
        load_file(path, max_bytes=1 << 40)


def test_a_zip_member_larger_than_declared_is_cut_at_its_declared_size(monkeypatch):
    good = zip_of({**shapefile_parts(points()), "points.dbf": bytes(20 << 20)})
    # shrink the .dbf's declared size in the central directory: the data holds 20 MiB
    i = good.find(b"PK\x01\x02")
    out = bytearray(good)
    while i >= 0:
        name_len = struct.unpack("<H", out[i + 28 : i + 30])[0]
        if out[i + 46 : i + 46 + name_len] == b"points.dbf":
            out[i + 24 : i + 28] = struct.pack("<I", 1000)
        i = out.find(b"PK\x01\x02", i + 4)
    sizes = {}
    real = files_shapefile._extract_member

    def spy(z, info, dest, c):
        try:
            return real(z, info, dest, c)
        finally:
            sizes[info.filename] = dest.stat().st_size if dest.exists() else 0

    monkeypatch.setattr(files_shapefile, "_extract_member", spy)
    with pytest.raises(DataError, match="corrupt zip archive: 'points.dbf' fails its checksum"):
        load_file(bytes(out), "lying.zip")
    assert sizes["points.dbf"] <= 1000


# ------------------------------------------------------------------ limits from the environment
def test_limits_come_from_the_environment(monkeypatch):
    data = table(lat=LAT, lon=LON)
    assert len(load_file(data, "ok.csv")) == 20
    monkeypatch.setenv("HEATMAP_MAX_POINTS", "19")
    with pytest.raises(DataError, match="over the limit of 19 locations per file .HEATMAP_MAX_POINTS"):
        load_file(data, "ok.csv")
    with pytest.raises(DataError, match="over the limit of 19"):
        load_file(fc(good_features()), "ok.geojson")
    monkeypatch.delenv("HEATMAP_MAX_POINTS")
    monkeypatch.setenv("HEATMAP_MAX_UPLOAD_MB", "0.0001")
    with pytest.raises(DataError, match=r"over the limit of 104 bytes \(HEATMAP_MAX_UPLOAD_MB\)"):
        load_file(data, "ok.csv")
    assert upload_limits() == (104, DEFAULT_MAX_POINTS)
    for bad in ("abc", "-1", "0", "nan", "inf"):
        monkeypatch.setenv("HEATMAP_MAX_UPLOAD_MB", bad)
        with pytest.raises(ParamError, match="HEATMAP_MAX_UPLOAD_MB must be a positive number"):
            load_file(data, "ok.csv")


# ------------------------------------------------------------------ silently wrong inputs
def test_a_cluster_across_the_antimeridian_gets_a_small_region():
    lon = np.concatenate([np.linspace(179.95, 180.0, 10), np.linspace(-180.0, -179.95, 10)])
    lat = np.linspace(-17.0, -16.95, 20)  # Fiji
    ds = load_file(table(lat=lat, lon=lon), "fiji.csv")
    dom = ds.public_domain(8)
    assert dom.side < 12_000  # 0.1 degrees of longitude at 17S is 10.6 km (not 360 degrees)
    assert ds.meta.bbox[0] == pytest.approx(179.95) and ds.meta.bbox[2] == pytest.approx(180.05)
    assert dom.inside(ds.xy).all()
    assert any("cross the antimeridian" in n for n in ds.meta.extra["notes"])
    assert "cross the antimeridian" in ds.meta.description


def test_lon_extent_only_unwraps_a_narrow_crossing():
    assert lon_extent(np.array([179.9, -179.9])) == pytest.approx((179.9, 180.1))
    assert lon_extent(np.array([-10.0, 20.0])) == (-10.0, 20.0)
    # spread round the world: no interval under 180 degrees holds them, so (min, max) stays
    assert lon_extent(np.array([-170.0, -60.0, 50.0, 170.0])) == (-170.0, 170.0)


def test_swapped_but_valid_coordinates_get_a_note_with_the_centre():
    london = load_file(table(lat=LAT, lon=LON), "london.csv")
    note = [n for n in london.meta.extra["notes"] if "swap" in n]
    assert len(note) == 1 and "51.5250°N, 0.1100°W" in note[0] and "'lat' (latitude)" in note[0]
    # Tokyo's longitudes (139-140) cannot be latitudes: no note
    tokyo = load_file(table(lat=np.linspace(35.6, 35.7, 5), lon=np.linspace(139.6, 139.8, 5)), "tokyo.csv")
    assert not [n for n in tokyo.meta.extra["notes"] if "swap" in n]
    # GeoJSON: the same rule on x/y
    gj = load_file(fc(good_features()), "london.geojson")
    assert any("swap" in n and "x read as longitude" in n for n in gj.meta.extra["notes"])
    # converted from a projected CRS: no note (the CRS fixes the axes)
    bng = load_file(points(crs=27700).to_json(to_wgs84=False).encode(), "bng.geojson")
    assert not [n for n in bng.meta.extra["notes"] if "swap" in n]


def test_synonym_columns_are_named_in_a_note():
    ds = load_file(table(lat=LAT, lon=LON, y=LAT + 1), "xy.csv")
    np.testing.assert_allclose(ds.lonlat[:, 1], LAT)
    assert any("'lat' was used as the latitude; 'y' also looked like one" in n for n in ds.meta.extra["notes"])


def test_a_geopackage_layer_can_be_chosen():
    two = gpkg(
        {
            "alpha": [(gp_blob(shapely.Point(x, y)), {}) for x, y in zip(LON, LAT)],
            "beta": [(gp_blob(shapely.Point(x + 1, y)), {}) for x, y in zip(LON, LAT)],
        }
    )
    ds = load_file(two, "two.gpkg", layer="beta")
    np.testing.assert_allclose(ds.lonlat[:, 0], LON + 1)


def test_a_geopackage_written_by_gdal_and_its_crs(tmp_path):
    path = tmp_path / "bng.gpkg"
    points(crs=27700, value=np.arange(20.0)).to_file(path, driver="GPKG", layer="pts")
    ds = load_file(path)
    np.testing.assert_allclose(ds.lonlat, np.column_stack([LON, LAT]), atol=1e-6)
    np.testing.assert_allclose(ds.value, np.arange(20.0))


def test_names_in_messages_are_short_and_plain():
    long_name = "n" * 300 + ".xlsx"
    with pytest.raises(DataError) as err:
        load_file(b"x", long_name)
    shown = str(err.value).split(":")[0]
    assert len(shown) <= NAME_CHARS and "…" in shown and shown.endswith(".xlsx")
    with pytest.raises(DataError) as err:
        load_file(b"x", "a\x1b[31mred\nb.xlsx")
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(DataError) as err:
        load_file(b"a,b\n1,2\n3,4\n", "x.csv", columns={"lat": "c" * 500, "lon": "b"})
    assert len(str(err.value)) < 300


def test_missing_path_on_the_command_line(tmp_path):
    with pytest.raises(DataError, match="no file at"):
        load_file(tmp_path / "nope.csv")
    with pytest.raises(ParamError, match="file name"):
        load_file(b"lat,lon\n")


def test_make_dataset_refuses_bad_weights_from_any_source():
    from engine.data.dataset import DatasetMeta, make_dataset

    meta = DatasetMeta(name="t", source="t")
    for weight, match in (
        ([0.0] * 20, "every weight is 0"),
        ([np.inf] + [1.0] * 19, "infinite"),
        ([np.nan] * 20, "missing"),
    ):
        with pytest.raises(DataError, match=match):
            make_dataset(LON, LAT, meta, weight=np.array(weight))
    with pytest.raises(DataError, match="less than a metre"):
        make_dataset(np.array([0.0, 1e-9]), np.array([51.0, 51.0 + 1e-9]), meta)
