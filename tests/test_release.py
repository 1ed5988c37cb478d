"""Evaluate and Release modes: a release uses OpenDP noise and fresh
entropy, records no seed, is never cached, and its files (GeoTIFF, GeoJSON, CSV, manifest) hold
no true count, no metric, no seed; evaluations are stamped; an Evaluate run's default seed is
drawn fresh and printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from engine.core.errors import ParamError
from engine.data.files import load_file
from engine.run import run
from engine.run.bookkeeping import _ledger as ledger
from engine.run.bookkeeping import fingerprint_people
from engine.run.execution._config import FRESH_SEED_BITS, RunConfig, fresh_seed
from engine.run.execution._release_files import (
    EVALUATION,
    csv_grid,
    geojson_grid,
    geotiff_grid,
    manifest,
    stamp_of,
    write_release,
)
from engine.run.execution._result_cache import run_cache_path

SYNTH = {"dataset": "synthetic:monocentric", "dataset_options": {"n": 3000, "locations_per_user": 2, "seed": 4}}
FORBIDDEN_KEYS = {"seed", "n_users", "n_points", "truth", "metrics", "diagnostics", "extras"}


@pytest.fixture(autouse=True)
def ledger_db(tmp_path, monkeypatch):
    """Every test books its releases in a ledger of its own."""
    path = tmp_path / "ledger.sqlite3"
    monkeypatch.setenv(ledger.ENV, str(path))
    return path


@pytest.fixture(scope="module")
def points_csv(tmp_path_factory):
    """A user's own file: 1,237 people, 2,473 locations (every person twice but the last)."""
    rng = np.random.default_rng(7)
    users = np.r_[np.repeat(np.arange(1236), 2), 1236]
    lat = 52.50 + rng.normal(0, 0.01, users.size)
    lon = 13.40 + rng.normal(0, 0.015, users.size)
    path = tmp_path_factory.mktemp("own") / "points.csv"
    path.write_text("user_id,lat,lon\n" + "".join(f"{u},{a:.6f},{b:.6f}\n" for u, a, b in zip(users, lat, lon)))
    return path


