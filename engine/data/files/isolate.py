"""Parse an uploaded file in a child process with memory and time limits, so that a file built to exhaust
the parser (a decompression or a nesting bomb the checks from metadata miss) ends the child, not the server.

The child is forked from a forkserver that has the readers imported (a fork costs milliseconds, not the
seconds of a fresh interpreter). The parent reads the child's resident memory every few milliseconds and
kills it once it has grown by more than :func:`memory_budget` of the file, or once it has run longer than
:func:`time_budget`; the child also limits its own address space (``RLIMIT_AS``, with room for thread
stacks and allocator reservations, which are address space but not memory) and CPU time, a backstop
should the parent's watch lag. What comes back is the work's result, or the refusal's message; a child
that ran out of memory or time or died gives a :class:`DataError` that says so.

:func:`run_isolated` runs any work on a file this way (a file of locations, of regions and their area
weights, a context layer); :func:`load_file_isolated` is :func:`engine.data.files.load_file` run so, with
the child's peak memory growth (what the limit bounds) in ``meta.extra["parse_peak_bytes"]``.

Limits: ``HEATMAP_PARSE_MEMORY_FACTOR`` (default 4) times the file plus ``HEATMAP_PARSE_MEMORY_MB`` (default
200), and ``HEATMAP_PARSE_SECONDS`` (default 20) plus ``HEATMAP_PARSE_SECONDS_PER_MB`` (default 0.5) per MB.
The child runs under the caller's ``HEATMAP_*`` environment (every limit a reader reads), not the forkserver's.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import resource
import sys
import threading
import time
import types
from pathlib import Path
from typing import NamedTuple

from ...core.errors import DataError, ParamError, shown_text
from .columns import MissingColumns
from .upload_limits import MiB, env_number, memory_budget

# the work done in a child imports these lazily: imported once in the forkserver, every child has them
_PRELOAD = [
    "engine.data.files",
    "engine.data.region_geometry",
    "engine.data.context",
    "scipy.sparse",
    "pandas",
    "pyarrow.parquet",
    "pyarrow.compute",
    "geopandas",
    "shapely",
    "pyproj",
    "fiona",
]
WATCH_S = 0.02  # how often the parent reads the child's resident memory
_AS_SLACK = 2 << 30  # address space beyond the budget: thread stacks and allocator reservations, not memory
_CTX_LOCK = threading.Lock()
_CTX = None
TALLY = {"runs": 0, "cpu_s": 0.0}  # children started by this process and the CPU those that finished used


def time_budget(size: int) -> float:
    """Seconds of wall time a parse may take for a file of ``size`` bytes."""
    return env_number("HEATMAP_PARSE_SECONDS", 20.0) + env_number("HEATMAP_PARSE_SECONDS_PER_MB", 0.5) * size / MiB


def _context():
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            # the forkserver is a fresh interpreter that ignores the caller's sys.path (Python 3.11): without
            # the project on its path the preload fails silently and every child imports it all again
            root = str(Path(__file__).resolve().parents[3])
            paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if root not in paths:
                os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, paths)])
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            _CTX = ctx
        return _CTX


def warm() -> None:
    """Start the forkserver and its imports now (seconds), so the first upload does not wait for them."""
    from multiprocessing import forkserver

    _context()
    with _bare_main():
        forkserver.ensure_running()


def _status_bytes(field: str, pid: int | str = "self") -> int:
    """A memory figure (``VmRSS``, ``VmSize``) of a process from /proc, in bytes; 0 once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Isolated(NamedTuple):
    """What a child's work gave: its result, the child's peak memory growth (bytes) and CPU seconds."""

    result: object
    peak_bytes: int
    cpu_s: float


def _caller_env() -> dict:
    """The caller's limits: every ``HEATMAP_*`` variable (the forkserver kept the environment it started with)."""
    return {k: v for k, v in os.environ.items() if k.startswith("HEATMAP_")}


def _child(conn, fn, args, kwargs, env, mem_bytes, cpu_s) -> None:
    try:
        for k in [k for k in os.environ if k.startswith("HEATMAP_")]:
            del os.environ[k]
        os.environ.update(env)
        # a hard backstop; the parent's watch of the resident memory is the budget itself
        vm = _status_bytes("VmSize") + mem_bytes + _AS_SLACK
        resource.setrlimit(resource.RLIMIT_AS, (vm, vm))
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_s) + 1, int(cpu_s) + 2))
        rss0 = _status_bytes("VmRSS")
        conn.send(("rss0", rss0))
        out = fn(*args, **kwargs)
        use = resource.getrusage(resource.RUSAGE_SELF)  # a forked process counts from zero
        peak = use.ru_maxrss * 1024 - rss0
        conn.send(("ok", Isolated(out, int(max(peak, 0)), use.ru_utime + use.ru_stime)))
    except MissingColumns as exc:  # the caller offers the file's columns to choose from
        conn.send(("MissingColumns", (exc.available, str(exc))))
    except (DataError, ParamError) as exc:
        conn.send((type(exc).__name__, str(exc)))
    except MemoryError:
        conn.send(("memory", ""))
    except BaseException:  # never a library's own message (it may quote the file)
        conn.send(("failed", ""))
    finally:
        conn.close()
        os._exit(0)  # skip the interpreter's teardown of every imported module


