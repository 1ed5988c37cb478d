"""How long a run should take, before it starts.

:func:`predict_seconds` predicts the wall time of :func:`engine.run.execution.run` for a configuration
(data preparation, mechanism and metrics; the dashboard needs about one more second to draw the
maps). Per mechanism, ``data/run_costs.csv`` holds the coefficients of

    seconds = fixed + points_s * P + cells_s * C + points_cells_s * P * C + work_s * W
              + secure_s * C * [secure] + first_s * [first run of the mechanism in this process]

with ``P`` the locations after sampling users (millions), ``C`` the grid's cells (millions), and
``W`` a mechanism's own measure of its heavy step (``P * C`` catches work that grows with both,
e.g. Sparse EMD, whose sketch width grows with the users) (:func:`features`): SNH's training work (gradient
steps x batch x networks x multiply-adds per query, in 1e9), the per-user attack of the federated
KDE mechanisms (attacked users x attack-grid points x (B + 4), in 1e6; RFF KDE's points also scale
with B and the number of answered bandwidths), Sparse EMD's reconstruction LP (w kept cells x measured
levels, in 1e4). ``scripts/calibrate_costs.py`` measures warm runs on
the default city over points, resolutions, secure mode and the parameters in ``W``, fits the
coefficients by non-negative least squares, measures ``first_s`` (imports, JIT compilation) in fresh
processes, and writes the table with each row's median error. Parameters the model does not know
(e.g. the k-NN bandwidth rule, Adaptive HH's thresholds) are corrected by the history below.

History: :func:`record` (called by ``engine.run.execution.run`` after every computed run) keeps the ratio of
measured to modelled time, per mechanism, in memory; an estimate is the model times the median
of that mechanism's last ratios, or, for a mechanism not yet run here, times the median over all
mechanisms (how fast this machine is compared with the calibration machine), times the machine's
load now (:func:`load_factor`; each ratio is stored divided by the load factor of its run).
"""

from __future__ import annotations

import csv
import math
import os
import threading
import weakref
from collections import deque
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).resolve().parents[3] / "data" / "run_costs.csv"
COEFFICIENTS = ("fixed_s", "points_s", "cells_s", "points_cells_s", "work_s", "secure_s", "first_s")
HISTORY = 20  # ratios kept per mechanism
MIN_GLOBAL = 3  # runs of other mechanisms needed before their speed factor is used
CACHED_S = 0.1  # a result read from the disk cache
DEFAULT_POINTS = 100_000

_LOCK = threading.Lock()
_RATIOS: dict[str, deque] = {}
_SEEN: set[str] = set()  # mechanisms that have run in this process (their first-run cost is paid)
_PER_USER: dict[int, tuple] = {}  # id(dataset) -> (weak reference, locations per user)


@lru_cache(maxsize=2)
def table(path: str = str(TABLE)) -> dict[str, dict[str, float]]:
    """``{mechanism: {coefficient: value}}`` from the calibration table."""
    out = {}
    with open(path, newline="") as f:
        for rec in csv.DictReader(line for line in f if not line.startswith("#")):
            out[rec["mechanism"]] = {c: float(rec[c]) for c in COEFFICIENTS}
    return out


def features(config, n_points: int) -> dict[str, float]:
    """``P``, ``C`` and ``W`` of the module docstring for ``config`` on ``n_points`` locations (the mechanism's
    own share: ``Mechanism.cost_features``)."""
    from ...mechanisms import get

    cls = get(config.mechanism)
    factor, work = cls.cost_features(cls.schema().resolve(config.params), config.depth, n_points)
    return {"P": n_points / 1e6 * factor, "C": 4**config.depth / 1e6, "W": work}


