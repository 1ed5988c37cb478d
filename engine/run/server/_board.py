"""The job board: the runs and results every session of one server process shares.

:class:`Board` wraps :class:`engine.run.execution.JobManager`: identical configurations share one job,
finished results stay in a bounded in-memory LRU (so re-running a configuration is instant and
identical even when its release cannot be written to the disk cache), and a failed job only
reports its own error. Runs on a user's upload belong to the uploading session alone. Each
session's named groups of runs are kept by :class:`engine.run.server.Session`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field

import numpy as np

from ..execution import Job, JobManager, RunConfig


def deep_nbytes(obj, _seen: set | None = None, _depth: int = 0) -> int:
    """Bytes held by the arrays reachable from ``obj``: a result's truth, its release's density, partition,
    extras and diagnostics, and arrays captured by its callables (range answerers, server views). Counting
    only ``truth`` and ``density`` would let a board of "1.5 GB" hold 6.6 GB."""
    seen = set() if _seen is None else _seen
    if obj is None or _depth > 12 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool)):
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        base = obj.base if isinstance(obj.base, np.ndarray) else None
        return 0 if base is not None and id(base) in seen else obj.nbytes
    d = _depth + 1
    if isinstance(obj, dict):
        return sum(deep_nbytes(v, seen, d) for v in obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sum(deep_nbytes(v, seen, d) for v in obj)
    if callable(obj) and hasattr(obj, "__code__"):  # a closure: its captured cells
        cells = obj.__closure__ or ()
        return sum(deep_nbytes(c.cell_contents, seen, d) for c in cells if _cell_ok(c))
    if hasattr(obj, "__self__") and callable(obj):  # a bound method: its object
        return deep_nbytes(obj.__self__, seen, d)
    if type(obj).__module__.split(".")[0] in ("engine", "ui") or hasattr(obj, "__dataclass_fields__"):
        return deep_nbytes(getattr(obj, "__dict__", {}), seen, d)
    return 0


def _cell_ok(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
        return True
    except ValueError:
        return False


def result_nbytes(res) -> int:
    return deep_nbytes(res) + 4096


@dataclass
class Light:
    """A run's summary without its maps (what a sweep reads: metrics, timings, sizes); a few kB."""

    config: RunConfig
    metrics: dict
    timings: dict
    n_users: int
    n_points: int
    dataset_meta: object
    epsilon_spent: float = 0.0  # what the ledger books (booking.Bookkeeper.settle)
    cached: bool = False
    release: None = None
    truth: None = None


def _light(res) -> Light:
    return Light(
        res.config, dict(res.metrics), dict(res.timings), res.n_users, res.n_points, res.dataset_meta, res.epsilon_spent
    )


@dataclass
class Status:
    state: str  # ok | running | error | cancelled | missing
    result: object = None
    message: str = ""
    progress: float = 0.0
    note: str = ""
    elapsed: float = 0.0


@dataclass
class _Inflight:
    job: Job
    holders: set = field(default_factory=set)
    light: bool = False  # every holder wants only the summary


def private_dataset(config: RunConfig) -> bool:
    """Runs on a user's upload belong to the session that uploaded it."""
    return config.dataset.startswith("upload:")