def cli(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def keys(x, path=()):
    """Every (path, key) of a JSON document."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield (*path, k)
            yield from keys(v, (*path, k))
    elif isinstance(x, list):
        for v in x:
            yield from keys(v, path)


def number_in(text: str, n: int) -> bool:
    """``n`` written as a whole number (``2473`` or ``2473.0``), not as a part of another number."""
    return re.search(rf"(?<![\d.]){n}(\.0+)?(?![\d.])", text) is not None


def read_release(folder) -> dict:
    """The release's files read back: manifest, the cells (the GeoJSON where written, else the GeoParquet, as
    GeoJSON text), CSV text and header, GeoTIFF grid and tags."""
    import geopandas as gpd
    from rasterio.io import MemoryFile

    out = {"manifest_text": (folder / "manifest.json").read_text()}
    out["manifest"] = json.loads(out["manifest_text"])
    gj = folder / "heatmap.geojson"
    out["geojson_text"] = gj.read_text() if gj.exists() else gpd.read_parquet(folder / "heatmap.parquet").to_json()
    out["csv_text"] = (folder / "heatmap.csv").read_text()
    with MemoryFile((folder / "heatmap.tif").read_bytes()) as mf, mf.open() as src:
        out["grid"] = src.read(1)[::-1]
        out["tags"] = {**src.tags(), **src.tags(1)}
    return out


def assert_nothing_from_the_truth(files: dict, counts: tuple[int, ...], metric_names, public_options: bool) -> None:
    """No key naming a seed, a count, the truth or a metric anywhere; no true count written as a
    number (``public_options``: a synthetic city's generator options, e.g. n, are its public
    definition and are left out of the number search); no metric name in any text."""
    man = files["manifest"]
    names = {k for *_, k in keys(man)}
    gj = json.loads(files["geojson_text"])
    names |= set(gj) | {k for f in gj["features"] for k in f["properties"]}
    names |= set(files["csv_text"].splitlines()[0].split(",")) | set(files["tags"])
    found = names & (FORBIDDEN_KEYS | set(metric_names))
    seeds = [p for p in keys(man) if p[-1] == "seed"]
    if public_options and seeds == [("parameters", "dataset_options", "seed")]:
        found.discard("seed")  # the synthetic generator's own option: which data, not the noise
    assert not found, found
    man_wo = {k: v for k, v in man.items() if k != "parameters"} if public_options else man
    texts = [json.dumps(man_wo), files["geojson_text"], files["csv_text"], json.dumps(files["tags"])]
    if public_options:
        texts.append(json.dumps({k: v for k, v in man["parameters"].items() if k != "dataset_options"}))
    for n in counts:
        assert not any(number_in(t, n) for t in texts), f"the true count {n} is in the release"
    words = [m for m in metric_names if len(m) >= 4 or m == "mse"]
    for t in texts:
        for m in words:
            assert not re.search(rf"\b{m}\b", t), f"metric {m!r} in the release"
    assert "evaluation" not in names and EVALUATION not in "".join(texts)


# ------------------------------------------------------------------ the configuration
@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"mode": "publish"}, "mode must be 'evaluate' or 'release'"),
        ({"mode": "release", "seed": 3}, "takes no seed"),
        ({"mode": "release", "metrics": ("emd",)}, "computes no metric"),
        ({"mode": "release", "mechanism": "nonprivate_level"}, "is not private: it cannot be released"),
    ],
)
def test_a_bad_mode_is_a_clear_error(kw, fragment):
    with pytest.raises(ParamError, match=re.escape(fragment)):
        RunConfig(**kw).validate()


def test_a_release_run_is_secure_fresh_uncached_and_holds_no_truth(monkeypatch):
    from engine.core import noise

    modes = []
    init = noise.NoiseSource.__init__

    def spy(self, rng, secure=False, cancel_cb=None):
        modes.append(secure)
        init(self, rng, secure=secure, cancel_cb=cancel_cb)

    monkeypatch.setattr(noise.NoiseSource, "__init__", spy)
    cfg = RunConfig(**SYNTH, depth=4, mode="release")  # secure=False: the mode forces it
    a, b = run(cfg), run(cfg)
    assert modes == [True, True]
    assert a.truth is None and a.metrics == {} and a.n_users is None and a.n_points is None
    assert not run_cache_path(cfg).exists() and not a.cached and not b.cached
    assert not np.array_equal(a.release.density, b.release.density)  # fresh noise every time
    s = a.summary()
    assert s["mode"] == "release" and not {k for *_, k in keys(s)} & (FORBIDDEN_KEYS - {"seed"})
    # an evaluation of the same configuration at a fixed seed is the same every time (the contrast)
    ev = RunConfig(**SYNTH, depth=4, seed=5)
    assert np.array_equal(run(ev, use_cache=False).release.density, run(ev, use_cache=False).release.density)


def test_write_release_files_round_trip_and_refuse_evaluations(tmp_path):
    cfg = RunConfig(**SYNTH, depth=4, mode="release", mechanism="ug")
    res = run(cfg)
    paths = write_release(res, tmp_path / "r", release_key="k1")
    files = read_release(tmp_path / "r")
    np.testing.assert_allclose(files["grid"], res.release.density.astype(np.float32))
    man = files["manifest"]
    assert man["release_key"] == "k1" and man["ledger"]["total_epsilon"] == res.release.ledger.total()
    assert man["grid"]["crs"] == res.crs and man["grid"]["cells_per_side"] == 16
    assert man["parameters"]["mechanism_params"]["c"] == 10.0  # resolved with the defaults
    assert set(man["files"]) == {"geotiff", "geoparquet", "geojson", "csv"} and set(paths) == {
        "geotiff",
        "geoparquet",
        "geojson",
        "csv",
        "manifest",
    }
    with pytest.raises(ParamError, match="already holds"):
        write_release(res, tmp_path / "r")
    with pytest.raises(ParamError, match="unknown export format"):
        write_release(res, tmp_path / "s", formats=("png",))
    ev = run(RunConfig(**SYNTH, depth=4, seed=1), use_cache=False)
    with pytest.raises(ParamError, match="only a Release-mode run"):
        write_release(ev, tmp_path / "t")
    with pytest.raises(ParamError, match="only a Release-mode run"):
        manifest(ev)


# ------------------------------------------------------------------ the command line
def test_cli_release_of_a_synthetic_city_holds_only_dp_outputs_and_differs_each_time(tmp_path, ledger_db):
    truth = run(RunConfig(**SYNTH, depth=5, seed=2), use_cache=False)
    opts = [f"--data-opt={k}={v}" for k, v in SYNTH["dataset_options"].items()]
    args = ["release", "--dataset", SYNTH["dataset"], *opts, "--depth", "5", "--epsilon", "0.5"]
    outs = [json.loads(cli(*args, "--out", str(tmp_path / d)).stdout) for d in ("a", "b")]
    a, b = read_release(tmp_path / "a"), read_release(tmp_path / "b")
    for files in (a, b):
        assert_nothing_from_the_truth(files, (truth.n_users, truth.n_points), truth.metrics, public_options=True)
    assert a["grid"].shape == (32, 32) and not np.array_equal(a["grid"], b["grid"])
    # the ledger shared by every process: each release is a new one
    fp = outs[0]["dataset_fingerprint"]
    assert fp == ledger.fingerprint_config(truth.config) and outs[1]["dataset_epsilon_spent"] == 1.0
    assert ledger.BudgetStore(ledger_db).spent(fp) == 1.0


def test_cli_release_of_an_own_csv_file_holds_no_true_count(tmp_path, points_csv, ledger_db):
    from engine.run import load_dataset

    ds = load_dataset("file", {"path": str(points_csv)})
    assert (ds.n_users, len(ds)) == (1237, 2473)
    ev = run(RunConfig(dataset="file", dataset_options={"path": str(points_csv)}, depth=4, seed=1))
    args = ["release", "--dataset", "file", "--data-opt", f"path={points_csv}", "--depth", "4", "--epsilon", "1"]
    out = json.loads(cli(*args, "--out", str(tmp_path / "a"), "--limit", "1.5").stdout)
    files = read_release(tmp_path / "a")
    assert_nothing_from_the_truth(files, (1237, 2473), ev.metrics, public_options=False)
    assert str(points_csv) not in files["manifest_text"]
    assert any("read off the data" in s for s in files["manifest"]["side_information"])
    assert out["dataset_fingerprint"] == fingerprint_people(load_file(points_csv.read_bytes(), "points.csv"))
    # a second release would pass the limit of 1.5: refused before any file is written
    p = cli(*args, "--out", str(tmp_path / "b"), "--limit", "1.5", check=False)
    assert p.returncode == 2 and p.stderr.startswith("error: refused") and p.stderr.count("\n") == 1
    assert not (tmp_path / "b").exists() and p.stdout == ""
    # a run that fails (the file has no value column) releases nothing and books nothing
    p = cli(*args, "--mechanism", "bitpush_mean_ldp", "--out", str(tmp_path / "c"), check=False)
    assert p.returncode == 2 and "needs the dataset attribute 'value'" in p.stderr
    assert ledger.BudgetStore(ledger_db).spent(out["dataset_fingerprint"]) == 1.0


BAD_RELEASE = [
    (["release"], "the following arguments are required: --out"),
    (["release", "--out", "{tmp}", "--format", "png"], "unknown format 'png'"),
    (["release", "--out", "{tmp}", "--format", "csv,csv"], "a format is given twice"),
    (["release", "--out", "{tmp}", "--format", ""], "without empty items"),
    (["release", "--out", "{tmp}", "--seed", "3"], "unrecognized arguments: --seed 3"),
    (["release", "--out", "{tmp}", "--secure"], "unrecognized arguments: --secure"),
    (["release", "--out", "{tmp}", "--no-cache"], "unrecognized arguments: --no-cache"),
    (["release", "--out", "{tmp}", "--epsilon", "0"], "epsilon must be between"),
    (["release", "--out", "{tmp}", "--limit", "x"], "epsilon 'x' is not a number"),
    (["release", "--out", "{tmp}", "--mechanism", "nope"], "unknown mechanism 'nope'"),
    (["release", "--out", "{tmp}", "--mechanism", "nonprivate_level"], "cannot be released"),
    (["release", "--out", "{full}"], "already holds manifest.json"),
]


@pytest.mark.parametrize("argv,fragment", BAD_RELEASE, ids=[" ".join(a) for a, _ in BAD_RELEASE])
def test_bad_release_command_line_is_one_clear_line(argv, fragment, tmp_path, capsys, ledger_db):
    from engine.__main__ import main

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "manifest.json").write_text("{}")
    argv = [a.format(tmp=tmp_path / "new", full=tmp_path / "full") for a in argv]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and fragment in err, err
    assert err.startswith("error: ") and err.count("\n") == 1 and out == "" and "Traceback" not in err
    assert not (tmp_path / "new").exists() and not ledger_db.exists()  # nothing written, nothing booked


# ------------------------------------------------------------------ evaluations are stamped
def test_evaluation_exports_are_stamped(tmp_path):
    from rasterio.io import MemoryFile

    from ui import export as ui_export

    ev = run(RunConfig(**SYNTH, depth=3, seed=1), use_cache=False)
    rel = run(RunConfig(**SYNTH, depth=3, mode="release"))
    assert stamp_of(ev) == EVALUATION and stamp_of(rel) is None
    dens, dom = ev.release.density, ev.release.domain
    assert json.loads(geojson_grid(dens, dom, ev.crs, stamp=EVALUATION))["evaluation"] == EVALUATION
    assert "evaluation" not in json.loads(geojson_grid(dens, dom, ev.crs))
    assert csv_grid(dens, dom, ev.crs, stamp=EVALUATION).splitlines()[0] == f"# evaluation: {EVALUATION}"
    with MemoryFile(geotiff_grid(dens, dom, ev.crs, stamp=EVALUATION)) as mf, mf.open() as src:
        assert src.tags()["evaluation"] == EVALUATION
    with MemoryFile(ui_export.release_geotiff(ev, ev.crs)) as mf, mf.open() as src:  # the dashboard's GeoTIFF
        assert src.tags()["evaluation"] == EVALUATION
    s = ev.summary()
    assert s["evaluation"] == EVALUATION and s["mode"] == "evaluate" and s["metrics"]


# ------------------------------------------------------------------ fresh seeds
def test_fresh_seeds_come_from_os_entropy():
    draws = [fresh_seed() for _ in range(20)]
    assert all(0 <= s < 2**FRESH_SEED_BITS for s in draws)
    # 20 draws of 31 bits: a repeat has probability 190 / 2^31, below 1e-7
    assert len(set(draws)) == 20


def test_cli_run_draws_a_fresh_seed_prints_it_and_the_seed_repeats_the_run():
    args = ["run", "--dataset", SYNTH["dataset"], "--data-opt", "n=2000", "--depth", "4", "--no-cache"]
    runs = [cli(*args) for _ in range(2)]
    seeds = []
    for p in runs:
        m = re.fullmatch(r"seed (\d+) \(drawn at random; --seed \1 repeats this run\)\n", p.stderr)
        assert m, p.stderr
        out = json.loads(p.stdout)
        assert out["config"]["seed"] == int(m.group(1)) and out["evaluation"] == EVALUATION
        seeds.append(int(m.group(1)))
    assert seeds[0] != seeds[1]  # probability 2^-31 of a false alarm
    again = cli(*args, "--seed", str(seeds[0]))
    assert again.stderr == "" and json.loads(again.stdout)["metrics"] == json.loads(runs[0].stdout)["metrics"]


def test_sweep_keeps_explicit_seeds_from_seed0():
    out = cli("sweep", "--data-opt", "n=1000", "--depth", "3", "--epsilons", "1", "--seeds", "2", "--seed0", "5")
    assert [r["seed"] for r in json.loads(out.stdout)] == [5, 6] and "drawn at random" not in out.stderr
