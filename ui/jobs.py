"""Background runs for the dashboard: one shared job board, per-session groups, a poller.

The :class:`Board` (one per server process, held in ``st.cache_resource``) wraps
:class:`engine.jobs.JobManager`: identical configurations share one job, finished
results stay in a bounded in-memory LRU (so re-running a configuration is instant
and identical even when its release cannot be pickled to the disk cache), and a
failed job only reports its own error. Each browser session keeps its own named
*groups* of configuration keys in ``st.session_state``; a fragment polls the
running ones (``run_every`` only while something runs) and reruns the page when
they finish. Engine work never calls ``st.*``.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field

import numpy as np
import streamlit as st

from engine.core.errors import EngineError
from engine.jobs import JobManager, RunConfig

POLL_S = 0.3  # fragment refresh while something runs, on a quiet server
POLL_MAX_S = 2.0  # on a busy one: every poll is a script run holding the GIL the runs and pages need
SYNC_WAIT_S = 0.8  # a fast run is shown without a progress flash


def deep_nbytes(obj, _seen: set | None = None, _depth: int = 0) -> int:
    """Bytes held by the arrays reachable from ``obj``: a result's truth, its release's density, partition,
    extras and diagnostics, and arrays captured by its callables (range answerers, server views). Counting
    only ``truth`` and ``density`` had let a board of "1.5 GB" hold 6.6 GB."""
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
    cached: bool = False
    release: None = None
    truth: None = None


def _light(res) -> Light:
    return Light(res.config, dict(res.metrics), dict(res.timings), res.n_users, res.n_points, res.dataset_meta)


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
    job: object
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
        self._warm = None

    def poll_interval(self) -> float:
        """Seconds between a running page's polls: 0.1 s per run in flight on the server, within
        [POLL_S, POLL_MAX_S] (16 sessions polling every 0.3 s were 50 script runs a second)."""
        with self._lock:
            busy = len(self._inflight)
        return min(POLL_MAX_S, max(POLL_S, 0.1 * busy))

    def warm_up(self) -> None:
        """Once per process, after the first page is drawn: load the engine's imports and compiled
        kernels in the background, so the user's first Run does not pay for them."""
        with self._lock:
            if self._warm is None:
                self._warm = self.jm._pool.submit(_warmup)

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
            hist.append((int(res.config.depth), int(res.n_points or 0), t))
            del hist[:-50]

    def estimate(self, config: RunConfig) -> float | None:
        """Seconds a run of ``config`` should take: the engine's cost model when it has one, else the median
        of this server's measured runs of the same mechanism, scaled by cells (4^depth); None if unknown."""
        try:
            from engine.jobs import estimate_seconds
        except ImportError:
            estimate_seconds = None
        if estimate_seconds is not None:
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
        return self.jm._pool.submit(fn, *args)


def _warmup() -> None:
    from engine.jobs import run

    try:
        cfg = RunConfig(dataset="synthetic:monocentric", dataset_options={"n": 2000}, depth=4, mechanism="identity")
        run(cfg, use_cache=False)
    except Exception:  # a warm-up failure only costs speed
        pass


@st.cache_resource(show_spinner=False)
def board() -> Board:
    return Board()


# ------------------------------------------------------------------ sessions
def session_id() -> str:
    """A random secret per browser session: it owns the session's uploads and their runs."""
    if "_sid" not in st.session_state:
        st.session_state["_sid"] = secrets.token_hex(16)
    return st.session_state["_sid"]


def _groups() -> dict:
    return st.session_state.setdefault("_groups", {})


@dataclass
class Group:
    name: str
    configs: list[RunConfig]
    keys: list[str]
    statuses: list[Status]
    started: float
    label: str = ""

    @property
    def running(self) -> bool:
        return any(s.state == "running" for s in self.statuses)

    @property
    def done(self) -> bool:
        return not self.running

    @property
    def results(self) -> list:
        return [s.result for s in self.statuses]

    @property
    def errors(self) -> list[str]:
        seen = []
        for s in self.statuses:
            if s.state == "error" and s.message not in seen:
                seen.append(s.message)
        return seen

    @property
    def cancelled(self) -> bool:
        return any(s.state == "cancelled" for s in self.statuses)

    @property
    def progress(self) -> float:
        return float(np.mean([s.progress for s in self.statuses])) if self.statuses else 1.0

    def by_key(self) -> dict[str, Status]:
        return dict(zip(self.keys, self.statuses))


def _dataset_for(config: RunConfig):
    """The upload a private run reads (this session's only), or None for registry datasets."""
    if not private_dataset(config):
        return None
    from . import uploads

    up = uploads.get(config.dataset)
    return None if up is None else up.dataset


