"""The planner's inputs and running time are bounded: a release folder holding a named pipe, a link to
/dev/zero, a malformed manifest or map, and a plan too slow to simulate each end in one ``error:`` line
within seconds, never a hang, unbounded memory or a traceback."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.core.errors import Cancelled, ParamError
from engine.run.planning import _forecast as P

GRID = {"crs": "EPSG:3857", "x0_m": 0.0, "y0_m": 0.0, "side_m": 1600.0, "cells_per_side": 4, "cell_m": 400.0}


def _manifest(**changes) -> dict:
    doc = {"mode": "release", "quantity": "counts", "parameters": {"epsilon": 1.0}, "grid": dict(GRID)}
    doc.update(changes)
    return doc


def _release(folder: Path, manifest=None, csv: str | None = None) -> Path:
    """A release folder as ``engine release`` writes it (the fields the planner reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(_manifest() if manifest is None else manifest))
    rows = "".join(f"{i % 4},{i // 4},{10.0 + i}\n" for i in range(16))
    (folder / "heatmap.csv").write_text("ix,iy,estimate\n" + rows if csv is None else csv)
    return folder


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))  # a runaway read fails, not the machine


def _cli(*args: str, timeout: float = 60, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "engine", "plan", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        preexec_fn=_limit_memory,
        env={**os.environ, **(env or {})},
    )
    return p, time.monotonic() - t


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "unexpectedly" not in lines[0], p.stderr
    return lines[0]


@pytest.mark.parametrize("name", ["manifest.json", "heatmap.csv"])
def test_a_named_pipe_in_the_release_folder_is_refused_at_once(tmp_path, name):
    folder = _release(tmp_path / "rel")
    (folder / name).unlink()
    os.mkfifo(folder / name)  # nobody ever writes to it: opening it to read would block for ever
    for args in (["--users-from", str(folder)], ["--users", "500", "--proxy-from", str(folder), "--depth", "3"]):
        p, wall = _cli(*args, timeout=60)
        line = _one_error_line(p)
        assert f"{name} is a named pipe, not a regular file" in line
        assert wall < 30


@pytest.mark.parametrize("name", ["manifest.json", "heatmap.csv"])
def test_a_link_to_dev_zero_is_refused_without_reading_it(tmp_path, name):
    folder = _release(tmp_path / "rel")
    (folder / name).unlink()
    (folder / name).symlink_to("/dev/zero")  # endless bytes: a read without a limit never returns
    p, wall = _cli("--users", "500", "--proxy-from", str(folder), "--depth", "3", timeout=60)
    assert f"{name} is a character device, not a regular file" in _one_error_line(p)
    assert wall < 30


def test_a_link_to_a_regular_release_file_is_read(tmp_path):
    real = _release(tmp_path / "real")
    folder = tmp_path / "linked"
    folder.mkdir()
    for name in ("manifest.json", "heatmap.csv"):
        (folder / name).symlink_to(real / name)
    assert P.released_users(folder).n == sum(10 + i for i in range(16))


BAD_MANIFESTS = [
    ([1, 2, 3], "it holds list, not a JSON object"),
    ("release", "it holds str, not a JSON object"),
    (_manifest(grid=None), "it needs the objects grid and parameters"),
    (_manifest(parameters=[1.0]), "it needs the objects grid and parameters"),
    (_manifest(parameters={}), "epsilon must be a positive number"),
    (_manifest(parameters={"epsilon": "1"}), "epsilon must be a positive number"),
    (_manifest(grid={**GRID, "cells_per_side": 3}), "cells_per_side must be a power of 2"),
    (_manifest(grid={**GRID, "cells_per_side": 2**17}), "cells_per_side must be a power of 2"),
    (_manifest(grid={**GRID, "cells_per_side": "4"}), "cells_per_side must be a power of 2"),
    (_manifest(grid={**GRID, "cells_per_side": True}), "cells_per_side must be a power of 2"),
    (_manifest(grid={**GRID, "side_m": -5}), "side_m must be a positive number"),
    (_manifest(grid={**GRID, "x0_m": None}), "x0_m must be a finite number"),
    (_manifest(mode="evaluate"), "only a Release of counts"),
]


