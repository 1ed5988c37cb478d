"""Fit the run-time cost model's table, ``data/run_costs.csv`` (engine/run/execution/_estimates.py).

    python scripts/calibrate_costs.py [--quick] [--out data/run_costs.csv] [--only snh,ug]

For every registered heatmap mechanism (mechanisms that need no attribute) it measures warm runs of
``engine.run.execution.run`` on the default synthetic city (polycentric) over 20,000 / 100,000 / 1,000,000
locations and 64² / 256² / 1024² cells, secure mode at 64² and 256², and the parameters that
enter the model's work term (SNH presets; RFF KDE's B; the federated KDE attack's users; Sparse EMD's w). Each
configuration runs twice with different seeds and the mean is kept. The coefficients are fitted by
non-negative least squares on relative errors (each row divided by its measured time). The
first-run cost (imports, JIT compilation) is measured in a fresh process per mechanism, after the
warm-up the dashboard does (one tiny identity run), as the first run's time minus the second's.
``--quick`` measures fewer sizes (for a smoke test of the script, not for the table).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.mechanisms import heatmap_keys, registry  # noqa: E402
from engine.run.execution import (  # noqa: E402
    COEFFICIENTS,
    TABLE,
    RunConfig,  # noqa: E402
    features,
    load_factor,
    run,  # noqa: E402
)

SIZES = (20_000, 100_000, 1_000_000)
DEPTHS = (6, 8, 10)
DEFAULT_WEIGHT = 5.0


def _is_default(config: dict) -> bool:
    return (
        config["dataset_options"] == {"n": 100_000}
        and config["depth"] == 8
        and not config["params"]
        and not config["secure"]
    )


COLD = """
import sys, time
from engine.run.execution._config import RunConfig
from engine.run.execution._runner import run  # noqa: E402
run(RunConfig(dataset="synthetic:monocentric", dataset_options={"n": 2000}, depth=4), use_cache=False)
run(RunConfig(mechanism="identity"), use_cache=False)  # the dataset, loaded before the user's Run
t = []
for seed in (1, 2):
    c = time.perf_counter()
    run(RunConfig(mechanism=sys.argv[1], seed=seed), use_cache=False)
    t.append(time.perf_counter() - c)
