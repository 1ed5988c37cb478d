"""How a release names its inputs: a public polygon file by its base name and SHA-256, never its path; the
analyst's private file by neither its name, nor its path, nor a hash (a hash would confirm a candidate copy)."""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
import zipfile

import pytest

from engine.__main__ import main
from engine.data.region_geometry import public_spec
from engine.run.execution import OWN_FILE
from tests.support import release_scan as R
from tests.support.app import click_run, open_app, upload


@pytest.fixture
def inputs(tmp_path):
    csv = R.private_city(tmp_path / "srv-private-qzx7", "clinic_visits_qzx.csv", people=300)
    regions = R.region_file(tmp_path / "srv-public-qzx7", "barrios_qzx.geojson")
    return csv, regions, hashlib.sha256(regions.read_bytes()).hexdigest()


def test_public_spec_names_a_polygon_file_by_base_name_and_hash():
    digest = "ab" * 32
    assert public_spec("/srv/data/districts.geojson:code", digest) == f"districts.geojson:code (sha256:{digest})"
    assert public_spec("districts.geojson", digest) == f"districts.geojson (sha256:{digest})"
    assert public_spec("grid") == "grid" and public_spec("h3:7") == "h3:7" and public_spec("h3:auto") == "h3:auto"


def test_cli_release_names_the_region_file_by_hash_and_the_private_file_not_at_all(inputs, tmp_path, capsys):
    csv, regions, digest = inputs
    out = tmp_path / "release"
    argv = ["release", "--dataset", "file", "--data-opt", f"path={csv}", "--mechanism", "laplace_regions"]
    argv += ["--depth", "5", "--out", str(out), "--regions", f"{regions}:code", "--region-names", "name"]
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads((out / "manifest.json").read_text())
    named = f"barrios_qzx.geojson:code (sha256:{digest})"
    assert doc["parameters"]["mechanism_params"]["regions"] == named  # the parameter, as the mechanism counted it
    assert doc["regions"]["spec"] == named  # the regional table's description
    assert named in doc["ledger"]["entries"][0]["note"]  # the ledger's note of the noise per region
    assert doc["dataset"]["name"] == OWN_FILE and doc["dataset"]["source"] == "file"
    text = (out / "manifest.json").read_text()
    for private in (str(regions.parent), str(csv.parent), csv.name, csv.stem, str(tmp_path)):
        assert private not in text, private
    assert re.fullmatch(r"release/[0-9a-f]{32}", doc["release_key"])  # by chance alone, not from the path


def test_release_keys_do_not_depend_on_the_configuration(inputs, tmp_path, capsys):
    """The same release of the same file, read from two folders: the keys share nothing (a key hashed from the
    configuration would confirm a guessed path)."""
    csv, _, _ = inputs
    copy = tmp_path / "elsewhere" / csv.name
    copy.parent.mkdir()
    copy.write_bytes(csv.read_bytes())
    keys = []
    for i, path in enumerate((csv, copy, csv)):
        out = tmp_path / f"r{i}"
        argv = ["release", "--dataset", "file", "--data-opt", f"path={path}", "--depth", "4", "--out", str(out)]
        assert main(argv) == 0, capsys.readouterr().err
        keys.append(json.loads((out / "manifest.json").read_text())["release_key"])
    drawn = [k.removeprefix("release/") for k in keys]
    assert len({k[:8] for k in drawn}) == 3  # not even the first and third, of one file in one folder


def test_dashboard_release_names_the_uploaded_polygons_by_hash_and_the_upload_not_at_all(inputs, monkeypatch):
    csv, regions, digest = inputs
    downloads = R.record_downloads(monkeypatch)
    at = open_app(mode="release", eps="1", res="32", mech="laplace_regions", baselines="0")
    upload(at, csv.name, csv.read_bytes())
    at.segmented_control(key="regions.kind").set_value("Your polygons").run()
    at.file_uploader(key="regions.file").set_value((regions.name, regions.read_bytes(), "application/geo+json")).run()
    click_run(at, "explore")  # Laplace over regions counts the analysis's regions: the uploaded polygons
    files = R.page_downloads(at, downloads)
    z = zipfile.ZipFile(io.BytesIO(files["laplace_regions_release.zip"]))
    doc = json.loads(z.read("manifest.json"))
    named = f"barrios_qzx.geojson:code (sha256:{digest})"  # the upload: its name, id column and hash
    assert doc["parameters"]["mechanism_params"]["regions"] == named and doc["regions"]["spec"] == named
    assert doc["dataset"]["name"] == OWN_FILE and doc["parameters"]["dataset"] == "an uploaded file"
    report = html.unescape(files["laplace_regions_release_report.html"].decode())
    assert OWN_FILE in report
    for name, data in [*files.items(), *((n, z.read(n)) for n in z.namelist())]:
        for private in (csv.name, csv.stem, str(regions.parent)):
            assert private.encode() not in data, (name, private)


def test_evaluation_exports_still_name_the_analysts_file():
    """An evaluation's files stay with the analyst: they name the file, as the page does."""
    from engine.run import RunConfig, run
    from ui.export import attribution

    res = run(RunConfig(dataset="snow_cholera", depth=4, epsilon=1.0, seed=1), use_cache=False)
    assert "Snow" in attribution(res)
