"""``python -m engine bench dask``: sweeps, out-of-core histograms and federated runs on Dask.

Figures:

* a sweep of 5 mechanisms x 6 epsilons x 20 seeds on a synthetic city (100,000 points, 256 x 256):
  serial in this process against ``run_many`` on ``local:2`` (a LocalCluster of 2 worker
  processes started and warmed once), in turns; speed-up of the medians of 3 (target >= 1.6 on
  2 cores), the rows identical, and the overhead per task (1,000 no-op tasks; the CPU time a run
  costs on the cluster against in one process, which other jobs on the machine change little);
* a 100-million-point Parquet directory (``scripts/make_parquet_city.py``, written once to the
  cache folder) binned into 1024 x 1024 out of core: time and peak RSS per process, in one process
  (dask's threaded scheduler) and on ``local:2`` (client and each worker), target < 2 GB;
* Adaptive HH with 100 million clients read from that directory on ``local:2`` (depth 10,
  epsilon 1, S_max 10,000): time and peak RSS per worker (< 2 GB); and its release equal to the
  in-process run on the same rows at 1 million clients.

Each big figure runs in a fresh process (``python -c``), so its peak RSS is its own. ``--quick``:
2 x 2 x 3 runs on 20,000 points, 1 million points binned, 20,000 clients. The load average is
in the notes: another job on these 2 shared cores slows the cluster more than the serial run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from multiprocessing import get_context

from . import Figure

GB = 1024.0  # MB
FULL = {
    "mechanisms": ("identity", "ug", "privtree", "hierarchical", "adaptive_hh"),
    "epsilons": (0.1, 0.3, 1.0, 2.0, 5.0, 10.0),
    "seeds": 20,
    "n": 100_000,
    "repeats": 3,
    "points": 100_000_000,
    "chunk": 1_000_000,
    "equal_clients": 1_000_000,
}
QUICK = {
    "mechanisms": ("identity", "adaptive_hh"),
    "epsilons": (0.5, 2.0),
    "seeds": 3,
    "n": 20_000,
    "repeats": 1,
    "points": 200_000,
    "chunk": 50_000,
    "equal_clients": 20_000,
}


def _noop(x):
    return x


def _warm(n: int) -> None:
    from ..run import RunConfig, run

    for m in FULL["mechanisms"]:
        run(RunConfig(mechanism=m, dataset_options={"n": n}), use_cache=False)


def _run_all(configs) -> None:
    from ..run import run

    for cfg in configs:
        run(cfg, use_cache=False)


def _cpu() -> float:
    """CPU seconds (user + system) of this process so far."""
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system


def _load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


# ------------------------------------------------------------------ sweep
def sweep_figures(quick: bool, progress) -> list[Figure]:
    from ..run.execution import RunConfig, connect, run, run_many, sweep_row

    p = QUICK if quick else FULL
    configs = [
        RunConfig(mechanism=m, epsilon=e, seed=s, dataset_options={"n": p["n"]})
        for m in p["mechanisms"]
        for e in p["epsilons"]
        for s in range(p["seeds"])
    ]
    n = len(configs)
    for m in p["mechanisms"]:  # the dataset generated and every mechanism's code warm, as in a long session
        run(RunConfig(mechanism=m, dataset_options={"n": p["n"]}), use_cache=False)
    serial_t, serial_cpu, cluster_t, cluster_cpu, pool_t, loads = [], [], [], [], [], []
    t = time.perf_counter()
    with connect("local:2") as client, get_context("spawn").Pool(2) as pool:
        run_many(configs[:: max(1, n // 10)], client, use_cache=False, keep=sweep_row)  # workers warm
        start_s = time.perf_counter() - t
        pool.map(_warm, [p["n"]] * 2)
        # serial, cluster and the control in turns, so a change of the machine's load touches all three
        for r in range(p["repeats"]):
            progress(f"sweep of {n} runs: serial, on local:2, two plain processes ({r + 1}/{p['repeats']})")
            loads.append(os.getloadavg()[0])
            t, c = time.perf_counter(), time.process_time()
            serial = [sweep_row(run(cfg, use_cache=False)) for cfg in configs]
            serial_t.append(time.perf_counter() - t)
            serial_cpu.append(time.process_time() - c)
            w0, c = sum(client.run(_cpu).values()), time.process_time()
            t = time.perf_counter()
            rows = run_many(configs, client, use_cache=False, keep=sweep_row)
            cluster_t.append(time.perf_counter() - t)
            # the workers' CPU and this process's (the client and, in a LocalCluster, the scheduler)
            cluster_cpu.append(sum(client.run(_cpu).values()) - w0 + time.process_time() - c)
            # control without Dask, in the same round: what two processes get from this machine at this load
            t = time.perf_counter()
            pool.map(_run_all, [configs[0::2], configs[1::2]])
            pool_t.append(time.perf_counter() - t)
        progress("1,000 no-op tasks")
        t = time.perf_counter()
        client.gather([client.submit(_noop, i, pure=False) for i in range(1000)])
        noop_ms = time.perf_counter() - t  # s per 1,000 = ms per task
    ts, tc = statistics.median(serial_t), statistics.median(cluster_t)
    speed, capacity = ts / tc, ts / statistics.median(pool_t)
    measurable = capacity >= 1.6  # two cores free enough for the target to be reachable at all
    same = json.dumps(rows, default=float) == json.dumps(serial, default=float)
    cpu_s, cpu_c = statistics.median(serial_cpu) / n * 1000, statistics.median(cluster_cpu) / n * 1000
    note = f"{n} runs ({len(p['mechanisms'])} mechanisms x {len(p['epsilons'])} eps x {p['seeds']} seeds), {p['n']:,} points"
    busy = "; the 1-min load average was " + ", ".join(f"{v:.1f}" for v in loads) + " at the start of each repeat"
    return [
        Figure("sweep_serial_s", ts, "s", "informative", None, f"{note}; median of {p['repeats']}"),
        Figure(
            "sweep_local2_s",
            tc,
            "s",
            "informative",
            None,
            f"run_many on a started LocalCluster (start and warm-up {start_s:.1f} s, once); median of {p['repeats']}",
            {"times_s": cluster_t, "serial_times_s": serial_t},
        ),
        Figure(
            "sweep_speedup_local2",
            speed,
            "x",
            ">= 1.6",
            (speed >= 1.6) if measurable else None,
            f"serial / local:2 wall time on this 2-core machine, shared with other jobs{busy}"
            + ("" if measurable else f"; NOT MEASURABLE: two plain processes reached only {capacity:.2f}x"),
        ),
        Figure(
            "sweep_speedup_two_processes",
            capacity,
            "x",
            "informative",
            None,
            "control without Dask: serial / two multiprocessing processes each running half of the runs, in "
            "the same turns; below 1.6 the machine did not offer two cores and the speed-up target is not judged",
        ),
        Figure("sweep_rows_identical", float(same), "bool", "= 1", same, "every metric of every run equal to serial"),
        Figure("task_overhead_ms", noop_ms, "ms/task", "informative", None, "1,000 no-op tasks submitted and gathered"),
        Figure(
            "sweep_cpu_per_run_serial_ms",
            cpu_s,
            "ms/run",
            "informative",
            None,
            "CPU time per run in one process (what the machine's load does not change much)",
        ),
        Figure(
            "sweep_cpu_per_run_local2_ms",
            cpu_c,
            "ms/run",
            "informative",
            None,
            f"CPU time per run on local:2: workers + client and scheduler; {cpu_c - cpu_s:+.1f} ms against serial "
            "is Dask's cost per task (and two runs sharing the caches)",
        ),
    ]


# ------------------------------------------------------------------ fresh processes
_HIST = textwrap.dedent(
    """
    import json, resource, sys, time
    from engine.data.parquet_source import load_parquet

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    if __name__ == "__main__":
        path, cluster = sys.argv[1], sys.argv[2]
        out = {}
        ds = load_parquet(path)
        t = time.perf_counter()
        if cluster == "none":
            dom = ds.public_domain(10)
            h = ds.in_domain(dom).true_histogram(dom)
        else:
            from engine.run.execution._cluster import connect
            with connect(cluster) as client:
                client.run(lambda: None)
                t = time.perf_counter()
                dom = ds.public_domain(10)
                h = ds.with_client(client).in_domain(dom).true_histogram(dom)
                out["workers_peak_mb"] = sorted(client.run(peak).values())
        out.update(seconds=time.perf_counter() - t, total=float(h.sum()), shape=list(h.shape), peak_mb=peak())
        print(json.dumps(out))
    """
)

_HH = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    from engine.data.parquet_source import load_parquet
    from engine.run.execution._config import RunConfig
    from engine.run.execution._runner import run

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    if __name__ == "__main__":
        path, depth, compare = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "compare"
        cfg = RunConfig(dataset="parquet", dataset_options={"path": path}, mechanism="adaptive_hh", epsilon=1.0,
                        depth=depth, seed=7)
        from engine.run.execution._cluster import connect
        with connect("local:2") as client:
            ds = load_parquet(path).with_client(client)
            t = time.perf_counter()
            res = run(cfg, dataset=ds, use_cache=False)
            seconds = time.perf_counter() - t
            workers = sorted(client.run(peak).values())
        out = dict(seconds=seconds, clients=res.n_users, workers_peak_mb=workers, peak_mb=peak(),
                   subqueries=res.release.communication.rounds, shards=res.release.communication.shards,
                   mse=res.metrics["mse"], timings=res.timings)
        if compare:
            mem = run(cfg, dataset=load_parquet(path, in_memory=True), use_cache=False)
            out["equal"] = bool(np.array_equal(mem.release.density, res.release.density)
                                and mem.release.ledger.to_dict() == res.release.ledger.to_dict()
                                and mem.n_users == res.n_users)
        print(json.dumps(out))
    """
)


