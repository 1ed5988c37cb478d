"""Coordinates people actually have: a file on a local grid in kilometres (Burkitt's lymphoma cases in West Nile,
Uganda: X 255-335, Y 247-399, no CRS) is told its values are not degrees and asked for its CRS, then read with the
CRS given (an EPSG code, or a PROJ string for a grid no code names); a Shapefile of regions without its .prj is
read with the CRS given; a PROJ string that could name a file is refused. On the command line, ``--data-opt
crs=`` and ``--regions-crs`` do the same, and the location check (points at sea, longitude and latitude swapped)
is printed on stderr as the dashboard shows it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from engine.core.errors import EngineError
from engine.data.files import load_file
from engine.data.files.polygons import load_polygons
from engine.run.bookkeeping import _ledger as budget_store
from tests.support.files import UTM36_KM, burkitt_csv, km_squares_shapefile

ARUA = (30.91, 3.02)  # lon, lat of Arua, the West Nile district's town


@pytest.fixture(autouse=True)
def ledger_db(tmp_path, monkeypatch):
    monkeypatch.setenv(budget_store.ENV, str(tmp_path / "ledger.sqlite3"))


def test_a_local_grid_is_told_it_is_not_degrees_and_asked_for_its_crs():
    with pytest.raises(EngineError) as exc:
        load_file(burkitt_csv(), "burkitt.csv")
    msg = str(exc.value)
    assert "not longitude and latitude in degrees" in msg and "mix units" not in msg
    assert "x from 255 to 335" in msg and "kilometres" in msg  # what was read, and what it looks like
    assert "CRS field" in msg and "--data-opt crs=" in msg and "PROJ string" in msg  # where and how to give it
    assert "cannot be placed on a map" in msg  # a grid with no known place on the Earth, said honestly


def test_the_local_grid_is_read_with_the_crs_given_as_a_proj_string():
    ds = load_file(burkitt_csv(), "burkitt.csv", crs=UTM36_KM)
    lon, lat = ds.lonlat[:, 0], ds.lonlat[:, 1]
    # UTM 36N in km puts the grid's corners at 30.8-31.5° E, 2.2-3.6° N: West Nile, around Arua
    assert 30.7 < lon.min() and lon.max() < 31.6 and 2.2 < lat.min() and lat.max() < 3.65
    assert abs(np.median(lon) - ARUA[0]) < 0.4 and abs(np.median(lat) - ARUA[1]) < 0.5
    assert any(UTM36_KM in n for n in ds.meta.extra["notes"])  # the note names the CRS as given


def test_an_epsg_code_reads_metres_and_the_location_check_passes_them():
    from pyproj import Transformer

    from engine.data.geography import file_warning

    km = np.loadtxt(io.BytesIO(burkitt_csv()), delimiter=",", skiprows=1)
    csv = "x,y\n" + "\n".join(f"{a * 1000:.1f},{b * 1000:.1f}" for a, b in km) + "\n"
    ds = load_file(csv.encode(), "burkitt_m.csv", crs="EPSG:32636")
    lon, lat = Transformer.from_crs("EPSG:32636", "EPSG:4326", always_xy=True).transform(
        km[:, 0] * 1000, km[:, 1] * 1000
    )
    np.testing.assert_allclose(ds.lonlat, np.column_stack([lon, lat]), atol=1e-9)
    assert file_warning(ds) is None  # on land, near towns: nothing to warn of


@pytest.mark.parametrize(
    "crs",
    [
        "+proj=utm +zone=36 +nadgrids=/etc/passwd",
        "+proj=hgridshift +grids=/tmp/x.tif",
        "+proj=pipeline +step +proj=utm +zone=36",
        "+init=epsg:32636",
        "+proj=defmodel +model=/tmp/m.json",
        "+proj=utm +zone=36 +geoidgrids=http://example.com/g.tif",
    ],
)
def test_a_proj_string_that_could_name_a_file_is_refused_before_proj_reads_it(crs):
    with pytest.raises(EngineError, match="never a file, grid or network resource"):
        load_file(burkitt_csv(), "burkitt.csv", crs=crs)


def test_a_shapefile_of_regions_without_its_prj_is_read_with_the_crs_given(tmp_path):
    data = km_squares_shapefile(tmp_path)
    with pytest.raises(EngineError, match="no .prj.*regions' CRS field.*--regions-crs"):
        load_polygons(data, "districts.zip")
    pf = load_polygons(data, "districts.zip", crs=UTM36_KM)
    assert pf.ids == ("SW", "NW", "SE", "NE")
    west, south, east, north = np.array([g.bounds for g in pf.geoms]).T
    assert 30.7 < west.min() and east.max() < 31.6 and 2.1 < south.min() and north.max() < 3.65
    assert any("declares no CRS" in n and UTM36_KM in n for n in pf.notes)


@pytest.mark.parametrize("ext", ["zip", "parquet", "geojson", "gpkg"])
def test_one_column_may_give_both_the_regions_ids_and_their_names(tmp_path, ext):
    """A file with one attribute column: the dashboard's pickers then name it for both: ids and names from the one column."""
    import geopandas as gpd
    import shapely

    g = gpd.GeoDataFrame({"code": ["a", "b"]}, geometry=[shapely.box(0, 0, 1, 1), shapely.box(1, 0, 2, 1)], crs=4326)
    if ext == "zip":
        g.to_file(tmp_path / "r.shp")
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for p in tmp_path.glob("r.*"):
                z.write(p, p.name)
        data = buf.getvalue()
    elif ext == "parquet":
        buf = io.BytesIO()
        g.to_parquet(buf)
        data = buf.getvalue()
    elif ext == "geojson":
        data = g.to_json().encode()
    else:
        g.to_file(tmp_path / "r.gpkg")
        data = (tmp_path / "r.gpkg").read_bytes()
    pf = load_polygons(data, f"r.{ext}", id_column="code", name_column="code")
    assert pf.ids == ("a", "b") and pf.names == ("a", "b")