GONE = "your uploaded file is no longer held by the server (the session was idle, or newer uploads replaced it): upload it again"


def _submit(b: Board, config: RunConfig, sid: str, light: bool) -> str | None:
    ds = _dataset_for(config)
    if private_dataset(config) and ds is None:
        return None
    return b.submit(config, sid, dataset=ds, light=light)


def submit_group(
    name: str, configs: list[RunConfig], label: str = "", wait: bool = True, light: bool = False, cluster=None
) -> Group:
    """Start (or reuse) the runs of ``configs`` under the session's group ``name``
    (``light``: keep only each run's summary, as a sweep needs; ``cluster``: a Dask client that runs them,
    for a sweep of registry datasets)."""
    b = board()
    sid = session_id()
    old = _groups().get(name)
    keys = [c.key() for c in configs]
    todo = [c for c in configs if not (b.cached(c.key(), sid) or b.status(c.key(), sid, light=True).state == "ok")]
    if cluster is not None and light and todo and not any(private_dataset(c) for c in configs):
        prog = {"done": 0, "total": len(todo)}
        st.session_state.setdefault("_cluster", {})[name] = (
            b.submit_task(_cluster_sweep, todo, cluster, b, prog),
            prog,
        )
    else:
        st.session_state.get("_cluster", {}).pop(name, None)
        for c in configs:
            _submit(b, c, sid, light)
    if old is not None:
        for k in set(old["keys"]) - set(keys):
            b.cancel(k, sid)
    _groups()[name] = {
        "keys": keys,
        "configs": [c.to_dict() for c in configs],
        "started": time.time(),
        "label": label,
        "light": light,
        "resubmitted": [],
    }
    if wait:
        b.wait(keys, SYNC_WAIT_S)
    return get_group(name)


def _cluster_sweep(configs: list[RunConfig], client, b: Board, prog: dict) -> None:
    """Run a sweep on a Dask cluster (engine.distributed.run_many) and keep each run's summary on the board."""
    from engine.distributed import run_many

    def progress(done, total, cfg):
        prog["done"] = done

    results = run_many(configs, client, progress=progress, cancelled=lambda: prog.get("cancel", False))
    for cfg, res in zip(configs, results):
        b.put_light(cfg.key(), res)


def _cluster_status(name: str, key: str) -> Status | None:
    """A key of a sweep running on the cluster: "running" until its summary arrives, or the sweep's error."""
    held = st.session_state.get("_cluster", {}).get(name)
    if held is None:
        return None
    fut, prog = held
    if not fut.done():
        return Status("running", progress=prog["done"] / max(prog["total"], 1), note="on the Dask cluster")
    exc = fut.exception()
    if exc is not None:
        msg = str(exc) if isinstance(exc, EngineError) else f"the cluster's sweep failed ({type(exc).__name__})"
        return Status("error", message=msg, progress=1.0)
    return None


def _statuses(g: dict, name: str = "") -> list[Status]:
    """The group's statuses. A result dropped from the board's memory is computed again only when that
    gives the identical release (a seeded evaluation run) and only once per group: re-running a secure
    run would be a new release the ledger never counted, and re-running without end is how a large sweep
    once cycled between eviction and re-submission."""
    b = board()
    sid = session_id()
    light = bool(g.get("light"))
    statuses = [b.status(k, sid, light) for k in g["keys"]]
    for i, s in enumerate(statuses):
        if s.state != "missing":
            continue
        cfg = RunConfig.from_dict(g["configs"][i])
        key = g["keys"][i]
        cs = _cluster_status(name, key) if name else None
        if cs is not None:
            statuses[i] = cs
            continue
        if cfg.secure:
            statuses[i] = Status(
                "error",
                message="a secure release was dropped from the server's memory; it is not re-drawn silently "
                "(that would be a new release): press Run for a new one, counted in the ledger",
                progress=1.0,
            )
        elif key in g.setdefault("resubmitted", []):
            statuses[i] = Status(
                "error",
                message="results were dropped from the server's memory to stay within its limit: "
                "run fewer or smaller configurations at once",
                progress=1.0,
            )
        elif _submit(b, cfg, sid, light) is None:
            statuses[i] = Status("error", message=GONE, progress=1.0)
        else:
            g["resubmitted"].append(key)
            statuses[i] = b.status(key, sid, light)
    return statuses


