"""Background runs: a thread pool of :func:`engine.run.execution.run` calls, each cancellable, shared
by every caller of the process."""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import Cancelled, EngineError
from ._config import RunConfig
from ._runner import run

MAX_UNCOLLECTED = 50  # finished jobs whose outcome nobody read, kept for a late get()


@dataclass
class Job:
    id: str
    config: RunConfig
    cancel_event: threading.Event
    started: float
    future: Future = field(init=False)  # set by JobManager.submit right after the job is made
    progress: float = 0.0
    message: str = "queued"
    finished: float | None = None
    on_collected: Callable[[Job], None] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.future.done()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.time()) - self.started

    def cancel(self) -> None:
        """Stop the job: a queued job never starts; a running one stops at its next check
        (the engine checks at least every second or so, noise draws included)."""
        self.cancel_event.set()
        if self.future.cancel() and self.finished is None:
            self.finished, self.message = time.time(), "cancelled"

    def outcome(self) -> tuple[str, Any]:
        """("ok", RunResult) | ("cancelled", msg) | ("error", user message) | ("running", None).
        Reading a finished job's outcome hands its result to the caller: the manager then
        stops holding it (see :class:`JobManager`)."""
        if not self.future.done():
            return "running", None
        out = self._outcome()
        if self.on_collected is not None:
            self.on_collected(self)
        return out

    def when_done(self, fn: Callable[[str, Any], None]) -> None:
        """Call ``fn(state, value)`` with the job's outcome (see :meth:`outcome`) once it has ended: in the
        thread that ends it, or at once when it has. Unlike :meth:`outcome` it leaves the result with its owner."""
        # the callback holds the future's outcome, not the job: a job kept by its own future's callbacks would
        # keep its result until the cyclic garbage collector runs
        self.future.add_done_callback(lambda future: fn(*_outcome(future)))

    def _outcome(self) -> tuple[str, Any]:
        return _outcome(self.future)


def _outcome(future: Future) -> tuple[str, Any]:
    if future.cancelled():
        return "cancelled", "the run was cancelled"
    exc = future.exception()
    if exc is None:
        return "ok", future.result()
    if isinstance(exc, Cancelled):
        return "cancelled", str(exc)
    if isinstance(exc, EngineError):
        return "error", str(exc)
    if isinstance(exc, MemoryError):
        return (
            "error",
            "the run needed more memory than this machine has; lower the resolution or the number of users",
        )
    return "error", f"the run failed unexpectedly ({type(exc).__name__}); the error was logged without data"


class JobManager:
    """Runs configurations in a thread pool; shared by all browser sessions.

    Jobs never touch the UI; the dashboard polls ``job.progress``. A failure is
    confined to its job. The manager holds a job (and so its result) only until its
    outcome is read, then only weakly: a finished result lives as long as its owner keeps
    the :class:`Job` (``get`` finds it until then), so the owner's own bounds (e.g. the
    dashboard's board) are the only ones that keep results. ``forget`` drops a job at once
    (cancelling it if it still runs); at most ``MAX_UNCOLLECTED`` finished jobs whose outcome
    nobody read are kept.
    """

    def __init__(self, workers: int = 2):
        self.workers = workers  # runs at once
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heatmap-job")
        self._jobs: dict[str, Job] = {}  # running, or finished and not yet collected
        self._collected: weakref.WeakValueDictionary[str, Job] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def submit(self, config: RunConfig, use_cache: bool = True, dataset=None) -> Job:
        """Run ``config`` in the pool (``dataset``: a dataset object instead of the registry's, e.g. an upload)."""
        ev = threading.Event()
        # the job exists before its work starts, so no early progress message is lost (a running
        # job would show "queued" until the mechanism's first report)
        job = Job(uuid.uuid4().hex[:12], config, ev, time.time(), on_collected=self._collected_cb)

        def prog(f, msg=""):
            job.progress, job.message = f, msg

        def work():
            try:
                res = run(config, progress=prog, cancelled=ev.is_set, use_cache=use_cache, dataset=dataset)
                if ev.is_set():  # cancelled after the last check: the user asked for no result
                    raise Cancelled("the run was cancelled")
                return res
            finally:
                job.finished = time.time()

        job.future = self._pool.submit(work)
        with self._lock:
            self._jobs[job.id] = job
            finished = [k for k, j in self._jobs.items() if j.done]
            for k in finished[: max(0, len(finished) - MAX_UNCOLLECTED)]:
                self._jobs.pop(k)
        return job

    def submit_task(self, fn, *args) -> Future:
        """Run a task other than a run (a download, a warm-up) on the same pool."""
        return self._pool.submit(fn, *args)

    def _collected_cb(self, job: Job) -> None:
        with self._lock:
            if self._jobs.pop(job.id, None) is not None:
                self._collected[job.id] = job

    def get(self, jid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(jid) or self._collected.get(jid)

    def forget(self, jid: str) -> None:
        """Drop the manager's hold on a job (cancelled first if it has not finished)."""
        with self._lock:
            job = self._jobs.pop(jid, None) or self._collected.pop(jid, None)
        if job is not None and not job.done:
            job.cancel()

    def shutdown(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for j in jobs:
            j.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
