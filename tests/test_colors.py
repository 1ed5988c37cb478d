"""Colour maps from the libraries that define them, and the diverging scale of a difference map."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from ui.colors import DIVERGING, SEQUENTIAL, ColourScale, lut


def lightness(rgb: np.ndarray) -> np.ndarray:
    """CIELAB L* of sRGB colours (0..255), D65 white."""
    c = np.asarray(rgb, dtype=np.float64) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    y = lin @ np.array([0.2126, 0.7152, 0.0722])
    return np.where(y > (6 / 29) ** 3, 116 * np.cbrt(y) - 16, y * (29 / 3) ** 3)


@pytest.mark.parametrize("cmap", SEQUENTIAL)
def test_sequential_maps_rise_steadily_in_lightness(cmap):
    L = lightness(lut(cmap, 255))
    steps = np.diff(L)
    # dark = few, light = many, with no band that reverses (beyond the 8-bit rounding of the colours)
    assert (steps > -0.5).all() and L[-1] - L[0] > 60, cmap
    assert steps.std() < 0.5 * steps.mean()  # perceptually even: no stretch of the ramp hides differences


def test_viridis_has_its_published_ends():
    ends = lut("viridis", 255)[[0, -1]]
    assert ends.tolist() == [[0x44, 0x01, 0x54], [0xFD, 0xE7, 0x25]]  # #440154 and #fde725 (van der Walt & Smith)


def test_the_diverging_map_is_symmetric_in_lightness_around_a_light_centre():
    cols = lut(DIVERGING, 255)
    L = lightness(cols)
    mid = 127  # 0 of a difference map
    assert L[mid] > 85 and L[0] < 40 and L[-1] < 40
    assert (np.diff(L[: mid + 1]) > -0.5).all() and (np.diff(L[mid:]) < 0.5).all()  # 8-bit rounding aside
    assert np.abs(L - L[::-1]).max() < 2.0  # an excess and a deficit of the same size look equally strong
    (r0, _, b0), (r1, _, b1) = cols[0].astype(int), cols[-1].astype(int)
    assert b0 > r0 + 60 and r1 > b1 + 60  # blue below, red above


def test_an_unknown_map_is_refused():
    with pytest.raises(KeyError, match="unknown colour map"):
        lut("no_such_map")


def _truth_and_private(rng):
    truth = rng.poisson(20.0, (32, 32)).astype(np.float64)
    truth[:4] = 0.0  # an empty strip
    private = truth + rng.normal(0.0, 5.0, truth.shape)
    private[:4] = 0.0  # nobody there in either map
    return truth, private


def test_the_difference_scale_is_symmetric_around_zero(rng):
    truth, private = _truth_and_private(rng)
    s = ColourScale.difference(truth, private, cell_km2=0.25)
    assert s.diverging and s.hi > 0 and s.lo == -s.hi and s.cmap == DIVERGING
    d = np.abs(private - truth)[4:]
    assert np.mean(d <= s.hi) == pytest.approx(0.995, abs=0.003)  # the 99.5th percentile: a few saturate
    x = np.linspace(0.01, 1.5, 50) * s.hi
    up, down = s.index(x).astype(int), s.index(-x).astype(int)
    assert (up + down == 256).all()  # mirror images around the centre index 128
    assert up.max() == 255 and down.min() == 1  # beyond the half-width: the end colours
    assert s.index(np.array([0.0, np.nan]))[0] == 0 and s.index(np.array([np.nan]))[0] == 0  # no difference: empty
    assert s.index(np.array([1e-9]))[0] == 128
    labels = dict((round(p, 6), lbl) for p, lbl in s.ticks())
    assert labels[0.5] == "0" and any(lbl.startswith("-") for lbl in labels.values())
    assert "±" in s.legend_html() and "private − true" in s.legend_html()


def test_the_difference_scale_is_shared_by_several_releases_and_follows_the_units(rng):
    truth, private = _truth_and_private(rng)
    worse = truth + rng.normal(0.0, 15.0, truth.shape)
    one = ColourScale.difference(truth, private, cell_km2=0.25)
    both = ColourScale.difference(truth, [private, worse], cell_km2=0.25)
    assert both.hi > 2 * one.hi  # the noisier release sets the page's width
    share = ColourScale.difference(truth, private, cell_km2=0.25, units="share")
    assert share.factor == pytest.approx(100.0 / truth.sum()) and one.factor == pytest.approx(4.0)
    flat = ColourScale.difference(truth, truth.copy(), cell_km2=1.0)
    assert flat.hi == 1.0 and not flat.index(truth - truth).any()  # identical maps: nothing drawn


def test_a_difference_map_draws_excess_red_and_deficit_blue():
    truth = np.full((8, 8), 10.0)
    private = truth.copy()
    private[0, 0] += 6.0  # south-west: more than the truth
    private[7, 7] -= 6.0  # north-east: fewer
    s = ColourScale.difference(truth, private, cell_km2=1.0)
    im = Image.open(io.BytesIO(s.rgba_png(private - truth, min_side=8)))
    px = np.asarray(im)
    sw, ne, same = px[7, 0], px[0, 7], px[3, 3]  # the PNG is north up
    assert sw[3] == ne[3] == 255 and same[3] == 0
    assert sw[0] > sw[2] + 60 and ne[2] > ne[0] + 60
