"""``python -m engine bench hdmm [--quick] [--json]``: HDMM's published figures, its distance to the SVD lower
bound on the workloads the product uses, and its run time.

* Reproduction. HDMM's README (McKenna et al., PVLDB 2018; the authors' code ``dpcomp-org/hdmm``) prints, for
  p-Identity strategies optimised on a 256-cell axis (p = 16), the RMSE of all 1-D ranges, 5.736, and, for the
  Kronecker product of two of them, of all 2-D ranges of 256 x 256, 32.69. Its error module's measure: the
  expected total squared error of the workload's answers, ``(2 / ε^2) ||A||_1^2 tr(W^T W (A^T A)^-1)``, divided
  by the number of queries, square-rooted; at its default ε = sqrt(2), where the Laplace variance 2/ε^2 is 1.
  Data-free: no data is read. Target: within 3 %.
* The bound. For each workload the product uses on a 256 x 256 map (all ranges; the Range queries page's
  squares, 2-10 % of the side, as HDMM's ``squares`` workload draws 1,000 of them; DPBench's 2,000 random
  rectangles of ``bench dpbench``), the expected RMSE per query at ε = 1 of HDMM optimised for it, of HDMM
  optimised for all ranges, and of Identity (Laplace per cell), each over the SVD lower bound
  (:mod:`engine.metrics.lower_bound`). All closed forms, data-free.
* Speed. CPU time of the strategy optimisation (once per grid and workload, then read from the disk cache), and
  the median CPU time of a default run at 256 x 256 once the strategy is cached (target: under 3 s).

``--quick``: the same reproduction (256 cells, p = 16); the bound on 64 x 64 with p = 4, without DPBench's
rectangles; 3 timed runs.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

from ..core.grid import Domain
from ..core.workload import RangeWorkload, all_range_gram
from ..metrics.lower_bound import rmse_bound
from . import Figure
from .central import random_rectangles

README_2D, README_1D = 32.69, 5.736  # HDMM's README: KronPIdentity([16, 16], [256, 256]) and PIdentity(16, 256)
README_EPS = math.sqrt(2.0)  # the README's error module's default ε
N = 256
P = 16


def _rmse(w: RangeWorkload, ty, tx, eps: float) -> float:
    from ..mechanisms.hdmm.strategy import expected_error

    return math.sqrt(2.0 / eps**2 * expected_error(w, ty, tx) / w.queries)


def reproduction(n: int = N, p: int = P) -> list[Figure]:
    from ..mechanisms.hdmm.strategy import opt0_best, opt0_objective

    t0 = time.process_time()
    theta = opt0_best(all_range_gram(n), p)
    cpu = time.process_time() - t0
    w2 = RangeWorkload.all_ranges(n)
    q1 = n * (n + 1) / 2
    rmse1 = math.sqrt(opt0_objective(theta, all_range_gram(n))[0] / q1)  # 2/ε² = 1 at ε = sqrt(2)
    rmse2 = _rmse(w2, theta, theta, README_EPS)
    full = n == N and p == P
    out = []
    for name, value, paper in (("all_2d_ranges", rmse2, README_2D), ("all_1d_ranges", rmse1, README_1D)):
        out.append(
            Figure(
                f"readme/{name}_rmse",
                value,
                "RMSE per query (expected), ε = sqrt(2)",
                f"within 3 % of {paper}" if full else "informative (--quick: a smaller grid)",
                abs(value / paper - 1) <= 0.03 if full else None,
                f"{n} cells per axis, p = {p}; README {paper}; ratio {value / paper:.3f}",
            )
        )
    out.append(Figure("readme/optimisation_cpu_s", cpu, "s (CPU)", "informative", None, f"OPT_0, {n} cells, p = {p}"))
    out.append(
        Figure(
            "readme/all_2d_ranges_over_svd_bound",
            rmse2 / rmse_bound(w2, README_EPS),
            "x the SVD bound",
            "informative (>= 1)",
            None,
            "the bound is not attained under ε-DP in general",
        )
    )
    return out


def workloads(n: int, quick: bool) -> dict[str, RangeWorkload]:
    from ..mechanisms.hdmm.mechanism import workload_of

    dom = Domain(0.0, 0.0, 100.0 * n, int(math.log2(n)))
    squares = {"workload": "squares", "workload_queries": 1000, "side_min_pct": 2.0, "side_max_pct": 10.0}
    out = {
        "all ranges": RangeWorkload.all_ranges(n),
        "squares 2-10 % (Range queries page, 1,000)": workload_of(dom, {**squares, "workload_seed": 0}),
    }
    if not quick:
        out["DPBench's 2,000 random rectangles"] = RangeWorkload.rectangles(random_rectangles(n), n)
    return out


def bound_figures(n: int, p: int, quick: bool, eps: float = 1.0) -> list[Figure]:
    from ..mechanisms.hdmm.mechanism import strategy_for

    out = []
    all_ranges = strategy_for(RangeWorkload.all_ranges(n), p)
    for name, w in workloads(n, quick).items():
        bound = rmse_bound(w, eps)
        own = _rmse(w, *strategy_for(w, p), eps)
        rows = {"hdmm (optimised for it)": own, "hdmm (all ranges)": _rmse(w, *all_ranges, eps)}
        zero = np.zeros((1, n))
        rows["identity"] = _rmse(w, zero, zero, eps)  # Θ = 0: the Laplace mechanism on the cells
        for who, rmse in rows.items():
            out.append(
                Figure(
                    f"bound/{name}/{who}",
                    rmse / bound,
                    "x the SVD bound (expected RMSE)",
                    "informative (>= 1: matrix mechanisms)",
                    None,
                    f"{n} x {n}, ε = {eps:g}: expected RMSE {rmse:.4g}, bound {bound:.4g}",
                )
            )
    return out


def speed(repeats: int = 5) -> list[Figure]:
    """A default run on DPBench's 256 x 256 domain (a uniform shape: HDMM's time does not depend on the data)."""
    from ..bench.dpbench import sample_points
    from ..mechanisms import RunContext, get

    cls = get("hdmm")
    shape = np.full((N, N), 1.0 / (N * N))
    data, dom, _ = sample_points(shape, 100_000, np.random.default_rng(0))
    params = cls.schema().resolve({})
    cls().run(data, dom, 1.0, params, RunContext(rng=np.random.default_rng(0)))  # the strategy, cached
    times = []
    for s in range(repeats):
        t0 = time.process_time()
        cls().run(data, dom, 1.0, params, RunContext(rng=np.random.default_rng(s)))
        times.append(time.process_time() - t0)
    return [
        Figure(
            f"speed/default_run_{N}_cpu_s",
            statistics.median(times),
            "s (CPU, median)",
            "< 3 s",
            statistics.median(times) < 3.0,
            f"{repeats} runs, 100,000 points, strategy read from the cache",
        )
    ]


def run(quick: bool = False, progress=print) -> list[Figure]:
    n, p = (64, 4) if quick else (N, P)
    figs = reproduction()  # the published setting in --quick too: a few seconds, and the Reproduce page's rows
    progress(f"reproduction: {figs[0].value:.4g} (README {README_2D})")
    figs += bound_figures(n, p, quick)
    progress("bound ratios done")
    figs += speed(3 if quick else 5)
    return figs