def get_group(name: str) -> Group | None:
    g = _groups().get(name)
    if g is None:
        return None
    statuses = _statuses(g, name)
    configs = [RunConfig.from_dict(c) for c in g["configs"]]
    # what the page last saw, so progress_panel can tell when it drew a state that has since changed
    st.session_state.setdefault("_seen_states", {})[name] = [s.state for s in statuses]
    return Group(name, configs, g["keys"], statuses, g["started"], g.get("label", ""))


def cancel_group(name: str) -> None:
    g = _groups().get(name)
    if g is None:
        return
    held = st.session_state.get("_cluster", {}).get(name)
    if held is not None:
        held[1]["cancel"] = True  # run_many polls it and cancels the cluster's remaining tasks
    for k in g["keys"]:
        board().cancel(k, session_id())


def forget_group(name: str) -> None:
    _groups().pop(name, None)


def progress_panel(names: list[str], title: str = "Running") -> None:
    """Progress bar, elapsed time and a Cancel button for the session's running groups.

    Polls with ``st.fragment(run_every=...)`` (:meth:`Board.poll_interval`) while something runs and reruns the
    whole page when it finishes; when idle the fragment is static (``run_every=None``).
    The rest of the page stays usable meanwhile.
    """
    seen = {n: list(v) for n, v in st.session_state.get("_seen_states", {}).items()}
    groups = [g for g in (get_group(n) for n in names) if g is not None]
    active = any(g.running for g in groups)
    if not active and any("running" in seen.get(g.name, []) for g in groups):
        # a run ended between the page reading its state and this panel: the page above drew it as still
        # running (no result, no cancelled/failed message) and no poller would come back; redraw now
        st.rerun()
    done_at_render = sum(s.state != "running" for g in groups for s in g.statuses)

    @st.fragment(run_every=board().poll_interval() if active else None)
    def _panel():
        gs = [g for g in (get_group(n) for n in names) if g is not None]
        running = [g for g in gs if g.running]
        n_done = sum(s.state != "running" for g in gs for s in g.statuses)
        if active and n_done > done_at_render:
            st.rerun()  # a run finished since the page was drawn: redraw it (results appear as they come)
        for g in running:
            k_done = sum(s.state != "running" for s in g.statuses)
            notes = [s.note for s in g.statuses if s.state == "running" and s.note]
            elapsed = time.time() - g.started
            c1, c2 = st.columns([5, 1], vertical_alignment="center")
            with c1:
                text = f"{g.label or title}: {k_done}/{len(g.statuses)} runs done · {elapsed:.1f} s"
                if notes:
                    text += f" · {notes[0]}"
                st.progress(min(max(g.progress, 0.0), 1.0), text=text)
            with c2:
                if st.button("Cancel", key=f"cancel_{g.name}", help="Stop these runs (other sessions are unaffected)"):
                    cancel_group(g.name)
                    st.rerun()

    _panel()


def remember_ok(name: str) -> None:
    """Keep the group's current runs as the last finished view (shown while a new run is going)."""
    g = _groups().get(name)
    if g is not None:
        st.session_state.setdefault("_last_ok", {})[name] = dict(g)


def last_ok(name: str, whole: bool = False) -> Group | None:
    """The page's last good view, if the server still holds it: its first run (``whole``: any run) ok."""
    g = st.session_state.get("_last_ok", {}).get(name)
    if g is None:
        return None
    b = board()
    statuses = [b.status(k, session_id(), bool(g.get("light"))) for k in g["keys"]]
    if not any(s.state == "ok" for s in (statuses if whole else statuses[:1])):
        return None
    configs = [RunConfig.from_dict(c) for c in g["configs"]]
    # what the page last saw, so progress_panel can tell when it drew a state that has since changed
    st.session_state.setdefault("_seen_states", {})[name] = [s.state for s in statuses]
    return Group(name, configs, g["keys"], statuses, g["started"], g.get("label", ""))


def main_ok(g: Group | None) -> bool:
    return g is not None and bool(g.statuses) and g.statuses[0].state == "ok"


def shown(name: str, g: Group | None, whole: bool = False) -> Group | None:
    """The group a page draws: the current one when it finished well (kept as the page's last
    good view), else the last good one, else None. ``whole`` (pages comparing several runs):
    the group must have finished and any run may be the good one; otherwise (one main run
    plus context) the first run must have succeeded."""
    ok = _finished_ok(g) if whole else main_ok(g)
    if ok:
        remember_ok(name)
        return g
    last = last_ok(name, whole)
    return None if last is None or (whole and not last.done) else last


def _finished_ok(g: Group | None) -> bool:
    return g is not None and g.done and any(s.state == "ok" for s in g.statuses)
