"""Dask: sweeps on a cluster, Parquet out of core, Adaptive HH's clients in tasks.

Every cluster here is a real LocalCluster of 2 worker processes bound to 127.0.0.1 (one per
module); datasets are small, so the module takes seconds, not minutes.
"""

from __future__ import annotations

import json
import math
import os
import signal

import numpy as np
import pytest

from engine.core.errors import DataError, ParamError
from engine.data.parquet_source import HISTOGRAM_ONLY, PartitionedPoints, load_parquet, write_city
from engine.run import RunConfig, run
from engine.run.execution._cluster import (
    SECRETS_KEY,
    SETTING_ENV,
    cluster_from_setting,
    open_client,
    parse_cluster,
    run_many,
    scheduler_setting,
    sweep_row,
)


@pytest.fixture(scope="module")
def client():
    c, cluster = open_client("local:2")
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def city(tmp_path_factory):
    """20,000 points of a synthetic city in 4 Parquet files (lon/lat), and the same rows in memory."""
    path = tmp_path_factory.mktemp("pq") / "city"
    write_city(path, 20_000, chunk=5_000)
    return str(path), load_parquet(str(path), in_memory=True)


def _same(a: dict, b: dict) -> bool:
    """Equal metric dicts, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        (isinstance(v, float) and math.isnan(v) and math.isnan(b[k])) or v == b[k] for k, v in a.items()
    )


# ------------------------------------------------------------------ addresses and settings
def test_cluster_addresses_are_checked():
    assert parse_cluster(" local:3 ") == "local:3"
    assert parse_cluster("tcp://127.0.0.1:8786") == "tcp://127.0.0.1:8786"
    assert parse_cluster("tcp://scheduler.example.org:8786") == "tcp://scheduler.example.org:8786"
    assert parse_cluster("tcp://[::1]:8786") == "tcp://[::1]:8786"
    for bad in (
        "local:0",
        "local:x",
        "local:65",
        "tcp://host",
        "tcp://:8786",
        "tcp://host:0",
        "tcp://host:99999",
        "http://host:8786",
        "host:8786",
        "tcp://bad host:1",
        "tcp://[nope]:1",
        "",
    ):
        with pytest.raises(ParamError):
            parse_cluster(bad)


def test_cli_refuses_a_malformed_cluster(capsys):
    from engine.__main__ import main

    assert main(["sweep", "--cluster", "tcp://nohost", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--cluster" in err and "tcp://HOST:PORT" in err and "Traceback" not in err


def test_dashboard_setting(tmp_path, monkeypatch, client):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(SETTING_ENV, raising=False)
    assert scheduler_setting() is None
    none = cluster_from_setting()
    assert none.client is None and "in the app's own process" in none.description
    address = client.scheduler.address  # the fixture's LocalCluster, tcp://127.0.0.1:PORT
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(f'{SECRETS_KEY} = "{address}"\n')
    assert scheduler_setting() == address
    monkeypatch.setenv(SETTING_ENV, "local:nope")  # the environment wins, and is checked
    bad = cluster_from_setting()
    assert bad.client is None and "not valid" in bad.description
    monkeypatch.delenv(SETTING_ENV)
    choice = cluster_from_setting()
    assert choice.client is not None and choice.address == address
    assert address in choice.description and "2 workers" in choice.description
    assert cluster_from_setting().client is choice.client  # one client per address, reused
    cfgs = [RunConfig(mechanism="identity", epsilon=1.0, seed=s, dataset_options={"n": 2_000}) for s in range(3)]
    got = run_many(cfgs, choice.client, use_cache=False, keep=sweep_row)
    assert [r["seed"] for r in got] == [0, 1, 2]
    choice.client.close()


# ------------------------------------------------------------------ sweeps
def test_cli_sweep_on_the_cluster_equals_serial(client, capsys):
    from engine.__main__ import main

    args = ["sweep", "--mechanisms", "identity,adaptive_hh", "--epsilons", "0.5,2", "--seeds", "2"]
    args += ["--data-opt", "n=5000", "--no-cache", "--format", "json"]
    assert main(args) == 0
    serial = capsys.readouterr().out
    assert main([*args, "--cluster", client.scheduler.address]) == 0
    out = capsys.readouterr()
    assert out.out == serial  # same seeds, same numbers, same order
    assert len(json.loads(out.out)) == 8
    assert "on the Dask cluster" in out.err and "8/8" not in out.err  # a progress bar only on a terminal


def test_sweep_survives_a_killed_worker(client):
    """A worker process is killed (SIGKILL) while the sweep runs: its tasks are recomputed
    elsewhere and every result is there, equal to the serial run's."""
    cfgs = [
        RunConfig(mechanism=m, epsilon=e, seed=s, dataset_options={"n": 30_000})
        for m in ("adaptive_hh", "identity")
        for e in (0.5, 2.0)
        for s in range(6)
    ]
    pids = client.run(os.getpid)
    killed = []

    def progress(done, total, cfg):
        if killed:
            return
        busy = [w for w, keys in client.processing().items() if keys and w in pids]
        if busy:  # a worker with a run in flight
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed.append(pids[busy[0]])

    got = run_many(cfgs, client, use_cache=False, keep=sweep_row, progress=progress)
    assert killed, "no worker was busy when the first run finished"
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in client.run(os.getpid).values()  # that process is gone (its nanny started another)
    want = [sweep_row(run(c, use_cache=False)) for c in cfgs]
    assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want))


