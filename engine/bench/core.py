"""``python -m engine bench core``: binning, synthetic generation, central baselines, exact EMD.

Figures:
* binning 10 M points into 1024 x 1024, points per second per core (>= 50 M/s);
* peak memory of generating and binning 10 M points, in a fresh process (< 2 GB);
* a synthetic city of 1 M points generated in < 2 s;
* every central baseline end to end on 1 M points at 256 x 256 in < 1 s (engine/bench/central_part.py);
* exact EMD at 128 x 128 < 1 s and 256 x 256 < 5 s, faster than a generic min-cost-flow
  solver run in the same process, and equal to POT on small grids (engine/bench/emd_part.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

from . import Figure, median_time

_PEAK_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    from engine.data.synthetic import generate
    n = int(sys.argv[1])
    ds = generate("polycentric", n, 0)
    dom = ds.public_domain(10)
    h = dom.histogram(ds.xy)
    assert int(h.sum()) == n
    print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    """
)


def binning_figures(quick: bool, progress) -> list[Figure]:
    from ..core.grid import Domain

    n = 2_000_000 if quick else 10_000_000
    progress(f"binning {n:,} points into 1024x1024")
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 20_000, (n, 2))
    dom = Domain(0.0, 0.0, 20_000.0, 10)
    t, _ = median_time(lambda: dom.histogram(xy), repeats=5)
    rate = n / t / 1e6
    figs = [
        Figure(
            "binning_mpts_per_s_per_core",
            rate,
            "M points/s",
            ">= 50",
            rate >= 50,
            f"{n:,} points, 1024x1024, one thread, median of 5",
        )
    ]
    progress("peak memory of 10 M points (fresh process)")
    m = n
    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(m)], capture_output=True, text=True, timeout=600)
    if out.returncode == 0:
        peak = json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]
        figs.append(
            Figure(
                "peak_memory_10m_points_mb",
                peak,
                "MB",
                "< 2048",
                peak < 2048,
                f"generate + bin {m:,} points, max RSS of a fresh interpreter",
            )
        )
    else:
        figs.append(Figure("peak_memory_10m_points_mb", None, "MB", "< 2048", False, out.stderr[-300:]))
    return figs


def synthetic_figures(quick: bool, progress) -> list[Figure]:
    from ..data.synthetic import generate

    progress("synthetic city of 1 M points")
    seeds = iter(range(100))
    t, _ = median_time(lambda: generate("polycentric", 1_000_000, next(seeds)), repeats=3 if quick else 5)
    return [Figure("synthetic_1m_points_s", t, "s", "< 2", t < 2, "polycentric preset, fresh seed each run, median")]


def run(quick: bool = False, progress=print) -> list[Figure]:
    figs: list[Figure] = []
    figs += binning_figures(quick, progress)
    figs += synthetic_figures(quick, progress)
    from . import central_part, emd_part

    progress("central baselines")
    figs += central_part.bench_figures(quick=quick)
    progress("exact EMD")
    figs += emd_part.bench_figures(quick=quick)
    return figs
