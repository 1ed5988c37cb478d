"""Unit tests of the dashboard's pure helpers: colour scale, PNG maps, deck JSON, exports, budget."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from engine.core.grid import Domain
from ui.colors import ColourScale, lut
from ui.export import csv_grid, geojson_grid
from ui.maps import Frame, deck, heat_layer, outline_layer, rects_to_grid, region_layer

CRS = "+proj=aeqd +lat_0=48.85 +lon_0=2.35 +x_0=0 +y_0=0 +datum=WGS84 +units=m +no_defs"


def test_shared_scale_maps_counts_monotonically_and_hides_empty_cells():
    truth = np.array([[0.0, 1.0], [10.0, 1000.0]])
    s = ColourScale.shared(truth, cell_km2=0.25)
    idx = s.index(np.array([[-3.0, 0.0, 0.4, 0.6], [1.0, 10.0, 1000.0, 1e6]]))
    assert list(idx[0]) == [0, 0, 0, 0]  # negative, empty and under one location (the floor): transparent
    assert 0 < idx[1, 0] < idx[1, 1] < idx[1, 2] == idx[1, 3] == 255  # saturates at the top
    # a release that spreads its mass thinly lowers the floor, so it is drawn rather than blanked
    thin = np.full((2, 4), 0.6)
    assert (ColourScale.shared(truth, 0.25, others=[thin]).index(thin) > 0).all()
    assert s.factor == pytest.approx(4.0)  # counts per cell of 0.25 km² -> per km²
    share = ColourScale.shared(truth, 0.25, units="share")
    assert share.factor == pytest.approx(100 / truth.sum())
    lin = ColourScale.shared(truth, 0.25, log=False)
    assert lin.index(np.array([0.0]))[0] == 0 and lin.index(np.array([lin.hi]))[0] == 255


def test_png_is_indexed_north_up_with_transparent_zero():
    g = np.zeros((4, 4))
    g[0, 0] = 50.0  # south-west cell
    s = ColourScale.shared(g, 1.0)
    img = Image.open(io.BytesIO(s.png(g)))
    assert img.mode == "P" and img.size == (4, 4) and img.info.get("transparency") == 0
    px = np.asarray(img)
    assert px[3, 0] == 255 and px[0, 0] == 0  # drawn in the bottom-left pixel (north up)
    assert tuple(img.getpalette()[255 * 3 : 255 * 3 + 3]) == tuple(lut("viridis", 255)[-1])


def test_legend_ticks_within_range_and_labelled():
    s = ColourScale.shared(np.array([[1.0, 5000.0]]), 1.0)
    ticks = s.ticks()
    assert ticks and all(0 <= p <= 1 for p, _ in ticks) and [p for p, _ in ticks] == sorted(p for p, _ in ticks)
    html = s.legend_html()
    assert "locations per km²" in html and "log scale" in html and ticks[-1][1] in html


@pytest.mark.parametrize("depth,limit", [(8, 2_000_000), (10, 6_000_000)])
def test_deck_json_per_map_is_small_even_for_pure_noise(depth, limit):
    """Worst case for PNG compression: a map of independent noise (identity at small ε)."""
    dom = Domain(-10_000, -10_000, 20_000, depth)
    rng = np.random.default_rng(0)
    truth = rng.poisson(5.0, (dom.n, dom.n)).astype(float)
    noisy = truth + rng.laplace(0, 10, truth.shape)
    fr = Frame(dom, CRS)
    s = ColourScale.shared(truth, dom.cell**2 / 1e6)
    spec = deck([region_layer(fr), heat_layer(noisy, s, fr, "private_heat")], fr.view()).to_json()
    assert len(spec.encode()) < limit
    d = json.loads(spec)
    layer = d["layers"][1]
    assert layer["@@type"] == "BitmapLayer" and layer["image"].startswith("data:image/png;base64,")
    assert layer["textureParameters"]["magFilter"] == "nearest"
    assert d["mapStyle"] == "__MAP_STYLE__" and "mapProvider" not in d  # offline: no basemap, no request
    assert "cartocdn" in deck([], fr.view(), basemap=True).to_json()


def test_frame_corners_and_view_fit_the_domain():
    dom = Domain(-5_000, -5_000, 10_000, 6)
    fr = Frame(dom, CRS)
    bl, tl, tr, br = fr.corners()
    assert bl[0] == pytest.approx(tl[0], abs=1e-3) and bl[1] < tl[1] and tr[0] > tl[0]
    assert fr.centre() == pytest.approx((2.35, 48.85), abs=1e-6)
    v1, v2 = fr.view(px=290), fr.view(zoom=1.0, px=290)
    assert v2.zoom == pytest.approx(v1.zoom + 1)
    # 10 km in 290 px at 48.85° N: deck.gl's 512-px world gives zoom log2(78271.5 cos(lat) / (10000/290))
    assert v1.zoom == pytest.approx(np.log2(78271.51696 * np.cos(np.radians(48.85)) / (10_000 / 290)), abs=1e-3)


def test_outlines_paths_or_raster_and_rects_to_grid():
    dom = Domain(0, 0, 1000, 3)
    fr = Frame(dom, CRS)
    rects = np.array([[0, 0, 500, 500], [500, 0, 1000, 1000]])
    paths = json.loads(deck([outline_layer(rects, fr, "cells")], fr.view()).to_json())["layers"][0]
    assert paths["@@type"] == "PathLayer" and len(paths["data"]) == 2 and len(paths["data"][0]["path"]) == 5
    many = np.tile(rects, (3000, 1))
    assert json.loads(deck([outline_layer(many, fr, "c")], fr.view()).to_json())["layers"][0]["@@type"] == "BitmapLayer"
    g = rects_to_grid(rects, np.array([16.0, 32.0]), dom)
    assert g.sum() == pytest.approx(48.0) and g[0, 0] == pytest.approx(1.0) and g[7, 7] == pytest.approx(1.0)


def test_geojson_and_csv_exports_cover_the_grid():
    dom = Domain(-1_000, -1_000, 2_000, 2)
    dens = np.arange(16, dtype=float).reshape(4, 4)
    gj = json.loads(geojson_grid(dens, dom, CRS))
    assert len(gj["features"]) == 15  # the one zero cell is skipped
    f = gj["features"][0]
    ring = f["geometry"]["coordinates"][0]
    assert ring[0] == ring[-1] and len(ring) == 5
    assert f["properties"]["per_km2"] == pytest.approx(f["properties"]["value"] / 0.25)
    rows = csv_grid(dens, dom, CRS).strip().splitlines()
    assert rows[0].startswith("ix,iy,x_m,y_m,lon,lat,estimate,per_km2") and len(rows) == 17
    last = rows[-1].split(",")
    assert last[:2] == ["3", "3"] and float(last[6]) == 15.0
