"""The engine owns a run's life (engine/run/server/_run_session.py): it books a group's runs, starts them on the board and
settles each booking when its run ends, in the run's own callback. Nothing here looks at the runs again after
they start (no page rerun: the tab may be closed), and the ledger still ends right."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from engine.core.errors import Cancelled, EngineError
from engine.run import RunConfig
from engine.run.bookkeeping._booking import EXCESS_NOTE, Bookkeeper, Refused
from engine.run.bookkeeping._ledger import BudgetStore, fingerprint_config
from engine.run.bookkeeping._limits import ENV_LIMIT
from engine.run.execution import _pool as jobs
from engine.run.server import Board, RunSession, Session
from tests.support.waiting import wait_until

DATA = {"dataset": "synthetic:polycentric", "dataset_options": {"n": 3000}, "depth": 5}


def cfg(**kw) -> RunConfig:
    return RunConfig(**{**DATA, **kw})


@pytest.fixture
def runs(tmp_path):
    """A run session on a board of its own (one worker) and a ledger of its own; yields (session, ledger db)."""
    board = Board(workers=1)
    db = tmp_path / "ledger.sqlite3"
    yield RunSession(Session(board, "sid-1", {}, sync_wait_s=0.0), Bookkeeper(BudgetStore(db))), db
    board.jm.shutdown()


@pytest.fixture
def gated(monkeypatch):
    """Runs that end when the test opens the gate, with what the test put in ``end`` (a result or an exception);
    a cancelled run stops at its next check."""
    gate, started, end = threading.Event(), threading.Event(), {}

    def work(config, progress=None, cancelled=None, use_cache=True, dataset=None):
        started.set()
        while not gate.wait(0.02):
            if cancelled():
                raise Cancelled("the run was cancelled")
        if isinstance(end.get("value"), BaseException):
            raise end["value"]
        return end.get("value")

    monkeypatch.setattr(jobs, "run", work)
    return gate, started, end


def entries(db, table: str, config: RunConfig) -> dict[str, float]:
    return {e.release_key: e.epsilon for e in BudgetStore(db, table=table).entries(fingerprint_config(config))}


def eventually(check, what: str) -> None:
    wait_until(check, f"the runs to settle ({what})", poll=0.02)


def no_page_reads(rs: RunSession, monkeypatch) -> None:
    """From here on nothing reads the runs' states (as a page rerun would)."""
    for obj, name in ((rs.session.board, "status"), (rs.session, "get_group")):
        monkeypatch.setattr(obj, name, lambda *a, **k: pytest.fail("a run's state was read after its start"))


def test_a_run_that_fails_after_its_page_has_gone_is_unbooked(runs, gated, monkeypatch):
    rs, db = runs
    gate, started, end = gated
    ev = cfg(mechanism="ug", epsilon=2.0, seed=3)
    out = rs.start("explore", [ev], note="explore", wait=False)
    assert [b.key for b in out.bookings] == [ev.key()] and entries(db, "evaluations", ev) == {ev.key(): 2.0}
    no_page_reads(rs, monkeypatch)
    end["value"] = EngineError("the mechanism refused the data")
    gate.set()
    eventually(lambda: entries(db, "evaluations", ev) == {}, "a failed run stays booked")


def test_a_run_cancelled_after_its_start_is_unbooked_whether_queued_or_running(runs, gated, monkeypatch):
    rs, db = runs
    gate, started, _ = gated
    rel = cfg(mechanism="ug", epsilon=1.0, mode="release")
    ev = cfg(mechanism="ug", epsilon=1.0, seed=5)
    rs.start("release", [rel], note="explore", wait=False)
    assert started.wait(10)  # the one worker runs the release; the evaluation waits in the queue
    rs.start("other", [ev], note="compare", wait=False)
    assert sum(entries(db, "releases", rel).values()) == 1.0 and entries(db, "evaluations", ev) == {ev.key(): 1.0}
    rs.session.cancel_group("other")  # queued: never starts
    rs.session.cancel_group("release")  # running: stops at its next check
    no_page_reads(rs, monkeypatch)
    eventually(lambda: entries(db, "evaluations", ev) == {}, "a cancelled queued run stays booked")
    eventually(lambda: entries(db, "releases", rel) == {}, "a cancelled release stays booked")


def test_the_excess_of_a_dropout_run_is_booked_when_it_ends(runs, gated, monkeypatch):
    """A release planned at ε = 1 that spent 1.25 (client dropout): the 0.25 is booked once, under its key."""
    rs, db = runs
    gate, _, end = gated
    rel = cfg(mechanism="ug", epsilon=1.0, mode="release")
    (booking,) = rs.start("explore", [rel], note="explore", wait=False).bookings
    no_page_reads(rs, monkeypatch)
    end["value"] = SimpleNamespace(epsilon_spent=1.25)
    gate.set()
    want = {booking.key: 1.0, booking.key + "/effective": 0.25}
    eventually(lambda: entries(db, "releases", rel) == pytest.approx(want), "the excess was never booked")
    assert [e.note for e in BudgetStore(db).entries(booking.fingerprint) if e.epsilon == 0.25] == [EXCESS_NOTE]


def test_a_real_dropout_run_books_what_it_spent(runs, monkeypatch):
    """Adaptive HH with 40 % of its clients dropping (planned for none) spends more than its ε: the session
    books the run's own effective ε, with no one reading the run after its start."""
    from engine.run import run

    rs, db = runs
    ev = cfg(mechanism="adaptive_hh", params={"dropout": 0.4}, epsilon=1.0, seed=3)
    rs.start("explore", [ev], note="explore", wait=False)
    no_page_reads(rs, monkeypatch)
    eventually(lambda: len(entries(db, "evaluations", ev)) == 2, "the excess was never booked")
    spent = run(ev, use_cache=False).epsilon_spent
    assert spent > 1.05 and sum(entries(db, "evaluations", ev).values()) == pytest.approx(spent)


def test_a_refused_release_starts_nothing_and_takes_back_what_its_group_booked(runs, gated, monkeypatch):
    rs, db = runs
    monkeypatch.setenv(ENV_LIMIT, "1.0")
    first, second = (
        cfg(mechanism="ug", epsilon=0.6, mode="release"),
        cfg(mechanism="identity", epsilon=0.6, mode="release"),
    )
    with pytest.raises(Refused):
        rs.start("explore", [first, second], note="explore")
    assert entries(db, "releases", first) == {} and rs.session.board.running() == 0
    assert rs.session.get_group("explore") is None
