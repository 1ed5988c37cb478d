"""A full or read-only cache and ledger folder is not an outage.

Evaluate runs go on without the cache (and without booking, which the page and the CLI say); Release, the CLI's
included, refuses with a message that names the folder and the reason before any noise is drawn; the CLI
books no ε before it knows it can write the release, and ``--out ''`` is refused.

The folders are real: a read-only tmpfs and a 64 kB tmpfs filled to the last byte (this needs root, as on
the CI machine). Where mounting is not allowed, both fall back to a folder under a regular file, which
cannot be created (ENOTDIR): unwritable, but not full; the test then checks only that case's messages.
"""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

import engine.run.execution._runner
from engine.__main__ import main
from engine.run import RunConfig
from engine.run.bookkeeping._ledger import BudgetStore, fingerprint_config
from tests.support.app import SMALL, charts, click_run, open_app, texts

CFG = ["--mechanism", "ug", "--epsilon", "1", "--dataset", "synthetic:zong_a"]


def _mount(path, opts: str) -> bool:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def _fill(path) -> None:
    try:
        with open(path / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:  # ENOSPC: full to the last block
        pass


@pytest.fixture(params=["read-only", "full"])
def outage(request, tmp_path):
    """(a folder in the broken place, the words the messages should give for why)."""
    root = tmp_path / request.param
    mounted = _mount(root, "ro,size=64k" if request.param == "read-only" else "size=64k")
    if mounted:
        try:
            if request.param == "full":
                (root / "cache").mkdir()
                _fill(root)
            yield root / "cache", ("Read-only file system" if request.param == "read-only" else "full")
        finally:
            subprocess.run(["umount", "-l", str(root)], capture_output=True)
    else:
        (tmp_path / "a-file").write_text("")
        yield tmp_path / "a-file" / "cache", "Not a directory"


def test_the_outage_is_real(outage):
    folder, why = outage
    with pytest.raises(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "probe").write_bytes(b"\0" * 100_000)


def test_evaluate_runs_without_the_cache(outage, monkeypatch):
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(outage[0]))
    cfg = RunConfig(dataset="synthetic:zong_a", mechanism="ug", epsilon=1.0, seed=1, depth=5)
    a, b = engine.run.execution.run(cfg), engine.run.execution.run(cfg)
    assert a.release.density.shape == (32, 32) and (a.release.density == b.release.density).all()


