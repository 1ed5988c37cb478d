"""``python -m engine bench central [--quick] [--json]``: the central-DP baselines on real
location data.

Protocol (DPBench's, Hay et al. SIGMOD 2016: a data *shape* sampled at a *scale*):

* Data. Each dataset's rows are the shape; a trial samples ``n`` rows with replacement
  (``n`` = 10^4 and 10^6; 10^6 only in ``--quick`` for the hot-spot city) and bins them on
  the dataset's public domain at 256 x 256 (depth 8). Datasets: SF cab pick-ups
  (``../shared/data``, skipped with a message when absent; not in ``--quick``), the bundled
  Berlin Prenzlauer Berg Airbnb listings and John Snow's cholera deaths (libpysal), and a
  synthetic hot-spot city made here (:func:`hotspot_city`): the polycentric preset plus
  four single-cell hot spots holding 3%, 5%, 5% and 7% of all points, each inside one
  output cell (a cab rank, a stadium, a hospital). Without user ids every location is its
  own user, so ``unit = user`` and ``unit = record`` coincide.
* Workload. 2,000 random rectangles over the output cells (two cell indices drawn
  uniformly per axis, the rectangle spanning both; DPBench's random range queries), one
  fixed set for every run.
* Error. Scaled average L1 error per query, ``||W x - W x_hat||_1 / (q ||x||_1)``
  (DPBench's error measure, Hay et al. SIGMOD 2016), each release answering the rectangles
  (``Release.answer_range``: the released 256 x 256 map's exact sums, the hierarchical tree's from its
  least-squares leaves); the hierarchical default's non-negative map's sums informatively.
* Methods. Every central baseline of engine/mechanisms/central/ at its defaults;
  informatively, UG and AG with ``align = off`` (the papers' sizes, cells spread over the
  output cells by area), HB with DPComp's equal split (``budget = hb``) and the hierarchical
  default with ``nonnegative`` off (its map the least-squares leaves: the default's answers, same noise).
* Trees. The hierarchical default (and its non-negative map's sums) against fixed branchings per
  axis (b = 2 with Hay et al.'s uniform budget, with Cormode et al.'s geometric budget and
  with the variance-optimal split; b = 4, 8, 16 with the variance-optimal split), each
  answering from its least-squares leaves, on one dataset (the hot-spot city, 10^4 points) with many
  seeds (100; 40 in ``--quick``): the candidates differ by a few percent. The least-squares
  leaves' error does not depend on the data (a linear estimator of noisy counts) and the
  scaled error depends on n * epsilon only; the non-negative map's does depend on the data.
* Statistics. Medians over seeds (5; 3 in ``--quick``). Each run's random stream is seeded
  by (trial seed, mechanism key, epsilon): variants of one mechanism share noise streams
  (common random numbers for their comparison). Each
  (dataset, size, epsilon) also gets a ranking of the defaults by mean error with 95%
  t-intervals and the methods tied with the best (:func:`engine.run.analysis.rank_over_seeds`).

Targets: at 10^6 points UG's and AG's errors fall as epsilon rises (0.1 -> 1);
AG at or below UG at 10^4 points and epsilon 0.1; the hierarchical default at most 1.05x the
best fixed-branching tree, at every dataset, size and epsilon.
"""

from __future__ import annotations

import statistics
import time
import zlib
from dataclasses import replace

import numpy as np

from ..run.analysis import rank_over_seeds
from . import SF_CABS_PATH, Figure

DEPTH = 8
EPS = (0.1, 1.0)
SIZES = (10_000, 1_000_000)
N_QUERIES = 2_000
HOTSPOTS = ((0.303, 0.621, 0.03), (0.552, 0.413, 0.05), (0.712, 0.774, 0.05), (0.431, 0.182, 0.07))

