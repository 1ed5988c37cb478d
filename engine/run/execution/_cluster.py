"""Runs on a Dask cluster: sweeps as one task per run, and the setting the dashboard reads.

A cluster is named as ``local:N`` (a :class:`distributed.LocalCluster` of N worker processes
on this machine, bound to 127.0.0.1) or ``tcp://HOST:PORT`` (the scheduler of a cluster started
with ``dask scheduler`` / ``dask worker``; docs/dask.md).

* :func:`connect` opens a client on such a cluster (and closes what it started).
* :func:`submit_runs` / :func:`run_many`: each configuration is one task calling
  :func:`engine.run.execution.run` on a worker, exactly as the serial sweep calls it in this process:
  same configuration, same seed, same disk cache rule, so the same numbers. Each dataset is
  loaded here once and scattered to the workers once (``client.scatter(..., broadcast=True)``):
  **the data itself travels to every worker** (see docs/dask.md). A task that raises is retried
  twice (``retries=2``); a task whose worker dies is recomputed on another worker by the scheduler
  (up to ``distributed.scheduler.allowed-failures`` deaths, 3 by default).
* Out-of-core datasets (:class:`engine.data.parquet_source.PartitionedPoints`) are not shipped:
  their runs execute here, one after another, and only their partition passes (one task per
  Parquet partition) run on the workers.
* :func:`cluster_from_setting`: the cluster named by ``HEATMAP_DASK_SCHEDULER`` or by
  ``dask_scheduler`` in ``.streamlit/secrets.toml``, or None (runs stay in process).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import Cancelled, EngineError, ParamError

MAX_LOCAL_WORKERS = 64
CONNECT_TIMEOUT_S = 10
RETRIES = 2  # a task that raises is run again this many times
POLL_S = 0.05  # how often run_many looks at its cancel callback while no run finishes
SETTING_ENV = "HEATMAP_DASK_SCHEDULER"
SECRETS_KEY = "dask_scheduler"

_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def parse_cluster(text: str) -> str:
    """``local:N`` or ``tcp://HOST:PORT``, checked and normalised; ParamError otherwise."""
    s = str(text).strip()
    if s.startswith("local:"):
        n = s[len("local:") :]
        if not n.isdigit() or not 1 <= int(n) <= MAX_LOCAL_WORKERS:
            raise ParamError(f"a local cluster is local:N with N worker processes, 1..{MAX_LOCAL_WORKERS} (got {s!r})")
        return f"local:{int(n)}"
    if not s.startswith("tcp://"):
        raise ParamError(
            f"a cluster is local:N (N worker processes on this machine) or tcp://HOST:PORT (a running Dask "
            f"scheduler), got {s!r}"
        )
    rest = s[len("tcp://") :]
    if rest.startswith("["):  # [IPv6]:port
        host, sep, port = rest[1:].partition("]:")
        ok_host = bool(sep)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            ok_host = False
    else:
        host, sep, port = rest.rpartition(":")
        ok_host = bool(sep) and bool(_HOST.match(host))
    if not ok_host:
        raise ParamError(f"the scheduler address must be tcp://HOST:PORT with a host name or IP address (got {s!r})")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ParamError(f"the scheduler's port must be a number from 1 to 65535 (got {s!r})")
    return s


def _local_cluster(n_workers: int):
    import dask
    from distributed import LocalCluster  # before dask.config.set: it loads the "distributed" defaults

    # The nanny's default MALLOC_TRIM_THRESHOLD_=65536 fixes glibc's mmap threshold, so every numpy
    # array above 128 kB is a fresh mmap: runs took 2x longer in the workers than here (docs/dask.md).
    # The workers' statistical profiler samples every thread's stack every 10 ms, holding the GIL: off.
    with dask.config.set(
        {
            "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
            "distributed.worker.profile.enabled": False,
        }
    ):
        # processes, one thread each, on the loopback interface only; no dashboard web server
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )


