"""At most a few pages of this server render at once.

Streamlit runs each session's script in its own thread, and the process runs Python in one thread at a time (the
GIL). When many pages render together, the event loop that sends every session's messages gets a small share of
it, and a click's first answer waits in its session's queue. A page waits for a slot instead; it waits at most
``WAIT_S`` and then renders anyway, so a slow page never holds the others for long. The click itself is answered
before the page waits: Streamlit reports that the script started before ``app.py`` runs it, and widget callbacks
(an upload's parser among them) run before it too. A page that waits for a run it shows as soon as it ends gives
its slot up meanwhile.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from engine.run.server import env_float

SLOTS = max(1, int(env_float("HEATMAP_RENDER_SLOTS", 2)))  # two: 16 sessions' answers ≤ 0.85 s (BENCHMARKS.md "Load")
WAIT_S = 3.0

_slots = threading.BoundedSemaphore(SLOTS)
_local = threading.local()


def _held() -> list[bool]:
    """This thread's open ``render_slot`` blocks, innermost last: whether each holds a slot now."""
    if not hasattr(_local, "held"):
        _local.held = []
    return _local.held


def holds_slot() -> bool:
    held = _held()
    return bool(held and held[-1])


@contextmanager
def render_slot(wait: float = WAIT_S):
    """Hold one of the server's render slots while the block runs (without one after ``wait`` seconds)."""
    held = _held()
    held.append(_slots.acquire(timeout=wait))
    try:
        yield held[-1]
    finally:
        if held.pop():
            _slots.release()


@contextmanager
def given_up():
    """Let another page render while this one waits on work outside the server's Python (then take a slot back,
    waiting at most ``WAIT_S``, as :func:`render_slot` does)."""
    held = _held()
    if not (held and held[-1]):
        yield
        return
    _slots.release()
    held[-1] = False
    try:
        yield
    finally:
        held[-1] = _slots.acquire(timeout=WAIT_S)
