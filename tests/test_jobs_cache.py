"""The run cache on disk holds data only: nothing read from it is
unpickled, every entry is verified, and stale temporaries are cleaned at start."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import time
import zipfile

import numpy as np
import pytest

from engine.core.cache import cache_dir
from engine.run import RunConfig, run
from engine.run.execution import _config as run_config
from engine.run.execution import _result_cache as result_cache
from engine.run.execution._result_cache import run_cache_path


def config(mechanism="identity", **kw) -> RunConfig:
    base = dict(
        dataset="synthetic:monocentric",
        dataset_options={"n": 4000, "seed": 2},
        mechanism=mechanism,
        depth=5,
        epsilon=1.0,
        seed=3,
    )
    base.update(kw)
    return RunConfig(**base)


class RunsCode:
    """Unpickling this creates ``marker`` (any code could run in its place)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickles(cfg: RunConfig, marker, monkeypatch) -> list:
    """A code-running pickle at every name a cache reader could open for ``cfg``: a pickled
    ``<key>.pkl`` (under this engine's key and under the key of cache format 1, a pickled
    one) and the ``<key>.npz``, plus a pickled object array inside a
    real npz (read only with allow_pickle=True)."""
    runs = cache_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    payload = pickle.dumps(RunsCode(marker))
    with monkeypatch.context() as m:
        m.setattr(run_config, "CACHE_VERSION", 1)
        old_key = cfg.key()
    paths = [runs / f"{cfg.key()}.pkl", runs / f"{old_key}.pkl", run_cache_path(cfg)]
    for p in paths:
        p.write_bytes(payload)
    return paths


def test_a_planted_pickle_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    cfg = config(seed=11)
    plant_pickles(cfg, marker, monkeypatch)
    res = run(cfg)
    assert not marker.exists()
    assert not res.cached and res.timings["mechanism_s"] > 0  # computed afresh
    again = run(cfg)  # the planted file was replaced by a verified entry
    assert again.cached and np.array_equal(again.release.density, res.release.density)
    assert not marker.exists()


def test_a_pickled_array_inside_an_npz_is_not_loaded(tmp_path):
    marker = tmp_path / "pwned"
    cfg = config(seed=12)
    path = run_cache_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:  # np.savez pickles object arrays: np.load(allow_pickle=True) would run it
        np.savez(f, doc=np.array([RunsCode(marker)], dtype=object), digest=np.zeros(3, np.uint8))
    res = run(cfg)
    assert not marker.exists() and not res.cached
    assert run(cfg).cached


def test_the_engine_never_unpickles():
    """No module of the engine (benchmarks included) imports pickle (or joblib/dill), and
    every np.load says allow_pickle=False."""
    for p in (run_config.ROOT / "engine").rglob("*.py"):
        text = p.read_text()
        for word in ("import pickle", "import joblib", "import dill", "import cloudpickle", "pickle.load"):
            assert word not in text, f"{p}: {word}"
        for line in text.splitlines():
            if "np.load(" in line:
                assert "allow_pickle=False" in line, f"{p}: {line.strip()}"


