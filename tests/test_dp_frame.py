"""The frame options produce the frames they state: the dataset's region, an analyst's box or gazetteer place,
or the square around DP quantiles of the coordinates (a step of the ledger, drawn by the exponential mechanism
whose law is checked here against its closed form, in numpy and in OpenDP)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import integrate, stats

from engine.core.grid import Domain
from engine.core.noise import NoiseSource, quantile_epsilon, quantile_scale, quantile_scores
from engine.data.files import load_file
from engine.data.geography import place_frame
from engine.data.projection import to_local
from engine.run import RunConfig
from engine.run.execution._frame import CANDIDATES
from engine.run.execution._release_files import manifest
from engine.run.execution._runner import prepare_run, run

ALPHA = 1e-3  # false-alarm rate of each statistical test


def people(n=3000, seed=5, **kw):
    rng = np.random.default_rng(seed)
    lon, lat = rng.normal(13.40, 0.04, n), rng.normal(52.52, 0.025, n)
    data = ("lon,lat\n" + "\n".join(f"{a:.6f},{b:.6f}" for a, b in zip(lon, lat))).encode()
    return load_file(data, "people.csv", **kw)


def dp_cfg(**kw) -> RunConfig:
    base = dict(dataset="file:people.csv", mechanism="identity", depth=6, frame="dp", frame_share=0.2, seed=3)
    return RunConfig(**{**base, **kw})


# ---------------------------------------------------------------- the exponential mechanism's law
def exact_probabilities(scores: np.ndarray, scale: float) -> np.ndarray:
    """P(candidate i has the largest -score + Exponential(scale)): integral of its density times the others'
    distribution functions."""
    s = np.asarray(scores, dtype=np.float64)

    def density(x, i):
        if x < -s[i]:
            return 0.0
        others = np.delete(s, i)
        cdf = np.where(x >= -others, -np.expm1(-(x + others) / scale), 0.0)
        return np.exp(-(x + s[i]) / scale) / scale * float(np.prod(cdf))

    hi = -s.min() + 60 * scale
    return np.array(
        [integrate.quad(density, -s[i], hi, args=(i,), points=sorted(-s), limit=200)[0] for i in range(s.size)]
    )


@pytest.mark.parametrize("secure", [False, True])
def test_the_noisy_quantile_follows_the_exponential_mechanism(secure):
    """4,000 draws of the 25 % quantile of 60 values over 8 candidates: chi-square against the closed form
    (false-alarm rate ALPHA), in numpy (Evaluate) and through OpenDP's make_private_quantile (Release)."""
    rng = np.random.default_rng(2)
    values = rng.normal(0, 1, 60)
    cands = np.linspace(-2, 1.5, 8)
    scale = 8.0  # ε 0.19: every candidate expected at least 8 times in 4,000 draws
    p = exact_probabilities(quantile_scores(values, cands, 0.25), scale)
    assert p.sum() == pytest.approx(1.0, abs=1e-6) and p.max() < 0.6  # a law worth testing
    noise = NoiseSource(np.random.default_rng(9), secure=secure)
    draws = [noise.quantile(values, cands, 0.25, scale) for _ in range(4000)]
    observed = np.array([np.sum(np.isclose(draws, c)) for c in cands])
    assert observed.sum() == 4000
    assert stats.chisquare(observed, p / p.sum() * 4000).pvalue > ALPHA


def test_the_quantiles_epsilon_is_opendps():
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
    for alpha, eps, d_in in ((0.01, 0.025, 1), (0.3, 1.0, 1), (0.05, 0.1, 2)):
        scale = quantile_scale(alpha, eps, d_in)
        m = dp.m.make_private_quantile(*space, dp.max_divergence(), [0.0, 1.0], alpha, scale)
        assert m.map(d_in) == pytest.approx(eps) == pytest.approx(quantile_epsilon(alpha, scale, d_in))
        t = dp.t.make_quantile_score_candidates(*space, [0.0, 0.5, 1.0], alpha)
        x = [0.1, 0.2, 0.7, 0.9, 0.95]
        ours = quantile_scores(x, [0.0, 0.5, 1.0], alpha)
        theirs = np.asarray(t(x), dtype=float)  # in integer units of alpha's fraction: the same up to a factor
        assert np.allclose(theirs / theirs.max(), ours / ours.max())


