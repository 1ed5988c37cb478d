"""The server's render slots: at most SLOTS pages render at once, a page waits at most its limit, and a slot is
given back however the page ends (Streamlit ends a page by raising, e.g. on st.rerun)."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from ui import slots


def _hold(started: threading.Event, release: threading.Event) -> None:
    with slots.render_slot():
        started.set()
        release.wait(10)


def test_a_page_waits_for_a_free_slot_then_gets_it():
    release = threading.Event()
    holders = []
    for _ in range(slots.SLOTS):
        started = threading.Event()
        t = threading.Thread(target=_hold, args=(started, release))
        t.start()
        assert started.wait(5)
        holders.append(t)
    try:
        t0 = time.perf_counter()
        with slots.render_slot(wait=0.3) as got:
            waited = time.perf_counter() - t0
        assert got is False and waited >= 0.25  # every slot taken: it waited its limit and rendered without one
        threading.Timer(0.2, release.set).start()
        t0 = time.perf_counter()
        with slots.render_slot(wait=5) as got:
            waited = time.perf_counter() - t0
        assert got is True and 0.1 <= waited < 4  # a slot freed: it took it
    finally:
        release.set()
        for t in holders:
            t.join(5)


def test_a_page_that_raises_gives_its_slot_back():
    class Rerun(Exception):  # how Streamlit ends a script on st.rerun or st.stop
        pass

    for _ in range(slots.SLOTS + 2):
        with pytest.raises(Rerun), slots.render_slot(wait=0.5) as got:
            assert got is True  # the slots of the pages before were all given back
            raise Rerun


def test_the_slot_count_comes_from_the_environment_and_absurd_values_fall_back(monkeypatch):
    import importlib

    try:
        for value, expected in (("5", 5), ("0", 2), ("-3", 2), ("many", 2)):
            monkeypatch.setenv("HEATMAP_RENDER_SLOTS", value)
            assert importlib.reload(slots).SLOTS == expected, value
    finally:
        monkeypatch.delenv("HEATMAP_RENDER_SLOTS")
        importlib.reload(slots)


def test_a_page_waiting_on_work_elsewhere_lets_another_render():
    """Inside ``given_up`` (an upload's parser, a run's first second) the page's slot is another page's; after
    it the page holds a slot again."""
    with slots.render_slot() as got:
        assert got is True
        others = []
        release = threading.Event()
        with slots.given_up():
            for _ in range(slots.SLOTS):  # every slot, this page's included, can go to other pages now
                started = threading.Event()
                t = threading.Thread(target=_hold, args=(started, release))
                t.start()
                assert started.wait(5)
                others.append(t)
            threading.Timer(0.2, release.set).start()
        assert slots.holds_slot()  # taken back once one was free
        for t in others:
            t.join(5)
    with slots.given_up():  # outside any page: nothing to give up
        assert not slots.holds_slot()
    for _ in range(2):  # and every slot is free again, all at once, and given back by nested blocks
        with contextlib.ExitStack() as stack:
            assert all(stack.enter_context(slots.render_slot(wait=0.5)) for _ in range(slots.SLOTS))
