"""One region set per analysis on the command line: ``plan``, ``run`` and ``release`` given the same ``--regions``
agree. Laplace over regions is planned on the file's regions (not on hexagons), in closed form, and the ε the plan
finds for a target margin gives that margin in the run and in the release; the regions parameter cannot name
other regions besides."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from engine.__main__ import main
from engine.bench.city_regions import city_geojson
from engine.run import load_dataset

DATA = ["--dataset", "synthetic:monocentric", "--data-opt", "n=3000", "--data-opt", "seed=4", "--depth", "5"]


@pytest.fixture(scope="module")
def neighbourhoods(tmp_path_factory):
    """77 neighbourhoods of realistic shape over the synthetic city's map (its local CRS, its side)."""
    ds = load_dataset("synthetic:monocentric", {"n": 3000, "seed": 4})
    side = ds.public_domain(5).side
    path = city_geojson(tmp_path_factory.mktemp("public") / "neighbourhoods.geojson", crs=ds.crs, side=side)
    return f"{path}:area_id"


def cli_json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_plan_run_and_release_agree_on_one_regions_file(neighbourhoods, capsys, tmp_path):
    plan = cli_json(
        capsys, "plan", *DATA, "--mechanism", "laplace_regions", "--epsilon", "1", "--users", "3000",
        "--regions", neighbourhoods, "--target-margin", "10", "--json",
    )  # fmt: skip
    p = plan["predictions"][0]
    assert p["method"] == "closed form" and p["regions"] == 77
    # each neighbourhood is one Laplace(1/eps) count: its margin is ln(20)/eps exactly, at the median and worst tenth
    assert p["region_median"] == pytest.approx(math.log(20)) and p["region_p90"] == pytest.approx(math.log(20))
    eps = plan["suggested_epsilon"]["laplace_regions"]
    assert eps is not None and math.log(20) / eps <= 10 < math.log(20) / (eps * 0.99)
    run = cli_json(
        capsys, "run", *DATA, "--mechanism", "laplace_regions", "--epsilon", str(eps), "--seed", "1",
        "--regions", neighbourhoods, "--format", "json",
    )  # fmt: skip
    margins = [r["margin95"] for r in run["regions"]]
    assert len(margins) == 77 and max(margins) <= 10 and run["regions_info"]["count"] == 77
    out = tmp_path / "release"
    assert main(["release", *DATA, "--mechanism", "laplace_regions", "--epsilon", str(eps),
                 "--regions", neighbourhoods, "--out", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    table = pd.read_csv(out / "regions.csv")
    assert list(table["id"]) == [r["id"] for r in run["regions"]] and (table["margin95"] <= 10).all()
    doc = json.loads((out / "manifest.json").read_text())
    # the regions counted are the regions reported: one name, the file's base name, id column and content hash
    assert doc["parameters"]["mechanism_params"]["regions"] == doc["regions"]["spec"]
    assert doc["regions"]["spec"].startswith("neighbourhoods.geojson:area_id (sha256:")


def test_regions_named_twice_must_be_the_same(neighbourhoods, capsys):
    argv = ["run", *DATA, "--mechanism", "laplace_regions", "--seed", "1", "--regions", neighbourhoods]
    assert main([*argv, "--param", "regions=h3:7"]) == 2
    assert "the regions are given twice" in capsys.readouterr().err
    assert main([*argv, "--param", f"regions={neighbourhoods}"]) == 0  # the same regions, said twice, are one set


def test_plan_panel_plans_per_region_on_the_uploaded_polygons_and_its_epsilon_keeps_the_promise(tmp_path):
    """The dashboard: the sidebar's regions (an uploaded polygon file) are what the Plan panel plans over, stated
    "per region", and what Laplace over regions counts; the ε the panel suggests for ±10 per region gives a release
    whose every region's margin is at most 10."""
    from tests.support.app import click_run, open_app

    ds = load_dataset("synthetic:polycentric", {"n": 3000})
    path = city_geojson(tmp_path / "neighbourhoods.geojson", crs=ds.crs, side=ds.public_domain(5).side)
    at = open_app(mode="release", mech="laplace_regions", eps="1", baselines="0")
    at.segmented_control(key="regions.kind").set_value("Your polygons").run()
    at.file_uploader(key="regions.file").set_value((path.name, path.read_bytes(), "application/geo+json")).run()
    at.selectbox(key="regions.id").set_value("area_id").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="plan.where").value == "regions"
    at.number_input(key="plan.users").set_value(3000).run()
    at.number_input(key="plan.target").set_value(10.0).run()
    at.button(key="plan.go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    m = next(x for x in at.metric if "Predicted 95 % margin per region at ε 1" in x.label)
    assert float(m.value.split()[0].lstrip("±")) == pytest.approx(math.log(20), abs=0.01)  # 3 figures
    body = "\n".join(str(x.value) for x in at.markdown)
    eps = float(re.search(r"smallest ε giving ±10 people per region is \*\*([0-9.]+)\*\*", body)[1])
    assert math.log(20) / eps <= 10 < math.log(20) / (eps * 0.98)  # the smallest, to the search's precision
    at.button(key="plan.use").click().run()
    assert at.sidebar.select_slider(key="cfg.eps").value == pytest.approx(eps)
    click_run(at, "explore")
    table = next(d.value for d in at.dataframe if "95 % margin" in d.value.columns)
    assert len(table) == 77 and (table["95 % margin"] <= 10).all()


def test_a_link_carries_the_regions_and_laplace_over_regions_counts_them():
    from tests.support.app import open_app

    at = open_app(mech="laplace_regions", regions="h3:7", baselines="0")
    assert at.segmented_control(key="regions.kind").value == "H3 hexagons" and at.slider(key="regions.h3").value == 7
    assert at.query_params["regions"] in ("h3:7", ["h3:7"])  # written back: the page's link names them
    at = open_app(mech="identity", regions="grid")
    assert at.segmented_control(key="regions.kind").value == "Grid cells"
    at = open_app(mech="identity", regions="/srv/secret.geojson")  # a path in a link is no region set
    assert at.segmented_control(key="regions.kind").value == "Off"
    assert "regions=/srv/secret.geojson" in " ".join(w.value for w in at.warning)


def test_the_regions_parameter_is_the_same_region_set_as_regions(capsys, tmp_path):
    """``--param regions=h3:7`` is ``--regions h3:7``: counted, and reported in the release's regional files."""
    out = tmp_path / "release"
    argv = ["release", *DATA, "--mechanism", "laplace_regions", "--param", "regions=h3:7", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["regions"]["spec"] == doc["parameters"]["mechanism_params"]["regions"] == "h3:7"
    assert np.allclose(pd.read_csv(out / "regions.csv")["margin95"], math.log(20))  # each region counted
