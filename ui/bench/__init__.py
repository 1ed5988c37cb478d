"""Benchmarks of the dashboard: ``python -m ui.bench SUITE [--json] [--quick]``, SUITE one of :data:`SUITES`.

They drive the real app (``streamlit run app.py``) in Debian's Chromium with Playwright, so they live beside
the dashboard, not in the engine. Each suite follows the engine's convention (:mod:`engine.bench`): a module
``ui/bench/<name>.py`` defining ``run(quick: bool = False, progress=print) -> list[Figure]``, printed as the
engine's suites are (a table, or with ``--json`` one JSON object of figures).
"""

from __future__ import annotations

import importlib

SUITES = ("app", "speed")


def run_suite(name: str, quick: bool = False, progress=None) -> list:
    if name not in SUITES:
        raise SystemExit(f"unknown dashboard benchmark {name!r}; available: {', '.join(SUITES)}")
    mod = importlib.import_module(f"{__name__}.{name}")
    return mod.run(quick=quick, progress=progress or (lambda *a: None))