def open_client(spec: str):
    """A :class:`distributed.Client` on the cluster ``spec`` (see :func:`parse_cluster`) and the
    LocalCluster it started (None for a remote scheduler). Closing is the caller's."""
    from distributed import Client

    spec = parse_cluster(spec)
    if spec.startswith("local:"):
        cluster = _local_cluster(int(spec.split(":")[1]))
        return Client(cluster), cluster
    try:
        return Client(spec, timeout=CONNECT_TIMEOUT_S), None
    except (OSError, TimeoutError) as exc:
        raise EngineError(f"could not reach the Dask scheduler at {spec} ({type(exc).__name__}: {exc})") from None


@contextmanager
def connect(spec: str) -> Iterator[Any]:
    """``with connect("local:2") as client:`` ... the client (and a LocalCluster it started) closed after."""
    client, cluster = open_client(spec)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ------------------------------------------------------------------ runs as tasks
def _run_task(config, dataset, use_cache: bool, registry_copy: bool, keep):
    """One run on a worker: :func:`engine.run.execution.run` on the scattered dataset."""
    from ._runner import run

    res = run(config, use_cache=use_cache, dataset=dataset, registry_copy=registry_copy)
    return res if keep is None else keep(res)


def sweep_row(res) -> dict:
    """A sweep's row for one run: mechanism, epsilon (planned, and spent: more under excess client dropout), seed,
    users and every metric (CLI output)."""
    c = res.config
    return {
        "mechanism": c.mechanism,
        "epsilon": c.epsilon,
        "epsilon_spent": res.epsilon_spent,
        "seed": c.seed,
        "n_users": res.n_users,
        **res.metrics,
    }


def _out_of_core(ds) -> bool:
    return callable(getattr(ds, "with_client", None))


def submit_runs(configs, client, *, use_cache: bool = True, dataset=None, keep=None) -> list:
    """One future per configuration, in order (non-blocking). Each distinct dataset is loaded
    here and scattered once to every worker; ``dataset``: one dataset object for every
    configuration instead of the registry's (e.g. an upload; its runs are never cached).
    ``keep``: a picklable function applied to each result on the worker (e.g. :func:`sweep_row`)
    so only what is needed travels back."""
    from ._runner import load_dataset

    configs = list(configs)
    scattered, data = {}, []
    for cfg in configs:
        cfg.validate()
        key = "given" if dataset is not None else (cfg.dataset, repr(sorted(cfg.dataset_options.items())))
        if key not in scattered:
            ds = dataset if dataset is not None else load_dataset(cfg.dataset, cfg.dataset_options)
            if _out_of_core(ds):
                raise ParamError(
                    f"{cfg.dataset!r} is read out of core: its runs cannot be shipped as tasks; use run_many, which "
                    "runs them here and sends only the partition passes to the cluster"
                )
            scattered[key] = client.scatter(ds, broadcast=True, hash=False)
        data.append(scattered[key])
    if not configs:
        return []
    n = len(configs)
    # one task per run, submitted in one message (client.map): a submit per run cost the scheduler a
    # graph update each, which on 2 cores took CPU from the workers (bench dask)
    futures = client.map(
        _run_task,
        configs,
        data,
        [use_cache] * n,
        [dataset is None] * n,  # a registry dataset: the disk cache applies as in process
        [keep] * n,
        retries=RETRIES,
        pure=False,
    )
    return futures


