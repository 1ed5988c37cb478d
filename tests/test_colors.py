"""Colour maps from the libraries that define them, and the one diverging palette of the difference map."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from PIL import Image

from ui.colors import DIVERGING, SEQUENTIAL, lut
from ui.diverging import DiffScale


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


def _truth_and_private():
    truth = np.full((8, 8), 10.0)
    private = truth.copy()
    private[0, 0] += 6.0  # south-west: more than the truth
    private[7, 7] -= 6.0  # north-east: fewer
    private[3, 3] += 3.0  # half the end
    return truth, private


def test_a_difference_map_draws_excess_red_and_deficit_blue():
    truth, private = _truth_and_private()
    s = DiffScale.of(truth, private, factor=1.0, unit="u")
    px = np.asarray(Image.open(io.BytesIO(s.png(truth, private))))
    sw, ne, same = px[7, 0].astype(int), px[0, 7].astype(int), px[5, 5].astype(int)  # the PNG is north up
    assert sw[0] > sw[2] + 60 and ne[2] > ne[0] + 60  # red above the truth, blue below
    assert same.min() > 200  # agreement: the light centre


def test_the_difference_map_and_its_legend_use_the_one_diverging_palette():
    """Every colour of the difference map is a colour of :data:`ui.colors.DIVERGING` at its place on the scale,
    and the legend's gradient is the same palette: what the legend says blue means is what the map draws blue."""
    truth, private = _truth_and_private()
    s = DiffScale.of(truth, private, factor=1.0, unit="u")
    pal = lut(DIVERGING, 255)
    d = (private - truth)[::-1]  # north up, as drawn
    idx = np.clip(np.round((d / s.end + 1) / 2 * 254), 0, 254).astype(int)
    assert np.array_equal(s.rgb(truth, private), pal[idx])
    assert idx.min() == 0 and idx.max() == 254 and 127 in idx  # both ends and the centre are drawn
    stops = re.findall(r"rgb\((\d+),(\d+),(\d+)\) ([\d.]+)%", s.legend_html())
    assert np.array_equal(np.array([[int(r), int(g), int(b)] for r, g, b, _ in stops]), lut(DIVERGING, 17))
    assert [float(q) for *_, q in stops] == pytest.approx(np.linspace(0, 100, 17), abs=0.06)
