"""The ledger means what it says: one booking protocol for every door (engine/run/bookkeeping/_booking.py).

Releases count against the dataset's limit, which is the operator's (engine/run/bookkeeping/_limits.py); Evaluate runs
publish nothing and are listed apart; every door books the same entries, the extra epsilon under client
dropout included.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from engine.core.accounting import Ledger
from engine.core.errors import EngineError, ParamError
from engine.run import RunConfig
from engine.run.bookkeeping import Bookkeeper, Refused
from engine.run.bookkeeping._ledger import BudgetStore, fingerprint_config
from engine.run.bookkeeping._limits import ENV_FILE, ENV_LIMIT, lowered, release_limit
from tests.support.app import open_app, wait_jobs
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("test_mechanisms")

DATA = {"dataset": "synthetic:polycentric", "dataset_options": {"n": 3000}}
DROPOUT = {"dropout": 0.4}  # one shard of 3,000 clients planned for no dropout: 40 % drop, weaker noise


def cfg(**kw) -> RunConfig:
    return RunConfig(**{**DATA, "depth": 5, **kw})


def result_spending(eps: float):
    led = Ledger()
    led.spend("the whole run", eps)
    return SimpleNamespace(epsilon_spent=led.total())


def test_evaluation_runs_are_listed_apart_and_never_count(tmp_path):
    bk = Bookkeeper(BudgetStore(tmp_path / "l.sqlite3"))
    for seed in range(5):  # five Explore clicks at epsilon 3: 15 in all, past the default limit of 10
        bk.book(cfg(epsilon=3.0, seed=seed), note="explore")
    bk.book(cfg(epsilon=3.0, seed=0), note="explore")  # the same configuration is the same run: booked once
    assert bk.spent(cfg()) == 0.0 and bk.releases(cfg()) == []
    assert [e.epsilon for e in bk.evaluation_runs(cfg())] == [3.0] * 5
    booking = bk.book(cfg(epsilon=1.0, mode="release"), note="explore")  # Release is not refused
    assert booking.release and bk.spent(cfg()) == 1.0


def test_non_private_runs_are_never_releases(tmp_path):
    bk = Bookkeeper(BudgetStore(tmp_path / "l.sqlite3"))
    b = bk.book(cfg(mechanism="nonprivate_level", epsilon=2.0))
    assert not b.release and b.epsilon == 0.0 and bk.spent(cfg()) == 0.0
    with pytest.raises(ParamError, match="not private"):
        bk.book(cfg(mechanism="nonprivate_level", mode="release"))


def test_the_limit_is_the_operators_and_a_caller_may_only_lower_it(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_LIMIT, "1.5")
    bk = Bookkeeper(BudgetStore(tmp_path / "l.sqlite3"))
    rel = cfg(epsilon=1.0, mode="release")
    assert release_limit("synthetic:polycentric") == 1.5 and lowered(100.0, "x") == 1.5 and lowered(0.5, "x") == 0.5
    bk.book(rel, limit=100.0)  # a caller asking for more gets the operator's limit
    with pytest.raises(Refused, match="of its limit 1.5"):
        bk.book(rel, limit=100.0)
    assert bk.spent(rel) == 1.0
    limits = tmp_path / "limits.toml"
    limits.write_text("[limits]\nsnow_cholera = 0.25\ndefault = 4\n")
    monkeypatch.setenv(ENV_FILE, str(limits))
    assert release_limit("snow_cholera") == 0.25 and release_limit("synthetic:polycentric") == 4.0
    limits.write_text("[limits]\ndefault = 'lots'\n")
    with pytest.raises(EngineError, match="ask the operator"):
        release_limit("snow_cholera")


def test_the_dashboard_has_no_limit_to_raise(monkeypatch):
    monkeypatch.setenv(ENV_LIMIT, "0.8")
    at = open_app(mode="release", eps="0.5")
    assert not [w for w in at.sidebar.number_input if w.key == "cfg.limit"]  # no number a session could raise
    assert "of the limit 0.8" in " ".join(p.proto.text for p in at.get("progress"))
    assert "set by the server's operator" in " ".join(c.value for c in at.caption)


def test_settling_books_the_excess_once_and_unbooking_takes_it_all_back(tmp_path):
    bk = Bookkeeper(BudgetStore(tmp_path / "l.sqlite3"))
    rel = cfg(epsilon=1.0, mode="release")
    b = bk.book(rel)
    for _ in range(2):
        bk.settle(rel, b, result_spending(1.25))
    assert bk.spent(rel) == pytest.approx(1.25)
    bk.unbook(b)
    assert bk.spent(rel) == 0.0


def entries(db, table: str, fp: str) -> list[tuple]:
    """What a door booked, without the time and the note (the door's own name)."""
    return sorted(
        (e.release_key, e.epsilon, e.mechanism, e.neighbouring, e.mode)
        for e in BudgetStore(db, table=table).entries(fp)
    )


def cli(db, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HEATMAP_LEDGER_DB": str(db)}
    p = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    return p


def test_a_dropout_run_books_the_same_ledger_through_the_cli_and_the_dashboard(tmp_path):
    """Adaptive HH with 40 % of its clients dropping (planned for none) spends more than its epsilon; the command
    line and the dashboard book the planned epsilon and the excess alike, under the same keys (Evaluate: the
    configuration's), in the evaluations; no release is counted."""
    common = ["--mechanism", "adaptive_hh", "--param", "dropout=0.4", "--data-opt", "n=3000", "--depth", "5"]
    cli(tmp_path / "cli.sqlite3", "run", *common, "--epsilon", "1", "--seed", "3")
    at = open_app(mech="adaptive_hh", baselines="0", eps="1", seed="3", **{"p.adaptive_hh.dropout": "0.4"})
    at.button(key="run_explore").click().run()
    wait_jobs(at)
    at.run()  # the page after the run: the booking is settled
    dash = os.environ["HEATMAP_LEDGER_DB"]
    fp = fingerprint_config(cfg(mechanism="adaptive_hh"))
    got = entries(tmp_path / "cli.sqlite3", "evaluations", fp)
    assert got == entries(dash, "evaluations", fp)
    (planned, excess) = sorted(got, key=lambda e: e[0])
    assert planned[1] == 1.0 and excess[0] == planned[0] + "/effective" and excess[1] > 0.05
    # what a sweep keeps of the run (the board's summary, the CLI's row) carries the same epsilon spent
    from engine.run import run
    from engine.run.execution import sweep_row
    from engine.run.server._board import _light

    res = run(cfg(mechanism="adaptive_hh", params=DROPOUT, seed=3))
    assert res.epsilon_spent == pytest.approx(1.0 + excess[1])
    assert _light(res).epsilon_spent == sweep_row(res)["epsilon_spent"] == res.epsilon_spent
    assert entries(tmp_path / "cli.sqlite3", "releases", fp) == entries(dash, "releases", fp) == []


def test_a_run_that_ends_after_its_tab_closed_is_settled():
    """The page starts a run and is never drawn again (its tab was closed); the run then ends cancelled on the
    server: nothing was published, so its booking is taken back all the same, with no page to do it."""

    from ui.jobs import board

    at = open_app(mech="_test_slow", baselines="0", seed="47")
    at.button(key="run_explore").click().run()
    group = at.session_state["_groups"]["explore"]
    run = RunConfig.from_dict(group["configs"][0])
    evaluations = BudgetStore(os.environ["HEATMAP_LEDGER_DB"], table="evaluations")
    assert [e.release_key for e in evaluations.entries(fingerprint_config(run))] == [run.key()]
    board().cancel(group["keys"][0], at.session_state["_sid"])  # no rerun of the page from here on
    wait_until(lambda: not evaluations.entries(fingerprint_config(run)), "the cancelled run's booking to go")


def test_a_release_with_dropout_books_the_same_through_the_cli_and_the_dashboard(tmp_path):
    """Release mode draws secure noise, and secure aggregation withholds a shard short of its planned clients,
    so a release spends no more than planned: within the plan (20 % planned, 20 % dropping) both doors book
    one release of epsilon 1 and nothing else."""
    params = {"planned_dropout": "0.2", "dropout": "0.2"}
    common = ["--mechanism", "adaptive_hh", "--data-opt", "n=3000", "--depth", "5", "--epsilon", "1"]
    common += [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    cli(tmp_path / "cli.sqlite3", "release", *common, "--out", str(tmp_path / "out"))
    at = open_app(
        mech="adaptive_hh",
        baselines="0",
        eps="1",
        mode="release",
        **{f"p.adaptive_hh.{k}": v for k, v in params.items()},
    )
    at.button(key="run_explore").click().run()
    wait_jobs(at)
    at.run()
    fp = fingerprint_config(cfg(mechanism="adaptive_hh"))

    def strip(rows):  # a release's key is new at every run: compare what it spent
        return [r[1:] for r in rows]

    dash = os.environ["HEATMAP_LEDGER_DB"]
    got = strip(entries(tmp_path / "cli.sqlite3", "releases", fp))
    assert got == strip(entries(dash, "releases", fp)) == [(1.0, "adaptive_hh", "zero-out user", "release")]


def test_declared_side_information_reaches_the_ledger_in_both_modes():
    from engine.run import run
    from engine.run.execution._release_files import manifest

    note = "Resolution 32 x 32 chosen automatically from 3,000 people (the file)."
    ev = run(cfg(side_information=(note,), seed=1), use_cache=False)
    rel = run(cfg(side_information=(note,), mode="release"))
    assert note in ev.summary()["ledger"]["side_information"]
    assert note in manifest(rel)["side_information"]
    assert cfg(side_information=(note,)).key() != cfg().key()  # a declared choice is part of the run


def test_an_uploads_automatic_resolution_follows_one_rule_in_both_modes():
    """The automatic resolution of an upload is a DP count in both modes: Evaluate's run books the same step
    as Release's, and the release's manifest states it."""
    from streamlit.testing.v1 import AppTest

    from engine.run.execution._release_files import manifest
    from tests.support.app import APP, upload
    from tests.support.files import csv_bytes
    from ui.jobs import board

    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({"baselines": "0", "seed": "3"})
    at.run()
    upload(at, "people.csv", csv_bytes(600, seed=4))
    for mode in ("evaluate", "release"):
        at.sidebar.radio(key="cfg.mode").set_value(mode).run()
        at.button(key="run_explore").click().run()
        wait_jobs(at)
        key = at.session_state["_groups"]["explore"]["keys"][0]
        res = board().result(key, at.session_state["_sid"])
        first = res.release.ledger.entries[0]
        assert first.step == "count of the people (automatic resolution)", mode
        assert first.epsilon == pytest.approx(0.05 * res.config.epsilon), mode
    assert manifest(res)["ledger"]["entries"][0]["step"] == first.step  # the release's files carry it


def test_a_folder_dataset_is_fingerprinted_by_its_files(tmp_path):
    """A partitioned Parquet dataset read by path is a folder: the same files are the same people, wherever the
    folder is; a changed file is another dataset."""
    from engine.run.bookkeeping import fingerprint_source

    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "part=1").mkdir(parents=True)
        (root / "part=1" / "x.parquet").write_bytes(b"rows of part 1")
        (root / "y.parquet").write_bytes(b"rows of y")
    fa, fb = fingerprint_source("parquet", {"path": str(a)}), fingerprint_source("parquet", {"path": str(b)})
    assert fa == fb
    (b / "y.parquet").write_bytes(b"other rows")
    assert fingerprint_source("parquet", {"path": str(b)}) != fa
