"""Inputs that could crash a page or be silently misread: weights near 1e308 (the legend's ticks), a link with
more than seven mechanisms or one named twice (Compare and Range queries; a repeat is said on the page), blank user ids (merged into
one person)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from engine.core.errors import DataError
from engine.data.dataset import DatasetMeta, make_dataset
from engine.data.files import load_file
from tests.support.app import open_app, texts
from ui.colors import ColourScale

LON = np.linspace(-0.15, -0.07, 20)
LAT = np.linspace(51.50, 51.55, 20)
MECHS = "identity,uniform,ug,ag,privtree,hierarchical,laplace_gauss,flat_onehot"  # eight


def csv(**cols) -> bytes:
    return pd.DataFrame({"lon": LON, "lat": LAT, **cols}).to_csv(index=False).encode()


@pytest.mark.parametrize("w", [1e308, 1.7e308, 1e300, 1e16])
def test_huge_weights_are_refused_with_a_message(w):
    with pytest.raises(DataError, match="the weights add up to"):
        load_file(csv(weight=[w] * 20), "w.csv")
    with pytest.raises(DataError, match="scale them down"):
        make_dataset(LON, LAT, DatasetMeta(name="t", source="t"), weight=np.full(20, w))


def test_large_but_summable_weights_still_load():
    ds = load_file(csv(weight=[1e13] * 20), "w.csv")
    assert ds.weight.sum() == pytest.approx(2e14)


@pytest.mark.parametrize(
    "lo, hi, factor, log",
    [(1.0, math.inf, 1.0, True), (0.5, 1e308, 1e10, True), (0.0, 1.0, 1.0, True), (0.0, math.inf, 1.0, False)],
)
def test_legend_ticks_of_a_degenerate_scale_are_empty_not_an_error(lo, hi, factor, log):
    scale = ColourScale(lo, hi, log, factor, "per km²")
    assert scale.ticks() == []
    assert "per km²" in scale.legend_html()


@pytest.mark.parametrize(
    "ids",
    [
        ["u1", "", "u2"] * 6 + ["u1", "u2"],
        ["u1", "NA", "u2"] * 6 + ["u1", "u2"],
        ["u1", " ", "u2"] * 6 + ["u1", "u2"],
        ["u1", "null", "u2"] * 6 + ["u1", "u2"],
    ],
)
def test_blank_user_ids_are_refused_not_merged_into_one_person(ids):
    with pytest.raises(DataError, match="have no user id"):
        load_file(csv(user_id=ids), "u.csv")
    with pytest.raises(DataError, match="have no user id"):
        make_dataset(LON, LAT, DatasetMeta(name="t", source="t"), user_id=np.array(ids, dtype=object))


def test_numeric_user_ids_with_a_gap_are_refused():
    ids = [1.0, np.nan] * 10
    with pytest.raises(DataError, match="user id"):
        make_dataset(LON, LAT, DatasetMeta(name="t", source="t"), user_id=np.array(ids))


@pytest.mark.parametrize("page", ["compare", "ranges"])
@pytest.mark.parametrize("mechs", [MECHS, "identity,identity,uniform", "ug,ug,ug,ug,ug,ug,ug,ug"])
def test_a_link_with_too_many_or_repeated_mechanisms_does_not_crash(page, mechs):
    at = open_app(page, mechs=mechs)
    assert not at.exception
    chosen = at.sidebar.multiselect(key="cfg.mechs").value
    assert len(chosen) == len(set(chosen)) and 0 < len(chosen) <= 7
    if len(mechs.split(",")) > 7 and len(set(mechs.split(","))) > 7:
        assert "compares at most 7" in texts(at)
    warned = [w.value for w in at.warning if "more than once" in w.value]
    if len(set(mechs.split(","))) < len(mechs.split(",")):  # a repeat is said on the page, not dropped silently
        assert warned == [f"URL parameter 'mechs' names {mechs.split(',')[0]} more than once: each runs once"]
    else:
        assert warned == []