def test_run_many_returns_results_in_order_and_scatters_once(client, monkeypatch):
    cfgs = [RunConfig(mechanism="identity", epsilon=e, seed=1, dataset_options={"n": 3_000}) for e in (2.0, 0.5, 1.0)]
    before = set(client.who_has())
    scattered = []
    real = client.scatter
    monkeypatch.setattr(client, "scatter", lambda data, **kw: scattered.append(kw) or real(data, **kw))
    res = run_many(cfgs, client, use_cache=False)
    assert scattered == [{"broadcast": True, "hash": False}]  # one dataset, sent once to every worker
    assert [r.config.epsilon for r in res] == [2.0, 0.5, 1.0]
    assert all(np.array_equal(r.release.density, run(c, use_cache=False).release.density) for r, c in zip(res, cfgs))
    assert set(client.who_has()) == before  # nothing left behind (the one scattered dataset released)


def test_cancel_stops_the_sweep(client):
    from engine.core.errors import Cancelled

    cfgs = [RunConfig(mechanism="adaptive_hh", epsilon=1.0, seed=s, dataset_options={"n": 20_000}) for s in range(40)]
    done = []
    with pytest.raises(Cancelled):
        run_many(
            cfgs,
            client,
            use_cache=False,
            keep=sweep_row,
            progress=lambda *a: done.append(a),
            cancelled=lambda: bool(done),
        )
    assert len(done) < len(cfgs) // 2  # stopped at the first look after the first run, not at the end


def test_a_failing_run_reports_its_error(client):
    cfg = RunConfig(mechanism="identity", params={"no_such_parameter": 1}, dataset_options={"n": 1_000})
    with pytest.raises(ParamError, match="no_such_parameter"):  # raised on a worker, the same error here
        run_many([cfg], client, use_cache=False)


# ------------------------------------------------------------------ Parquet out of core
def test_out_of_core_histogram_and_mechanisms_equal_in_memory(city):
    path, mem = city
    ooc = load_parquet(path)
    assert isinstance(ooc, PartitionedPoints) and len(ooc) == len(mem) == 20_000
    for depth in (6, 10):
        d = ooc.public_domain(depth)
        assert np.array_equal(ooc.in_domain(d).true_histogram(d), mem.in_domain(d).true_histogram(d))
    for m in HISTOGRAM_ONLY:
        cfg = RunConfig(dataset="parquet", dataset_options={"path": path}, mechanism=m, epsilon=1.0, seed=5)
        a, b = run(cfg, dataset=mem), run(cfg, dataset=ooc)
        assert np.array_equal(a.release.density, b.release.density), m
        assert _same(a.metrics, b.metrics) and a.n_users == b.n_users, m
    cfg = RunConfig(dataset="parquet", dataset_options={"path": path}, mechanism="identity", n_users=3_000, seed=2)
    a, b = run(cfg, dataset=mem), run(cfg, dataset=ooc)  # the same users sampled
    assert (
        b.n_users == 3_000 and np.array_equal(a.truth, b.truth) and np.array_equal(a.release.density, b.release.density)
    )


def test_geoparquet_points_read_like_lon_lat_columns(tmp_path, city):
    path, mem = city
    write_city(tmp_path / "geo", 20_000, chunk=5_000, geo=True)  # the same chunks' streams
    geo = load_parquet(str(tmp_path / "geo"))
    assert geo.layout.encoding == "wkb"
    d = geo.public_domain(8)
    assert np.array_equal(geo.in_domain(d).true_histogram(d), mem.in_domain(d).true_histogram(d))


def test_out_of_core_refuses_what_needs_points(city):
    path, _ = city
    ooc = load_parquet(path)
    for m in ("ag", "flat_onehot", "federated_kde"):
        with pytest.raises(DataError, match="in_memory=true"):
            run(RunConfig(dataset="parquet", dataset_options={"path": path}, mechanism=m, seed=1), dataset=ooc)
    cfg = RunConfig(
        dataset="parquet", dataset_options={"path": path}, mechanism="adaptive_hh", params={"clip_bits": 16}
    )
    with pytest.raises(ParamError, match="modular clipping"):
        run(cfg, dataset=ooc)


