"""The user's own files: every format, CRS handling, and every kind of bad input."""

from __future__ import annotations

import io
import json
import zipfile

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely
from pyproj import Transformer

from engine.core.errors import DataError, ParamError
from engine.data import load, sources
from engine.data.files import load_file


@pytest.fixture
def pts(rng):
    n = 60
    return pd.DataFrame(
        {
            "lat": 51.50 + 0.05 * rng.random(n),
            "lon": -0.15 + 0.08 * rng.random(n),
            "user": rng.integers(0, 12, n),
            "value": rng.normal(40, 10, n),
            "flag": rng.integers(0, 2, n),
        }
    )


def _csv(df, **kw) -> bytes:
    return df.to_csv(index=False, **kw).encode()


def _bng(df):
    t = Transformer.from_crs("EPSG:4326", "EPSG:27700", always_xy=True)
    return t.transform(df["lon"].to_numpy(), df["lat"].to_numpy())


def _zip(files: dict[str, bytes]) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return b.getvalue()


def _shapefile(gdf, tmp_path, drop=(), sub="shp") -> bytes:
    d = tmp_path / sub
    d.mkdir(exist_ok=True)
    gdf.to_file(d / "points.shp")
    return _zip({p.name: p.read_bytes() for p in d.iterdir() if p.suffix not in drop})


# ------------------------------------------------------------------ good files
def test_csv_columns_found_by_common_names(pts):
    df = pts.rename(columns={"lat": "Latitude", "lon": "LNG", "user": "user_id"})
    ds = load_file(_csv(df), "mine.csv")
    np.testing.assert_allclose(ds.lonlat, df[["LNG", "Latitude"]].to_numpy())
    assert ds.n_users == df["user_id"].nunique() and ds.value is not None and ds.flag is not None
    assert ds.meta.bbox_from_data and ds.meta.source == "file:mine.csv"
    # semicolons and x/y names
    ds2 = load_file(_csv(pts.rename(columns={"lat": "y", "lon": "x"})[["x", "y"]], sep=";"), "b.csv")
    np.testing.assert_allclose(ds2.lonlat, pts[["lon", "lat"]].to_numpy())
    assert any("x/y" in n for n in ds2.meta.extra["notes"])


def test_csv_explicit_mapping_and_yes_no_flag(pts, tmp_path):
    df = pd.DataFrame(
        {
            "where_n": pts["lat"],
            "where_e": pts["lon"],
            "who": pts["user"],
            "age": pts["value"],
            "pos": np.where(pts["flag"] == 1, "yes", "no"),
        }
    )
    path = tmp_path / "mapped.csv"
    path.write_bytes(_csv(df))
    ds = load_file(path, columns={"lat": "where_n", "lon": "where_e", "user_id": "who", "value": "age", "flag": "pos"})
    np.testing.assert_array_equal(ds.flag, pts["flag"].to_numpy() == 1)
    np.testing.assert_allclose(ds.value, pts["value"])
    with pytest.raises(DataError, match="'nope' is not in the file"):
        load_file(path, columns={"lat": "nope", "lon": "where_e"})
    with pytest.raises(ParamError, match="unknown column role"):
        load_file(path, columns={"latitude": "where_n"})


def test_csv_in_a_projected_crs_with_the_crs_given(pts):
    e, n = _bng(pts)
    ds = load_file(_csv(pd.DataFrame({"x": e, "y": n})), "bng.csv", crs="EPSG:27700")
    np.testing.assert_allclose(ds.lonlat, pts[["lon", "lat"]].to_numpy(), atol=1e-6)
    assert any("British National Grid" in note for note in ds.meta.extra["notes"])


