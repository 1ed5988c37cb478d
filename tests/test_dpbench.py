"""bench dpbench (engine/bench/dpbench.py) and average regret (engine/metrics/regret.py): the sampler, the
weighted-cell shortcut against the expanded points, the message when DPBench's data are absent, and the
regret arithmetic on hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.bench import SUITES
from engine.bench.dpbench import METHODS, PARAMS, absent_message, load_shapes, regret_table, sample_points
from engine.mechanisms import RunContext, get
from engine.metrics.regret import average_regret, regrets


def _shape(seed=0):
    rng = np.random.default_rng(seed)
    h = np.zeros((256, 256))
    h[rng.integers(0, 256, 300), rng.integers(0, 256, 300)] = rng.random(300)
    return h / h.sum()


def test_suite_is_registered():
    assert "dpbench" in SUITES


def test_absent_data_says_so_and_falls_back(tmp_path):
    said = []
    shapes = load_shapes(("cabspottingS",), folder=tmp_path / "nowhere", progress=said.append)
    assert said == [absent_message(tmp_path / "nowhere")]
    assert "DPBench's 2-D data not found at" in said[0] and "skipped" in said[0]
    ((name, shape),) = shapes.items()
    assert "fallback" in name and shape.shape == (256, 256) and shape.sum() == pytest.approx(1.0)


def test_present_data_is_read_and_normalised(tmp_path):
    h = _shape() * 1000
    np.save(tmp_path / "twitter_256_256.npy", h)
    said = []
    shapes = load_shapes(("twitter", "checkin"), folder=tmp_path, progress=said.append)
    assert list(shapes) == ["twitter"] and not said
    assert np.allclose(shapes["twitter"], h / h.sum())
    np.save(tmp_path / "checkin_256_256.npy", np.ones((4, 4)))
    with pytest.raises(ValueError, match="256 x 256"):
        load_shapes(("checkin",), folder=tmp_path)


def test_multinomial_sample_has_the_scale_and_lives_on_the_shape():
    shape = _shape(1)
    data, dom, counts = sample_points(shape, 12_345, np.random.default_rng(0))
    assert counts.sum() == 12_345 and data.weight.sum() == 12_345
    assert np.all(counts[shape == 0] == 0)
    assert np.array_equal(data.true_histogram(dom), counts)


def test_weighted_cells_release_what_the_expanded_points_release():
    """Every method of the bench, same seed: the weighted-cell sample (unit = record) and the sample as one
    point per location give bit-identical maps."""
    shape = _shape(2)
    cells, dom, counts = sample_points(shape, 20_000, np.random.default_rng(3))
    points, _, counts2 = sample_points(shape, 20_000, np.random.default_rng(3), expand=True)
    assert np.array_equal(counts, counts2) and len(points) == 20_000
    for key in METHODS:
        cls = get(key)
        p = cls.schema().resolve(PARAMS)
        a = cls().run(cells, dom, 1.0, p, RunContext(rng=np.random.default_rng(9))).density
        b = cls().run(points, dom, 1.0, p, RunContext(rng=np.random.default_rng(9))).density
        assert np.array_equal(a, b), key


# ------------------------------------------------------------------ regret
def test_regret_is_error_over_the_best_of_each_setting():
    errors = {
        "s1": {"a": 1.0, "b": 2.0, "c": 4.0},
        "s2": {"a": 30.0, "b": 12.0, "c": 9.0},
    }
    got = regrets(errors)
    assert got["s1"] == {"a": 1.0, "b": 2.0, "c": 4.0}
    assert got["s2"] == pytest.approx({"a": 30 / 9, "b": 12 / 9, "c": 1.0})
    avg = average_regret(errors)
    assert avg == pytest.approx({"b": (2 + 12 / 9) / 2, "a": (1 + 30 / 9) / 2, "c": 2.5})
    assert list(avg) == ["b", "a", "c"]  # best first
    # the mean raw error ranks otherwise: the large setting dominates it
    mean_rank = sorted("abc", key=lambda m: np.mean([errors[s][m] for s in errors]))
    assert mean_rank[0] == "c" and list(avg)[0] == "b"


def test_regret_uses_common_settings_and_handles_zero_and_nan():
    errors = {"s1": {"a": 1.0, "b": 2.0}, "s2": {"a": 1.0}, "s3": {"a": 0.0, "b": 0.0}, "s4": {"a": math.nan, "b": 1.0}}
    # s2 lacks b, s4 has no finite error for a: only s1 and s3 count
    assert average_regret(errors, ["a", "b"]) == {"a": 1.0, "b": 1.5}
    assert regrets({"s": {"a": 0.0, "b": 1.0}})["s"] == {"a": 1.0, "b": math.inf}
    assert average_regret({}) == {}
    with pytest.raises(ValueError, match="non-negative"):
        regrets({"s": {"a": -1.0}})


def test_regret_table_bands():
    res = {
        ("d", 1_000, 1.0): {"dawa": [(1.0, 0.0)], "identity": [(2.0, 0.0), (4.0, 0.0)]},
        ("d", 10_000_000, 1.0): {"dawa": [(3.0, 0.0)], "identity": [(1.0, 0.0)]},
    }
    t = regret_table(res, ("dawa", "identity"))
    assert t["small"] == {"dawa": 1.0, "identity": 3.0}
    assert t["large"] == {"identity": 1.0, "dawa": 3.0}
    assert t["all"] == {"dawa": 2.0, "identity": 2.0}


def test_findings_set_the_best_of_each_class_side_by_side_per_band_and_at_the_largest_scale():
    """Regrets by hand: small (10^3) dawa 1, ag 2, hdmm 3, identity 4, uniform 10; at 10^6 dawa 1, identity 1.5,
    hdmm 2, ag 4, uniform 10; at 10^7 identity 1, dawa 1.4, hdmm 3, ag 4.5, uniform 15. Uniform is in neither
    class."""
    from engine.bench.dpbench import findings

    errors = {
        1_000: {"dawa": 1, "ag": 2, "identity": 4, "hdmm": 3, "uniform": 10},
        1_000_000: {"dawa": 2, "ag": 8, "identity": 3, "hdmm": 4, "uniform": 20},
        10_000_000: {"dawa": 2.8, "ag": 9, "identity": 2, "hdmm": 6, "uniform": 30},
    }
    res = {("d", n, 1.0): {m: [(e, 0.0)] for m, e in by.items()} for n, by in errors.items()}
    methods = ("dawa", "ag", "identity", "hdmm", "uniform")
    figs = {f.name: f for f in findings(res, regret_table(res, methods), methods)}
    ratio = "finding/independent_over_dependent/"
    assert figs[ratio + "small"].value == pytest.approx(3.0)  # hdmm 3 over dawa 1
    assert figs[ratio + "large"].value == pytest.approx(1.25 / 1.2)  # identity (1.5 + 1)/2 over dawa (1 + 1.4)/2
    assert figs[ratio + "n=10^7"].value == pytest.approx(1 / 1.4)
    assert figs[ratio + "all"].value == pytest.approx(((4 + 1.5 + 1) / 3) / ((1 + 1 + 1.4) / 3))
    beaten = figs["finding/beaten_by_identity/large"]
    assert beaten.value == 3 and beaten.unit == "methods of 4" and beaten.note.endswith("ag, hdmm, uniform")
    assert figs["finding/dawa_best_at_small_scale"].value == 1.0
    del res[("d", 10_000_000, 1.0)]
    names = {f.name for f in findings(res, regret_table(res, methods), methods)}
    assert ratio + "large" in names and not any("10^7" in n for n in names)  # no 10^7 setting, no 10^7 figure


# ------------------------------------------------------------------ the bound column
def test_bound_column_is_each_methods_rmse_over_the_bound_of_the_setting():
    """Per setting the RMSE is the root of the mean of the trials' squared RMSE; a band reports the median, least
    and largest ratio over its settings; runs measured without an RMSE (old tuples) are left out."""
    from engine.bench.dpbench import bound_table

    res = {
        ("d", 1_000, 1.0): {"identity": [(0.1, 0.0, 3.0), (0.1, 0.0, 4.0)], "dawa": [(0.1, 0.0, 0.5)]},
        ("d", 10_000, 1.0): {"identity": [(0.1, 0.0, 1.0)], "dawa": [(0.1, 0.0, 2.0)], "ug": [(0.1, 0.0)]},
    }
    bounds = {("d", 1_000, 1.0): 0.5, ("d", 10_000, 1.0): 0.25}
    t = bound_table(res, bounds)
    assert set(t) == {"small", "all"}  # no large-scale setting
    first = math.sqrt((9 + 16) / 2) / 0.5
    assert t["small"]["identity"] == pytest.approx(((first + 4.0) / 2, 4.0, first))
    assert t["small"]["dawa"] == pytest.approx((4.5, 1.0, 8.0))
    assert "ug" not in t["small"]


def test_scaled_rmse_and_bound_share_the_scale_and_the_matrix_mechanisms_are_marked():
    from engine.bench.central import random_rectangles
    from engine.bench.dpbench import markdown_table, scaled_bound, scaled_rmse
    from engine.core.workload import RangeWorkload
    from engine.metrics.lower_bound import rmse_bound

    rects = random_rectangles(256, 50)
    truth = _shape(4) * 1000
    noisy = truth + np.random.default_rng(5).laplace(0, 1.0, truth.shape)
    W = RangeWorkload.rectangles(rects, 256)
    diff = (W.cy @ (noisy - truth) @ W.cx.T).diagonal()  # each rectangle's error
    assert scaled_rmse(truth, noisy, rects) == pytest.approx(np.sqrt(np.mean(diff**2)) / truth.sum())
    assert scaled_bound(rects, 1000, 0.5) == pytest.approx(rmse_bound(W, 0.5) / 1000)
    md = markdown_table({"all": {"hdmm": 1.0, "dawa": 1.5}}, {"all": {"hdmm": (3.9, 3.8, 4.0), "dawa": (1, 0.2, 9)}})
    assert "| hdmm (matrix mechanism) | 1.00 | 3.9 (3.8-4) |" in md and "| dawa | 1.50 | 1 (0.2-9) |" in md
    assert "hdmm" in METHODS