# ------------------------------------------------------------------ the command line
def cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=600)


def test_the_command_line_reads_the_local_grid_and_its_regions_with_their_crs(tmp_path):
    points = tmp_path / "burkitt.csv"
    points.write_bytes(burkitt_csv())
    regions = tmp_path / "districts.zip"
    regions.write_bytes(km_squares_shapefile(tmp_path))
    base = ["run", "--dataset", "file", "--data-opt", f"path={points}", "--depth", "4", "--seed", "1"]
    no_crs = cli(*base)
    assert no_crs.returncode == 2 and "not longitude and latitude in degrees" in no_crs.stderr
    with_crs = [*base, "--data-opt", f"crs={UTM36_KM}", "--regions", f"{regions}:code"]
    no_regions_crs = cli(*with_crs)
    assert no_regions_crs.returncode == 2 and "--regions-crs" in no_regions_crs.stderr
    ok = cli(*with_crs, "--regions-crs", UTM36_KM)
    assert ok.returncode == 0, ok.stderr
    rows = json.loads(ok.stdout)["regions"]
    assert [r["id"] for r in rows] == ["SW", "NW", "SE", "NE"]
    assert sum(r["true"] for r in rows) == 300  # the districts tile the grid: every case is in one
    assert "warning" not in ok.stderr  # West Nile is on land, near towns


def test_laplace_over_regions_counts_the_regions_read_with_their_crs(tmp_path):
    points = tmp_path / "burkitt.csv"
    points.write_bytes(burkitt_csv())
    regions = tmp_path / "districts.zip"
    regions.write_bytes(km_squares_shapefile(tmp_path))
    out = tmp_path / "rel"
    p = cli(
        "release", "--dataset", "file", "--data-opt", f"path={points}", "--data-opt", f"crs={UTM36_KM}",
        "--depth", "4", "--mechanism", "laplace_regions", "--regions", f"{regions}:code",
        "--regions-crs", UTM36_KM, "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["mechanism_params"]["regions_crs"] == UTM36_KM
    # the four districts were counted, each with its noisy count
    table = (out / "regions.csv").read_text()
    assert all(f"\n{code}," in table.replace("\r", "") for code in ("SW", "NW", "SE", "NE"))


def test_a_bad_regions_crs_is_refused_before_any_work():
    p = cli("run", "--regions", "h3:7", "--regions-crs", "+proj=utm +nadgrids=/etc/passwd")
    assert p.returncode == 2 and "never a file" in p.stderr


def swapped_berlin(tmp_path):
    pts = np.random.default_rng(4).normal(0, 0.01, (400, 2)) + (13.41, 52.53)
    path = tmp_path / "swapped.csv"
    path.write_text("lon,lat\n" + "\n".join(f"{lat:.6f},{lon:.6f}" for lon, lat in pts) + "\n")
    return path


def test_the_command_line_warns_of_swapped_columns_and_says_how_to_exchange_them(tmp_path):
    p = cli("run", "--dataset", "file", "--data-opt", f"path={swapped_berlin(tmp_path)}", "--depth", "4", "--seed", "1")
    assert p.returncode == 0, p.stderr
    warning = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "look swapped" in warning[0] and "fall at sea" in warning[0]
    assert "--data-opt lon=lat --data-opt lat=lon" in warning[0]
    fixed = cli(
        "run", "--dataset", "file", "--data-opt", f"path={swapped_berlin(tmp_path)}", "--data-opt", "lon=lat",
        "--data-opt", "lat=lon", "--depth", "4", "--seed", "1",
    )  # fmt: skip
    assert fixed.returncode == 0 and "warning:" not in fixed.stderr


def test_the_command_line_warns_of_points_at_sea_once_per_sweep(tmp_path):
    pts = np.random.default_rng(5).normal(0, 0.05, (400, 2)) + (-30.0, 40.0)  # the mid-Atlantic
    path = tmp_path / "sea.csv"
    path.write_text("lon,lat\n" + "\n".join(f"{a:.6f},{b:.6f}" for a, b in pts) + "\n")
    p = cli(
        "sweep", "--dataset", "file", "--data-opt", f"path={path}", "--mechanisms", "identity,uniform",
        "--epsilons", "1", "--seeds", "1", "--depth", "3",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    warning = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "fall at sea" in warning[0] and "--data-opt crs=" in warning[0]