def test_geojson_geoparquet_shapefile_in_any_crs(pts, tmp_path):
    g = gpd.GeoDataFrame(pts[["value", "flag", "user"]], geometry=gpd.points_from_xy(pts["lon"], pts["lat"]), crs=4326)
    want = pts[["lon", "lat"]].to_numpy()
    ds = load_file(g.to_crs(3857).to_json(to_wgs84=False).encode(), "webmerc.geojson")
    np.testing.assert_allclose(ds.lonlat, want, atol=1e-7)
    assert ds.value is not None and ds.flag is not None and ds.user_id is not None
    buf = io.BytesIO()
    g.to_crs(27700).to_parquet(buf)
    np.testing.assert_allclose(load_file(buf.getvalue(), "bng.parquet").lonlat, want, atol=1e-6)
    shp = load_file(_shapefile(g.to_crs(32630), tmp_path), "utm.zip")
    np.testing.assert_allclose(shp.lonlat, want, atol=1e-6)
    gpkg = tmp_path / "p.gpkg"
    g.to_file(gpkg, driver="GPKG")
    assert len(load_file(gpkg)) == len(pts)


def test_geojson_without_crs_assumes_wgs84_and_says_so(pts):
    g = gpd.GeoDataFrame(geometry=gpd.points_from_xy(pts["lon"], pts["lat"]), crs=4326)
    text = g.to_json()
    assert '"crs"' not in text
    ds = load_file(text.encode(), "plain.geojson")
    assert any("RFC 7946" in n for n in ds.meta.extra["notes"]) and "RFC 7946" in ds.meta.description


def test_polygons_become_centroids_or_are_rejected():
    boxes = [shapely.box(-0.10, 51.50, -0.09, 51.51), shapely.box(-0.05, 51.52, -0.04, 51.53)]
    g = gpd.GeoDataFrame({"value": [1.0, 2.0]}, geometry=boxes, crs=4326)
    data = g.to_json().encode()
    ds = load_file(data, "areas.geojson")
    np.testing.assert_allclose(ds.lonlat, [[-0.095, 51.505], [-0.045, 51.525]], atol=1e-4)
    assert any("centroids" in n for n in ds.meta.extra["notes"])
    with pytest.raises(DataError, match="non-point feature"):
        load_file(data, "areas.geojson", polygons="reject")
    mp = gpd.GeoDataFrame(
        geometry=[shapely.MultiPoint([(-0.1, 51.5), (-0.09, 51.51)]), shapely.Point(0, 51.6)], crs=4326
    )
    assert len(load_file(mp.to_json().encode(), "mp.geojson")) == 3


def test_registered_file_source(pts, tmp_path):
    path = tmp_path / "cli.csv"
    path.write_bytes(_csv(pts.rename(columns={"value": "age"})))
    assert sources()["file"].kind == "file"
    ds = load("file", path=str(path), value="age")
    assert len(ds) == len(pts) and ds.meta.value_name == "age"
    with pytest.raises(ParamError):
        load("file")


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "content, match",
    [
        (b"lat,lon\n51.5,-0.1\nabc,-0.2\n", "non-numeric value 'abc' at line 3"),
        (b"lat,lon\n51.5,-0.1\n,-0.2\n51.6,-0.3\n", "have no latitude .* line 3"),
        (b"lat,lon\n51.5,-0.1\n95,-0.2\n", "latitude 95 at line 3 is beyond"),
        (b"lat,lon\n120,51.5\n130,51.6\n", "look swapped"),
        (b"lat,lon\n51.5,-0.1\n", "single location"),
        (b"lat,lon\n51.5,-0.1\n51.5,-0.1\n", "same point"),
        (b"lat,lon\n", "no data rows"),
        (b"a,b\n1,2\n3,4\n", "could not find the latitude and longitude"),
        (b"\n\n", "empty"),
    ],
)
def test_bad_csv_gets_a_specific_message(content, match):
    with pytest.raises(DataError, match=match):
        load_file(content, "bad.csv")


def test_projected_csv_mistaken_for_degrees_and_mixed_units(pts):
    e, n = _bng(pts)
    with pytest.raises(DataError, match="projected CRS.*EPSG:27700"):
        load_file(_csv(pd.DataFrame({"x": e, "y": n})), "bng.csv")
    mixed = pd.DataFrame({"lat": [*pts["lat"][:5], n[0]], "lon": [*pts["lon"][:5], e[0]]})
    with pytest.raises(DataError, match="mix units.*line 7"):
        load_file(_csv(mixed), "mixed.csv")


