"""Maps kept as deck JSON (ui/drawn.py): an unchanged map is served without rebuilding it, a change in any
input (an array's values, the scale, the view, the context's identity) draws it again, and what is served is
exactly what building gives."""

from __future__ import annotations

import numpy as np
import pydeck as pdk
import pytest

from engine.core.grid import Domain
from ui import drawn, maps
from ui.colors import ColourScale
from ui.controls import Display


@pytest.fixture(autouse=True)
def _empty():
    drawn.clear()
    yield
    drawn.clear()


def _build_counter(grid, scale, fr):
    calls = []

    def build():
        calls.append(1)
        return maps.deck([maps.heat_layer(grid, scale, fr, "k_heat")], fr.view())

    return calls, build


def _frame():
    return maps.Frame(Domain(0.0, 0.0, 1000.0, 3), "+proj=aeqd +lat_0=51.5 +lon_0=-0.13 +datum=WGS84 +units=m")


def test_unchanged_inputs_are_served_and_equal_a_fresh_build():
    fr, grid = _frame(), np.arange(64, dtype=float).reshape(8, 8)
    scale = ColourScale.shared(grid, 0.1)
    calls, build = _build_counter(grid, scale, fr)
    first = drawn.deck(("heat", grid, scale, fr, Display()), build)
    again = drawn.deck(("heat", grid.copy(), scale, fr, Display()), build)  # equal values, another array
    assert len(calls) == 1
    assert again.to_json() == first.to_json() == build().to_json()


def test_any_changed_input_draws_again():
    fr, grid = _frame(), np.arange(64, dtype=float).reshape(8, 8)
    scale = ColourScale.shared(grid, 0.1)
    calls, build = _build_counter(grid, scale, fr)
    drawn.deck(("heat", grid, scale, fr, Display()), build)
    changed = grid.copy()
    changed[3, 3] += 1e-9
    variants = [
        ("heat", changed, scale, fr, Display()),
        ("heat", grid.astype(np.float32), scale, fr, Display()),
        ("heat", grid, ColourScale.shared(grid, 0.2), fr, Display()),
        ("heat", grid, scale, maps.Frame(fr.domain, fr.crs.replace("51.5", "51.6")), Display()),
        ("heat", grid, scale, fr, Display(outlines=False)),
        ("heat", grid, scale, fr, Display(), [1.0] * 100),  # long sequences go in by identity
    ]
    for v in variants:
        drawn.deck(v, build)
    assert len(calls) == 1 + len(variants)


def test_objects_of_no_known_shape_are_kept_by_identity_and_the_size_is_bounded(monkeypatch):
    class Ctx:  # e.g. a context layer: hashed by identity, held while its entry lives
        pass

    fr, grid = _frame(), np.ones((8, 8))
    scale = ColourScale.shared(grid, 0.1)
    calls, build = _build_counter(grid, scale, fr)
    a, b = Ctx(), Ctx()
    drawn.deck(("heat", a), build)
    drawn.deck(("heat", a), build)
    drawn.deck(("heat", b), build)
    assert len(calls) == 2
    one = len(build().to_json())
    calls.clear()
    monkeypatch.setattr(drawn, "MAX_BYTES", 2 * one)
    for i in range(5):
        drawn.deck(("heat", i), build)
    assert drawn._size <= 2 * one and len(drawn._entries) == 2
    drawn.deck(("heat", 4), build)  # the newest is kept
    drawn.deck(("heat", 0), build)  # the oldest was dropped
    assert len(calls) == 6


def test_streamlit_reads_a_kept_deck_like_a_pydeck_one():
    from streamlit.elements.deck_gl_json_chart import _get_pydeck_tooltip

    fr = _frame()
    tip = {"html": "<b>{t}</b>"}
    d = drawn.deck(("x",), lambda: maps.deck([pdk.Layer("ScatterplotLayer", data=[])], fr.view(), tooltip=tip))
    assert _get_pydeck_tooltip(d) == tip and d.mapbox_key is None and list(d.layers) == []
