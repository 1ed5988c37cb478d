"""The Reproduce page: every paper's headline rows with the paper's numbers and the command; a quick
reproduction runs in the background (the page keeps answering), its numbers are the suite's own, and
Cancel ends it."""

from __future__ import annotations

import json
import os
import time

from test_app import open_app

from ui import reproduce


def _table(at, suite: str):
    tables = [t.value.reset_index() for t in at.table]
    want = {r.what for r in reproduce.BY_SUITE[suite].rows}
    return next(t for t in tables if set(t["Quantity"]) == want)


def test_every_paper_has_its_rows_and_command():
    at = open_app("reproduce")
    for paper in reproduce.PAPERS:
        t = _table(at, paper.suite)
        assert list(t["Paper"]) == [r.paper for r in paper.rows]
        assert list(t["Engine, full suite (BENCHMARKS.md)"]) == [r.recorded for r in paper.rows]
        assert "Engine, this quick run" not in t.columns  # nothing run yet
    codes = [c.value for c in at.code]
    assert codes == [p.command() for p in reproduce.PAPERS]


def _wait(at, suite: str, timeout: float) -> None:
    t0 = time.time()
    while at.session_state["repro.runs"][suite].state == "running":
        assert time.time() - t0 < timeout, "the quick reproduction did not finish"
        time.sleep(0.5)
        at.run()  # what the page's poller does in a browser
    at.run()


def test_a_quick_reproduction_runs_in_the_background_and_shows_the_suites_numbers():
    at = open_app("reproduce")
    t0 = time.time()
    at.button(key="repro.run.bit_pushing").click().run()
    assert time.time() - t0 < 10  # the page came back while the suite runs
    run = at.session_state["repro.runs"]["bit_pushing"]
    assert run.state == "running"
    assert at.button(key="repro.run.adaptive_hh").disabled  # one reproduction at a time
    _wait(at, "bit_pushing", timeout=600)
    assert run.state == "ok", run.failure()
    figures = json.loads(run.out.read_text())
    t = _table(at, "bit_pushing")
    for row, got in zip(reproduce.BY_SUITE["bit_pushing"].rows, t["Engine, this quick run"]):
        assert got == reproduce.shown(figures[row.figure]["value"], row)
    assert t["Engine, this quick run"].str.match(r"^[0-9.]+ ?(%|×)$").all()
    assert any("Quick run finished" in c.value for c in at.caption)


def test_cancel_ends_the_suite():
    at = open_app("reproduce")
    at.button(key="repro.run.adaptive_hh").click().run()
    run = at.session_state["repro.runs"]["adaptive_hh"]
    assert run.state == "running"
    at.button(key="repro.cancel.adaptive_hh").click().run()
    t0 = time.time()
    while run.proc.poll() is None:
        assert time.time() - t0 < 20, "the suite did not stop"
        time.sleep(0.2)
    at.run()
    assert run.state == "cancelled"
    try:
        os.killpg(run.proc.pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive  # nothing the suite started is left
    assert any("cancelled" in c.value for c in at.caption)
