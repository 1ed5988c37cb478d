"""Quick reproductions of the papers' results (the Reproduce page's **Run the quick version**), server-wide.

Each is ``python -m engine bench SUITE --quick --json`` in a child process and process group of its own (a few
hundred MB and one core for tens of seconds). At most ``HEATMAP_REPRODUCE_RUNS`` (default 1) run at once on
the server, whichever sessions asked; the others wait in one queue, first come first served, and know their
place in it (:meth:`QuickRuns.place`).

A run belongs to the session (owner) that asked for it. An owner has at most one run queued or running, and
:meth:`QuickRuns.drop_owner` ends all of them: the hook of the upload store, which releases a session when its
tab has been closed for ``HEATMAP_SESSION_GRACE_S`` (:mod:`engine.run.server._session_files`). A run writes into a temporary
folder of its own; when it ends (finished, failed or cancelled) its figures and last progress line are kept in
memory and the folder is removed. Cancel sends SIGTERM to the run's process group, then SIGKILL after
:data:`KILL_AFTER_S`; the server's exit ends every run.

Progress: a suite prints a line per step to stderr, not how many are left, so a run's progress is its elapsed
time over its expected time: the median of this server's finished runs of the suite, else the caller's
estimate (the suite's typical time). It stops at :data:`PROGRESS_CAP` until the run ends.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import ParamError
from ..execution import read_regular
from ._session_files import env_float

ROOT = Path(__file__).resolve().parents[3]
KILL_AFTER_S = 5.0  # a cancelled run's group gets SIGKILL if SIGTERM has not ended it by then
PROGRESS_CAP = 0.95
FIGURES_BYTES = 16 * 2**20  # a quick suite's JSON is a few kB
TAIL_BYTES = 4096  # of the progress file, for its last line
HISTORY = 5  # finished runs per suite whose durations give the expected time


def bench_command(suite: str) -> list[str]:
    return [sys.executable, "-m", "engine", "bench", suite, "--quick", "--json"]


@dataclass(eq=False)
class QuickRun:
    """One quick reproduction: queued, running, or ended (``ok``, ``error``, ``cancelled``)."""

    suite: str
    owner: str
    expected_s: float
    state: str = "queued"
    queued_at: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    figures: dict | None = None  # the suite's JSON, once it finished
    message: str = ""  # why it failed, or its last progress line once it ended
    folder: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    cancel_at: float | None = None

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    def elapsed(self) -> float:
        return 0.0 if self.started is None else (self.ended or time.time()) - self.started

    def progress(self) -> float:
        """0 while queued, elapsed over expected time while running (at most :data:`PROGRESS_CAP`), 1 once ended."""
        if self.state == "queued":
            return 0.0
        if self.state != "running":
            return 1.0
        return min(PROGRESS_CAP, self.elapsed() / max(self.expected_s, 1.0))

    def last_line(self) -> str:
        """The suite's latest progress message (it writes them to stderr)."""
        if self.state != "running" or self.folder is None:
            return self.message
        return _last_line(self.folder / "progress.txt")


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def _signal_group(proc: subprocess.Popen | None, sig: int) -> None:
    if proc is None:
        return
    try:
        os.killpg(proc.pid, sig)  # the suite and anything it started
    except (ProcessLookupError, PermissionError):
        pass


