"""Benchmarks of the dashboard: ``python -m ui.benchmarks.SUITE [--json] [--quick]``, SUITE one of :data:`SUITES`.

They drive the real app (``streamlit run app.py``) in Debian's Chromium with Playwright, so they live beside
the dashboard, not in the engine. Each suite follows the engine's convention (:mod:`engine.bench`): a module
``ui/benchmarks/<name>.py`` defining ``run(quick: bool = False, progress=print) -> list[Figure]``, printed as
the engine's suites are (a table, or with ``--json`` one JSON object of figures) by :func:`main`.
"""

from __future__ import annotations

import argparse
import sys

from engine.bench import render_table, to_json

SUITES = ("app", "speed")


def main(run, name: str, argv=None) -> int:
    """The command line of the suite ``name``, whose figures ``run`` measures."""
    p = argparse.ArgumentParser(prog=f"python -m ui.benchmarks.{name}", description=f"the dashboard's {name} benchmark")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="smaller sizes (for smoke tests)")
    args = p.parse_args(argv)
    figs = run(quick=args.quick, progress=lambda *a: print(*a, file=sys.stderr))
    print(to_json(figs) if args.json else render_table(figs))
    return 0
