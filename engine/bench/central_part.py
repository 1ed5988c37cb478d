"""Speed of the classical central-DP baselines (part of the ``core`` suite).

One figure per baseline: the median ``timings['mechanism_s']`` of
``engine.run.execution.run`` (no cache) on 1 million synthetic polycentric points at
256 x 256 (depth 8), epsilon = 1, over several seeds; target < 1 s. The median
of the mechanism's ``run()`` called directly on the same prepared data is
reported alongside (``direct_run_median_s``).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import Figure

N_POINTS = 1_000_000
DEPTH = 8
TARGET_S = 1.0


def _config(key: str, seed: int, n: int):
    from ..run import RunConfig

    return RunConfig(
        dataset="synthetic:polycentric",
        dataset_options={"n": n, "seed": 0},
        mechanism=key,
        epsilon=1.0,
        depth=DEPTH,
        seed=seed,
    )


def bench_figures(quick: bool = False, progress=None) -> list[Figure]:
    from ..mechanisms import RunContext, get
    from ..mechanisms.central import CENTRAL_KEYS
    from ..run import prepare, run

    say = progress or (lambda *a: None)
    repeats = 3 if quick else 7
    figures = []
    for key in CENTRAL_KEYS:
        say(f"central baseline {key}")
        run(_config(key, 0, N_POINTS), use_cache=False)  # warm-up: data generation, numba loading
        job_times = [
            run(_config(key, s, N_POINTS), use_cache=False).timings["mechanism_s"] for s in range(1, repeats + 1)
        ]
        cfg = _config(key, 0, N_POINTS)
        ds, domain, mech_seq, _ = prepare(cfg)
        cls = get(key)
        params = cls.schema().resolve({})
        direct = []
        for s in range(repeats):
            ctx = RunContext(rng=np.random.default_rng([s, 99]))
            t = time.perf_counter()
            cls().run(ds, domain, 1.0, params, ctx)
            direct.append(time.perf_counter() - t)
        med = statistics.median(job_times)
        figures.append(
            Figure(
                name=f"central_{key}_time_1M_256",
                value=med,
                unit="s",
                target=f"< {TARGET_S:g} s",
                passed=med < TARGET_S,
                note=f"{cls.label}: median mechanism time, {N_POINTS:,} points, 256x256, eps=1",
                extra={
                    "direct_run_median_s": statistics.median(direct),
                    "job_times_s": job_times,
                    "direct_times_s": direct,
                    "repeats": repeats,
                    "n_points": len(ds),
                },
            )
        )
    return figures


def run_suite(quick: bool = False, progress=print) -> list[Figure]:
    """Run just this part (``python -c 'from engine.bench import central_part as c; ...'``)."""
    return bench_figures(quick=quick, progress=progress)