def _wait(parent, proc, mem: int, seconds: float):
    """The child's answer, watching its resident memory every WATCH_S: ("memory"|"time", "") when over."""
    start, rss0 = time.monotonic(), None
    while True:
        if parent.poll(WATCH_S):
            kind, payload = parent.recv()
            if kind != "rss0":
                return kind, payload
            rss0 = payload
        if rss0 is not None and _status_bytes("VmRSS", proc.pid) - rss0 > mem:
            return "memory", ""
        if time.monotonic() - start > seconds:
            return "time", ""


_BARE_MAIN = types.ModuleType("__main__")  # no file: a process started under it imports nothing of the caller's
_START_LOCK = threading.Lock()


@contextlib.contextmanager
def _bare_main():
    """Start processes under a bare ``__main__``: the forkserver and each child re-import their parent's main
    script, which in a dashboard is the page Streamlit is running (its imports run again, slowly) and in a
    test may be a script that fails outside its runner."""
    with _START_LOCK:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = _BARE_MAIN
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


def _start(proc) -> None:
    with _bare_main():
        proc.start()


READ_ADVICE = "convert it to CSV or GeoParquet, or upload a smaller file"


def run_isolated(fn, args: tuple, size: int, name: str, kwargs=None, work: str = "read", advice: str = READ_ADVICE):
    """``fn(*args, **kwargs)`` in a child process under the memory and time budgets of a file of ``size`` bytes (see the
    module docstring): an :class:`Isolated` (its result, the child's peak memory growth and CPU time), or its
    DataError/ParamError.
    ``fn`` is a module-level function (it is sent to the child by name). ``name`` and ``work`` ("read",
    "build the area weights of") make the message when the child is stopped, ``advice`` ends it."""
    if mp.current_process().daemon:  # a daemonic process (a Dask worker, not the server) may not start one
        use0 = time.process_time()
        out = fn(*args, **(kwargs or {}))
        return Isolated(out, 0, time.process_time() - use0)
    mem, seconds = memory_budget(size), time_budget(size)
    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, kwargs or {}, _caller_env(), mem, seconds), daemon=True)
    _start(proc)
    child.close()
    TALLY["runs"] += 1
    try:
        kind, payload = _wait(parent, proc, mem, seconds)
    except EOFError:  # the child died without a word: killed by its limits, or crashed
        kind, payload = "failed", ""
    finally:
        parent.close()
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if kind == "ok":
        TALLY["cpu_s"] += payload.cpu_s
        return payload
    if kind == "MissingColumns":
        raise MissingColumns(*payload)
    if kind in ("DataError", "ParamError"):
        raise (DataError if kind == "DataError" else ParamError)(payload)
    if kind == "time":
        raise DataError(
            f"{name} took longer than {seconds:,.0f} s to {work} and was stopped (HEATMAP_PARSE_SECONDS plus "
            f"HEATMAP_PARSE_SECONDS_PER_MB per MB of the file): {advice}"
        )
    if kind == "memory":
        raise DataError(
            f"{name} needs more than {mem / MiB:,.0f} MB of memory to {work} (HEATMAP_PARSE_MEMORY_FACTOR times the "
            f"file plus HEATMAP_PARSE_MEMORY_MB) and was stopped: {advice}"
        )
    raise DataError(f"{name} could not be read: the reader stopped (out of memory or time, or a damaged file)")


def load_file_isolated(path_or_bytes, filename: str | None = None, **kwargs):
    """:func:`engine.data.files.load_file` run in a child process under memory and time limits
    (see the module docstring); same arguments, same Dataset or DataError/ParamError."""
    from .load import load_file
    from .upload_limits import upload_limits

    env_bytes, env_points = upload_limits()  # read here: the forkserver's environment is the one it started with
    kwargs.setdefault("max_bytes", env_bytes)
    kwargs.setdefault("max_points", env_points)
    source, name, size = file_source(path_or_bytes, filename)
    size = min(size, kwargs["max_bytes"])  # a larger file is refused before it is parsed
    done = run_isolated(load_file, (source, filename), size, name, kwargs)
    done.result.meta.extra["parse_peak_bytes"] = done.peak_bytes
    return done.result


def file_source(path_or_bytes, filename: str | None) -> tuple:
    """(what the child reads: bytes or a path as text, the file's name for messages, its size)."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), shown_text(Path(filename or "the file").name), len(path_or_bytes)
    path = Path(path_or_bytes)
    return str(path), shown_text(Path(filename or path.name).name), path.stat().st_size if path.is_file() else 0
