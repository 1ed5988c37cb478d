"""The run-time cost model behind the dashboard's estimate before Run (engine/run/execution/_estimates.py)."""

from __future__ import annotations

import math

import pytest

from engine.mechanisms import registry
from engine.run import RunConfig
from engine.run.execution import _estimates as estimates
from engine.run.execution import estimate_seconds, load_dataset, run


@pytest.fixture(autouse=True)
def fresh_history(monkeypatch):
    """A fresh history on a quiet machine (load 0, so the load factor is 1) unless a test says."""
    estimates.forget_history()
    monkeypatch.setattr(estimates.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    yield
    estimates.forget_history()


def test_a_busy_machine_scales_the_estimate_and_the_history_is_stored_without_it(monkeypatch):
    """Load 5 on 2 cores: a new run gets about 2/6 of the machine, 3x the quiet time. A run
    measured at that load and then estimated on a quiet machine is its quiet time again."""
    monkeypatch.setattr(estimates.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    n = 100_000
    ug = RunConfig(mechanism="ug", dataset_options={"n": n})
    quiet = estimate_seconds(ug, n_points=n)
    monkeypatch.setattr(estimates.os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    assert estimates.load_factor() == pytest.approx(3.0)
    assert estimate_seconds(ug, n_points=n) == pytest.approx(3 * quiet)
    estimates.record(ug, 3 * quiet, n)  # measured at load 5: as fast as the calibration, once the load is known
    monkeypatch.setattr(estimates.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert estimates.load_factor() == 1.0  # fewer runnable processes than cores
    assert estimate_seconds(ug, n_points=n) == pytest.approx(estimates.model_seconds(ug, n))


def test_table_has_a_row_for_every_heatmap_mechanism():
    reg = registry()
    table = estimates.table()
    missing = [k for k in reg if "value" not in reg[k].needs and k not in table]
    assert not missing, f"calibrate them: python scripts/calibrate_costs.py --only {','.join(missing)}"
    for row in table.values():
        assert all(math.isfinite(v) and v >= 0 for v in row.values())


def test_work_terms_follow_the_algorithms():
    def snh(**p):
        return estimates.features(RunConfig(mechanism="snh", params=p), 100_000)["W"]

    # quality: 1,500 steps of 1,024 queries, fast: 3,000 of 256 (whole passes: about 2x); the work is per network
    assert snh(preset="quality") == pytest.approx(2 * snh(preset="fast"), rel=0.02)
    assert snh(k=4) == pytest.approx(snh(k=8) / 2)

    def rff(**p):
        return estimates.features(RunConfig(mechanism="federated_rff_kde", params=p), 100_000)

    # every user sends B features per answered bandwidth; the attack grows with the users attacked
    assert rff(B=8)["P"] == pytest.approx(4 * rff(B=2)["P"])
    assert rff(extra_bandwidths="9")["P"] == pytest.approx(2 * rff()["P"])
    assert rff(attack_users=0)["W"] < rff()["W"]
    assert estimates.features(RunConfig(depth=10), 1)["C"] == pytest.approx(
        16 * estimates.features(RunConfig(), 1)["C"]
    )


def test_model_is_the_documented_formula():
    c = {"fixed_s": 0.5, "points_s": 2.0, "cells_s": 3.0, "points_cells_s": 13.0, "work_s": 5.0, "secure_s": 7.0}
    c["first_s"] = 11.0
    cells = 4**8 / 1e6
    secure = RunConfig(secure=True)
    assert estimates.model_seconds(secure, 200_000, first=True, coeffs=c) == pytest.approx(
        0.5 + 2 * 0.2 + 3 * cells + 13 * 0.2 * cells + 7 * cells + 11
    )
    # release mode draws secure noise too; the work term counts for SNH
    assert estimates.model_seconds(RunConfig(mode="release"), 200_000, coeffs=c) == pytest.approx(
        0.5 + 2 * 0.2 + 10 * cells + 13 * 0.2 * cells
    )
    snh = RunConfig(mechanism="snh")
    w = estimates.features(snh, 1)["W"]
    assert estimates.model_seconds(snh, 0, coeffs=c) == pytest.approx(0.5 + 3 * cells + 5 * w)


def test_measured_runs_scale_the_estimate():
    n = 100_000
    ug = RunConfig(mechanism="ug", dataset_options={"n": n})
    first = estimates.model_seconds(ug, n, first=True)
    assert estimate_seconds(ug, n_points=n) == pytest.approx(first)  # first run here: imports included
    estimates.record(ug, 3 * first, n)  # this machine is 3x slower than the calibration's
    assert estimate_seconds(ug, n_points=n) == pytest.approx(3 * estimates.model_seconds(ug, n))
    # a mechanism not run yet takes the speed factor of the others once three runs are known
    other = RunConfig(mechanism="privtree", dataset_options={"n": n})
    assert estimate_seconds(other, n_points=n) == pytest.approx(estimates.model_seconds(other, n, first=True))
    for m in ("identity", "uniform"):
        cfg = RunConfig(mechanism=m, dataset_options={"n": n})
        estimates.record(cfg, 2 * estimates.model_seconds(cfg, n, first=True), n)
    assert estimate_seconds(other, n_points=n) == pytest.approx(2 * estimates.model_seconds(other, n, first=True))


def test_points_come_from_the_loaded_dataset_and_the_sampled_users():
    cfg = RunConfig(dataset="synthetic:monocentric", dataset_options={"n": 3000, "seed": 7})
    assert estimates._points(cfg, None) == 3000  # not loaded: the source's size option
    ds = load_dataset(cfg.dataset, cfg.dataset_options)
    assert estimates._points(cfg, None) == len(ds)
    sampled = RunConfig(dataset=cfg.dataset, dataset_options=cfg.dataset_options, n_users=500)
    assert estimates._points(sampled, None) == 500  # one location per user in a synthetic city
    assert estimates._points(RunConfig(dataset="synthetic:sprawl"), None) == 100_000  # the source's default


def test_a_run_is_recorded_and_a_cached_result_is_instant(tmp_path, monkeypatch):
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(tmp_path))
    cfg = RunConfig(dataset_options={"n": 4000}, depth=5, seed=3)
    assert estimate_seconds(cfg) == pytest.approx(estimates.model_seconds(cfg, 4000, first=True))
    res = run(cfg)
    assert len(estimates._RATIOS["identity"]) == 1  # engine.run.execution.run told the model how long it took
    assert res.timings["total_s"] > 0
    assert estimate_seconds(cfg) == estimates.CACHED_S  # now read from the disk cache
