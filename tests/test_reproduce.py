"""The Reproduce page: every paper's headline rows with the paper's numbers and the command; a quick
reproduction runs in the background (the page keeps answering), its numbers are the suite's own, and
Cancel ends it."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.app import open_app, rerun_until
from tests.support.waiting import wait_until
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


@pytest.fixture(autouse=True)
def _no_runs_left():
    """The server's queue of quick runs outlives a test (it is cached like the server's): empty it after each."""
    yield
    q = reproduce.queue()
    for r in q.active():
        q.cancel(r)
    wait_until(lambda: not q.active(), "the quick runs to end")


def _run(at, suite: str):
    return reproduce.queue().runs(at.session_state["_sid"]).get(suite)


def _bars(at) -> list:
    return [(p.proto.value, p.proto.text) for p in at.get("progress")]


def _wait(at, suite: str) -> None:
    rerun_until(at, lambda a: not _run(a, suite).active, "the quick reproduction", poll=0.5)
    at.run()


def test_a_quick_reproduction_runs_in_the_background_and_shows_the_suites_numbers():
    at = open_app("reproduce")
    t0 = time.time()
    at.button(key="repro.run.bit_pushing").click().run()
    assert time.time() - t0 < 10  # the page came back while the suite runs
    run = _run(at, "bit_pushing")
    assert run.state == "running"
    folder = run.folder
    assert at.button(key="repro.run.adaptive_hh").disabled  # one reproduction at a time per session
    _wait(at, "bit_pushing")
    assert run.state == "ok", run.message
    assert not folder.exists()  # the run's files went with it
    t = _table(at, "bit_pushing")
    for row, got in zip(reproduce.BY_SUITE["bit_pushing"].rows, t["Engine, this quick run"]):
        assert got == reproduce.shown(run.figures[row.figure]["value"], row)
    assert t["Engine, this quick run"].str.match(r"^[0-9.]+ ?(%|×)$").all()
    assert any("Quick run finished" in c.value for c in at.caption)


def test_dpbench_rows_name_the_figures_and_units_the_suite_reports():
    """Every DPBench row reads a figure that the suite's findings produce from its own results, in the row's unit:
    here from random errors of every method of the suite at each scale band's settings."""
    import numpy as np

    from engine.bench import dpbench

    rng = np.random.default_rng(0)
    res = {
        ("d", n, eps): {m: [(float(e), 0.0)] for m, e in zip(dpbench.METHODS, rng.random(len(dpbench.METHODS)))}
        for n in (1_000, 10_000, 1_000_000, 10_000_000)
        for eps in (0.1, 1.0)
    }
    figs = {f.name: f for f in dpbench.figures(res, dpbench.regret_table(res), "note")}
    for row in reproduce.BY_SUITE["dpbench"].rows:
        assert row.figure in figs, row.figure
        value = figs[row.figure].value
        assert reproduce.shown(value, row) != "n/a"
        if row.unit.startswith("of "):
            assert figs[row.figure].unit == "methods " + row.unit


@pytest.mark.parametrize("suite", ["dpbench", "hdmm"])
def test_the_recorded_figures_are_those_of_the_suites_section_in_benchmarks(suite):
    """A row's full-suite figure is the one BENCHMARKS.md records in the suite's section: every number it quotes."""
    import re
    from pathlib import Path

    bench = (Path(__file__).resolve().parents[1] / "BENCHMARKS.md").read_text()
    start = bench.index(f"\n### {suite} — ")
    section = bench[start : re.search(r"\n#{2,3} ", bench[start + 5 :]).start() + start + 5]
    for row in reproduce.BY_SUITE[suite].rows:
        numbers = re.findall(r"\d+\.\d+", row.recorded) or re.findall(r"\d+", row.recorded)
        assert numbers and all(n in section for n in numbers), (row.what, row.recorded)


