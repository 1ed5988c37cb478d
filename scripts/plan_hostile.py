"""What hostile inputs cost the release planner: ``python -m engine plan`` run on each, in a child process.

    python scripts/plan_hostile.py [CASE ...] [--repeats N] [--cap S] [--json]

CASE (default: all): ``fifo`` (``--users-from`` a folder whose manifest.json is a named pipe), ``devzero``
(``--proxy-from`` a folder whose manifest.json links to /dev/zero), ``manifest`` (``--users-from`` a folder
whose manifest.json is a JSON list), ``snh`` (``--mechanism snh --users 2000``) and ``snh4`` (the same at four ε),
each run once.

Per case: the command's first line of error output (or what stopped it), its exit code, wall seconds until
it ended, and its CPU seconds and peak resident memory as the kernel counts them for that child
(``os.wait4``). A watchdog kills a child still running after ``--cap`` seconds (300; 60 for the file cases)
or above 2 GB, so the "before" rows say "killed" with what it had used by then. Medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
MAX_RSS = 2 * 2**30


def _case(name: str, tmp: Path) -> tuple[list[str], float]:
    """The plan command of a case (its inputs made in ``tmp``) and its watchdog's cap in seconds."""
    folder = tmp / name
    folder.mkdir()
    (folder / "heatmap.csv").write_text("ix,iy,estimate\n0,0,1\n")
    if name == "fifo":
        os.mkfifo(folder / "manifest.json")
        return ["--users-from", str(folder)], 60
    if name == "devzero":
        (folder / "manifest.json").symlink_to("/dev/zero")
        return ["--users", "2000", "--proxy-from", str(folder)], 60
    if name == "manifest":
        (folder / "manifest.json").write_text("[1, 2, 3]")
        return ["--users-from", str(folder)], 60
    if name == "snh":
        return ["--mechanism", "snh", "--users", "2000"], 300
    if name == "snh4":
        return ["--mechanism", "snh", "--users", "2000", "--epsilon", "0.5,1,2,5"], 300
    raise SystemExit(f"unknown case {name!r}")


def measure(args: list[str], cap: float) -> dict:
    """Run ``python -m engine plan ARGS``; kill it past ``cap`` seconds or :data:`MAX_RSS`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "plan", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    killed: list[str] = []

    def watch() -> None:
        p = psutil.Process(proc.pid)
        t0 = time.monotonic()
        while proc.returncode is None:
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                return
            if rss > MAX_RSS or time.monotonic() - t0 > cap:
                killed.append(f"killed at {rss / 2**20:,.0f} MB" if rss > MAX_RSS else f"killed at {cap:g} s")
                proc.kill()
                return
            time.sleep(0.05)

    t = time.monotonic()
    threading.Thread(target=watch, daemon=True).start()
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(5)
    text = (err[0] if err else b"").decode(errors="replace").strip()
    first = text.splitlines()[0] if text else ""
    return {
        "outcome": killed[0] if killed else first[:200],
        "traceback": "Traceback" in text,
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_mb": round(ru.ru_maxrss / 1024),  # kilobytes on Linux
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=["fifo", "devzero", "manifest", "snh", "snh4"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cap", type=float, default=None, help="seconds before a child is killed (per case by default)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    rows = []
    for name in a.cases:
        runs = []
        for _ in range(1 if name.startswith("snh") else a.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                args, cap = _case(name, Path(tmp))
                runs.append(measure(args, a.cap or cap))
        row = {"case": name, "runs": len(runs), **runs[-1]}
        for k in ("wall_s", "cpu_s", "peak_mb"):
            row[k] = statistics.median(r[k] for r in runs)
        rows.append(row)
        if not a.json:
            print(
                f"{name:<9} {row['wall_s']:>7.2f} s wall {row['cpu_s']:>7.2f} CPU-s {row['peak_mb']:>6} MB  "
                f"exit {row['exit']}{' TRACEBACK' if row['traceback'] else ''}  {row['outcome']}",
                flush=True,
            )
    if a.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