class QuickRuns:
    """The server's quick reproductions: a queue and at most ``slots`` running (see the module docstring).
    ``command(suite)``: the child's command line (default :func:`bench_command`, the suite's quick benchmark)."""

    def __init__(self, slots: int | None = None, command: Callable[[str], list[str]] | None = None):
        self.slots = max(1, int(slots if slots is not None else env_float("HEATMAP_REPRODUCE_RUNS", 1)))
        self.command = command
        self._lock = threading.Lock()
        self._queue: list[QuickRun] = []
        self._running: list[QuickRun] = []
        self._runs: dict[str, dict[str, QuickRun]] = {}  # owner -> suite -> its latest run
        self._durations: dict[str, list[float]] = {}
        atexit.register(_shutdown, weakref.ref(self))

    # ------------------------------------------------------------ asking
    def submit(self, owner: str, suite: str, expected_s: float) -> QuickRun:
        """Queue a quick run of ``suite`` for ``owner``; an owner with a run queued or running gets that one."""
        with self._lock:
            mine = self._runs.setdefault(owner, {})
            active = next((r for r in mine.values() if r.active), None)
            if active is not None:
                return active
            run = QuickRun(suite, owner, float(expected_s))
            mine[suite] = run
            self._queue.append(run)
        self._advance()
        return run

    def runs(self, owner: str) -> dict[str, QuickRun]:
        """``owner``'s latest run of each suite."""
        with self._lock:
            return dict(self._runs.get(owner, {}))

    def place(self, run: QuickRun) -> tuple[int, int]:
        """``(position, running)``: the run's place in the queue (1 = next; 0 once it runs) and how many run now."""
        with self._lock:
            pos = next((i + 1 for i, r in enumerate(self._queue) if r is run), 0)
            return pos, len(self._running)

    def active(self) -> list[QuickRun]:
        """Every run queued or running on the server."""
        with self._lock:
            return [*self._running, *self._queue]

    # ------------------------------------------------------------ ending
    def cancel(self, run: QuickRun) -> None:
        """A queued run leaves the queue; a running one is ended (its folder is removed when it has stopped)."""
        with self._lock:
            if run in self._queue:
                self._queue.remove(run)
                run.state, run.ended = "cancelled", time.time()
                return
            if run.state != "running" or run.cancel_at is not None:
                return
            run.cancel_at = time.time()
            proc = run.proc
        _signal_group(proc, signal.SIGTERM)  # a run still starting is signalled by its watcher

    def drop_owner(self, owner: str) -> None:
        """End and forget every run of ``owner`` (its session has gone)."""
        with self._lock:
            runs = list(self._runs.pop(owner, {}).values())
        for run in runs:
            self.cancel(run)

    def shutdown(self) -> None:
        """End every run now (the server is stopping)."""
        with self._lock:
            queued, self._queue = self._queue, []
            running = list(self._running)
        for run in queued:
            run.state, run.ended = "cancelled", time.time()
        for run in running:
            run.cancel_at = run.cancel_at or time.time()
            _signal_group(run.proc, signal.SIGKILL)
            if run.folder is not None:
                shutil.rmtree(run.folder, ignore_errors=True)

    # ------------------------------------------------------------ running
    def _expected(self, run: QuickRun) -> float:
        hist = self._durations.get(run.suite)
        return statistics.median(hist) if hist else run.expected_s

    def _advance(self) -> None:
        """Start queued runs while a slot is free."""
        while True:
            with self._lock:
                if len(self._running) >= self.slots or not self._queue:
                    return
                run = self._queue.pop(0)
                run.state, run.started = "running", time.time()
                run.expected_s = self._expected(run)
                self._running.append(run)
            try:
                self._start(run)
            except OSError as exc:
                self._end(run, "error", f"the quick run could not start ({exc.strerror or exc})")

    def _start(self, run: QuickRun) -> None:
        run.folder = Path(tempfile.mkdtemp(prefix=f"reproduce_{run.suite}_"))
        with open(run.folder / "figures.json", "wb") as out, open(run.folder / "progress.txt", "wb") as err:
            run.proc = subprocess.Popen(
                (self.command or bench_command)(run.suite),
                cwd=ROOT,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        threading.Thread(target=self._watch, args=(run,), name=f"reproduce-{run.suite}", daemon=True).start()

    def _watch(self, run: QuickRun) -> None:
        """Wait for the run's process, escalating a cancel to SIGKILL, then end the run."""
        proc, folder, termed = run.proc, run.folder, False
        if proc is None or folder is None:  # _start sets both before it starts this thread
            raise RuntimeError(f"the quick run of {run.suite} is watched before its process started")
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if run.cancel_at is None:
                    continue
                if not termed:
                    _signal_group(proc, signal.SIGTERM)
                    termed = True
                elif time.time() - run.cancel_at > KILL_AFTER_S:
                    _signal_group(proc, signal.SIGKILL)
        _signal_group(proc, signal.SIGKILL)  # whatever the suite started and left behind
        if run.cancel_at is not None:
            self._end(run, "cancelled", "")
        elif proc.returncode == 0:
            self._finished(run, folder)
        else:
            last = _last_line(folder / "progress.txt")
            self._end(run, "error", last or f"the command exited with code {proc.returncode}")

    def _finished(self, run: QuickRun, folder: Path) -> None:
        try:
            figures = json.loads(read_regular(folder / "figures.json", FIGURES_BYTES))
        except (ParamError, ValueError) as exc:
            self._end(run, "error", f"the suite's output could not be read ({str(exc)[:120]})")
            return
        if not isinstance(figures, dict):
            self._end(run, "error", "the suite's output is not a table of figures")
            return
        run.figures = figures
        self._end(run, "ok", _last_line(folder / "progress.txt"))

    def _end(self, run: QuickRun, state: str, message: str) -> None:
        if run.folder is not None:
            shutil.rmtree(run.folder, ignore_errors=True)
        with self._lock:
            run.state, run.message, run.ended = state, message, time.time()
            if run in self._running:
                self._running.remove(run)
            if state == "ok":
                hist = self._durations.setdefault(run.suite, [])
                hist.append(run.elapsed())
                del hist[:-HISTORY]
        self._advance()


def _shutdown(ref) -> None:
    runs = ref()
    if runs is not None:
        runs.shutdown()
