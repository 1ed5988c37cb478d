"""The regional release as a product: the files say what each figure is, true counts print as whole numbers where
they are whole, and the regional maps draw a legend and set apart the regions whose margin exceeds their estimate."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd

from engine.data.region_geometry import build
from engine.regions.regional_table import regional_report
from engine.run import RunConfig, prepare, run

SEVEN = {"n": 2000, "seed": 3, "locations_per_user": 7}


def test_true_counts_of_people_print_as_whole_numbers_where_they_are_whole():
    """A person's 7 locations weigh 1/7 each: seven of them add up to 0.9999999999999998 in floating point, which a
    table must print as 1."""
    cfg = RunConfig(dataset="synthetic:monocentric", dataset_options=SEVEN, mechanism="identity", depth=4, seed=1)
    res = run(cfg, use_cache=False)
    data = prepare(cfg)[0]
    rep = regional_report(res, build("grid", res.release.domain, res.crs), data, people=True)
    true = np.array([r["true"] for r in rep.rows()], dtype=np.float64)
    whole = np.abs(true - np.rint(true)) <= 1e-9 * np.maximum(1.0, np.abs(true))
    assert whole.sum() > 10 and (~whole).sum() > 10  # both kinds, in one column
    assert all(isinstance(r["true"], int) for r, w in zip(rep.rows(), whole) if w)
    cells = pd.read_csv(io.StringIO(rep.as_csv()), dtype=str)["true"]
    assert all(re.fullmatch(r"\d+", c) for c, w in zip(cells, whole) if w)
    assert np.allclose(cells.astype(float), true)


def test_regional_maps_draw_a_legend_and_set_unreliable_regions_apart(monkeypatch):
    """Release mode, Laplace over regions at a small ε: the regions whose margin exceeds their estimate are filled
    with the unreliable class and hatched, the others take the scale's colours, and the legend shows both; the
    release report lists the regions with the same flag."""
    import html
    import json

    from tests.support import release_scan as R
    from tests.support.app import click_run, open_app, texts
    from ui.region_panel import HATCH, UNRELIABLE_FILL

    downloads = R.record_downloads(monkeypatch)
    at = open_app(mode="release", mech="laplace_regions", eps="0.2", baselines="0")
    click_run(at, "explore")
    assert not at.exception, [e.value for e in at.exception]
    layers = {}
    for chart in at.get("deck_gl_json_chart"):
        for la in json.loads(chart.proto.json).get("layers", []):
            layers[la["id"]] = la
    rows = layers["release_0"]["data"]
    table = next(d.value for d in at.dataframe if "95 % margin" in d.value.columns)
    apart = (table["95 % margin"] > table["estimate"]).to_numpy()
    assert 0 < apart.sum() < len(table)  # both kinds at this ε
    fills = {r["tip"].split("</b>")[0]: tuple(r["fill"]) for r in rows}
    names = [f"<b>{n}" for n in table["name"]]
    assert all((fills[n] == UNRELIABLE_FILL) == a for n, a in zip(names, apart))
    assert all("unreliable" in r["tip"] for r in rows if tuple(r["fill"]) == UNRELIABLE_FILL)
    hatch = layers["release_hatch_0"]
    assert hatch["@@type"] == "PathLayer" and len(hatch["data"]) >= apart.sum()
    assert hatch["getColor"] == list(HATCH)
    legend = next(h.proto.body for h in at.get("html") if "region-legend" in h.proto.body)
    assert "unreliable-swatch" in legend and f"{apart.sum()} regions here" in legend
    assert "linear-gradient(to right" in legend  # the scale's colour bar
    assert "Laplace over regions counted" not in texts(at)  # the release counted the regions it reports
    report = html.unescape(R.page_downloads(at, downloads)["laplace_regions_release_report.html"].decode())
    assert f"<h2>Regions</h2><p>{len(table):,} regions (h3:" in report
    assert report.count("unreliable: the margin exceeds the estimate") == apart.sum()