def test_missing_crs_in_shapefile_and_geojson(pts, tmp_path):
    e, n = _bng(pts)
    g = gpd.GeoDataFrame(geometry=gpd.points_from_xy(e, n), crs=27700)
    with pytest.raises(DataError, match=r"no \.prj.*not degrees"):
        load_file(_shapefile(g, tmp_path, drop=(".prj",)), "noprj.zip")
    ds = load_file(_shapefile(g, tmp_path, drop=(".prj",)), "noprj.zip", crs="EPSG:27700")
    np.testing.assert_allclose(ds.lonlat, pts[["lon", "lat"]].to_numpy(), atol=1e-6)
    gj = json.loads(g.to_json(to_wgs84=False))
    gj.pop("crs", None)
    with pytest.raises(DataError, match='GeoJSON without a "crs" member'):
        load_file(json.dumps(gj).encode(), "noproj.geojson")
    wgs = gpd.GeoDataFrame(geometry=gpd.points_from_xy(pts["lon"], pts["lat"]), crs=4326)
    ds = load_file(_shapefile(wgs, tmp_path, drop=(".prj",), sub="wgs"), "degrees.zip")
    assert any("WGS84 was assumed" in n for n in ds.meta.extra["notes"])
    with pytest.raises(DataError, match="declares the CRS"):
        load_file(g.to_json(to_wgs84=False).encode(), "both.geojson", crs="EPSG:3857")


def test_bad_archives_and_types(pts, tmp_path):
    g = gpd.GeoDataFrame(geometry=gpd.points_from_xy(pts["lon"], pts["lat"]), crs=4326)
    good = _shapefile(g, tmp_path)
    with pytest.raises(DataError, match="not a valid zip"):
        load_file(good[:200], "cut.zip")
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        info = max(z.infolist(), key=lambda i: i.compress_size)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    flipped = bytearray(good)
    flipped[start + info.compress_size // 2] ^= 0xFF  # in the middle of a member's compressed data
    with pytest.raises(DataError, match="corrupt zip"):
        load_file(bytes(flipped), "flipped.zip")
    with pytest.raises(DataError, match="holds no Shapefile"):
        load_file(_zip({"readme.txt": b"hello"}), "nothing.zip")
    with pytest.raises(DataError, match="lacks its .shx"):
        load_file(_shapefile(g, tmp_path, drop=(".shx",), sub="noshx"), "noshx.zip")
    two = _zip({"a.shp": b"1", "a.shx": b"1", "a.dbf": b"1", "b.shp": b"1", "b.shx": b"1", "b.dbf": b"1"})
    with pytest.raises(DataError, match="several Shapefiles"):
        load_file(two, "two.zip")
    with pytest.raises(DataError, match="unsupported file type '.xlsx'"):
        load_file(b"PK", "sheet.xlsx")
    with pytest.raises(DataError, match="as one .zip"):
        load_file(b"x", "points.shp")
    with pytest.raises(DataError, match="not a readable GeoJSON"):
        load_file(b'{"type": "FeatureCollection", "features": [', "broken.geojson")
    with pytest.raises(DataError, match="not a readable GeoParquet"):
        load_file(b"PAR1 not really parquet", "broken.parquet")


def test_size_limit_and_empty_geometries(pts):
    data = _csv(pts)
    with pytest.raises(DataError, match="over the limit of 1,000 bytes"):
        load_file(data, "big.csv", max_bytes=1000)
    g = gpd.GeoDataFrame(geometry=[None, None], crs=4326)
    with pytest.raises(DataError, match="empty geometry"):
        load_file(g.to_json().encode(), "empty.geojson")
    some = gpd.GeoDataFrame({"value": [1.0, 2.0, 3.0]}, geometry=[None, shapely.Point(0, 51), shapely.Point(1, 52)])
    ds = load_file(some.set_crs(4326).to_json().encode(), "some.geojson")
    assert len(ds) == 2 and any("without geometry were dropped" in n for n in ds.meta.extra["notes"])
    with pytest.raises(ParamError, match="file name"):
        load_file(data)