# --------------------------------------------------------------------- round trip
def same(a, b, where="result") -> None:
    """Deep equality with types: dict key order and key types, tuple vs list, dtypes."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys"
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
    elif isinstance(a, float):
        assert a == b or (np.isnan(a) and np.isnan(b)), f"{where}: {a} != {b}"
    elif dataclasses.is_dataclass(a):  # a release's typed part: field by field
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# a spread of release shapes: plain maps, partitions, int-keyed dicts of arrays (cms sketches), typed parts
# (noise models with labels, area weights or a tree's covariance; levels, heat layers, warnings), numpy scalars
ROUND_TRIP = ["identity", "ug", "ag", "hierarchical", "adaptive_hh", "sparse_emd", "cms_hierarchical", "privtree"]
ROUND_TRIP += ["laplace_regions", "dawa"]


@pytest.mark.parametrize("mechanism", ROUND_TRIP)
def test_a_cached_result_equals_the_fresh_one(mechanism):
    cfg = config(mechanism, seed=21)
    fresh = run(cfg)
    assert not fresh.cached and run_cache_path(cfg).is_file()
    back = run(cfg)
    assert back.cached
    same(back.truth, fresh.truth, "truth")
    for name in ("metrics", "timings", "n_users", "n_points", "dataset_meta", "config", "crs", "evaluation"):
        same(getattr(back, name), getattr(fresh, name), name)
    r, f = back.release, fresh.release
    for name in ("density", "partition", "diagnostics", "extras", "quantity", "domain", "communication"):
        same(getattr(r, name), getattr(f, name), name)
    for name in ("noise", "measurements", "levels", "heat", "regional", "proportion", "warnings", "regions_counted"):
        same(getattr(r, name), getattr(f, name), name)
    assert r.ledger.entries == f.ledger.entries and r.ledger.to_dict() == f.ledger.to_dict()
    assert (r.server_view.kind, r.server_view.description) == (f.server_view.kind, f.server_view.description)
    same(back.summary(), fresh.summary(), "summary")
    if f.levels:  # Explore's level slider reads these per-level snapshots
        assert isinstance(r.levels[0].counts, np.ndarray)


def test_the_evaluation_record_round_trips_through_the_cache():
    """What a mechanism computed from the truth (RunResult.evaluation) is stored with
    the result: arrays, lists with None, numbers."""
    cfg = config("identity", seed=22)
    fresh = run(cfg, use_cache=False)
    fresh.evaluation = {"region_true_mean": np.array([40.5, np.nan]), "nrmse_per_region": [None, 0.1], "users": 5}
    doc, arrays = result_cache._encode(fresh)
    back = result_cache._decode(json.loads(doc), arrays, cfg)
    same(back.evaluation, fresh.evaluation, "evaluation")


@pytest.mark.parametrize(
    "mechanism,what",
    [
        ("bitpush_mean", "candidates"),  # the Attack page asks server_view.candidates for a user's region
        ("ldp_grid", "candidates"),
        ("federated_rff_kde", "surface"),  # the Attack page draws server_view.surface
        ("identity_paramselect", "range_answerer"),  # the Ranges page answers from the model
    ],
)
def test_results_with_callables_pages_need_are_not_cached(mechanism, what):
    """A callable cannot be stored as data; rather than serve a result without it, such a
    result is not cached (the dashboard keeps it in memory)."""
    cfg = config(mechanism, seed=22, dataset_options={"n": 1500, "seed": 2})
    fresh = run(cfg)
    view = fresh.release.server_view
    held = {"candidates": view.candidates, "surface": view.surface, "range_answerer": fresh.release.range_answerer}
    assert held[what] is not None
    assert not run_cache_path(cfg).exists() and not run(cfg).cached


# ---------------------------------------------------------------- verification
def _members(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _rewrite(path, members) -> None:
    with path.open("wb") as f:
        np.savez(f, **members)


def _density_member(members) -> str:
    doc = json.loads(members["doc"].tobytes())
    return doc["release"]["density"]["__a"]


def test_a_tampered_entry_is_discarded_and_recomputed():
    cfg = config(seed=31)
    fresh = run(cfg)
    path = run_cache_path(cfg)
    m = _members(path)
    name = _density_member(m)
    m[name] = m[name].copy()
    m[name][0, 0] += 1000.0  # the payload changes, its stored digest does not
    _rewrite(path, m)
    back = run(cfg)
    assert not back.cached  # discarded, recomputed
    assert np.array_equal(back.release.density, fresh.release.density)
    assert run(cfg).cached  # and stored again, verified


@pytest.mark.parametrize("damage", ["shape", "schema", "doc", "compressed", "truncated"])
def test_entries_failing_any_check_are_discarded(damage):
    """Checks beyond the digest (which a writer could recompute): schema version, shapes,
    document well-formed, members stored uncompressed (nothing expands), a readable zip."""
    cfg = config(seed=40)
    fresh = run(cfg)
    path = run_cache_path(cfg)
    m = _members(path)
    doc = json.loads(m["doc"].tobytes())
    arrays = {k: v for k, v in m.items() if k not in ("doc", "digest")}
    if damage == "shape":
        arrays[_density_member(m)] = np.zeros((3, 3))
    elif damage == "schema":
        doc["schema"] = 999
    elif damage == "doc":
        doc["release"]["extras"] = {"__not_a_tag": 1}
    if damage in ("shape", "schema", "doc"):
        raw = json.dumps(doc).encode()
        m = {
            **arrays,
            "doc": np.frombuffer(raw, np.uint8),
            "digest": np.frombuffer(result_cache._digest(raw, arrays), np.uint8),
        }
        _rewrite(path, m)
    elif damage == "compressed":
        with path.open("wb") as f:
            np.savez_compressed(f, **m)
    else:
        path.write_bytes(path.read_bytes()[:-100])
    back = run(cfg)
    assert not back.cached and np.array_equal(back.release.density, fresh.release.density)
    with zipfile.ZipFile(path) as zf:  # rewritten as a good entry
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    assert run(cfg).cached


def test_an_entry_under_another_configurations_name_is_not_served():
    a, b = config(seed=51), config(seed=52)
    run(a)
    run_cache_path(b).write_bytes(run_cache_path(a).read_bytes())
    res = run(b)
    assert not res.cached and res.config == b


# ------------------------------------------------------------ stale temporaries
def test_stale_temporaries_are_cleaned_when_the_cache_is_first_used(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    runs, dl, derived = root / "runs", root / "downloads", root / "downloads" / "derived"
    free = root / "data_free" / "hdmm_strategy"
    for d in (runs, dl, derived, free):
        d.mkdir(parents=True)
    old = time.time() - 3600
    stale = [
        runs / "0123abcd.5f5f.tmp",  # a run entry being written when the server was killed
        dl / ".loc-gowalla_totalCheckins.txt.gz.4242.deadbeef.part.gz",  # engine.data.online's download
        derived / ".gowalla-boston-1234.npz.4242.deadbeef.part.npz",
        free / ".0a1b2c.5e5e.tmp",  # a data-free array being written (engine.core.cache.data_free)
    ]
    fresh = [runs / "89abcdef.6e6e.tmp", dl / ".x.gz.1.cafe.part.gz", free / ".3d4e5f.6f6f.tmp"]  # a writer's
    kept = [runs / "feedbeef.npz", dl / "ab12-file.txt.gz", runs / "notes.txt", free / "0a1b2c.f64"]
    legacy = runs / "0123abcd.pkl"  # a pickled entry: never read, removed
    for p in stale + fresh + kept + [legacy]:
        p.write_bytes(b"x")
    for p in stale + kept + [legacy]:
        os.utime(p, (old, old))
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(root))
    assert cache_dir() == root
    assert not any(p.exists() for p in stale + [legacy])
    assert all(p.exists() for p in fresh + kept)