@pytest.mark.parametrize("doc,says", BAD_MANIFESTS, ids=range(len(BAD_MANIFESTS)))
def test_a_malformed_manifest_is_one_clear_line(tmp_path, capsys, doc, says):
    folder = _release(tmp_path / "rel", manifest=doc)
    assert main(["plan", "--users-from", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "manifest.json" in err and says in err and "\n" not in err, err


@pytest.mark.parametrize(
    "raw,says",
    [
        (b'{"grid": ' * 50_000, "is not valid JSON"),  # nested past the parser's recursion limit
        (b"\xff\xfe\x00garbage", "is not valid JSON"),
        (json.dumps(_manifest(grid={**GRID, "side_m": float("inf")})).encode(), "side_m must be a positive number"),
    ],
    ids=["deep", "not-utf8", "infinity"],
)
def test_manifest_bytes_that_are_not_json_are_refused(tmp_path, capsys, raw, says):
    folder = _release(tmp_path / "rel")
    (folder / "manifest.json").write_bytes(raw)
    assert main(["plan", "--users-from", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and says in err and "\n" not in err, err


@pytest.mark.parametrize(
    "csv,says",
    [
        ("ix,iy,estimate\n0,0,1\n-1,0,5\n", "names cells outside"),  # a negative index would wrap round the grid
        ("ix,iy,estimate\n4,0,1\n", "names cells outside"),
        ("ix,iy,estimate\n0,x,1\n", "is not a release's heatmap.csv"),
        ("a,b\n1,2\n", "is not a release's heatmap.csv"),
    ],
    ids=["negative", "past-the-edge", "not-a-number", "no-columns"],
)
def test_a_malformed_map_is_refused(tmp_path, csv, says):
    folder = _release(tmp_path / "rel", csv=csv)
    with pytest.raises(ParamError, match=says):
        P.released_users(folder)


def test_files_over_their_byte_limit_are_refused(tmp_path, monkeypatch):
    from engine.run.execution import _published as published

    monkeypatch.setattr(published, "MANIFEST_BYTES", 1000)
    folder = _release(tmp_path / "rel", manifest={**_manifest(), "padding": "x" * 2000})
    with pytest.raises(ParamError, match="manifest.json is 2,.* bytes, over the limit of 1,000 bytes"):
        P.released_users(folder)
    # the map may hold at most what its grid needs: 16 cells here
    big = "ix,iy,estimate\n" + "0,0,1\n" * (16 * published.CSV_ROW_BYTES // 6 + 1000)
    folder = _release(tmp_path / "rel2", csv=big)
    with pytest.raises(ParamError, match="heatmap.csv is .* over the limit"):
        P.released_users(folder)


# ------------------------------------------------------------------ time budget
def _slow_runs(monkeypatch, seconds: float) -> list:
    """Proxy runs that take ``seconds`` each (checking for cancellation as the engine's mechanisms do)."""
    from engine.run import execution  # the planner runs its proxies through the room's face

    real, calls = execution.run, []

    def slow(config, progress=None, cancelled=None, **kw):
        calls.append(config.mechanism)
        t = time.monotonic()
        while time.monotonic() - t < seconds:
            if cancelled is not None and cancelled():
                raise Cancelled("the run was cancelled")
            time.sleep(0.01)
        return real(config, progress=progress, cancelled=cancelled, **kw)

    monkeypatch.setattr(execution, "run", slow)
    return calls


def test_a_plan_past_its_time_budget_stops_with_a_message(monkeypatch):
    P.make_plan(["privtree"], [1.0], P.stated_users(500), depth=3)  # imports and caches: not what is measured
    calls = _slow_runs(monkeypatch, 4.0)
    monkeypatch.setenv("HEATMAP_PLAN_SECONDS", "1")
    t = time.monotonic()
    with pytest.raises(ParamError, match=r"stopped at its time budget of 1 s \(HEATMAP_PLAN_SECONDS\).*privtree"):
        P.make_plan(["privtree"], [1.0], P.stated_users(500), depth=3)
    assert time.monotonic() - t < 3.5  # stopped inside the first proxy run, not after it
    assert calls == ["privtree"]


def test_a_mechanism_the_cost_model_finds_too_slow_is_refused_before_it_runs(monkeypatch):
    from engine.run import execution

    calls = _slow_runs(monkeypatch, 0.0)
    slow = {"privtree": 30.0}  # seconds a proxy run takes, as the model says (SNH's are of this order)
    monkeypatch.setattr(execution, "predict_seconds", lambda cfg, **kw: slow.get(cfg.mechanism, 0.01))
    monkeypatch.setenv("HEATMAP_PLAN_SECONDS", "60")
    with pytest.raises(ParamError, match=r"planning privtree would take about 150 s here \(5 proxy runs of about 30"):
        P.make_plan(["identity", "privtree"], [1.0], P.stated_users(500), depth=3)
    assert calls == []  # refused before any proxy run, the cheap mechanism's included
    plan = P.make_plan(["privtree"], [1.0], P.stated_users(500), depth=3, runs=1)  # one run fits: the cheap path
    assert calls == ["privtree"] and plan.predictions[0].runs == 1


def test_cli_plan_of_snh_answers_within_its_budget():
    p, wall = _cli("--mechanism", "snh", "--users", "2000", timeout=120, env={"HEATMAP_PLAN_SECONDS": "5"})
    line = _one_error_line(p)
    assert "snh" in line and "time budget of 5 s (HEATMAP_PLAN_SECONDS)" in line
    assert wall < 60