def model_seconds(config, n_points: int, first: bool = False, coeffs: dict | None = None) -> float:
    """The table's prediction (no history); ``first``: add the first-run cost."""
    c = coeffs if coeffs is not None else table().get(config.mechanism)
    if c is None:  # a mechanism registered after the calibration: the median row
        rows = list(table().values())
        c = {k: float(sorted(r[k] for r in rows)[len(rows) // 2]) for k in COEFFICIENTS}
    f = features(config, n_points)
    secure = bool(config.secure or getattr(config, "mode", "evaluate") == "release")
    t = c["fixed_s"] + c["points_s"] * f["P"] + c["cells_s"] * f["C"] + c["points_cells_s"] * f["P"] * f["C"]
    t += c["work_s"] * f["W"]
    t += c["secure_s"] * f["C"] * secure + c["first_s"] * first
    return max(t, 0.01)


def _points(config, n_points: int | None, ds=None) -> int:
    """Locations the run will use: given, or from the dataset ``ds`` if the caller has it loaded,
    else the source's default size; users sampled keep their share of the locations."""
    if n_points is None:
        if ds is not None:
            n_points = len(ds)
        else:
            from ...data.registry import source
            from ...mechanisms import load_all

            load_all()
            src = source(config.dataset)
            n_param = next((p for p in getattr(src, "params", ()) if p.name == "n"), None)
            n_points = int(config.dataset_options.get("n", n_param.default if n_param else DEFAULT_POINTS))
    if config.n_users:
        n_points = min(n_points, int(config.n_users * (_per_user(ds) if ds is not None else 1.0)))
    return max(int(n_points), 1)


def _per_user(ds) -> float:
    """Locations per user of a loaded dataset (remembered: counting users sorts their ids)."""
    key = id(ds)
    with _LOCK:
        hit = _PER_USER.get(key)
    if hit is not None and hit[0]() is ds:
        return hit[1]
    v = len(ds) / max(ds.n_users, 1)
    with _LOCK:
        if len(_PER_USER) > 16:
            _PER_USER.clear()
        _PER_USER[key] = (weakref.ref(ds), v)
    return v


def _factor(mechanism: str) -> float:
    with _LOCK:
        own = list(_RATIOS.get(mechanism, ()))
        if own:
            return _median(own)
        pooled = [r for q in _RATIOS.values() for r in q]
    return _median(pooled) if len(pooled) >= MIN_GLOBAL else 1.0


def load_factor() -> float:
    """How much slower a CPU-bound run is now than on a quiet machine: with ``L`` runnable
    processes (the 1-minute load average, which counts the other users' work) on ``C`` cores a
    new run gets about ``C / (L + 1)`` of the machine, so ``max(1, (L + 1) / C)``. The model's
    table was calibrated on a quiet machine and the history stores ratios divided by the
    factor of their time, so a busy machine scales the estimate now, not the runs of an hour ago
    (without it the estimate is 3-5x low under a load of 6-7 on 2 cores)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 1.0
    return max(1.0, (load + 1.0) / usable_cores())


def usable_cores() -> int:
    """The cores this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _median(v: list[float]) -> float:
    s = sorted(v)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


def predict_seconds(config, n_points: int | None = None, *, dataset=None, cached: bool = False) -> float:
    """Seconds :func:`engine.run.execution.run` should take for ``config`` (see the module docstring);
    ``n_points``: the dataset's number of locations when the caller knows it (e.g. an upload);
    ``dataset``: the dataset if it is loaded; ``cached``: the disk cache holds the result.
    :func:`engine.run.execution.estimate_seconds` fills in the last two."""
    if cached:
        return CACHED_S
    with _LOCK:
        first = config.mechanism not in _SEEN
    pts = _points(config, n_points, dataset)
    if getattr(config, "resolution", "fixed") == "auto":  # the grid the number of people gives, noise aside
        from ._frame import auto_depth

        config = replace(config, depth=auto_depth(config.people or pts))
    return model_seconds(config, pts, first) * _factor(config.mechanism) * load_factor()


def record(config, seconds: float, n_points: int) -> None:
    """Remember how a computed run of ``config`` on ``n_points`` locations compared with the model."""
    with _LOCK:
        first = config.mechanism not in _SEEN
        _SEEN.add(config.mechanism)
    try:
        pred = model_seconds(config, n_points, first)
    except Exception:  # parameters the model cannot read: nothing to learn
        return
    if seconds > 0 and math.isfinite(seconds):
        with _LOCK:
            _RATIOS.setdefault(config.mechanism, deque(maxlen=HISTORY)).append(seconds / pred / load_factor())


def forget_history() -> None:
    """Drop the measured history (tests, or after the machine's load changed)."""
    with _LOCK:
        _RATIOS.clear()
        _SEEN.clear()