def test_the_cli_runs_without_the_cache(outage, monkeypatch, capsys):
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(outage[0]))
    assert main(["run", *CFG, "--seed", "1", "--depth", "5"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows["config"]["mechanism"] == "ug" and rows["mode"] == "evaluate"


def test_the_cli_evaluates_without_a_ledger_and_says_so(outage, monkeypatch, capsys):
    """As the dashboard does: ``run`` and ``sweep`` (Evaluate) go on unbooked, with one note on stderr."""
    folder, why = outage
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(folder))
    monkeypatch.delenv("HEATMAP_LEDGER_DB")  # the ledger lives in the broken cache folder
    assert main(["run", *CFG, "--seed", "1", "--depth", "5"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["mode"] == "evaluate"
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and str(folder) in notes[0] and why in notes[0] and "unbooked" in notes[0], err
    assert "error" not in err
    sweep = ["sweep", "--mechanisms", "ug,identity", "--epsilons", "1", "--seeds", "2", "--dataset", "synthetic:zong_a"]
    assert main([*sweep, "--depth", "5", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 + 4 and err.count("note:") == 1 and "unbooked" in err


def test_a_cli_release_without_a_ledger_is_refused_before_any_noise(outage, monkeypatch, capsys, tmp_path):
    folder, why = outage
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(folder))
    monkeypatch.delenv("HEATMAP_LEDGER_DB")

    def no_noise(*a, **k):
        raise AssertionError("a release ran without a ledger")

    monkeypatch.setattr(engine.run.execution._runner, "run", no_noise)
    out = tmp_path / "out"
    assert main(["release", *CFG, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and why in err, err
    assert "unexpectedly" not in err
    assert not (out / "manifest.json").exists()


def test_the_cli_books_nothing_when_the_output_folder_cannot_be_written(outage, monkeypatch, capsys):
    folder, why = outage
    monkeypatch.setattr(engine.run.execution._runner, "run", lambda *a, **k: pytest.fail("a release ran"))
    assert main(["release", *CFG, "--out", str(folder / "release")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the release to" in err and str(folder) in err and why.split()[0] in err, err
    cfg = RunConfig(dataset="synthetic:zong_a", mechanism="ug", epsilon=1.0, mode="release")
    assert BudgetStore().entries(fingerprint_config(cfg)) == []


def test_an_empty_out_is_refused(capsys, monkeypatch):
    monkeypatch.setattr(engine.run.execution._runner, "run", lambda *a, **k: pytest.fail("a release ran"))
    assert main(["release", *CFG, "--out", ""]) == 2
    assert "--out '' names no folder" in capsys.readouterr().err


def test_the_dashboard_evaluates_without_a_ledger_and_refuses_to_release(outage, monkeypatch):
    folder, _ = outage
    monkeypatch.setenv("HEATMAP_LEDGER_DB", str(folder / "ledger.sqlite3"))
    at = open_app(eps="0.5", seed="3")
    click_run(at, "explore")
    assert "explore_private_heat" in charts(at) or any(k.endswith("private_heat") for k in charts(at))
    assert "privacy ledger cannot be written" in texts(at)
    at = open_app(mode="release", eps="0.5", **{k: v for k, v in SMALL.items() if k != "res"})
    click_run(at, "explore")
    assert any("Refused" in e.value and "ledger cannot be written" in e.value for e in at.error)
    assert not [k for k in charts(at) if k.startswith("release")]


def test_the_servers_ledger_policy_evaluates_unbooked_and_refuses_a_release(outage, monkeypatch):
    """Tolerant (the server): an evaluation goes on unbooked when the ledger cannot be written, and is run; a
    release is refused before any noise, with the ledger's reason, and nothing of it starts."""
    from engine.run.bookkeeping import TOLERANT, Booking, Bookkeeper, LedgerUnavailable
    from engine.run.server import Board, RunSession, Session

    folder, why = outage
    monkeypatch.setenv("HEATMAP_LEDGER_DB", str(folder / "ledger.sqlite3"))
    bk = Bookkeeper(policy=TOLERANT)
    ev = RunConfig(dataset="synthetic:zong_a", mechanism="ug", epsilon=1.0, seed=1, depth=5)
    rel = RunConfig(dataset="synthetic:zong_a", mechanism="ug", epsilon=1.0, depth=5, mode="release")
    assert bk.book(ev) is None and bk.evaluated(ev) is False
    booking = Booking("fp", "key", 1.0, release=False)
    bk.finish(ev, booking, "ok", SimpleNamespace(epsilon_spent=2.0))  # nothing to settle, nothing raised
    bk.finish(ev, booking, "error")
    with pytest.raises(LedgerUnavailable, match=why):
        bk.book(rel)
    board = Board(workers=1)
    try:
        rs = RunSession(Session(board, "sid", {}), bk)
        started = rs.start("explore", [ev])
        board.wait(started.group.keys, 60)
        assert started.bookings == [] and board.status(ev.key(), "sid").state == "ok"
        with pytest.raises(LedgerUnavailable, match=str(folder)):
            rs.start("release", [rel])
        assert board.status(rel.key(), "sid").state == "missing" and board.running() == 0
    finally:
        board.jm.shutdown()


def test_the_strict_ledger_policy_stops_at_a_ledger_it_cannot_write(outage, monkeypatch):
    """Strict (``python -m engine release``'s): even an evaluation the ledger cannot book stops before it runs,
    with the reason."""
    from engine.run.bookkeeping import STRICT, Bookkeeper, LedgerUnavailable

    folder, why = outage
    monkeypatch.setenv("HEATMAP_LEDGER_DB", str(folder / "ledger.sqlite3"))
    ev = RunConfig(dataset="synthetic:zong_a", mechanism="ug", epsilon=1.0, seed=1, depth=5)
    with pytest.raises(LedgerUnavailable, match=why):
        Bookkeeper(policy=STRICT).run(ev, lambda c: pytest.fail("an evaluation ran unbooked"))
    with pytest.raises(LedgerUnavailable, match=str(folder)):
        Bookkeeper(policy=STRICT).evaluated(ev)