print(t[0] - t[1])
"""


def configs(mech: str, quick: bool) -> list[RunConfig]:
    sizes = (20_000, 100_000) if quick else SIZES
    depths = (6, 8) if quick else DEPTHS
    cls = registry()[mech]
    if not cls.cost_grows_with_points:  # its work (SNH's training) does not depend on the points: one size
        sizes = (100_000,)
    out = [RunConfig(mechanism=mech, dataset_options={"n": n}, depth=d) for n in sizes for d in depths]
    if cls.uses_epsilon and cls.cost_grows_with_points:
        out += [RunConfig(mechanism=mech, dataset_options={"n": 100_000}, depth=d, secure=True) for d in depths[:2]]
    # the parameter settings that move the work term W (Mechanism.cost_variants), at 100,000 locations and 256²
    out += [RunConfig(mechanism=mech, dataset_options={"n": 100_000}, params=dict(p)) for p in cls.cost_variants]
    return out


def measure(cfg: RunConfig) -> tuple[float, int]:
    """Mean seconds of two warm runs (seeds 1 and 2) and the locations used, each divided by the
    machine's load factor when it started (engine.run.execution.load_factor): the table is for a quiet
    machine, and the estimate multiplies the load back in."""
    times = []
    for seed in (1, 2):
        c = RunConfig.from_dict({**cfg.to_dict(), "seed": seed})
        busy = load_factor()
        t = time.perf_counter()
        res = run(c, use_cache=False)
        times.append((time.perf_counter() - t) / busy)
    return float(np.mean(times)), int(res.n_points)


def fit(rows: list[dict]) -> tuple[dict, float]:
    """NNLS on relative errors, the default configuration (100,000 locations, 256², default parameters,
    what the dashboard runs first) weighted ``DEFAULT_WEIGHT`` times; returns the coefficients and the
    median |log(pred / measured)| over the rows."""
    from scipy.optimize import nnls

    X = np.array([[1.0, r["P"], r["C"], r["P"] * r["C"], r["W"], r["C"] * r["secure"]] for r in rows])
    t = np.array([r["seconds"] for r in rows])
    w = np.array([DEFAULT_WEIGHT if _is_default(r["config"]) else 1.0 for r in rows])
    coef, _ = nnls(X * (w / t)[:, None], w)
    err = np.abs(np.log((X @ coef) / t))
    names = COEFFICIENTS[:-1]  # first_s is measured apart
    return dict(zip(names, coef.tolist())), float(np.median(err))


def first_run_cost(mech: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", COLD, mech], cwd=ROOT, capture_output=True, text=True, check=True, env=os.environ
    )
    return max(0.0, float(out.stdout.strip().splitlines()[-1]))


def write(path: str, out: list[dict], note: str) -> None:
    with open(path, "w", newline="") as f:
        f.write(
            f"# Run-time cost model (engine/run/execution/_estimates.py), fitted by scripts/calibrate_costs.py on {date.today()}\n"
            f"# on {os.cpu_count()} cores, {note}; seconds = fixed + points*P + cells*C + work*W "
            "+ points_cells*P*C + secure*C (secure) + first (first run in a process)\n"
        )
        w = csv.DictWriter(f, fieldnames=["mechanism", *COEFFICIENTS, "median_log_error"])
        w.writeheader()
        w.writerows(sorted(out, key=lambda r: r["mechanism"]))


def refit(rows_path: str, out_path: str) -> None:
    """Refit the coefficients from saved rows, keeping each mechanism's measured first-run cost."""
    with open(out_path, newline="") as f:
        lines = f.readlines()
    kept = {r["mechanism"]: r for r in csv.DictReader(line for line in lines if not line.startswith("#"))}
    rows = json.loads(Path(rows_path).read_text())
    out = []
    for mech in sorted({r["mechanism"] for r in rows}):
        coef, err = fit([r for r in rows if r["mechanism"] == mech])
        coef["first_s"] = float(kept[mech]["first_s"])
        out.append({"mechanism": mech, **{k: f"{coef[k]:.6g}" for k in COEFFICIENTS}, "median_log_error": f"{err:.3f}"})
        print(f"{mech}: median |log error| {err:.2f}")
    measured_on = next((line[2:].strip() for line in lines[1:2] if line.startswith("#")), "")
    load = measured_on.split("; ")[0].split("cores, ", 1)[-1]
    write(out_path, out, f"refit from {Path(rows_path).name} (rows measured at {load})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(TABLE))
    ap.add_argument("--only", default="", help="comma-separated mechanisms to re-measure (others kept from --out)")
    ap.add_argument("--rows", default="", help="also write the measured rows to this JSON file")
    ap.add_argument("--refit", default="", help="refit from rows saved with --rows (first-run costs kept from --out)")
    a = ap.parse_args()
    if a.refit:
        return refit(a.refit, a.out)
    only = [m for m in a.only.split(",") if m]
    kept = {}
    if only and Path(a.out).is_file():
        with open(a.out, newline="") as f:
            kept = {r["mechanism"]: r for r in csv.DictReader(line for line in f if not line.startswith("#"))}
    out, measured = [], []
    for mech in heatmap_keys():
        if only and mech not in only:
            if mech in kept:
                out.append(kept[mech])
            continue
        run(RunConfig(mechanism=mech), use_cache=False)  # warm: imports and compiled kernels
        rows = []
        for cfg in configs(mech, a.quick):
            sec, n_points = measure(cfg)
            f = features(cfg, n_points)
            rows.append({**f, "secure": float(cfg.secure), "seconds": sec, "config": cfg.to_dict()})
            print(
                f"{mech:28s} n={n_points:>9,} depth={cfg.depth:2d} secure={cfg.secure!s:5s} {cfg.params} {sec:7.3f} s"
            )
        coef, err = fit(rows)
        coef["first_s"] = first_run_cost(mech)
        print(f"{mech}: {json.dumps({k: round(v, 5) for k, v in coef.items()})}, median |log error| {err:.2f}")
        out.append({"mechanism": mech, **{k: f"{coef[k]:.6g}" for k in COEFFICIENTS}, "median_log_error": f"{err:.3f}"})
        measured += [{**r, "mechanism": mech} for r in rows]
    write(a.out, out, "load average " + ", ".join(f"{v:.1f}" for v in os.getloadavg()))
    if a.rows:
        Path(a.rows).write_text(json.dumps(measured, indent=1, default=str))
    print(
        f"wrote {a.out} ({len(out)} mechanisms); max median |log error| "
        f"{max((float(r['median_log_error']) for r in out), default=math.nan):.2f}"
    )


if __name__ == "__main__":
    main()
