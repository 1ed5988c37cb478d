import json

import numpy as np
import pytest

from engine.core.accounting import Ledger
from engine.core.errors import EngineError, ParamError
from engine.core.params import Param, Schema
from engine.run import RunConfig, run
from engine.run.execution import JobManager


def test_param_coercion_and_ranges():
    p = Param("w", "int", 20, min=1, max=100)
    assert p.coerce("30") == 30 and p.coerce(None) == 20 and p.coerce(5.0) == 5
    for bad in ("abc", 2.5, 0, 101, True):
        with pytest.raises(ParamError):
            p.coerce(bad)
    f = Param("sigma", "float", 1.0, min=0)
    with pytest.raises(ParamError):
        f.coerce("nan")
    b = Param("clip", "bool", False)
    assert b.coerce("true") is True and b.coerce("0") is False
    c = Param("mode", "choice", "a", choices=("a", "b"))
    with pytest.raises(ParamError, match="not one of"):
        c.coerce("z")
    s = Schema((p, b))
    assert s.resolve({"clip": "yes"}) == {"w": 20, "clip": True}
    with pytest.raises(ParamError, match="unknown parameter"):
        s.resolve({"nope": 1})


def test_ledger_composition():
    led = Ledger()
    led.spend("level 0", 0.2)
    led.spend("cells A", 0.5, composition="parallel", group="cells")
    led.spend("cells B", 0.3, composition="parallel", group="cells")
    assert np.isclose(led.total(), 0.7)
    led.check(0.7)
    with pytest.raises(AssertionError):
        led.check(0.69)
    led.note_side_information("true total N")
    d = led.to_dict()
    assert d["side_information"] == ["true total N"] and len(d["entries"]) == 3
    with pytest.raises(ParamError, match="finite number >= 0"):
        led.spend("x", -1)


def small_config(**kw):
    base = dict(dataset="synthetic:monocentric", dataset_options={"n": 5000, "seed": 1}, depth=6, epsilon=1.0, seed=0)
    base.update(kw)
    return RunConfig(**base)


def test_run_deterministic_by_seed_and_cached():
    a = run(small_config(), use_cache=False)
    b = run(small_config(), use_cache=False)
    assert np.array_equal(a.release.density, b.release.density)
    c = run(small_config(seed=1), use_cache=False)
    assert not np.array_equal(a.release.density, c.release.density)
    # the cache returns an identical result
    first = run(small_config(seed=7))
    again = run(small_config(seed=7))
    assert again.cached and not first.cached
    assert np.array_equal(first.release.density, again.release.density)
    assert first.metrics == again.metrics
    # the truth does not depend on the mechanism's noise
    assert np.array_equal(a.truth, c.truth)
    assert a.truth.sum() == a.n_points


def test_users_own_file_is_never_cached_on_disk(tmp_path):
    from engine.run.execution._result_cache import run_cache_path

    rng = np.random.default_rng(0)
    path = tmp_path / "mine.csv"

    def write(n):
        lat, lon = 51.5 + rng.normal(0, 0.01, n), -0.12 + rng.normal(0, 0.01, n)
        path.write_text("lat,lon\n" + "".join(f"{a:.6f},{b:.6f}\n" for a, b in zip(lat, lon)))

    write(400)
    cfg = RunConfig(dataset="file", dataset_options={"path": str(path)}, depth=5, epsilon=1.0, seed=0)
    first = run(cfg)
    assert not run_cache_path(cfg).exists()  # the true map stays off the disk
    write(900)  # the same configuration on an edited file reads the new file
    again = run(cfg)
    assert not again.cached and (first.n_points, again.n_points) == (400, 900)