# ---------------------------------------------------------------- the frames
@pytest.mark.parametrize("mode", ["evaluate", "release"])
def test_a_dp_frame_is_the_square_around_its_quantiles_and_a_step_of_the_ledger(mode):
    ds = people()
    res = run(dp_cfg(mode=mode, seed=0 if mode == "release" else 3), dataset=ds)
    led = res.release.ledger
    assert led.entries[0].step == "frame: DP quantiles of the coordinates"
    assert led.entries[0].epsilon == pytest.approx(0.2 * res.config.epsilon)
    assert led.total() == pytest.approx(res.config.epsilon)
    region = ds.public_domain(6)
    dom = res.release.domain
    assert dom.side < region.side  # fitted: smaller than the rounded box
    lo, hi = np.array(region.bounds[:2]), np.array(region.bounds[2:])
    assert (np.array(dom.bounds[:2]) >= lo - 1e-6).all() and (np.array(dom.bounds[2:]) <= hi + 1e-6).all()
    doc = manifest(res) if mode == "release" else None
    if doc is not None:
        assert doc["dataset"]["region_frame"].startswith("the square around DP quantiles 1 % and 99 %")
        assert "left out of the map" in doc["dataset"]["region_frame"]
        assert any("rounded outward" in s for s in doc["side_information"])  # the region searched, declared
        assert "frame_left_out" not in json.dumps(doc)
    else:  # Evaluate counts the people the frame leaves out
        out = int((~dom.inside(ds.xy)).sum())
        assert res.evaluation["frame_left_out"] == out and res.n_users == len(ds) - out


def test_a_dp_frame_at_a_large_epsilon_finds_the_quantiles():
    """At ε 50 per quantile the draws sit within two candidate steps of the true 1 % and 99 % quantiles."""
    ds = people(20_000, seed=1)
    p = prepare_run(dp_cfg(epsilon=100.0, frame_share=0.5, frame_quantile=0.02), ds)
    region = ds.public_domain(6)
    step = region.side / CANDIDATES
    q = np.quantile(ds.xy, [0.02, 0.98], axis=0)  # rows: quantile; columns: axis
    box = Domain.around(*q[0], *q[1], 6)
    assert abs(p.domain.side - box.side) <= 4 * step
    cx, cy = p.domain.x0 + p.domain.side / 2, p.domain.y0 + p.domain.side / 2
    assert abs(cx - box.x0 - box.side / 2) <= 2 * step and abs(cy - box.y0 - box.side / 2) <= 2 * step


def test_the_steps_count_what_the_mechanism_protects():
    """People (one mean location each) under a user-level relation, locations under a record-level one; a
    replace relation changes two of a quantile's values, so its noise doubles."""
    rng = np.random.default_rng(4)
    n_users = 900
    uid = np.repeat(np.arange(n_users), 3)
    lon, lat = rng.normal(13.40, 0.04, uid.size), rng.normal(52.52, 0.025, uid.size)
    rows = "\n".join(f"{u},{a:.6f},{b:.6f}" for u, a, b in zip(uid, lon, lat))
    ds = load_file(("user_id,lon,lat\n" + rows).encode(), "visits.csv")
    auto = dict(resolution="auto", count_share=0.1)
    users = prepare_run(dp_cfg(**auto), ds).setup
    records = prepare_run(dp_cfg(params={"unit": "record"}, **auto), ds).setup
    replace = prepare_run(dp_cfg(mechanism="ldp_grid", **auto), ds).setup
    assert users.steps[1].step == "count of the people (automatic resolution)"
    assert records.steps[1].step == "count of the locations (automatic resolution)"
    assert users.evaluation["people_exact"] <= n_users < records.evaluation["people_exact"] <= uid.size
    scale = quantile_scale(0.01, 0.2 / 4)  # ε 1, a fifth of it for 4 quantiles
    assert f"score noise scale {scale:.4g} people" in users.steps[0].note
    assert f"score noise scale {scale:.4g} locations" in records.steps[0].note
    assert f"score noise scale {2 * scale:.4g} people" in replace.steps[0].note


def test_an_analysts_place_or_box_is_the_frame_and_is_named():
    box, what = place_frame("Berlin", 15)
    ds = people(bbox=box)
    assert ds.meta.bbox == box and not ds.meta.bbox_from_data
    lon0, lat0 = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    dom = ds.public_domain(5)
    c = to_local(np.array([lon0]), np.array([lat0]), ds.crs)[0]
    assert np.allclose([dom.x0 + dom.side / 2, dom.y0 + dom.side / 2], c, atol=50)
    assert 29_000 < dom.side < 31_000  # the square of 30 km around the place
    assert "Berlin (DE" in what and "30 km" in what


def test_the_file_source_takes_a_place_as_its_region(tmp_path):
    path = tmp_path / "people.csv"
    rng = np.random.default_rng(0)
    lon, lat = rng.normal(13.40, 0.04, 500), rng.normal(52.52, 0.025, 500)
    path.write_text("lon,lat\n" + "\n".join(f"{a:.6f},{b:.6f}" for a, b in zip(lon, lat)))
    opts = {"path": str(path), "place": "Berlin, DE", "radius_km": 15}
    res = run(RunConfig(dataset="file", dataset_options=opts, mechanism="identity", depth=4, mode="release"))
    doc = manifest(res)
    assert doc["dataset"]["region_frame"].startswith("the square of 30 km around Berlin (DE")
    assert doc["dataset"]["region_lonlat"] == pytest.approx(list(place_frame("Berlin, DE", 15)[0]))
    assert doc["dataset"]["region_from_data"] is False and doc["side_information"] == []
