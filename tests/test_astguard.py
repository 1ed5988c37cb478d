"""Threads that parse at once (numpy's .npy headers in background runs, source scans) take turns in ast.parse.

The race needs a thread switch inside the AST constructor; a garbage-collector callback that sleeps makes one at
every collection, so the unguarded parse fails on CPython 3.11 in every trial here, the guarded one never."""

from __future__ import annotations

import ast
import gc
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import engine  # noqa: F401  installs the guard

SOURCE = open(ast.__file__, encoding="utf-8").read()  # thousands of nodes: several collections per parse


def _failures(parse, trials: int = 3) -> int:
    """Trials in which four threads parsing at once, switching at every collection, raised SystemError."""

    def switch(phase, info):
        time.sleep(0.0005)

    gc.callbacks.append(switch)
    failed = 0
    try:
        for _ in range(trials):
            try:
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(lambda _: parse(SOURCE), range(40)))
            except SystemError:
                failed += 1
    finally:
        gc.callbacks.remove(switch)
    return failed


def test_threads_parsing_at_once_never_fail():
    assert _failures(ast.parse) == 0
    if sys.version_info < (3, 13):  # where the interpreter shares the state, the bare parse does fail
        assert _failures(ast.parse.__wrapped__) > 0


def test_the_guard_is_installed_once_and_parses_as_before():
    from engine.core import astguard

    before = ast.parse
    astguard.install()
    assert ast.parse is before  # a second install is a no-op
    assert getattr(ast.parse, "_one_thread", False) == (sys.version_info < (3, 13))
    buf = io.BytesIO()
    np.save(buf, np.arange(6.0).reshape(2, 3))
    assert float(np.load(io.BytesIO(buf.getvalue())).sum()) == 15.0  # numpy's header goes through literal_eval
    assert ast.literal_eval("{'descr': '<f8', 'shape': (2, 3)}") == {"descr": "<f8", "shape": (2, 3)}