# (label, mechanism key, parameters)
DEFAULTS = (
    ("identity", "identity", {}),
    ("identity_topt", "identity_topt", {}),
    ("uniform", "uniform", {}),
    ("ug", "ug", {}),
    ("ag", "ag", {}),
    ("privtree", "privtree", {}),
    ("hierarchical", "hierarchical", {}),
)
FULL = {"height": 8}  # leaves at the benchmark's 256 x 256 output cells: a tree of full height
FIXED_TREES = (
    ("tree b=2 uniform", "hierarchical", {"branching": 2, "budget": "uniform", **FULL}),
    ("tree b=2 geometric", "hierarchical", {"branching": 2, "budget": "geometric", **FULL}),
    ("tree b=2 optimal", "hierarchical", {"branching": 2, "budget": "optimal", **FULL}),
    ("tree b=4 optimal", "hierarchical", {"branching": 4, "budget": "optimal", **FULL}),
    ("tree b=8 optimal", "hierarchical", {"branching": 8, "budget": "optimal", **FULL}),
    ("tree b=16 optimal", "hierarchical", {"branching": 16, "budget": "optimal", **FULL}),
    ("hierarchical, full height", "hierarchical", FULL),
)
INFORMATIVE = (
    ("ug aligned", "ug", {"align": "on"}),
    ("ag aligned", "ag", {"align": "on"}),
    ("ug unaligned", "ug", {"align": "off"}),
    ("ag unaligned", "ag", {"align": "off"}),
    ("HB, equal split (DPComp)", "hierarchical", {"budget": "hb"}),
    ("hierarchical, least squares", "hierarchical", {"nonnegative": False}),
)
METHODS = DEFAULTS + INFORMATIVE
# releases whose map is post-processed from the estimate they answer ranges with: the map's sums reported too
MAP_SUMS = ("hierarchical",)
TREES = (DEFAULTS[-1], INFORMATIVE[-1]) + FIXED_TREES
DEFAULT_LABELS = tuple(label for label, _, _ in DEFAULTS)


# ----------------------------------------------------------------------- data
def hotspot_city(n_background: int = 1_000_000, seed: int = 0):
    """The synthetic hot-spot city: ``n_background`` points of the polycentric preset plus
    single-cell hot spots (``HOTSPOTS``: relative position of the cell in the 256 x 256
    public domain, share of ALL points), points uniform inside their cell. Returns the
    dataset and the (iy, ix) output cells of the hot spots."""
    from ..data.dataset import DatasetMeta
    from ..data.projection import to_lonlat
    from ..data.synthetic import generate

    bg = generate("polycentric", n_background, seed)
    dom = bg.public_domain(DEPTH)
    bg = bg.in_domain(dom)
    share = sum(s for _, _, s in HOTSPOTS)
    total = len(bg) / (1.0 - share)
    rng = np.random.default_rng([seed, 17])
    xy, cells = [bg.xy], []
    for fx, fy, s in HOTSPOTS:
        ix, iy = int(fx * dom.n), int(fy * dom.n)
        k = int(round(s * total))
        u = rng.random((k, 2))
        xy.append(np.column_stack([dom.x0 + (ix + u[:, 0]) * dom.cell, dom.y0 + (iy + u[:, 1]) * dom.cell]))
        cells.append((iy, ix))
    xy = np.concatenate(xy)
    meta = DatasetMeta(
        name="Hot-spot city (synthetic: polycentric + 4 single-cell hot spots)",
        source="bench:hotspot_city",
        synthetic=True,
        bbox=bg.meta.bbox,
    )
    ds = replace(bg, xy=xy, lonlat=to_lonlat(xy[:, 0], xy[:, 1], bg.crs), meta=meta, weight=None, value=None, flag=None)
    return ds, cells


def load_datasets(quick: bool, progress) -> dict:
    """name -> (dataset, public domain at DEPTH, note); SF cabs only when its file is present."""
    from ..data.builtin import load_berlin, load_snow

    out = {}
    ds, _ = hotspot_city(200_000 if quick else 1_000_000)
    out["hotspot_city"] = (ds, ds.public_domain(DEPTH), "synthetic: polycentric + 4 single-cell hot spots (20%)")
    if quick:
        progress("--quick: SF cab pick-ups left out")
    elif SF_CABS_PATH.exists():
        from ..data.online import load_sf_cabs

        ds = load_sf_cabs(path=str(SF_CABS_PATH))
        out["sf_cabs"] = (ds, ds.public_domain(DEPTH), "SF cab pick-ups (../shared/data)")
    else:
        progress(f"{SF_CABS_PATH} not found: SF cab pick-ups skipped")
    ds = load_berlin()
    out["berlin_airbnb"] = (ds, ds.public_domain(DEPTH), "Berlin Prenzlauer Berg Airbnb listings (bundled)")
    ds = load_snow()
    out["snow_cholera"] = (ds, ds.public_domain(DEPTH), "John Snow's cholera deaths, one row per death (bundled)")
    return {k: (d.in_domain(dom), dom, note) for k, (d, dom, note) in out.items()}


def sample(ds, n: int, seed: int):
    """``n`` rows drawn with replacement (DPBench: the shape at scale n); locations only."""
    idx = np.random.default_rng([seed, 5]).integers(0, len(ds), n)
    return replace(ds, xy=ds.xy[idx], lonlat=ds.lonlat[idx], user_id=None, weight=None, value=None, flag=None)


