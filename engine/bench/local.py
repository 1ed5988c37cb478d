"""``python -m engine bench local [--quick] [--json]``: the local model's state of the art, HDG (Yang et al.,
PVLDB 2020), beside the seed papers' local and federated mechanisms and the distributed reference, on the
same range queries and maps.

Protocol (the central bench's, :mod:`engine.bench.central`: a data shape sampled at a scale):

* Data. The four synthetic cities (presets polycentric, monocentric, coastal, sprawl; a base sample of
  10^6 points each at seed 0) and SF cab pick-ups (``../shared/data``; skipped with a message when
  absent). A trial samples ``n`` rows with replacement, each row one user with one location, binned
  on the dataset's public domain at 256 x 256.
* Sizes and budgets. ``n`` = 10^4, 10^5, 10^6 users; epsilon 0.5, 1, 2, 4. ``--quick``: the
  polycentric city only, 10^4 and 10^5 users, epsilon 1 and 4.
* Methods. ``hdg`` at its defaults (the paper's guideline, OLH); the local DP grid of Bagdasaryan et
  al.'s Figure 1 (``ldp_grid``: k-ary randomized response at its default 64 x 64, and optimized unary
  encoding at 64 x 64 and 16 x 16); the federated RFF KDE of Zong et al. (``federated_rff_kde``, its
  defaults; no DP claim and no epsilon, so one run per sample, shown at every epsilon); adaptive
  hierarchical histograms (``adaptive_hh``, distributed DP with secure aggregation: a trusted
  aggregation protocol instead of none, and the zero-out relation, which implies 2 epsilon under
  replace user); Uniform (the public total spread evenly; DPComp's floor: a method near it says
  little). Bit-pushing (Cormode et al.) estimates an attribute's mean per region, not where people are,
  so it has no entry on these maps.
* Measures. Range queries: 2,000 random rectangles over the 256 x 256 cells (the central bench's
  workload), DPBench's scaled L1 per query. Maps: EMD in metres (:func:`engine.metrics.emd_m`, maps
  coarsened to 64 x 64, within its stated bound) and MSE of the normalised maps
  (:func:`engine.metrics.mse`). Medians over 3 seeds (``--quick``: 2); each run's noise is seeded by
  (sample seed, method, epsilon).
* Summaries. Per setting and measure, HDG's error over the best ``ldp_grid`` variant's, over Adaptive
  HH's and over RFF KDE's; how many settings HDG wins.
* Speed. HDG's default run (100,000 users of the polycentric city, 256 x 256, epsilon 1) through
  :func:`engine.run.execution.run` with its metrics: median CPU seconds of 5 runs; target < 3 s.
"""

from __future__ import annotations

import statistics
import time
import zlib
from dataclasses import replace

import numpy as np

from . import SF_CABS_PATH, Figure
from .central import DEPTH, random_rectangles, resolve_mechanism, sample, scaled_l1

SIZES = (10_000, 100_000, 1_000_000)
EPS = (0.5, 1.0, 2.0, 4.0)
PRESETS = ("polycentric", "monocentric", "coastal", "sprawl")
BASE_POINTS = 1_000_000
LDP_GRIDS = ("ldp_grid k-RR 64x64", "ldp_grid OUE 64x64", "ldp_grid OUE 16x16")
METHODS = (
    ("hdg", "hdg", {}),
    (LDP_GRIDS[0], "ldp_grid", {}),
    (LDP_GRIDS[1], "ldp_grid", {"encoding": "oue"}),
    (LDP_GRIDS[2], "ldp_grid", {"encoding": "oue", "level": 4}),
    ("adaptive_hh", "adaptive_hh", {}),
    ("uniform", "uniform", {}),
)
NO_EPSILON = (("federated_rff_kde", "federated_rff_kde", {"attack_users": 0}),)
MEASURES = (("scaled_l1", "scaled L1 per query"), ("emd_m", "m"), ("mse", "MSE of normalised maps"))


def load_datasets(quick: bool, progress) -> dict:
    """name -> (dataset inside its public domain, the domain at DEPTH)."""
    from ..data.synthetic import generate

    out = {}
    for preset in PRESETS[:1] if quick else PRESETS:
        ds = generate(preset, BASE_POINTS, 0)
        out[preset] = ds
    if quick:
        progress("--quick: one synthetic city, SF cab pick-ups left out")
    elif SF_CABS_PATH.exists():
        from ..data.online import load_sf_cabs

        out["sf_cabs"] = load_sf_cabs(path=str(SF_CABS_PATH))
    else:
        progress(f"{SF_CABS_PATH} not found: SF cab pick-ups skipped")
    res = {}
    for name, ds in out.items():
        dom = ds.public_domain(DEPTH)
        res[name] = (ds.in_domain(dom), dom)
    return res


