"""Benchmark suites of the engine: ``python -m engine bench SUITE [--json] [--quick]``. The dashboard's, which
drive the real app in a browser, are beside it (``python -m ui.benchmarks.SUITE``, :mod:`ui.benchmarks`) and
follow the same convention.

Convention shared by every suite: a suite module ``engine/bench/<name>.py``
defines ``run(quick: bool = False, progress=print) -> list[Figure]``. The CLI
prints a readable table, or with ``--json`` one JSON object mapping each
figure's name to ``{"value", "unit", "target", "pass", ...}``. Speed figures are
medians of repeated runs, and where a target is a ratio the baseline is
run in the same process (these machines are shared and noisy).
"""

from __future__ import annotations

import importlib
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

# Third-party benchmark data in a folder beside the checkout (``../shared/data``, not part of the repository;
# each suite's docstring names the files it reads): benchmarks may read it, never the app or the tests; every
# figure that needs it is skipped with a message when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SF_CABS_PATH = SHARED_DATA / "sf_cabs_pickups.npy"

# the dashboard's suites (app, speed) are not the engine's: a request for one is told where they are
DASHBOARD_HINT = "; the dashboard's benchmarks run as python -m ui.benchmarks.SUITE"
SUITES = (
    "core",
    "adaptive_hh",
    "sparse_emd",
    "rff_kde",
    "snh",
    "bit_pushing",
    "central",
    "dask",
    "regions",
    "city_regions",
    "dpbench",
    "plan",
    "frame",
    "hdmm",
    "local",
    "study",
)


@dataclass
class Figure:
    name: str
    value: float | None
    unit: str
    target: str  # human-readable, e.g. "< 1 s" or ">= 0.9"
    passed: bool | None  # None: informative only / could not be measured
    note: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {"value": self.value, "unit": self.unit, "target": self.target, "pass": self.passed, "note": self.note}
        d.update(self.extra)
        return d


def median_time(fn, repeats: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def available() -> list[str]:
    out = []
    for s in SUITES:
        try:
            importlib.import_module(f"{__name__}.{s}")
            out.append(s)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{s}":
                raise
    return out


def run_suite(name: str, quick: bool = False, progress=None) -> list[Figure]:
    if name not in available():
        raise SystemExit(f"unknown benchmark suite {name!r}; available: {', '.join(available())}{DASHBOARD_HINT}")
    mod = importlib.import_module(f"{__name__}.{name}")
    return mod.run(quick=quick, progress=progress or (lambda *a: None))


def render_table(figures: list[Figure]) -> str:
    rows = [("figure", "value", "unit", "target", "pass", "note")]
    for f in figures:
        v = "n/a" if f.value is None else (f"{f.value:.4g}" if isinstance(f.value, float) else str(f.value))
        p = {True: "PASS", False: "FAIL", None: "-"}[f.passed]
        rows.append((f.name, v, f.unit, f.target, p, f.note))
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    lines = []
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r[:5], widths)) + ("  " + r[5] if r[5] else ""))
    return "\n".join(lines)


def to_json(figures: list[Figure]) -> str:
    return json.dumps({f.name: f.to_dict() for f in figures}, indent=2, default=float)
