"""Waiting on background work (jobs in the shared pool, threads, child processes, a page's poller).

The ceiling is a hang detector, not a speed claim: an audit of thousands of runs takes 20 s on an idle machine and
several times that beside other work, so the ceiling only catches work that never ends. A test that claims how soon
something happens states its own bound (an explicit ``ceiling``) or measures it apart."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

HANG_S = 600.0

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, ceiling: float = HANG_S, poll: float = 0.1) -> T:
    """Calls ``condition`` every ``poll`` seconds until it gives a true value, and returns that value; fails if
    ``ceiling`` seconds pass first (``what`` names what was waited for)."""
    t0 = time.monotonic()
    while not (got := condition()):
        assert time.monotonic() - t0 < ceiling, f"still waiting for {what} after {ceiling:.0f} s"
        time.sleep(poll)
    return got