def test_a_quick_hdmm_reproduction_shows_its_published_figure():
    """HDMM's quick version reproduces the README's all-range RMSE at the published setting (256 x 256, p = 16,
    ε = √2): the page shows the suite's own figures, the 2-D one within 3 % of the paper's 32.69."""
    at = open_app("reproduce")
    at.button(key="repro.run.hdmm").click().run()
    run = _run(at, "hdmm")
    _wait(at, "hdmm")
    assert run.state == "ok", run.message
    t = _table(at, "hdmm")
    quick = list(t["Engine, this quick run"])
    for row, got in zip(reproduce.BY_SUITE["hdmm"].rows, quick):
        assert got == reproduce.shown(run.figures[row.figure]["value"], row)
    assert abs(float(quick[0]) / 32.69 - 1) <= 0.03 and abs(float(quick[1]) / 5.736 - 1) <= 0.03
    assert list(t["Paper"]) == ["32.69 (README)", "5.736 (README)"]


def test_cancel_ends_the_suite():
    at = open_app("reproduce")
    at.button(key="repro.run.adaptive_hh").click().run()
    run = _run(at, "adaptive_hh")
    assert run.state == "running"
    pid = run.proc.pid
    at.button(key="repro.cancel.adaptive_hh").click().run()
    wait_until(lambda: not run.active, "the suite to stop", poll=0.2)
    at.run()
    assert run.state == "cancelled" and not run.folder.exists()
    try:
        os.killpg(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive  # nothing the suite started is left
    assert any("cancelled" in c.value for c in at.caption)


def test_the_page_shows_its_place_in_the_server_queue_and_a_moving_bar(tmp_path, monkeypatch):
    """Two sessions ask for a quick run: the server runs one (its bar moves), the other's page says it waits
    first in line; when the first ends, the second runs."""
    from engine.run.server import _quickruns as quickruns
    from tests.support.fakes import Fakes

    fakes = Fakes(tmp_path)
    monkeypatch.setattr(quickruns, "bench_command", fakes)
    first, second = open_app("reproduce"), open_app("reproduce")
    first.button(key="repro.run.sparse_emd").click().run()
    second.button(key="repro.run.snh").click().run()
    assert not first.exception and not second.exception
    bar = _bars(second)
    assert len(bar) == 1 and bar[0][0] == 0
    assert bar[0][1] == "Queued: 1st in line · 1 quick run running on this server (at most 1 at a time)"
    assert second.button(key="repro.cancel.snh")  # a queued run can be cancelled too
    seen = []
    for _ in range(3):
        time.sleep(1.5)
        first.run()
        seen += [v for v, text in _bars(first) if text.startswith("Running the quick version")]
    assert len(seen) == 3 and seen[0] < seen[1] < seen[2], seen  # the bar moves with the run
    fakes.open("sparse_emd")
    wait_until(lambda: _run(second, "snh").state == "running", "the queued run to start")
    second.run()
    assert any(text.startswith("Running the quick version") for _, text in _bars(second))


def test_a_sessions_quick_run_ends_when_its_session_is_released(tmp_path, monkeypatch):
    """The server releases a session whose tab has been closed for HEATMAP_SESSION_GRACE_S (the upload store's
    reaper): the page's queue hears it, and the session's run ends and leaves no folder."""
    from engine.run.server import _quickruns as quickruns
    from tests.support.fakes import Fakes
    from ui import uploads

    monkeypatch.setattr(quickruns, "bench_command", Fakes(tmp_path))
    at = open_app("reproduce")
    at.button(key="repro.run.rff_kde").click().run()
    run = _run(at, "rff_kde")
    assert run.state == "running" and run.folder.is_dir()
    uploads.store().release(at.session_state["_sid"])
    wait_until(lambda: not run.active, "the session's run to end")
    assert run.state == "cancelled" and not run.folder.exists()
    assert reproduce.queue().runs(at.session_state["_sid"]) == {}
