"""The server's quick reproductions (engine.run.server._quickruns): at most HEATMAP_REPRODUCE_RUNS run at once for every
session, the others wait in order and know their place; a run ends, with its whole process group, and its
temporary folder is removed when it finishes, fails, is cancelled or its session ends. Fake suites stand in for
the benchmarks: each prints progress, starts a child of its own and waits for its gate file."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from engine.run.server._quickruns import PROGRESS_CAP, QuickRuns
from engine.run.server._session_files import Limits, UploadStore
from tests.support.fakes import Fakes
from tests.support.waiting import wait_until


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(q: QuickRuns, fakes: Fakes, run) -> None:
    """The run has ended: its folder is removed and no process of its group is left."""
    wait_until(lambda: not run.active, f"{run.suite} to end", poll=0.05)
    assert run.folder is not None and not run.folder.exists()
    wait_until(
        lambda: not any(_alive(p) for p in fakes.pids(run.suite)), "the run's processes to go", ceiling=10, poll=0.05
    )


@pytest.fixture
def fakes(tmp_path):
    return Fakes(tmp_path)


@pytest.fixture
def queue(fakes):
    q = QuickRuns(slots=1, command=fakes)
    yield q
    q.shutdown()


def test_one_run_at_a_time_on_the_server_the_others_queued_in_order(queue, fakes):
    runs = [queue.submit(f"session{i}", f"suite{i}", 10) for i in range(4)]  # four sessions, one run each
    wait_until(lambda: fakes.pids("suite0"), "the first run to start", poll=0.05)
    assert [r.state for r in runs] == ["running", "queued", "queued", "queued"]
    assert [queue.place(r) for r in runs] == [(0, 1), (1, 1), (2, 1), (3, 1)]
    time.sleep(0.5)
    assert not any(fakes.pids(f"suite{i}") for i in (1, 2, 3))  # none of the queued started a process
    fakes.open("suite0")
    wait_until(lambda: runs[1].state == "running", "the next run to start", poll=0.05)
    assert runs[0].state == "ok" and [queue.place(r) for r in runs[1:]] == [(0, 1), (1, 1), (2, 1)]


def test_the_cap_is_a_setting(fakes, monkeypatch):
    monkeypatch.setenv("HEATMAP_REPRODUCE_RUNS", "2")
    q = QuickRuns(command=fakes)
    try:
        runs = [q.submit(f"session{i}", f"suite{i}", 10) for i in range(3)]
        assert [r.state for r in runs] == ["running", "running", "queued"] and q.place(runs[2]) == (1, 2)
    finally:
        q.shutdown()
    monkeypatch.delenv("HEATMAP_REPRODUCE_RUNS")
    assert QuickRuns(command=fakes).slots == 1  # the default


def test_a_session_has_one_run_queued_or_running(queue, fakes):
    first = queue.submit("me", "suite0", 10)
    assert queue.submit("me", "suite1", 10) is first
    assert list(queue.runs("me")) == ["suite0"] and queue.runs("someone else") == {}


def test_a_finished_run_keeps_its_figures_and_removes_its_folder(queue, fakes):
    run = queue.submit("me", "suite0", 10)
    wait_until(lambda: fakes.pids("suite0"), "the run to start", poll=0.05)
    folder = run.folder
    assert folder.is_dir()
    fakes.open("suite0")
    _gone(queue, fakes, run)
    assert run.state == "ok" and run.figures == {"fig": {"value": 1.5}} and not folder.exists()


def test_a_failed_run_says_why_and_removes_its_folder(queue, fakes):
    run = queue.submit("me", "suite-fail", 10)
    wait_until(lambda: fakes.pids("suite-fail"), "the run to start", poll=0.05)
    fakes.open("suite-fail")
    _gone(queue, fakes, run)
    assert run.state == "error" and run.message == "figure 2: ValueError: the suite broke"


def test_cancel_ends_the_process_group_and_removes_the_folder(queue, fakes):
    running = queue.submit("me", "suite0", 10)
    queued = queue.submit("you", "suite1", 10)
    wait_until(lambda: len(fakes.pids("suite0")) == 2, "the run and its child", poll=0.05)
    queue.cancel(queued)
    assert queued.state == "cancelled" and queue.place(queued) == (0, 1)
    queue.cancel(running)
    _gone(queue, fakes, running)
    assert running.state == "cancelled" and fakes.pids("suite1") == []


def test_a_sessions_runs_end_when_the_session_ends(queue, fakes):
    """The upload store's reaper releases a session whose tab has been closed for the grace period: its quick
    run ends with it, and the next session's queued run starts."""
    tabs = {"tab-a": True, "tab-b": True}
    store = UploadStore(Limits(grace_s=1.0), is_alive=lambda st_session: tabs[st_session])
    store.on_release(queue.drop_owner)
    store.touch("owner-a", "tab-a")
    store.touch("owner-b", "tab-b")
    mine = queue.submit("owner-a", "suite0", 10)
    theirs = queue.submit("owner-b", "suite1", 10)
    wait_until(lambda: len(fakes.pids("suite0")) == 2, "the run and its child", poll=0.05)
    tabs["tab-a"] = False  # the tab closed
    now = time.time()
    assert store.reap(now) == [] and mine.state == "running"  # within the grace period
    assert store.reap(now + 1.5) == ["owner-a"]
    _gone(queue, fakes, mine)
    assert mine.state == "cancelled" and queue.runs("owner-a") == {}
    wait_until(lambda: theirs.state == "running", "the queued run to start", poll=0.05)


def test_progress_moves_with_the_run_and_learns_the_suites_time(queue, fakes):
    run = queue.submit("me", "suite0", 2.0)
    wait_until(lambda: fakes.pids("suite0"), "the run to start", poll=0.05)
    seen = [run.progress()]
    for _ in range(3):
        time.sleep(0.4)
        seen.append(run.progress())
    assert all(b > a for a, b in zip(seen, seen[1:])) and 0 <= seen[0] and seen[-1] <= PROGRESS_CAP
    assert run.last_line().startswith("step ")
    time.sleep(max(0.0, 2.0 - run.elapsed()) + 0.3)
    assert run.progress() == PROGRESS_CAP  # past its expected time, never 100 % before it ends
    fakes.open("suite0")
    _gone(queue, fakes, run)
    assert run.progress() == 1.0
    (fakes.tmp / "suite0").unlink()  # the second run waits for its gate again
    again = queue.submit("me", "suite0", 99.0)
    wait_until(lambda: again.state == "running", "the second run", poll=0.05)
    assert again.expected_s == pytest.approx(run.elapsed())  # this server's measured time, not the estimate
    fakes.open("suite0")
    wait_until(lambda: not again.active, "the second run to end", poll=0.05)


def test_shutdown_ends_every_run(fakes):
    q = QuickRuns(slots=1, command=fakes)
    run = q.submit("me", "suite0", 10)
    waiting = q.submit("you", "suite1", 10)
    wait_until(lambda: len(fakes.pids("suite0")) == 2, "the run and its child", poll=0.05)
    q.shutdown()
    assert waiting.state == "cancelled"
    _gone(q, fakes, run)
    assert not os.path.exists(run.folder)