def _fresh(script: str, *args, timeout: float = 7200) -> dict:
    from ..run.execution import ROOT

    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if out.returncode != 0:
        raise RuntimeError(f"the measuring process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def city_parquet(points: int, chunk: int, progress) -> str:
    """The synthetic city's Parquet directory in the cache folder, written once."""
    from ..core.cache import cache_dir
    from ..data.parquet_source import write_city

    path = cache_dir() / "parquet" / f"polycentric_{points}_{chunk}"
    done = path / "_complete"
    if not done.exists():
        progress(f"writing {points:,} points to {path} (once)")
        t = time.perf_counter()
        write_city(path, points, chunk)
        done.write_text(f"{time.perf_counter() - t:.1f} s\n")
    return str(path)


def histogram_figures(quick: bool, progress) -> list[Figure]:
    p = QUICK if quick else FULL
    path = city_parquet(p["points"], p["chunk"], progress)
    figs = []
    progress(f"binning {p['points']:,} points into 1024x1024, one process")
    a = _fresh(_HIST, path, "none")
    progress(f"binning {p['points']:,} points into 1024x1024 on local:2")
    b = _fresh(_HIST, path, "local:2")
    ok = a["total"] == p["points"] == b["total"]
    worst = max(b["workers_peak_mb"] + [b["peak_mb"]])
    note = f"{p['points']:,} points in {p['points'] // p['chunk']} partitions; {_load()}"
    figs += [
        Figure("parquet_hist_threads_s", a["seconds"], "s", "informative", None, f"one process, 2 threads; {note}"),
        Figure("parquet_hist_threads_peak_mb", a["peak_mb"], "MB", "< 2048", a["peak_mb"] < 2 * GB, "that process"),
        Figure("parquet_hist_local2_s", b["seconds"], "s", "informative", None, f"LocalCluster of 2; {note}"),
        Figure(
            "parquet_hist_local2_peak_mb",
            worst,
            "MB",
            "< 2048",
            worst < 2 * GB,
            f"largest of client {b['peak_mb']:.0f} MB and workers {', '.join(f'{w:.0f}' for w in b['workers_peak_mb'])} MB",
        ),
        Figure("parquet_hist_total_ok", float(ok), "bool", "= 1", ok, "every point counted once, both ways"),
    ]
    return figs


def federated_figures(quick: bool, progress) -> list[Figure]:
    p = QUICK if quick else FULL
    figs = []
    small = city_parquet(p["equal_clients"], p["equal_clients"] // 10, progress)
    progress(f"adaptive_hh: {p['equal_clients']:,} clients on local:2 against the in-process run")
    eq = _fresh(_HH, small, 10, "compare")
    figs.append(
        Figure(
            "hh_equal_in_process",
            float(eq["equal"]),
            "bool",
            "= 1",
            eq["equal"],
            f"{eq['clients']:,} clients, seed 7, depth 10: density, ledger and clients identical",
        )
    )
    big = city_parquet(p["points"], p["chunk"], progress)
    progress(f"adaptive_hh: {p['points']:,} clients on local:2")
    r = _fresh(_HH, big, 10, "alone")
    worst = max(r["workers_peak_mb"])
    t = r["timings"]  # prepare: the in-domain count (one histogram pass); metrics: the 500 users' rows
    phases = (
        f"count {t['prepare_s']:.0f} + clients and sub-queries {t['mechanism_s']:.0f} + metrics {t['metrics_s']:.0f}"
    )
    figs += [
        Figure(
            "hh_clients_local2_s",
            r["seconds"],
            "s",
            "informative",
            None,
            f"{r['clients']:,} clients, {r['shards']:,} SecAgg shards, {r['subqueries']} sub-queries, depth 10, eps 1, "
            f"end to end: {phases} s; {_load()}",
        ),
        Figure(
            "hh_clients_local2_worker_peak_mb",
            worst,
            "MB",
            "< 2048",
            worst < 2 * GB,
            f"workers {', '.join(f'{w:.0f}' for w in r['workers_peak_mb'])} MB; client (server) {r['peak_mb']:.0f} MB",
        ),
    ]
    return figs


def run(quick: bool = False, progress=print) -> list[Figure]:
    return sweep_figures(quick, progress) + histogram_figures(quick, progress) + federated_figures(quick, progress)