def run_many(
    configs,
    client,
    *,
    use_cache: bool = True,
    dataset=None,
    keep=None,
    progress: Callable[[int, int, Any], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> list:
    """Run every configuration on the cluster; the results (or ``keep(result)``) in the order
    of ``configs``. ``progress(done, total, config)`` after each run; ``cancelled()`` is polled
    every 50 ms: the remaining tasks are then cancelled and :class:`Cancelled` is raised. The
    first failing run's error is raised here (an EngineError keeps its message)."""
    from distributed import as_completed

    from ._runner import load_dataset, run

    configs = list(configs)
    out: list = [None] * len(configs)
    local, shipped, out_of_core = [], [], {}
    for i, cfg in enumerate(configs):
        ds = dataset
        if cfg.dataset not in out_of_core:
            out_of_core[cfg.dataset] = _is_out_of_core_source(cfg.dataset)
        if ds is None and out_of_core[cfg.dataset]:
            ds = load_dataset(cfg.dataset, cfg.dataset_options)
        if ds is not None and _out_of_core(ds):
            local.append((i, ds.with_client(client)))
        else:
            shipped.append(i)
    futures = submit_runs([configs[i] for i in shipped], client, use_cache=use_cache, dataset=dataset, keep=keep)
    position = {f.key: i for f, i in zip(futures, shipped)}
    done = 0

    def record(i, value):
        nonlocal done
        out[i] = value
        done += 1
        if progress:
            progress(done, len(configs), configs[i])

    def check():
        if cancelled and cancelled():
            raise Cancelled("the sweep was cancelled")

    try:
        for i, ds in local:  # out of core: the run here, its partition passes on the workers
            check()
            res = run(configs[i], use_cache=use_cache, dataset=ds, cancelled=cancelled)
            record(i, res if keep is None else keep(res))
        finished = as_completed(futures)  # event-driven: no pass over the pending futures per completion
        while not finished.is_empty():
            check()
            batch = finished.next_batch(block=cancelled is None)
            if not batch:
                time.sleep(POLL_S)
                continue
            # one round trip per batch; re-raises a run's error (keep() already ran on the worker)
            for fut, value in zip(batch, client.gather(batch)):
                record(position[fut.key], value)
    except BaseException:
        client.cancel(futures)
        raise
    return out


def _is_out_of_core_source(key: str) -> bool:
    from ...data.registry import source

    src = source(key)
    return src is not None and bool(src.extra.get("out_of_core"))


# ------------------------------------------------------------------ the dashboard's setting
@dataclass(frozen=True)
class ClusterChoice:
    """Where the dashboard's runs go: ``client`` None means in this process; ``description``
    says which, for the page to show."""

    client: Any
    address: str | None
    description: str


_CLIENTS: dict[str, tuple[Any, Any]] = {}
_CLIENTS_LOCK = threading.Lock()


def _secrets_files() -> list[Path]:
    # Streamlit's own order: the project's .streamlit/secrets.toml wins over the user's
    return [Path.cwd() / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"]


def scheduler_setting() -> str | None:
    """The cluster the dashboard should use: ``$HEATMAP_DASK_SCHEDULER``, else the key
    ``dask_scheduler`` of ``.streamlit/secrets.toml`` (project, then home), else None.
    A malformed value raises ParamError (see :func:`parse_cluster`)."""
    value = os.environ.get(SETTING_ENV, "").strip()
    if not value:
        for path in _secrets_files():
            try:
                with path.open("rb") as f:
                    value = str(tomllib.load(f).get(SECRETS_KEY, "")).strip()
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if value:
                break
    return parse_cluster(value) if value else None


def cluster_from_setting() -> ClusterChoice:
    """The client on the cluster named by :func:`scheduler_setting` (one per address and
    process, reused across calls), or ``client=None`` when no cluster is named or it cannot be
    reached; ``description`` says where runs go (and why not on the cluster)."""
    try:
        spec = scheduler_setting()
    except ParamError as exc:
        return ClusterChoice(None, None, f"Runs in this process: the Dask setting is not valid ({exc}).")
    if spec is None:
        return ClusterChoice(
            None,
            None,
            "Runs on this machine, in the app's own process. To run on a Dask cluster instead, the server's "
            f"administrator gives its address in the environment variable {SETTING_ENV} (or as {SECRETS_KEY} in "
            ".streamlit/secrets.toml).",
        )
    with _CLIENTS_LOCK:
        held = _CLIENTS.get(spec)
        if held is None or held[0].status not in ("running", "connecting"):
            try:
                held = _CLIENTS[spec] = open_client(spec)
            except EngineError as exc:
                return ClusterChoice(None, spec, f"Runs in this process: {exc}.")
    client = held[0]
    n = len(client.scheduler_info().get("workers", {}))
    where = "on this machine" if spec.startswith("local:") else f"at {spec}"
    return ClusterChoice(client, spec, f"Runs on the Dask cluster {where} ({n} worker{'s' if n != 1 else ''}).")