def test_bad_parquet_input(tmp_path, city):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, _ = city
    with pytest.raises(ParamError, match="bbox"):
        load_parquet(path, bbox="1,2,3")
    with pytest.raises(DataError, match="no 'x'/'y' columns"):
        load_parquet(path, lon="x", lat="y")
    with pytest.raises(DataError, match="neither"):
        load_parquet(str(tmp_path / "missing"))
    (tmp_path / "nan").mkdir()
    pq.write_table(pa.table({"lon": [4.0, np.nan], "lat": [0.5, 0.5]}), tmp_path / "nan" / "a.parquet")
    nan = load_parquet(str(tmp_path / "nan"), bbox="3.9,0.4,4.1,0.6")
    with pytest.raises(DataError, match="row 1 has missing"):
        nan.true_histogram(nan.public_domain(4))
    from_data = load_parquet(path, bbox="")
    assert not from_data.meta.bbox_from_data  # the files declare their public region
    (tmp_path / "plain").mkdir()
    pq.write_table(pa.table({"lon": [4.0, 4.1, 4.05], "lat": [0.5, 0.6, 0.55]}), tmp_path / "plain" / "a.parquet")
    assert load_parquet(str(tmp_path / "plain")).meta.bbox_from_data  # read off the data, and said so


def test_cli_runs_a_parquet_directory(city, capsys):
    from engine.__main__ import main

    path, _ = city
    assert (
        main(
            [
                "run",
                "--dataset",
                "parquet",
                "--data-opt",
                f"path={path}",
                "--mechanism",
                "privtree",
                "--seed",
                "1",
                "--format",
                "json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_users"] == 20_000


def test_histogram_on_the_cluster(client, city):
    path, mem = city
    ooc = load_parquet(path).with_client(client)
    d = ooc.public_domain(10)
    assert np.array_equal(ooc.in_domain(d).true_histogram(d), mem.in_domain(d).true_histogram(d))


# ------------------------------------------------------------------ Adaptive HH's clients in tasks
def test_adaptive_hh_on_the_cluster_equals_in_process(client, city):
    """20,000 clients in 20 SecAgg shards of 1,000, read from 4 partitions by the workers: the
    same release (density, tree, ledger) as the in-process run on the same rows at the same seed."""
    path, mem = city
    ooc = load_parquet(path).with_client(client)
    cfg = RunConfig(
        dataset="parquet",
        dataset_options={"path": path},
        mechanism="adaptive_hh",
        epsilon=1.0,
        depth=10,
        seed=11,
        params={"secagg_shard": 1_000},
    )
    a, b = run(cfg, dataset=mem), run(cfg, dataset=ooc)
    assert b.release.diagnostics["levels"][0]["shards"] == 20
    assert np.array_equal(a.release.density, b.release.density)
    assert np.array_equal(a.release.extras["tree"]["node_ids"], b.release.extras["tree"]["node_ids"])
    assert a.release.ledger.to_dict() == b.release.ledger.to_dict()
    assert _same(a.metrics, b.metrics)
    clients = ooc.clients(ooc.public_domain(10))
    assert all(type(f).__name__ == "Future" for f in clients._cells)  # the clients stay on the workers


def test_partition_clients_sum_like_bincount(city):
    """The partitions' sums equal the in-process encoding: lut[Morton code] counted per node."""
    from engine.mechanisms.federated_hh.tree import PrefixTree, paint_lut

    path, mem = city
    ooc = load_parquet(path)
    d = ooc.public_domain(8)
    tree = PrefixTree.initial(8, 3)
    rep = tree.reporting()
    lut = paint_lut(rep, 8)
    want = np.bincount(lut[d.paths(mem.in_domain(d).xy).astype(np.int64)], minlength=rep.size)
    assert np.array_equal(ooc.clients(d).signal(lut, rep.size), want)


def test_out_of_core_dataset_pickles_without_its_client(client, city):
    import pickle

    ooc = load_parquet(city[0]).with_client(client)
    back = pickle.loads(pickle.dumps(ooc))
    assert back.client is None and back.path == ooc.path


def test_cluster_runs_use_the_disk_cache(client):
    """A registry dataset scattered to the workers keeps the serial sweep's cache rule: the
    worker writes the run to the cache, and the same configuration here reads it back."""
    cfg = RunConfig(mechanism="identity", epsilon=0.7, seed=123, dataset_options={"n": 2_000})
    (fresh,) = run_many([cfg], client, use_cache=True)
    assert not fresh.cached
    again = run(cfg)
    assert again.cached and np.array_equal(again.release.density, fresh.release.density)