# ------------------------------------------------------------------ workload
def random_rectangles(n: int, count: int = N_QUERIES, seed: int = 0) -> np.ndarray:
    """``count`` rectangles ``(x0, y0, x1, y1)`` in output cells (half-open), each axis
    spanning two cell indices drawn uniformly in 0..n-1."""
    a = np.random.default_rng([seed, 11]).integers(0, n, (count, 4))
    return np.column_stack(
        [
            np.minimum(a[:, 0], a[:, 1]),
            np.minimum(a[:, 2], a[:, 3]),
            np.maximum(a[:, 0], a[:, 1]) + 1,
            np.maximum(a[:, 2], a[:, 3]) + 1,
        ]
    )


def answers(grid: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """Exact rectangle sums of a map (``grid[iy, ix]``) by a summed-area table."""
    s = np.zeros((grid.shape[0] + 1, grid.shape[1] + 1))
    s[1:, 1:] = np.cumsum(np.cumsum(grid, axis=0), axis=1)
    x0, y0, x1, y1 = rects.T
    return s[y1, x1] - s[y0, x1] - s[y1, x0] + s[y0, x0]


def scaled_l1(truth: np.ndarray, est: np.ndarray, rects: np.ndarray, answered: bool = False) -> float:
    """DPBench's scaled average per-query L1 error ``||Wx - W x_hat||_1 / (q ||x||_1)``; ``est`` is a map, or
    with ``answered`` the release's answers to ``rects``."""
    y = est if answered else answers(est, rects)
    return float(np.abs(answers(truth, rects) - y).mean() / truth.sum())


# ---------------------------------------------------------------------- runs
def resolve_mechanism(key: str, params: dict):
    from ..core.errors import ParamError
    from ..mechanisms import get

    cls = get(key)
    try:
        return cls, cls.schema().resolve(params)
    except ParamError:
        return None  # a variant this version of the mechanism does not have


def run_trial(data, domain, eps: float, seed: int, methods, rects) -> dict:
    """label -> (scaled L1 error, seconds) for one sample at one epsilon."""
    from ..mechanisms import RunContext

    truth = data.true_histogram(domain)
    out = {}
    for label, key, params in methods:
        r = resolve_mechanism(key, params)
        if r is None:
            continue
        cls, p = r
        ctx = RunContext(rng=np.random.default_rng([seed, zlib.crc32(key.encode()), int(round(eps * 1000))]))
        t = time.perf_counter()
        rel = cls().run(data, domain, float(eps), p, ctx)
        dt = time.perf_counter() - t
        metres = np.column_stack([domain.x0, domain.y0, domain.x0, domain.y0]) + rects * domain.cell
        out[label] = (scaled_l1(truth, rel.answer_range(metres), rects, answered=True), dt)
        if label in MAP_SUMS and rel.summed_map() is not rel.density:
            out[f"{label}, its map's sums"] = (scaled_l1(truth, rel.density, rects), dt)
    return out


def run_grid(datasets: dict, sizes, eps_list, seeds, methods, progress) -> dict:
    """(dataset, size, eps) -> label -> list of (error, seconds) over seeds."""
    rects = random_rectangles(1 << DEPTH)
    res = {}
    for name, (ds, dom, _) in datasets.items():
        for n in sizes:
            for s in seeds:
                data = sample(ds, n, s)
                for eps in eps_list:
                    trial = run_trial(data, dom, eps, s, methods, rects)
                    for label, v in trial.items():
                        res.setdefault((name, n, eps), {}).setdefault(label, []).append(v)
            progress(f"{name}: {n:,} points done")
    return res


def _med(vals, i=0) -> float:
    return float(statistics.median(v[i] for v in vals))


# ------------------------------------------------------------------- figures
def tree_figures(trees: dict) -> list[Figure]:
    """The hierarchical default against the best fixed-branching tree, per (size, epsilon)."""
    figs = []
    fixed = [label for label, _, _ in FIXED_TREES]
    for (name, n, eps), by in sorted(trees.items()):
        for label in ("hierarchical", "hierarchical, its map's sums", "hierarchical, least squares") + tuple(fixed):
            figs.append(
                Figure(
                    f"trees/n={n:.0e}/eps={eps:g}/{label}",
                    _med(by[label]),
                    "scaled L1 per query",
                    "informative",
                    None,
                    f"median over {len(by[label])} seeds ({name})",
                )
            )
        best = min(fixed, key=lambda f: _med(by[f]))
        r = _med(by["hierarchical"]) / _med(by[best])
        figs.append(
            Figure(
                f"target/trees/n={n:.0e}/eps={eps:g}/hierarchical_vs_best_fixed",
                r,
                "error ratio",
                "<= 1.05",
                r <= 1.05,
                f"default {_med(by['hierarchical']):.3g} vs best fixed ({best}) {_med(by[best]):.3g}; "
                f"{len(by[best])} seeds",
            )
        )
    return figs


def figures(res: dict, datasets: dict, sizes, eps_list) -> list[Figure]:
    figs: list[Figure] = []
    for (name, n, eps), by in sorted(res.items()):
        for label, vals in by.items():
            figs.append(
                Figure(
                    f"{name}/n={n:.0e}/eps={eps:g}/{label}",
                    _med(vals),
                    "scaled L1 per query",
                    "informative",
                    None,
                    f"median over {len(vals)} seeds; median time {_med(vals, 1):.3f} s",
                    extra={"errors": [v[0] for v in vals], "median_time_s": _med(vals, 1)},
                )
            )
    for (name, n, eps), by in sorted(res.items()):
        ranked = rank_over_seeds({k: [v[0] for v in vals] for k, vals in by.items() if k in DEFAULT_LABELS})
        figs.append(
            Figure(
                f"{name}/n={n:.0e}/eps={eps:g}/ranking",
                None,
                "",
                "informative",
                None,
                "tied with the best (paired t-test over seeds, 5%): "
                + ", ".join(r["method"] for r in ranked if r["tied"]),
                extra={"ranking": ranked},
            )
        )
    big, small = max(sizes), min(sizes)
    for name in datasets:
        for key in ("ug", "ag"):
            errs = [res.get((name, big, e), {}).get(key) for e in sorted(eps_list)]
            if all(errs) and len(errs) > 1:
                meds = [_med(v) for v in errs]
                ok = all(b < a for a, b in zip(meds, meds[1:]))
                figs.append(
                    Figure(
                        f"target/{name}/{key}_falls_with_eps@n={big:.0e}",
                        meds[-1] / meds[0],
                        "error ratio eps=max/eps=min",
                        "error strictly falls with eps (ratio < 1)",
                        ok,
                        "medians " + ", ".join(f"eps {e:g}: {m:.3g}" for e, m in zip(sorted(eps_list), meds)),
                    )
                )
        by = res.get((name, small, min(eps_list)), {})
        if "ag" in by and "ug" in by:
            r = _med(by["ag"]) / _med(by["ug"])
            figs.append(
                Figure(
                    f"target/{name}/ag_vs_ug@n={small:.0e},eps={min(eps_list):g}",
                    r,
                    "AG/UG error",
                    "<= 1",
                    r <= 1.0,
                    f"AG {_med(by['ag']):.3g}, UG {_med(by['ug']):.3g}",
                )
            )
    for (name, n, eps), by in sorted(res.items()):
        for key in ("ug", "ag"):
            old = f"{key} unaligned"
            if key in by and old in by:
                figs.append(
                    Figure(
                        f"before_after/{name}/n={n:.0e}/eps={eps:g}/{key}",
                        _med(by[key]) / _med(by[old]),
                        "default/unaligned error",
                        "informative",
                        None,
                        f"default {_med(by[key]):.3g}, unaligned {_med(by[old]):.3g}",
                    )
                )
    return figs


def run(quick: bool = False, progress=print) -> list[Figure]:
    t0 = time.perf_counter()
    datasets = load_datasets(quick, progress)
    seeds = range(3 if quick else 5)
    if quick:
        res = run_grid({"hotspot_city": datasets["hotspot_city"]}, SIZES, EPS, seeds, METHODS, progress)
        rest = {k: v for k, v in datasets.items() if k != "hotspot_city"}
        res.update(run_grid(rest, SIZES[:1], EPS, seeds, METHODS, progress))
    else:
        res = run_grid(datasets, SIZES, EPS, seeds, METHODS, progress)
    figs = figures(res, datasets, SIZES, EPS)
    # one dataset and many seeds: the default and the fixed branchings differ by a few percent
    progress("hierarchical trees")
    tree_seeds = range(40 if quick else 100)
    figs += tree_figures(
        run_grid({"hotspot_city": datasets["hotspot_city"]}, SIZES[:1], EPS, tree_seeds, TREES, progress)
    )
    figs.append(
        Figure("central_bench_wall_s", time.perf_counter() - t0, "s", "informative", None, "whole suite, this run")
    )
    return figs
