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

import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field

import numpy as np
import streamlit as st

from engine.jobs import JobManager, RunConfig

POLL_S = 0.3  # fragment refresh while something runs
SYNC_WAIT_S = 0.8  # a fast run is shown without a progress flash


def _nbytes(res) -> int:
    n = 0
    for a in (getattr(res, "truth", None), getattr(res.release, "density", None)):
        if isinstance(a, np.ndarray):
            n += a.nbytes
    for v in (getattr(res.release, "extras", None) or {}).values():
        if isinstance(v, np.ndarray):
            n += v.nbytes
    return n + 4096


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


class Board:
    """Jobs and results shared by every session of this server process."""

    def __init__(self, workers: int = 4, max_bytes: float = 1.5e9):
        self.jm = JobManager(workers=workers)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._results: OrderedDict[str, object] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[str, _Inflight] = {}
        self._failed: dict[str, tuple[str, str]] = {}
        self._warm = None

    def warm_up(self) -> None:
        """Once per process, after the first page is drawn: load the engine's imports and compiled
        kernels in the background, so the user's first Run does not pay for them."""
        with self._lock:
            if self._warm is None:
                self._warm = self.jm._pool.submit(_warmup)

    # ------------------------------------------------------------ submission
    def submit(self, config: RunConfig, holder: str) -> str:
        key = config.key()
        with self._lock:
            if key in self._results:
                self._results.move_to_end(key)
                return key
            inf = self._inflight.get(key)
            if inf is not None and not inf.job.done:
                inf.holders.add(holder)
                return key
            self._failed.pop(key, None)
            job = self.jm.submit(config)
            self._inflight[key] = _Inflight(job, {holder})
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
    def status(self, key: str) -> Status:
        with self._lock:
            if key in self._results:
                return Status("ok", self._results[key], progress=1.0)
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
            self._inflight.pop(key, None)
            if state == "ok":
                self._store(key, value)
            else:
                self._failed[key] = (state, str(value))
                if len(self._failed) > 500:
                    self._failed.pop(next(iter(self._failed)))
        if state == "ok":
            return Status("ok", value, progress=1.0, elapsed=job.elapsed)
        return Status(state, message=str(value), progress=1.0, elapsed=job.elapsed)

    def result(self, key: str):
        st_ = self.status(key)
        return st_.result if st_.state == "ok" else None

    def cached(self, key: str) -> bool:
        with self._lock:
            return key in self._results

    def _store(self, key: str, res) -> None:
        self._results[key] = res
        self._bytes += _nbytes(res)
        while self._bytes > self.max_bytes and len(self._results) > 1:
            _, old = self._results.popitem(last=False)
            self._bytes -= _nbytes(old)

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
    if "_sid" not in st.session_state:
        st.session_state["_sid"] = uuid.uuid4().hex[:12]
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


def submit_group(name: str, configs: list[RunConfig], label: str = "", wait: bool = True) -> Group:
    """Start (or reuse) the runs of ``configs`` under the session's group ``name``."""
    b = board()
    sid = session_id()
    old = _groups().get(name)
    keys = [b.submit(c, sid) for c in configs]
    if old is not None:
        for k in set(old["keys"]) - set(keys):
            b.cancel(k, sid)
    _groups()[name] = {"keys": keys, "configs": [c.to_dict() for c in configs], "started": time.time(), "label": label}
    if wait:
        b.wait(keys, SYNC_WAIT_S)
    return get_group(name)


def get_group(name: str) -> Group | None:
    g = _groups().get(name)
    if g is None:
        return None
    b = board()
    statuses = [b.status(k) for k in g["keys"]]
    # a result evicted from memory (or a job lost) is re-submitted: runs are deterministic
    missing = [i for i, s in enumerate(statuses) if s.state == "missing"]
    if missing:
        for i in missing:
            b.submit(RunConfig.from_dict(g["configs"][i]), session_id())
            statuses[i] = b.status(g["keys"][i])
    configs = [RunConfig.from_dict(c) for c in g["configs"]]
    # what the page last saw, so progress_panel can tell when it drew a state that has since changed
    st.session_state.setdefault("_seen_states", {})[name] = [s.state for s in statuses]
    return Group(name, configs, g["keys"], statuses, g["started"], g.get("label", ""))


def cancel_group(name: str) -> None:
    g = _groups().get(name)
    if g is None:
        return
    for k in g["keys"]:
        board().cancel(k, session_id())


def forget_group(name: str) -> None:
    _groups().pop(name, None)


def progress_panel(names: list[str], title: str = "Running") -> None:
    """Progress bar, elapsed time and a Cancel button for the session's running groups.

    Polls with ``st.fragment(run_every=POLL_S)`` while something runs and reruns the
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

    @st.fragment(run_every=POLL_S if active else None)
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
    statuses = [b.status(k) for k in g["keys"]]
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
