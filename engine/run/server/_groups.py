"""A session's named groups of runs on the shared :class:`~engine.run.server.Board`.

A page starts its runs as one named *group* (its main run and context runs, a sweep, the repeated
releases behind a margin of error) and draws them when they finish. :class:`Session` keeps the
groups in a mutable mapping the caller owns (the dashboard passes ``st.session_state``, a test a
plain dict), so this module never imports Streamlit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

import numpy as np

from ...core.errors import Cancelled, EngineError
from ..execution import RunConfig
from ._board import Board, Status, private_dataset

GONE = "your uploaded file is no longer held by the server (the session was idle, or newer uploads replaced it): upload it again"


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


def main_ok(g: Group | None) -> bool:
    return g is not None and bool(g.statuses) and g.statuses[0].state == "ok"


def _finished_ok(g: Group | None) -> bool:
    return g is not None and g.done and any(s.state == "ok" for s in g.statuses)


def _cluster_sweep(configs: list[RunConfig], client, b: Board, prog: dict) -> None:
    """Run a sweep on a Dask cluster (:func:`engine.run.execution.run_many`) and keep each run's summary on the board."""
    from ..execution import run_many

    def progress(done, total, cfg):
        prog["done"] = done

    results = run_many(configs, client, progress=progress, cancelled=lambda: prog.get("cancel", False))
    for cfg, res in zip(configs, results):
        b.put_light(cfg.key(), res)


