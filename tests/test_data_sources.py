"""Offline sources: the synthetic cities, libpysal's bundled datasets, the city catalogue."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.core.errors import OfflineError, ParamError
from engine.data import catalogue, load, sources
from engine.data import synthetic as syn
from engine.data.projection import to_lonlat


# ------------------------------------------------------------------ synthetic cities
def test_same_seed_same_city_other_seed_other_city():
    a = syn.generate("polycentric", 5000, 11)
    b = syn.generate("polycentric", 5000, 11)
    c = syn.generate("polycentric", 5000, 12)
    for name in ("xy", "lonlat", "value", "flag"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.xy, c.xy)
    # the seed fixes the city (intensity), whatever n
    np.testing.assert_array_equal(syn.intensity("polycentric", 11), syn.intensity("polycentric", 11))
    assert not np.array_equal(syn.intensity("polycentric", 11), syn.intensity("polycentric", 12))


def test_presets_differ_and_are_labelled_synthetic():
    hists = {}
    for key in syn.PRESETS:
        ds = syn.generate(key, 20_000, 0)
        assert "synthetic" in ds.meta.name and ds.meta.synthetic and ds.meta.source == f"synthetic:{key}"
        assert all(type(v) is float for v in ds.meta.bbox)
        dom = ds.public_domain(4)
        assert dom.inside(ds.xy).all()
        h = dom.histogram(ds.xy)
        hists[key] = h / h.sum()
    keys = list(hists)
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            tv = 0.5 * np.abs(hists[keys[i]] - hists[keys[j]]).sum()
            assert tv > 0.1, (keys[i], keys[j], tv)


def test_points_follow_the_intensity():
    """Chi-square goodness of fit of 16x16 block counts against the model's probabilities
    (false-alarm rate 1e-3 with the fixed seed)."""
    n = 50_000
    ds = syn.generate("monocentric", n, 5)
    p = syn.intensity("monocentric", 5)
    b = syn.RASTER // 16
    expected = p.reshape(16, b, 16, b).sum(axis=(1, 3)).ravel() * n
    side = ds.meta.extra["side_m"]
    ix = np.clip(((ds.xy[:, 0] + side / 2) / side * 16).astype(int), 0, 15)
    iy = np.clip(((ds.xy[:, 1] + side / 2) / side * 16).astype(int), 0, 15)
    observed = np.bincount(iy * 16 + ix, minlength=256)
    keep = expected > 5
    assert observed[~keep].sum() <= max(20, 3 * expected[~keep].sum())
    chi2 = (((observed - expected) ** 2)[keep] / expected[keep]).sum()
    assert stats.chi2.sf(chi2, keep.sum() - 1) > 1e-3


def test_spatial_structure_centre_sparse_areas_and_sea():
    ds = syn.generate("coastal", 40_000, 2)
    p = syn.intensity("coastal", 2)
    side, r = ds.meta.extra["side_m"], syn.RASTER
    ix = np.clip(((ds.xy[:, 0] + side / 2) / side * r).astype(int), 0, r - 1)
    iy = np.clip(((ds.xy[:, 1] + side / 2) / side * r).astype(int), 0, r - 1)
    assert (p[iy, ix] > 0).all()  # nobody in the sea
    assert (p == 0).mean() > 0.2  # the sea covers a good part of the square
    mono = syn.generate("monocentric", 40_000, 2)
    d = np.hypot(*mono.xy.T)
    # Clark's law: far more people within 2 km of the centre than in a ring of equal area at 6.x km
    inner = (d < 2000).sum()
    ring = ((d > 6000) & (d < np.sqrt(6000**2 + 2000**2))).sum()
    assert inner > 3 * ring


def test_attributes_age_and_hotspot():
    ds = syn.generate("monocentric", 60_000, 0)
    assert ds.value is not None and ds.flag is not None and ds.flag.dtype == bool
    assert ds.value.min() >= 0 and ds.value.max() <= 100
    np.testing.assert_array_equal(ds.value, np.floor(ds.value))  # whole years
    assert 30 < ds.value.mean() < 55
    hx, hy = ds.meta.extra["hotspot_xy_m"]
    d = np.hypot(ds.xy[:, 0] - hx, ds.xy[:, 1] - hy)
    near, far = ds.flag[d < 700], ds.flag[d > 4000]
    assert near.size > 200 and far.size > 1000
    # two-proportion z-test, one-sided, false-alarm rate 1e-3 with the fixed seed
    pn, pf = near.mean(), far.mean()
    pooled = (near.sum() + far.sum()) / (near.size + far.size)
    z = (pn - pf) / np.sqrt(pooled * (1 - pooled) * (1 / near.size + 1 / far.size))
    assert stats.norm.sf(z) < 1e-3
    assert abs(pf - syn.BASE_RATE) < 0.02
    # age varies in space: older in the outskirts than in the centre
    r = np.hypot(*ds.xy.T)
    assert ds.value[r > 6000].mean() > ds.value[r < 1500].mean() + 3


def test_lonlat_agrees_with_pyproj_to_a_millimetre():
    ds = syn.generate("sprawl", 3000, 4)
    ll = to_lonlat(ds.xy[:, 0], ds.xy[:, 1], ds.crs)
    err_m = np.abs(ll - ds.lonlat).max() * 111_320
    assert err_m < 1e-3


def test_several_locations_per_user():
    k, spread = 4, 300.0
    ds = syn.generate("polycentric", 10_002, 3, locations_per_user=k, spread_m=spread)
    assert len(ds) == 10_002 and ds.user_id is not None
    counts = np.bincount(ds.user_id)
    assert counts.max() == k and (counts[:-1] == k).all() and counts[-1] == 10_002 - k * (counts.size - 1)
    assert ds.n_users == -(-10_002 // k)
    for attr in (ds.value, ds.flag):  # a person's age and test result do not change with the place
        per_user = attr.reshape(-1)[: k * (counts.size - 1)].reshape(-1, k)
        assert (per_user == per_user[:, :1]).all()
    homes = ds.xy[::k][: counts.size - 1]
    steps = ds.xy[: k * (counts.size - 1)].reshape(-1, k, 2) - homes[:, None, :]
    dist = np.hypot(*steps[:, 1:].reshape(-1, 2).T)
    # Gaussian steps: mean distance sigma*sqrt(pi/2) (a few fall back to the home)
    assert 0.8 * spread * np.sqrt(np.pi / 2) < dist.mean() < 1.1 * spread * np.sqrt(np.pi / 2)
    assert syn.generate("polycentric", 100, 3).user_id is None


def test_registry_and_bad_parameters():
    src = sources()["synthetic:sprawl"]
    assert src.kind == "synthetic" and src.offline
    assert {p.name for p in src.params} == {"n", "seed", "locations_per_user", "spread_m"}
    ds = load("synthetic:sprawl", n=500, seed=9, locations_per_user=5)
    assert len(ds) == 500 and ds.n_users == 100
    with pytest.raises(ParamError):
        load("synthetic:sprawl", n=0)
    with pytest.raises(ParamError):
        syn.generate("atlantis", 10, 0)
    with pytest.raises(ParamError):
        syn.generate("polycentric", 10, 0, locations_per_user=0)


# ------------------------------------------------------------------ libpysal
def test_snow_cholera_deaths():
    ds = load("snow_cholera")
    deaths = ds.meta.extra["deaths"]
    assert len(ds) == deaths and ds.meta.extra["addresses"] == 324
    lon, lat = ds.lonlat.T
    assert (np.abs(lon + 0.137) < 0.01).all() and (np.abs(lat - 51.513) < 0.01).all()  # Soho, London
    b = ds.meta.bbox
    assert (lon >= b[0]).all() and (lon <= b[2]).all() and (lat >= b[1]).all() and (lat <= b[3]).all()
    assert not ds.meta.bbox_from_data and "Snow" in ds.meta.citation and ds.meta.license
    by_address = load("snow_cholera", unit="address")
    assert len(by_address) == 324
    assert by_address.value.sum() == deaths and by_address.flag.sum() == (by_address.value > 0).sum()
    with pytest.raises(ParamError):
        load("snow_cholera", unit="street")


def test_berlin_airbnb_prices():
    ds = load("berlin_airbnb")
    assert len(ds) == 2203 and ds.value is not None and (ds.value > 0).all()
    assert ds.meta.value_name.startswith("nightly price")
    lon, lat = ds.lonlat.T
    assert (np.abs(lon - 13.43) < 0.05).all() and (np.abs(lat - 52.54) < 0.03).all()  # Prenzlauer Berg
    assert ds.public_domain(6).inside(ds.xy).all()
    assert "Inside Airbnb" in ds.meta.citation and "CC BY" in ds.meta.license
    beds = load("berlin_airbnb", value="beds")
    assert not np.array_equal(beds.value, ds.value)


def test_missing_libpysal_example_is_an_offline_error():
    from engine.data.builtin import example_file

    with pytest.raises(OfflineError, match="not installed"):
        example_file("snow_maps", "NoSuchFile.shp")


# ------------------------------------------------------------------ catalogue
def test_catalogue_boxes_and_their_sources():
    from pyproj import Geod

    g = Geod(ellps="WGS84")
    cs = catalogue.cities()
    for key in (
        "san_francisco",
        "los_angeles",
        "chicago",
        "manhattan",
        "london",
        "tokyo",
        "miami",
        "milwaukee",
        "kansas_city",
    ):
        assert key in cs
    for c in cs.values():
        lon0, lat0, lon1, lat1 = c.bbox
        assert -180 <= lon0 < lon1 <= 180 and -90 <= lat0 < lat1 <= 90 and c.source
    # SNH: 20 x 20 km centred on Table 2's centres
    mil = cs["milwaukee"].bbox
    _, _, ns = g.inv(-87.910, mil[1], -87.910, mil[3])
    _, _, ew = g.inv(mil[0], 43.038, mil[2], 43.038)
    assert abs(ns - 20_000) < 1 and abs(ew - 20_000) < 1
    assert "Table 2" in cs["milwaukee"].source
    # Zong: the corners of Appendix B.1, Table 1
    assert cs["london"].bbox == (-0.16971, 51.50453, -0.10611, 51.52708)
    assert cs["tokyo"].bbox == (139.75249, 35.65504, 139.77897, 35.70064)
    # the SF cab data's published extent lies inside SNH's San Francisco box
    sf = cs["san_francisco"].bbox
    assert sf[0] < -122.50764 and sf[2] > -122.35978 and sf[1] < 37.70794 and sf[3] > 37.81944
