"""Shared fixtures. Every test runs offline with its own cache folder."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def slow_ids() -> set[str]:
    """Node ids of the tests that took 5 s or more in the last full run (scripts/slow_tests.py writes them)."""
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines() if SLOW_LIST.exists() else []
    return {s.strip() for s in lines if s.strip() and not s.startswith("#")}


def pytest_collection_modifyitems(config, items):
    """Marks the listed tests ``slow``: ``pytest -m "not slow and not browser"`` is the fast tier."""
    slow = slow_ids()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="session")
def _hermetic_cache(tmp_path_factory):
    import os

    path = tmp_path_factory.mktemp("cache")
    old = os.environ.get("HEATMAP_CACHE_DIR")
    os.environ["HEATMAP_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("HEATMAP_CACHE_DIR", None)
    else:
        os.environ["HEATMAP_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _own_ledger(tmp_path, monkeypatch):
    """Each test books its releases in a ledger of its own (the dashboard's is server-wide and persistent)."""
    monkeypatch.setenv("HEATMAP_LEDGER_DB", str(tmp_path / "ledger.sqlite3"))


@pytest.fixture(autouse=True)
def _own_board():
    """Each test's dashboard sessions share a board of their own, as they book in a ledger of their own: a board
    that outlived its ledger would show a release the new ledger never booked, and a job one test left running
    would count against the next one's limits."""
    yield
    jobs = sys.modules.get("ui.jobs")
    if jobs is not None:
        jobs.board().jm.shutdown()
        jobs.board.clear()


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def small_city():
    from engine.data.synthetic import generate

    return generate("polycentric", n=20_000, seed=3)


@pytest.fixture(scope="module")
def test_mechanisms():
    """The tiny test mechanisms of tests/support/mechanisms.py, registered for the module that asks for them."""
    from engine.mechanisms import base as mbase
    from tests.support.mechanisms import TEST_MECHS

    for cls in TEST_MECHS:
        mbase.register(cls)
    yield
    for cls in TEST_MECHS:
        mbase._REGISTRY.pop(cls.key, None)


# ------------------------------------------------------------------ browser tests (tests/support/browser.py)
@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """One real server for every browser test of the run: (url, process)."""
    from tests.support.browser import serve

    with serve(tmp_path_factory) as (url, proc):
        yield url, proc


@pytest.fixture(scope="session")
def app_url(app_server):
    return app_server[0]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    from tests.support.browser import CHROMIUM

    return {**browser_type_launch_args, "executable_path": CHROMIUM}