class Session:
    """One browser session's view of the board: its secret id ``sid`` (owner of its uploads' runs), its
    groups (kept in ``state``), and ``dataset_for``: the upload a private run reads (None when gone)."""

    def __init__(
        self,
        board: Board,
        sid: str,
        state: MutableMapping,
        dataset_for: Callable[[RunConfig], object | None] = lambda cfg: None,
        sync_wait_s: float = 0.8,
    ):
        self.board, self.sid, self.state, self.dataset_for = board, sid, state, dataset_for
        self.sync_wait_s = sync_wait_s  # a fast run is shown without a progress flash

    def _groups(self) -> dict:
        return self.state.setdefault("_groups", {})

    def _clusters(self) -> dict:
        return self.state.setdefault("_cluster", {})

    def _submit(self, config: RunConfig, light: bool) -> str | None:
        ds = self.dataset_for(config) if private_dataset(config) else None
        if private_dataset(config) and ds is None:
            return None
        return self.board.submit(config, self.sid, dataset=ds, light=light)

    def submit_group(
        self, name: str, configs: list[RunConfig], label: str = "", wait: bool = True, light: bool = False, cluster=None
    ) -> Group:
        """Start (or reuse) the runs of ``configs`` under the group ``name`` (``light``: keep only each run's
        summary, as a sweep needs; ``cluster``: a Dask client that runs them, for a sweep of registry datasets)."""
        b, sid = self.board, self.sid
        old = self._groups().get(name)
        keys = [c.key() for c in configs]
        todo = [c for c in configs if not (b.cached(c.key(), sid) or b.status(c.key(), sid, light=True).state == "ok")]
        if cluster is not None and light and todo and not any(private_dataset(c) for c in configs):
            prog = {"done": 0, "total": len(todo)}
            self._clusters()[name] = (b.submit_task(_cluster_sweep, todo, cluster, b, prog), prog)
        else:
            self._clusters().pop(name, None)
            for c in configs:
                self._submit(c, light)
        if old is not None:
            for k in set(old["keys"]) - set(keys):
                b.cancel(k, sid)
        self._groups()[name] = {
            "keys": keys,
            "configs": [c.to_dict() for c in configs],
            "started": time.time(),
            "label": label,
            "light": light,
            "resubmitted": [],
        }
        if wait:
            b.wait(keys, self.sync_wait_s)
        return self.group(name)

    def _cluster_status(self, name: str) -> Status | None:
        """A key of a sweep running on the cluster: "running" until its summary arrives, or the sweep's error."""
        held = self._clusters().get(name)
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

    def _statuses(self, g: dict, name: str = "") -> list[Status]:
        """The group's statuses. A result dropped from the board's memory is computed again only when that
        gives the identical release (a seeded evaluation run) and only once per group: re-running a secure
        run would be a new release the ledger never counted, and re-running without end is how a large sweep
        once cycled between eviction and re-submission."""
        b, sid = self.board, self.sid
        light = bool(g.get("light"))
        statuses = [b.status(k, sid, light) for k in g["keys"]]
        for i, s in enumerate(statuses):
            if s.state != "missing":
                continue
            cfg = RunConfig.from_dict(g["configs"][i])
            key = g["keys"][i]
            cs = self._cluster_status(name) if name else None
            if cs is not None:
                statuses[i] = cs
            elif cfg.secure:
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
            elif self._submit(cfg, light) is None:
                statuses[i] = Status("error", message=GONE, progress=1.0)
            else:
                g["resubmitted"].append(key)
                statuses[i] = b.status(key, sid, light)
        return statuses

    def _group(self, name: str, g: dict, statuses: list[Status]) -> Group:
        configs = [RunConfig.from_dict(c) for c in g["configs"]]
        # what the page last saw, so a progress panel can tell when it drew a state that has since changed
        self.state.setdefault("_seen_states", {})[name] = [s.state for s in statuses]
        return Group(name, configs, g["keys"], statuses, g["started"], g.get("label", ""))

    def get_group(self, name: str) -> Group | None:
        g = self._groups().get(name)
        return None if g is None else self._group(name, g, self._statuses(g, name))

    def group(self, name: str) -> Group:
        """The group ``name`` this session has started (its groups are replaced, never dropped)."""
        g = self.get_group(name)
        if g is None:
            raise EngineError(f"this session has started no group of runs named {name!r}")
        return g

    def when_done(self, name: str, key: str, fn: Callable[[str, object], None]) -> None:
        """Call ``fn(state, value)`` once the run ``key`` of the group ``name`` has ended (see
        :meth:`Board.when_done`); a sweep on the cluster ends with its task, which keeps every summary or none."""
        held = self._clusters().get(name)
        if held is None:
            self.board.when_done(key, fn)
            return

        def ended(fut) -> None:
            exc = None if fut.cancelled() else fut.exception()
            if fut.cancelled() or isinstance(exc, Cancelled):
                fn("cancelled", "the run was cancelled")
            elif exc is not None:
                fn("error", str(exc))
            else:
                self.board.when_done(key, fn)

        held[0].add_done_callback(ended)

    def cancel_group(self, name: str) -> None:
        g = self._groups().get(name)
        if g is None:
            return
        held = self._clusters().get(name)
        if held is not None:
            held[1]["cancel"] = True  # run_many polls it and cancels the cluster's remaining tasks
        for k in g["keys"]:
            self.board.cancel(k, self.sid)

    def seen_states(self) -> dict[str, list[str]]:
        """The states each group had when the page last read it."""
        return {n: list(v) for n, v in self.state.get("_seen_states", {}).items()}

    def remember_ok(self, name: str) -> None:
        """Keep the group's current runs as the last finished view (shown while a new run is going)."""
        g = self._groups().get(name)
        if g is not None:
            self.state.setdefault("_last_ok", {})[name] = dict(g)

    def last_ok(self, name: str, whole: bool = False) -> Group | None:
        """The page's last good view, if the server still holds it: its first run (``whole``: any run) ok."""
        g = self.state.get("_last_ok", {}).get(name)
        if g is None:
            return None
        statuses = [self.board.status(k, self.sid, bool(g.get("light"))) for k in g["keys"]]
        if not any(s.state == "ok" for s in (statuses if whole else statuses[:1])):
            return None
        return self._group(name, g, statuses)

    def shown(self, name: str, g: Group | None, whole: bool = False) -> Group | None:
        """The group a page draws: the current one when it finished well (kept as the page's last
        good view), else the last good one, else None. ``whole`` (pages comparing several runs):
        the group must have finished and any run may be the good one; otherwise (one main run
        plus context) the first run must have succeeded."""
        ok = _finished_ok(g) if whole else main_ok(g)
        if ok:
            self.remember_ok(name)
            return g
        last = self.last_ok(name, whole)
        return None if last is None or (whole and not last.done) else last