def measure(truth: np.ndarray, density: np.ndarray, domain, rects) -> dict:
    from ..metrics import emd_m, mse

    return {
        "scaled_l1": scaled_l1(truth, density, rects),
        "emd_m": emd_m(truth, density, domain.cell)[0],
        "mse": mse(truth, density),
    }


def run_method(label: str, key: str, params: dict, data, domain, eps: float, seed: int):
    from ..mechanisms import RunContext

    cls, p = resolve_mechanism(key, params)
    ctx = RunContext(rng=np.random.default_rng([seed, zlib.crc32(label.encode()), int(round(eps * 1000))]))
    return cls().run(data, domain, float(eps), p, ctx).density


def run_grid(datasets: dict, sizes, eps_list, seeds, progress) -> dict:
    """(dataset, n, eps) -> label -> list over seeds of {measure: value}."""
    rects = random_rectangles(1 << DEPTH)
    res: dict = {}
    for name, (ds, dom) in datasets.items():
        for n in sizes:
            for s in seeds:
                data = sample(ds, n, s)
                truth = data.true_histogram(dom)
                free = {
                    label: measure(truth, run_method(label, key, p, data, dom, 0.0, s), dom, rects)
                    for label, key, p in NO_EPSILON
                }
                for eps in eps_list:
                    by = res.setdefault((name, n, eps), {})
                    for label, key, p in METHODS:
                        dens = run_method(label, key, p, data, dom, eps, s)
                        by.setdefault(label, []).append(measure(truth, dens, dom, rects))
                    for label, m in free.items():
                        by.setdefault(label, []).append(m)
            progress(f"{name}: {n:,} users done")
    return res


def _med(vals: list[dict], what: str) -> float:
    return float(statistics.median(v[what] for v in vals))


def figures(res: dict) -> list[Figure]:
    figs: list[Figure] = []
    wins: dict = {}
    for (name, n, eps), by in sorted(res.items()):
        for label, vals in by.items():
            for what, unit in MEASURES:
                figs.append(
                    Figure(
                        f"{name}/n={n:.0e}/eps={eps:g}/{label}/{what}",
                        _med(vals, what),
                        unit,
                        "informative",
                        None,
                        f"median over {len(vals)} seeds",
                        extra={"values": [v[what] for v in vals]},
                    )
                )
        for what, _ in MEASURES:
            hdg = _med(by["hdg"], what)
            best = min(LDP_GRIDS, key=lambda k: _med(by[k], what))
            for other in (best, "adaptive_hh", "federated_rff_kde"):
                ref = _med(by[other], what)
                tag = "best_ldp_grid" if other == best else other
                figs.append(
                    Figure(
                        f"hdg_vs/{tag}/{what}/{name}/n={n:.0e}/eps={eps:g}",
                        hdg / ref if ref > 0 else None,
                        "error ratio (HDG / other)",
                        "informative",
                        None,
                        f"HDG {hdg:.4g}, {other} {ref:.4g}",
                    )
                )
                won = wins.setdefault((tag, what), [0, 0])
                won[0] += hdg < ref
                won[1] += 1
    for (tag, what), (k, total) in sorted(wins.items()):
        figs.append(
            Figure(f"hdg_wins/{tag}/{what}", k, f"settings of {total}", "informative", None, "HDG's error lower")
        )
    return figs


def speed_figure(progress) -> Figure:
    """HDG's default run through the runner (data preparation, mechanism, metrics), CPU seconds."""
    from ..run import RunConfig, run

    cfg = RunConfig(mechanism="hdg", dataset_options={"n": 100_000}, depth=DEPTH, epsilon=1.0)
    run(cfg, use_cache=False)  # the dataset and imports, once
    times, engine = [], []
    for s in range(5):
        t = time.process_time()
        r = run(replace(cfg, seed=s), use_cache=False)
        times.append(time.process_time() - t)
        engine.append(r.timings["mechanism_s"])
    med = statistics.median(times)
    progress(f"hdg default run: {med:.3f} s CPU")
    return Figure(
        "hdg_default_run_cpu_s",
        med,
        "s",
        "< 3 s",
        med < 3.0,
        f"100,000 users, 256 x 256, eps 1, with metrics; the mechanism alone {statistics.median(engine):.3f} s",
    )


def run(quick: bool = False, progress=print) -> list[Figure]:
    t0 = time.perf_counter()
    datasets = load_datasets(quick, progress)
    sizes, eps_list = (SIZES[:2], (1.0, 4.0)) if quick else (SIZES, EPS)
    res = run_grid(datasets, sizes, eps_list, range(2 if quick else 3), progress)
    figs = figures(res)
    figs.append(speed_figure(progress))
    figs.append(Figure("local_bench_wall_s", time.perf_counter() - t0, "s", "informative", None, "whole suite"))
    return figs
