"""Every registered benchmark suite runs from the command line in its ``--quick`` mode.

The unit tests import only what they test; a suite imports its baselines and tools too
(networkx, POT, Playwright, ...). This runs each suite as a user does, in a subprocess, so
a package that ``requirements.txt`` does not install fails here instead of on a user's
machine. The suites are read from the registries (``engine.bench.SUITES``, and ``ui.benchmarks.SUITES`` for
the dashboard's, run as ``python -m ui.benchmarks.SUITE``), so a new suite is covered without editing this file.
Targets are not judged (``--quick`` is a smoke version, and speed depends on the machine): the run must
succeed and report measured figures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from engine.bench import SUITES
from ui.benchmarks import SUITES as DASHBOARD_SUITES

ROOT = Path(__file__).resolve().parents[1]
# each suite's command after ``python -m``
COMMANDS = {s: ["engine", "bench", s] for s in SUITES} | {s: [f"ui.benchmarks.{s}"] for s in DASHBOARD_SUITES}


@pytest.mark.slow
@pytest.mark.parametrize("suite", list(COMMANDS))
def test_quick_suite_runs_and_reports_figures(suite):
    p = subprocess.run(
        [sys.executable, "-m", *COMMANDS[suite], "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert p.returncode == 0, f"bench {suite} --quick failed:\n{p.stderr[-3000:]}"
    figures = json.loads(p.stdout)
    assert isinstance(figures, dict) and figures, f"bench {suite} reported no figures"
    measured = 0
    for name, f in figures.items():
        assert {"value", "unit", "target", "pass", "note"} <= f.keys(), (name, f)
        v = f["value"]
        if v is None:
            # only an informative row may carry no number (e.g. third-party data absent); a
            # judged target always needs its measurement
            assert f["pass"] is None, f"{suite}: target {name!r} has no value ({f['note']})"
            continue
        assert isinstance(v, (int, float)) and not isinstance(v, bool), (name, v)
        assert math.isfinite(v), (name, v)
        assert f["pass"] in (True, False, None), (name, f["pass"])
        measured += 1
    # a suite that could not run its work (a missing package or browser) reports no number at all
    assert measured > 0, f"bench {suite} measured nothing: {[f['note'] for f in figures.values()]}"