class Board:
    """Jobs and results shared by every session of this server process.

    Results of public datasets are shared (identical configurations are one job); results of an upload
    belong to its owner session only (:meth:`status` answers "missing" to anyone else) and are dropped
    with the owner (:meth:`drop_owner`). Full results live in one LRU of at most ``max_bytes`` (counted
    with :func:`deep_nbytes`); sweep summaries (:class:`Light`) in a second LRU of ``max_light`` entries.
    """

    def __init__(self, workers: int = 4, max_bytes: float | None = None, max_light: int = 20_000):
        self.jm = JobManager(workers=workers)
        mb = os.environ.get("HEATMAP_BOARD_MB")
        self.max_bytes = float(max_bytes if max_bytes is not None else (float(mb) * 2**20 if mb else 1.5e9))
        self.max_light = max_light
        self._lock = threading.Lock()
        self._results: OrderedDict[str, object] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._light: OrderedDict[str, Light] = OrderedDict()
        self._inflight: dict[str, _Inflight] = {}
        self._failed: dict[str, tuple[str, str]] = {}
        self._owner: dict[str, str] = {}  # key of a private run -> owner session
        self._timings: dict[str, list[tuple[int, int, float]]] = {}  # mechanism -> (depth, points, seconds)
        self._warm: Future | None = None

    @property
    def workers(self) -> int:
        """How many runs this server runs at once (the others wait in its queue)."""
        return self.jm.workers

    def running(self) -> int:
        """How many runs are in flight on this server (every session's)."""
        with self._lock:
            return len(self._inflight)

    def warm_up(self) -> Future:
        """Once per process, after the first page is drawn: load the engine's imports and compiled
        kernels in the background, so the user's first Run does not pay for them."""
        with self._lock:
            if self._warm is None:
                self._warm = self.jm.submit_task(_warmup)
            return self._warm

    # ------------------------------------------------------------ submission
    def submit(self, config: RunConfig, holder: str, dataset=None, light: bool = False) -> str:
        """Start ``config`` (or join the same job); ``dataset`` is required for an upload's run,
        ``light``: only the summary is kept."""
        key = config.key()
        private = private_dataset(config)
        if private and dataset is None:
            raise ValueError("a run on an uploaded file needs its dataset")
        with self._lock:
            if private and self._owner.get(key, holder) != holder:
                raise PermissionError("not this session's run")
            if key in self._results or (light and key in self._light):
                (self._results if key in self._results else self._light).move_to_end(key)
                return key
            inf = self._inflight.get(key)
            if inf is not None and not inf.job.done:
                inf.holders.add(holder)
                inf.light = inf.light and light
                return key
            self._failed.pop(key, None)
            # a user's own data never reaches the disk cache (the result holds its true map)
            job = self.jm.submit(config, use_cache=not private, dataset=dataset)
            self._inflight[key] = _Inflight(job, {holder}, light)
            if private:
                self._owner[key] = holder
        return key

    def cancel(self, key: str, holder: str) -> None:
        """Withdraw ``holder``; the job stops only when no session still waits for it."""
        with self._lock:
            inf = self._inflight.get(key)
            if inf is None:
                return
            inf.holders.discard(holder)
            if not inf.holders:
                inf.job.cancel()

    def wait(self, keys: list[str], timeout: float) -> None:
        with self._lock:
            futs = [self._inflight[k].job.future for k in keys if k in self._inflight]
        if futs:
            wait_futures(futs, timeout=timeout)

    def when_done(self, key: str, fn: Callable[[str, object], None]) -> None:
        """Call ``fn(state, value)`` once the run ``key`` has ended: ("ok", its result or summary), ("error" or
        "cancelled", the message), or ("missing", "") when the board holds no such run. In the thread that
        ends the run, so it is called even when no page asks for the run again; at once when it has ended."""
        ended: tuple[str, object] = ("missing", "")
        inf = None
        with self._lock:
            if key in self._results or key in self._light:
                ended = ("ok", self._results[key] if key in self._results else self._light[key])
            elif key in self._failed:
                ended = self._failed[key]
            else:
                inf = self._inflight.get(key)
        if inf is not None:
            inf.job.when_done(fn)
        else:
            fn(*ended)

    # ---------------------------------------------------------------- status
    def _allowed(self, key: str, holder: str | None) -> bool:
        owner = self._owner.get(key)
        return owner is None or owner == holder

    def status(self, key: str, holder: str | None = None, light: bool = False) -> Status:
        """The run's state for ``holder`` (another session's private run is "missing");
        ``light``: a summary is enough."""
        with self._lock:
            if not self._allowed(key, holder):
                return Status("missing")
            if key in self._results:
                return Status("ok", self._results[key], progress=1.0)
            if light and key in self._light:
                return Status("ok", self._light[key], progress=1.0)
            if key in self._failed:
                state, msg = self._failed[key]
                return Status(state, message=msg, progress=1.0)
            inf = self._inflight.get(key)
        if inf is None:
            return Status("missing")
        job = inf.job
        state, value = job.outcome()
        if state == "running":
            return Status("running", progress=float(job.progress), note=job.message, elapsed=job.elapsed)
        with self._lock:
            if self._inflight.get(key) is inf:
                self._inflight.pop(key, None)
                if state == "ok":
                    self._store(key, value, inf.light)
                else:
                    self._failed[key] = (state, str(value))
                    if len(self._failed) > 500:
                        self._failed.pop(next(iter(self._failed)))
        self.jm.forget(job.id)  # the board holds the result now, within its limits
        if state == "ok":
            return Status("ok", _light(value) if inf.light else value, progress=1.0, elapsed=job.elapsed)
        return Status(state, message=str(value), progress=1.0, elapsed=job.elapsed)

    def result(self, key: str, holder: str | None = None):
        st_ = self.status(key, holder)
        return st_.result if st_.state == "ok" else None

    def cached(self, key: str, holder: str | None = None) -> bool:
        with self._lock:
            return key in self._results and self._allowed(key, holder)

    def _time(self, res) -> None:
        """Remember how long a run took (mechanism, resolution, points), for the next estimate."""
        t = float((getattr(res, "timings", None) or {}).get("total_s", 0.0))
        if t > 0 and not getattr(res, "cached", False):
            hist = self._timings.setdefault(res.config.mechanism, [])
            dom = getattr(getattr(res, "release", None), "domain", None)  # an automatic grid is the run's own
            hist.append((int(dom.depth if dom is not None else res.config.depth), int(res.n_points or 0), t))
            del hist[:-50]

    def estimate(self, config: RunConfig) -> float | None:
        """Seconds a run of ``config`` should take: the engine's cost model when it has one, else the median
        of this server's measured runs of the same mechanism, scaled by cells (4^depth); None if unknown."""
        from ..execution import estimate_seconds

        try:
            return float(estimate_seconds(config))
        except Exception:  # a model that cannot answer falls back on the history
            pass
        with self._lock:
            hist = list(self._timings.get(config.mechanism, ()))
        if not hist:
            return None
        same = [t for d, _, t in hist if d == config.depth]
        if same:
            return float(np.median(same))
        return float(np.median([t * max(1.0, 4.0 ** (config.depth - d)) ** 0.5 for d, _, t in hist]))

    def _store(self, key: str, res, light: bool) -> None:
        self._time(res)
        if light:
            self._light[key] = _light(res)
            while len(self._light) > self.max_light:
                self._light.popitem(last=False)
            return
        size = result_nbytes(res)
        self._results[key] = res
        self._sizes[key] = size
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._results) > 1:
            old, _ = self._results.popitem(last=False)
            self._bytes -= self._sizes.pop(old, 0)

    def held_bytes(self) -> int:
        """Bytes of arrays in the full results the board holds (its memory bound)."""
        with self._lock:
            return self._bytes

    def drop_owner(self, owner: str) -> None:
        """Forget every run of ``owner``'s uploads (its session ended): results, failures, running jobs."""
        with self._lock:
            keys = [k for k, o in self._owner.items() if o == owner]
            for k in keys:
                self._owner.pop(k, None)
                if k in self._results:
                    self._results.pop(k)
                    self._bytes -= self._sizes.pop(k, 0)
                self._light.pop(k, None)
                self._failed.pop(k, None)
                inf = self._inflight.pop(k, None)
                if inf is not None:
                    inf.job.cancel()
                    self.jm.forget(inf.job.id)

    def put_light(self, key: str, res) -> None:
        """Keep the summary of a run computed elsewhere (a Dask cluster's sweep)."""
        with self._lock:
            self._time(res)
            self._light[key] = _light(res)
            while len(self._light) > self.max_light:
                self._light.popitem(last=False)

    # ------------------------------------------------------------- other work
    def submit_task(self, fn, *args) -> object:
        """Run a non-run task (e.g. a download) on the same pool; returns its Future."""
        return self.jm.submit_task(fn, *args)


def _warmup() -> None:
    from ...data.files.isolate import warm
    from ...data.geography import land_share, nearest_place_km
    from ..execution import run

    try:
        cfg = RunConfig(dataset="synthetic:monocentric", dataset_options={"n": 2000}, depth=4, mechanism="identity")
        run(cfg, use_cache=False)
        warm()  # the upload parser's forkserver and the gazetteer, so that a first upload does not wait for them
        nearest_place_km([0.0], [51.5]), land_share([0.0], [51.5])
    except Exception:  # a warm-up failure only costs speed
        pass
