"""The per-dataset privacy ledger in SQLite: idempotent per release, kept
across store objects and processes (a restart), and atomic under concurrent sessions."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from engine.core.errors import EngineError, ParamError
from engine.data.files import load_file
from engine.run import RunConfig
from engine.run.bookkeeping import fingerprint_people
from engine.run.bookkeeping._ledger import (
    ENV,
    BudgetStore,
    Entry,
    entry_for,
    fingerprint_config,
    fingerprint_source,
    release_key,
)

FP = "sha256:dataset-under-test"


@pytest.fixture
def db(tmp_path):
    return tmp_path / "ledger" / "budget.sqlite3"  # the folder does not exist yet


def test_a_release_is_booked_once(db):
    store = BudgetStore(db)
    e = Entry("r1", 0.5, "identity", "add/remove user")
    assert store.record(FP, [e]) == 0.5
    assert store.record(FP, [e, e]) == 0.0  # a cached re-display costs nothing
    assert store.spent(FP) == 0.5 and [x.release_key for x in store.entries(FP)] == ["r1"]
    assert store.cost(FP, [e, Entry("r2", 0.25, "ug")]) == 0.25
    # already booked: passes even when the dataset is past the limit
    store.record(FP, [Entry("r3", 5.0, "ug")])
    assert store.try_spend(FP, [e], limit=1.0) == (True, 5.5, 0.0)
    assert store.try_spend(FP, [Entry("r4", 0.1, "ug")], limit=1.0) == (False, 5.5, 0.0)
    assert store.spent("sha256:another-dataset") == 0.0


def test_the_ledger_survives_a_restart(db):
    BudgetStore(db).record(FP, [Entry("r1", 1.5, "identity", "add/remove user", note="tab 1")])
    again = BudgetStore(db)  # a new connection, as after a restart
    assert again.spent(FP) == 1.5
    (e,) = again.entries(FP)
    assert (e.release_key, e.epsilon, e.mechanism, e.neighbouring, e.mode, e.note) == (
        "r1",
        1.5,
        "identity",
        "add/remove user",
        "evaluate",
        "tab 1",
    )
    # another process sees it too
    code = f"from engine.run.bookkeeping._ledger import BudgetStore; print(BudgetStore({str(db)!r}).spent({FP!r}))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and float(p.stdout) == 1.5, p.stderr


def sessions(path, n: int, attempt) -> list:
    """``attempt(store, i)`` in ``n`` threads released at once, each with its own store on ``path``."""
    BudgetStore(path)
    start, results = threading.Barrier(n), [None] * n

    def session(i):
        store = BudgetStore(path)
        start.wait()
        results[i] = attempt(store, i)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_concurrent_sessions_cannot_both_pass_the_limit(db, tmp_path):
    """16 sessions (each its own store and connection) try to spend 1 at once against a limit
    of 10: exactly 10 succeed."""
    results = sessions(db, 16, lambda s, i: s.try_spend(FP, [Entry(f"release-{i}", 1.0, "identity")], limit=10.0))
    assert sum(r.ok for r in results) == 10 and all(r.spent <= 10.0 for r in results)
    assert BudgetStore(db).spent(FP) == 10.0 and len(BudgetStore(db).entries(FP)) == 10

    # the sessions do race: checking, then booking in a second call, lets more than 10 through
    # (0.5 s between the two; the 16 checks take milliseconds), so the result above is not luck
    def check_then_book(store, i):
        ok = store.spent(FP) + 1.0 <= 10.0
        time.sleep(0.5)
        return ok and store.record(FP, [Entry(f"naive-{i}", 1.0, "identity")]) > 0

    naive = tmp_path / "naive.sqlite3"
    assert sum(sessions(naive, 16, check_then_book)) > 10 and BudgetStore(naive).spent(FP) > 10.0


def test_a_booking_is_removed_once(db):
    store = BudgetStore(db)
    store.record(FP, [Entry("a", 9.5, "identity")])
    assert store.remove(FP, "a") and not store.remove(FP, "a") and store.spent(FP) == 0.0


def test_the_default_file_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "x.sqlite3"))
    assert BudgetStore().path == tmp_path / "x.sqlite3"
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(tmp_path / "cache"))
    assert BudgetStore().path == tmp_path / "cache" / "ledger.sqlite3"


def test_bad_input_is_a_clear_error(db):
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(EngineError, match="not a readable ledger"):
        BudgetStore(db)
    with pytest.raises(ParamError, match="epsilon must be a finite number >= 0"):
        Entry("r", -1.0, "identity")
    with pytest.raises(ParamError, match="epsilon must be a finite number >= 0"):
        Entry("r", float("nan"), "identity")
    with pytest.raises(EngineError, match="no file at"):
        fingerprint_source("file", {"path": str(db.parent / "missing.csv")})


def test_fingerprints(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_bytes(b"lat,lon\n1,2\n3,4\n")
    b.write_bytes(b"lat,lon\n1,2\n3,4\n")
    # a file by the people in it: its name and how its columns are read do not matter
    assert fingerprint_source("file", {"path": str(a)}) == fingerprint_people(load_file(b.read_bytes(), "b.csv"))
    assert fingerprint_source("file", {"path": str(a), "lat": "lat"}) == fingerprint_source("file", {"path": str(b)})
    b.write_bytes(b"lat,lon\n1,3\n3,4\n")
    assert fingerprint_source("file", {"path": str(b)}) != fingerprint_source("file", {"path": str(a)})
    # a registry source by key and options, resolved with their defaults
    s = "synthetic:monocentric"
    assert fingerprint_source(s, {"n": 1000}) == fingerprint_source(s, {"n": "1000", "seed": 0})
    assert fingerprint_source(s, {"n": 1000}) != fingerprint_source(s, {"n": 1001})
    assert fingerprint_source(s, {}) != fingerprint_source("synthetic:polycentric", {})
    cfg = RunConfig(dataset=s, dataset_options={"n": 1000}, mechanism="ug", epsilon=2.0)
    assert fingerprint_config(cfg) == fingerprint_source(s, {"n": 1000})


def test_release_keys_and_entries():
    ev = RunConfig(mechanism="identity", epsilon=0.7, seed=4)
    assert release_key(ev) == ev.key() == release_key(ev)  # the same evaluation is the same release
    rel = RunConfig(mechanism="identity", epsilon=0.7, mode="release")
    k1, k2 = release_key(rel), release_key(rel)
    assert k1 != k2 and rel.key() not in k1  # every release run is a new release, keyed by chance alone
    e = entry_for(ev, note="Explore")
    assert (e.release_key, e.epsilon, e.mechanism, e.mode, e.note) == (ev.key(), 0.7, "identity", "evaluate", "Explore")
    assert entry_for(RunConfig(mechanism="nonprivate_level", epsilon=3.0)).epsilon == 0.0  # a non-private reference
    assert entry_for(rel).mode == "release"


def test_an_entry_carries_the_mechanisms_neighbouring_relation(monkeypatch):
    from engine.mechanisms import base

    class ZeroOut(base.Mechanism):
        key = "zero_out_stub"
        neighbouring = "zero-out user"

    class ByUnit(base.Mechanism):
        key = "by_unit_stub"
        neighbouring = "add/remove user"

        @classmethod
        def neighbouring_for(cls, params=None):  # a parameter that changes the relation
            return "add/remove record" if (params or {}).get("unit") == "record" else cls.neighbouring

    monkeypatch.setitem(base._REGISTRY, ZeroOut.key, ZeroOut)
    monkeypatch.setitem(base._REGISTRY, ByUnit.key, ByUnit)
    assert entry_for(RunConfig(mechanism="zero_out_stub")).neighbouring == "zero-out user"
    assert entry_for(RunConfig(mechanism="by_unit_stub")).neighbouring == "add/remove user"
    assert entry_for(RunConfig(mechanism="by_unit_stub", params={"unit": "record"})).neighbouring == "add/remove record"


def test_concurrent_sessions_cannot_reserve_past_the_limit(db):
    """16 sessions reserve a study of ε 1 (two releases of 0.5) at once against a limit of 10: exactly 10
    reservations hold; then 16 sessions book a release against one study's five reserved releases at once: exactly
    five are booked, and the reservation holds nothing more."""
    from engine.run.bookkeeping import Reservations

    def reserve(store, i):
        plan = [{"product": "map", "mechanism": "identity", "epsilon": 0.5, "repeat": 2}]
        return Reservations(store).reserve(FP, f"study/{i}", plan, limit=10.0)

    results = sessions(db, 16, reserve)
    assert sum(r.ok for r in results) == 10 and all(r.spent <= 10.0 + 1e-9 for r in results)
    assert BudgetStore(db).spent(FP) == pytest.approx(10.0)

    other = "sha256:another-dataset"
    plan = [{"product": "monthly", "mechanism": "identity", "epsilon": 0.5, "repeat": 5}]
    assert Reservations(BudgetStore(db)).reserve(other, "study/one", plan, limit=10.0).ok

    def book(store, i):
        try:
            Reservations(store).book(other, "study/one", "monthly", Entry(f"release-{i}", 0.5, "identity"))
            return True
        except ParamError:
            return False

    assert sum(sessions(db, 16, book)) == 5
    store = BudgetStore(db)
    assert store.spent(other) == pytest.approx(2.5)
    assert [e.release_key for e in store.entries(other)].count("study/one") == 0  # all of it spent