def test_cache_key_follows_the_engine_source(tmp_path, monkeypatch):
    """A changed engine (source or shipped table) gets new cache keys, so a release computed by
    older code is never served as this code's; benchmark modules and docs do not count."""
    from engine.run.execution import _config as config

    fp = config.source_fingerprint.__wrapped__  # uncached, on a made-up tree
    (tmp_path / "engine" / "bench").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    src, table = tmp_path / "engine" / "m.py", tmp_path / "data" / "t.csv"
    src.write_text("x = 1\n")
    table.write_text("a\n1\n")
    first = fp(tmp_path)
    assert fp(tmp_path) == first
    (tmp_path / "engine" / "bench" / "suite.py").write_text("y = 1\n")
    (tmp_path / "data" / "README.md").write_text("notes\n")
    assert fp(tmp_path) == first
    src.write_text("x = 2\n")
    second = fp(tmp_path)
    assert second != first
    table.write_text("a\n2\n")
    assert fp(tmp_path) not in (first, second)
    key = small_config().key()
    monkeypatch.setattr(config, "source_fingerprint", lambda: "another engine")
    assert small_config().key() != key


def test_config_key_and_validation():
    assert small_config().key() == small_config().key()
    assert small_config().key() != small_config(epsilon=2.0).key()
    assert RunConfig.from_dict(small_config().to_dict()) == small_config()
    with pytest.raises(ParamError):
        RunConfig.from_dict({"bogus": 1})
    for bad in (dict(epsilon=0.0), dict(epsilon=1e9), dict(depth=11), dict(n_users=0), dict(seed=-1)):
        with pytest.raises(ParamError):
            run(small_config(**bad), use_cache=False)
    with pytest.raises(ParamError):
        run(small_config(mechanism="no-such-mechanism"), use_cache=False)
    with pytest.raises(ParamError):
        run(small_config(params={"clip_negatives": "maybe"}), use_cache=False)


def test_sampling_users_reduces_points():
    r = run(small_config(n_users=1000), use_cache=False)
    assert r.n_users == 1000 and r.truth.sum() == 1000


def test_progress_and_cancel():
    seen = []
    run(small_config(), progress=lambda f, m: seen.append(f), use_cache=False)
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    from engine.core.errors import Cancelled

    with pytest.raises(Cancelled):
        run(small_config(), cancelled=lambda: True, use_cache=False)


def test_job_manager_runs_and_reports_errors():
    jm = JobManager(workers=2)
    try:
        ok = jm.submit(small_config(seed=3), use_cache=False)
        bad = jm.submit(small_config(epsilon=-1.0), use_cache=False)
        ok.future.result(timeout=60)
        bad.future.exception(timeout=60)
        status, res = ok.outcome()
        assert status == "ok" and res.metrics["mse"] >= 0
        status, msg = bad.outcome()
        assert status == "error" and "epsilon" in msg
        assert jm.get(ok.id) is ok
    finally:
        jm.shutdown()


def test_summary_is_json(tmp_path):
    r = run(small_config(), use_cache=False)
    s = json.loads(json.dumps(r.summary(), default=float))
    assert s["ledger"]["total_epsilon"] <= 1.0 + 1e-12
    assert s["config"]["mechanism"] == "identity"


def test_engine_error_is_user_facing():
    assert issubclass(ParamError, EngineError)


def test_truth_counts_each_user_once():
    r = run(
        small_config(dataset_options={"n": 6000, "seed": 1, "locations_per_user": 3}, n_users=500),
        use_cache=False,
    )
    assert r.n_users == 500 and r.n_points == 1500
    assert np.isclose(r.truth.sum(), 500)


def test_per_user_histogram_with_zero_weight_user():
    from engine.core.grid import Domain
    from engine.data.synthetic import generate

    ds = generate("monocentric", 40, 0)
    uid = np.repeat(np.arange(20), 2)
    w = np.ones(40)
    w[:2] = 0.0  # user 0 has zero total weight
    from dataclasses import replace

    ds = replace(ds, user_id=uid, weight=w)
    dom = Domain.around(*ds.xy.min(0), *ds.xy.max(0), 3)
    h = ds.true_histogram(dom, per_user_normalised=True)
    assert np.isfinite(h).all() and np.isclose(h.sum(), 19)
