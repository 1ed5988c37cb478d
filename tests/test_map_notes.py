"""A map whose noise swamps the shared colour scale, or that is one flat block, says so on the map."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.run import RunConfig, run
from ui.colors import ColourScale, swamp_note


@pytest.fixture(scope="module")
def runs():
    out = {}
    for m in ("ldp_grid", "uniform", "identity"):
        out[m] = run(RunConfig(dataset_options={"n": 20_000}, mechanism=m, depth=6, epsilon=1.0, seed=1))
    return out


@pytest.mark.parametrize("log", [True, False])
def test_swamped_and_flat_maps_are_named_and_good_ones_are_not(runs, log):
    truth = runs["identity"].truth
    cell_km2 = runs["identity"].release.domain.cell ** 2 / 1e6
    dens = {m: r.release.density for m, r in runs.items()}
    scale = ColourScale.shared(truth, cell_km2, log=log, others=list(dens.values()))
    ldp = swamp_note(scale, dens["ldp_grid"])
    assert ldp is not None and ldp[0].startswith("Noise swamps the scale")
    share = float((scale.index(dens["ldp_grid"]) == 255).mean())
    assert share >= 0.10 and f"{share:.0%}" in ldp[0]
    flat = swamp_note(scale, dens["uniform"])
    assert flat is not None and flat[0].startswith("Flat")
    assert swamp_note(scale, dens["identity"]) is None  # ε = 1 with 20,000 people: the city shows
    assert swamp_note(scale, truth) is None


def test_nothing_drawn_is_named():
    scale = ColourScale(1.0, 10.0, True, 1.0, "x")
    assert swamp_note(scale, np.full((8, 8), -1.0))[0].startswith("Nothing above")


def _page():
    import streamlit as st

    from engine.run import RunConfig, run
    from ui import views
    from ui.controls import Display

    res = run(RunConfig(dataset_options={"n": 20_000}, mechanism="ldp_grid", depth=6, epsilon=1.0, seed=1))
    fr = views.frame(res.config, res.release.domain)
    scale = views.scale_for(res.truth, res.release.domain, Display(), [res.release.density])
    views.heat_chart(res.release.density, scale, fr, fr.view(), "ldp", Display(), title="LDP")
    st.write("done")


def test_the_note_is_drawn_on_the_map_and_captioned():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_page, default_timeout=120).run()
    assert not at.exception
    spec = json.loads(at.get("deck_gl_json_chart")[0].proto.json)
    notes = [la for la in spec["layers"] if la["id"] == "ldp_note"]
    assert len(notes) == 1 and notes[0]["@@type"] == "TextLayer"
    assert notes[0]["data"][0]["t"].startswith("Noise swamps the scale")
    assert any("Noise swamps this map's colour scale" in c.value for c in at.caption)
