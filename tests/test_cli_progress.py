"""Progress of ``sweep`` and ``audit``: a bar on stderr when it is a terminal, and the JSON or CSV on
stdout byte for byte the same with the bar drawn as without it."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

from engine import progress

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, terminal: bool) -> tuple[str, str]:
    """Run ``python -m engine ARGS``: stdout a pipe; stderr a pipe, or a pseudo-terminal of 100 columns."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "engine", *args]
    if not terminal:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=600)  # bytes: CSV ends lines \r\n
        assert p.returncode == 0, p.stderr
        return p.stdout.decode(), p.stderr.decode()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    got = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out, _ = p.communicate(timeout=600)
    reader.join(timeout=10)
    os.close(master)
    assert p.returncode == 0, got.decode(errors="replace")
    return out.decode(), got.decode(errors="replace")


SWEEP = ("sweep", "--data-opt", "n=2000", "--depth", "4", "--epsilons", "0.1,1", "--seeds", "2", "--no-cache")


def test_a_sweep_writes_the_same_json_and_csv_with_its_bar_on_a_terminal():
    for fmt in ("json", "csv"):
        plain, quiet = _cli(*SWEEP, "--format", fmt, terminal=False)
        drawn, bar = _cli(*SWEEP, "--format", fmt, terminal=True)
        assert drawn == plain  # byte for byte
        assert quiet == ""  # no terminal: nothing but the result
        assert "sweep" in bar and "4/4" in bar and "100%" in bar and "identity eps=1 seed=" in bar
        rows = json.loads(plain) if fmt == "json" else list(csv.DictReader(io.StringIO(plain)))
        assert len(rows) == 4


def test_an_audit_writes_the_same_json_with_its_bar_on_a_terminal():
    args = ("audit", "identity", "--runs", "200", "--json", "--seed", "3")
    plain, quiet = _cli(*args, terminal=False)
    drawn, bar = _cli(*args, terminal=True)
    a, b = json.loads(plain), json.loads(drawn)
    a.pop("seconds"), b.pop("seconds")  # the audit's own wall time: the one field that may differ
    assert a == b and set(json.loads(plain)) == set(json.loads(drawn))
    assert quiet == ""
    assert "audit identity" in bar and "100%" in bar and "200 of 200 runs per dataset" in bar


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_draws_only_on_a_terminal():
    class Cfg:
        mechanism, epsilon, seed = "ug", 0.5, 7

    for stream, drawn in ((io.StringIO(), False), (_Tty(), True)):
        with progress.bar(3, "sweep", stream=stream) as b:
            for _ in range(3):
                progress.finished(b, Cfg())
        assert b.n == 3 or not drawn
        text = stream.getvalue()
        assert ("3/3" in text and "ug eps=0.5 seed=7" in text) if drawn else text == "", text
    stream = _Tty()
    with progress.bar(4, "sweep", stream=stream) as b:  # a cluster reports runs as they finish
        callback = progress.on_finished(b)
        callback(3, 4, Cfg())
        callback(4, 4, Cfg())
    assert b.n == 4 and "4/4" in stream.getvalue()
    stream = _Tty()
    b, moved = progress.fraction("audit ug", stream=stream)
    with b:
        moved(0.5, "100 of 200 runs per dataset")
        moved(1.0, "200 of 200 runs per dataset")
    assert b.n == 100 and "200 of 200 runs per dataset" in stream.getvalue()


def test_a_plan_writes_the_same_json_with_its_bar_on_a_terminal():
    # privtree is simulated (2 proxy runs per epsilon, and the target's search), identity has a closed form
    args = ("plan", "--mechanism", "identity,privtree", "--epsilon", "0.5,1", "--users", "2000", "--depth", "4")
    args += ("--runs", "2", "--target-margin", "40", "--json")
    plain, quiet = _cli(*args, terminal=False)
    drawn, bar = _cli(*args, terminal=True)
    assert json.loads(drawn) == json.loads(plain)
    assert quiet == ""
    assert bar.startswith("\rplan: 0 run")  # drawn before the frame, the regions and the first proxy run
    done = re.findall(r"100%\|[^|]*\| (\d+)/(\d+) ", bar)
    assert done and done[-1][0] == done[-1][1] and int(done[-1][0]) > 2 and bar.rstrip().endswith("done]")


def test_the_counted_bar_learns_its_total():
    stream = _Tty()
    b, moved = progress.counted("plan", stream=stream)
    with b:
        assert "plan" in stream.getvalue()  # shown before the first step
        moved(1, 6, "identity ε 1")
        moved(4, 6, "privtree ε 1")
        moved(6, 6, "done")
    assert b.n == 6 and b.total == 6 and "6/6" in stream.getvalue() and "done" in stream.getvalue()
    quiet = io.StringIO()
    b, moved = progress.counted("plan", stream=quiet)
    with b:
        moved(2, 2, "done")
    assert quiet.getvalue() == ""


def test_a_run_writes_the_same_json_with_its_bar_on_a_terminal():
    args = ("run", "--mechanism", "ug", "--epsilon", "0.5", "--seed", "7", "--data-opt", "n=2000", "--depth", "4")
    args += ("--no-cache", "--format", "json")
    plain, quiet = _cli(*args, terminal=False)
    drawn, bar = _cli(*args, terminal=True)
    a, b = json.loads(plain), json.loads(drawn)
    assert a.keys() == b.keys() and a["metrics"] == b["metrics"]  # the same run (its timings aside)
    assert quiet == ""
    assert bar.startswith("\rrun:") and "1/1" in bar and "ug eps=0.5 seed=7" in bar
