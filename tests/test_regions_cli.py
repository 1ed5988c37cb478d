"""``--regions`` on the command line and the release files that carry margins: the JSON rows and the CSV
of ``run`` (the true count in Evaluate only), and a release folder read back (regions as CSV and
GeoPackage, the grid as a two-band GeoTIFF and a GeoParquet, the manifest's margin basis)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from engine.bench.regions import voronoi_geojson
from engine.regions.regional_table import ABOUT
from engine.run.bookkeeping import _ledger as budget_store

SYNTH = ["--dataset", "synthetic:monocentric", "--data-opt", "n=3000", "--data-opt", "seed=4", "--depth", "5"]


@pytest.fixture(autouse=True)
def ledger_db(tmp_path, monkeypatch):
    monkeypatch.setenv(budget_store.ENV, str(tmp_path / "ledger.sqlite3"))


def cli(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def run_json():
    return json.loads(cli("run", *SYNTH, "--mechanism", "privtree", "--seed", "3", "--regions", "h3:7").stdout)


def test_run_json_lists_the_regions_with_margins_and_the_truth(run_json):
    rows = run_json["regions"]
    assert len(rows) == run_json["regions_info"]["count"] > 10
    assert {tuple(r) for r in rows} == {("id", "name", "estimate", "margin95", "true")}
    assert all(r["margin95"] is not None and r["margin95"] > 0 for r in rows)
    # the regions tile the map, so their estimates and truths add up to the map's
    assert sum(r["true"] for r in rows) == run_json["n_points"]
    assert "evaluation only" in run_json["regions_info"]["true"]
    assert "noise" in run_json["regions_info"]["margin_basis"].lower()


def test_run_csv_is_one_row_per_region_and_null_margins_are_empty(tmp_path):
    out = cli("run", *SYNTH, "--mechanism", "ag", "--seed", "3", "--regions", "grid", "--format", "csv").stdout
    df = pd.read_csv(io.StringIO(out), comment="#")
    assert list(df.columns) == ["id", "name", "estimate", "margin95", "true", *ABOUT]
    assert len(df) == 32 * 32 and df["margin95"].isna().all()  # AG has no closed form


def test_run_with_a_polygon_file_and_its_columns(tmp_path):
    path = voronoi_geojson(tmp_path / "d.geojson", n=8)
    # the synthetic city is not where the bench's districts are: a clear error, no traceback
    p = cli("run", *SYNTH, "--seed", "1", "--regions", f"{path}:code", check=False)
    assert p.returncode == 2 and p.stderr.startswith("error: none of the regions")
    p = cli("run", *SYNTH, "--seed", "1", "--regions", "h3:99", check=False)
    assert p.returncode == 2 and "15" in p.stderr


def test_laplace_over_regions_counts_the_regions_it_reports(run_json):
    doc = json.loads(cli("run", *SYNTH, "--mechanism", "laplace_regions", "--seed", "3", "--regions", "h3:7").stdout)
    margins = np.array([r["margin95"] for r in doc["regions"]])
    assert np.allclose(margins, np.log(20.0))  # each region one Laplace(1/eps) draw: ln(20)/eps
    assert [r["id"] for r in doc["regions"]] == [r["id"] for r in run_json["regions"]]


def test_release_with_regions_writes_files_that_read_back(tmp_path):
    import geopandas as gpd
    import rasterio

    out = tmp_path / "rel"
    cli("release", *SYNTH, "--mechanism", "ug", "--epsilon", "1", "--regions", "h3:7", "--out", str(out))
    man = json.loads((out / "manifest.json").read_text())
    assert set(man["files"]) == {"geotiff", "geoparquet", "csv", "regions_csv", "regions_gpkg"}
    assert "Laplace" in man["margins"]["cells"] and man["regions"]["kind"] == "h3"
    csv = pd.read_csv(out / "regions.csv")
    assert list(csv.columns) == ["id", "name", "estimate", "margin95", *ABOUT]  # no truth in a release
    # every row says what it is: a reader of one figure has the release's epsilon, mechanism, date, unit, basis
    about = {"unit": "records", "recorded": "locations", "epsilon": 1.0, "mechanism": "ug"}
    about |= {"date": man["created_utc"][:10], "margin_basis": man["regions"]["margin_basis"]}
    assert all((csv[k] == v).all() for k, v in about.items()), csv.iloc[0]
    gpkg = gpd.read_file(out / "regions.gpkg")
    assert list(gpkg["id"]) == list(csv["id"]) and np.allclose(gpkg["margin95"], csv["margin95"])
    assert all((gpkg[k] == v).all() for k, v in about.items())
    assert gpkg.crs.to_epsg() == 4326 and (gpkg.geometry.geom_type == "Polygon").all()
    with rasterio.open(out / "heatmap.tif") as r:
        assert r.count == 2 and "margin" in r.descriptions[1]
        est, margin = r.read(1), r.read(2)
    assert (margin > 0).all() and np.isclose(csv["estimate"].sum(), est.sum(), rtol=1e-4)
    grid = gpd.read_parquet(out / "heatmap.parquet")
    assert {"estimate", "margin95", "ix", "iy"} <= set(grid.columns) and len(grid) == np.count_nonzero(est)


def test_release_of_a_mechanism_without_margins_says_so(tmp_path):
    out = tmp_path / "rel"
    cli("release", *SYNTH, "--mechanism", "ag", "--regions", "grid", "--out", str(out), "--format", "geotiff")
    man = json.loads((out / "manifest.json").read_text())
    assert man["margins"]["cells"].startswith("no margin")
    assert pd.read_csv(out / "regions.csv")["margin95"].isna().all()


def test_release_of_an_attribute_mean_with_regions_is_refused_before_it_spends(tmp_path):
    out = tmp_path / "rel"
    p = cli("release", *SYNTH, "--mechanism", "bitpush_mean_ldp", "--regions", "h3:7", "--out", str(out), check=False)
    assert p.returncode == 2 and "attribute mean" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()  # no half-written release
    assert (
        budget_store.BudgetStore().spent(
            budget_store.fingerprint_source("synthetic:monocentric", {"n": 3000, "seed": 4})
        )
        == 0
    )
