"""``python -m engine bench dpbench [--quick] [--json]``: DPBench's protocol on DPBench's own 2-D data, every
central mechanism, DAWA and the rest of DPBench's 2-D roster, ranked by average regret as DPComp ranks them.

Protocol (Hay, Machanavajjhala, Miklau, Chen, Zhang, "Principled Evaluation of Differentially Private
Algorithms using DPBench", SIGMOD 2016):

* Data. DPBench's 2-D location datasets as 256 x 256 histograms (``../shared/data/dpbench_2d/``, see its
  README); each is a *shape*, the histogram normalised to sum 1. When the folder is absent the bench says
  so and, so that it still measures something, runs on the bundled John Snow cholera map binned at
  256 x 256 instead.
* Scale. A trial draws a multinomial sample of ``n`` points from the shape (n = 10^3 .. 10^7), each point
  at its cell's centre on a public 256 x 256 domain; without user ids every point is its own user.
* Workload. 2,000 random rectangles (two cell indices drawn uniformly per axis, DPBench's random range
  queries), one fixed set for every run (:func:`engine.bench.central.random_rectangles`).
* Error. Scaled average per-query L1 error ``||Wx - W x_hat||_1 / (q ||x||_1)``, x the sample's histogram; and,
  for the bound, the scaled root-mean-squared error ``||Wx - W x_hat||_2 / (sqrt(q) ||x||_1)``.
* Methods. Every central baseline (``CENTRAL_KEYS``), DAWA, HDMM and DPBench's other 2-D algorithms (Privelet,
  QuadTree, AHP, MWEM, DPCube), at their defaults but ``unit = record`` (DPBench's unit; the sample has no user
  ids, so it is also one point per user).
* The bound. The SVD lower bound of the rectangles (:mod:`engine.metrics.lower_bound`): the least expected RMSE of
  any ε-DP matrix mechanism on them, data-free, scaled by ``||x||_1 = n`` like the errors. It is a bound on RMSE,
  not on L1 (a mechanism's mean absolute error is at most its RMSE, so no L1 floor follows from it): each method's
  RMSE is set beside it, a setting's RMSE being the root of the mean over its trials of the squared RMSE. Matrix
  mechanisms (``Mechanism.matrix_mechanism``: Identity, HDMM) can never go below it in expectation; biased or
  data-dependent methods (UG, AG, PrivTree, DAWA, the tree with leaves coarser than cells) can, and do on sparse
  samples.
* Trials. ``TRIALS`` per (dataset, scale, epsilon): fresh sample and noise per trial; a setting's error is
  the mean over its trials. At 10^7 points fewer trials (``TRIALS_LARGEST``) to keep the run near 15 min.
* Ranking. Average regret (:func:`engine.metrics.regret.average_regret`): per setting, a method's error
  over the best error of that setting, averaged over the settings of a scale band: small (10^3, 10^4),
  large (10^6, 10^7), and all.

Figures: the average regret of every method at small and large scale and overall; DAWA's regret over each
other method's (below 1: DAWA ranks ahead); each method's RMSE over the bound (median, least and largest over the
settings of a band); the per-setting errors; and DPBench's headline findings, measured (:func:`findings`, the
Reproduce page's rows): DAWA among the best at small scale (DPBench saw it among the best, not always first);
data-dependent methods ahead at small scale and the data-independent ones (``Mechanism.data_independent``) catching up at
large scale, as the best regret of one class over the other's per band and at 10^7 points alone; and how many
methods Identity beats at large scale. ``--quick``: cabspottingS, 10^3, 10^4 and 10^7 points, ε = 1, 2 trials.
"""

from __future__ import annotations

import math
import statistics
import time
import zlib
from pathlib import Path

import numpy as np

from ..metrics.regret import average_regret
from . import SHARED_DATA, Figure
from .central import answers, random_rectangles, scaled_l1

DPBENCH_DIR = SHARED_DATA / "dpbench_2d"
DATASETS = ("cabspottingS", "cabspottingE", "checkin", "BeijingTaxiS", "BeijingTaxiE", "twitter")
DEPTH = 8
SIDE_M = 25_600.0  # 100 m cells: the domain is public and only labels the cells
SCALES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
SMALL, LARGE = (1_000, 10_000), (1_000_000, 10_000_000)
EPS = (0.1, 1.0, 10.0)
TRIALS = 3
TRIALS_LARGEST = 2
QUICK = {"datasets": ("cabspottingS",), "scales": (1_000, 10_000, 10_000_000), "eps": (1.0,), "trials": 2}
PARAMS = {"unit": "record"}  # DPBench is record-level; defaults otherwise
METHODS = (
    "identity",
    "identity_topt",
    "uniform",
    "ug",
    "ag",
    "privtree",
    "hierarchical",
    "dawa",
    "hdmm",
    "privelet",
    "quadtree",
    "ahp",
    "mwem",
    "dpcube",
)
STUDIED = "dawa"  # the mechanism the figures set against every other (DPBench's finding)


def absent_message(folder: Path = DPBENCH_DIR) -> str:
    return (
        f"DPBench's 2-D data not found at {folder} (see engine/bench/dpbench.py): DPBench's datasets skipped; "
        "running on the bundled John Snow cholera map instead"
    )


def load_shapes(names=DATASETS, folder: Path = DPBENCH_DIR, progress=print) -> dict[str, np.ndarray]:
    """name -> the 256 x 256 shape (sums to 1), DPBench's where its files exist; otherwise, with a message,
    the bundled cholera map."""
    shapes = {}
    for name in names:
        f = Path(folder) / f"{name}_256_256.npy"
        if f.exists():
            h = np.load(f, allow_pickle=False).astype(np.float64)
            if h.shape != (256, 256) or h.sum() <= 0 or (h < 0).any():
                raise ValueError(f"{f}: expected a 256 x 256 histogram of non-negative counts")
            shapes[name] = h / h.sum()
    if not shapes:
        progress(absent_message(Path(folder)))
        from ..data.builtin import load_snow

        ds = load_snow()
        h = ds.public_domain(DEPTH).histogram(ds.xy).astype(np.float64)
        shapes["snow_cholera (fallback)"] = h / h.sum()
    return shapes


def sample_points(shape: np.ndarray, n: int, rng: np.random.Generator, expand: bool = False):
    """A multinomial sample of ``n`` points from the shape on the public domain: the dataset, the domain and
    the sample's histogram. The points of a cell sit at its centre; unless ``expand``, each non-empty cell
    is one record weighted by its count, which under ``unit = record`` releases exactly what the expanded
    points would (every mechanism here counts sums of weights; tests/test_dpbench.py) and keeps 10^7
    points cheap."""
    from ..core.grid import Domain
    from ..data.dataset import Dataset, DatasetMeta

    dom = Domain(0.0, 0.0, SIDE_M, DEPTH)
    counts = rng.multinomial(n, shape.ravel())
    cells = np.repeat(np.arange(counts.size), counts) if expand else np.flatnonzero(counts)
    iy, ix = np.divmod(cells, dom.n)
    xy = np.column_stack([(ix + 0.5) * dom.cell, (iy + 0.5) * dom.cell])
    meta = DatasetMeta(name="dpbench sample", source="bench:dpbench", synthetic=True, bbox=(0.0, 0.0, 0.23, 0.23))
    weight = None if expand else counts[cells].astype(np.float64)
    ds = Dataset(xy=xy, lonlat=xy / 111_320.0, crs="", meta=meta, weight=weight)
    return ds, dom, counts.reshape(dom.n, dom.n)


def scaled_rmse(truth: np.ndarray, est: np.ndarray, rects: np.ndarray) -> float:
    """The root-mean-squared error per query over the total, ``||Wx - W x_hat||_2 / (sqrt(q) ||x||_1)``."""
    return float(np.sqrt(np.mean((answers(truth, rects) - answers(est, rects)) ** 2)) / truth.sum())


def scaled_bound(rects: np.ndarray, n: int, eps: float) -> float:
    """The SVD lower bound of the rectangles' RMSE at ``eps`` over ``||x||_1 = n`` (the errors' scale)."""
    from ..core.workload import RangeWorkload
    from ..metrics.lower_bound import rmse_bound

    return rmse_bound(RangeWorkload.rectangles(rects, 1 << DEPTH), eps) / n


def run_setting(shape, n: int, eps: float, trials: int, rects, methods, seed: int) -> dict[str, list[tuple]]:
    """method -> [(scaled L1 error, seconds, scaled RMSE)] over the trials of one (shape, scale, epsilon)."""
    from ..mechanisms import RunContext, get

    out: dict[str, list[tuple]] = {}
    for t in range(trials):
        data, dom, truth = sample_points(shape, n, np.random.default_rng([seed, n, t]))
        for key in methods:
            cls = get(key)
            ctx = RunContext(rng=np.random.default_rng([seed, t, zlib.crc32(key.encode()), int(round(eps * 1000))]))
            t0 = time.perf_counter()
            rel = cls().run(data, dom, float(eps), cls.schema().resolve(PARAMS), ctx)
            secs, est = (
                time.perf_counter() - t0,
                np.asarray(rel.summed_map()),
            )  # the map whose sums the release answers ranges with
            out.setdefault(key, []).append((scaled_l1(truth, est, rects), secs, scaled_rmse(truth, est, rects)))
    return out


def regret_table(res: dict, methods=METHODS, scales=None) -> dict[str, dict[str, float]]:
    """band -> method -> average regret, bands 'small', 'large' and 'all' (only the bands with settings); with
    ``scales``, the one band 'only' of those scales."""
    means = {s: {m: statistics.fmean(v[0] for v in by[m]) for m in by} for s, by in res.items()}
    bands = {"only": scales} if scales is not None else {"small": SMALL, "large": LARGE, "all": SCALES}
    out = {}
    for band, scales in bands.items():
        sub = {s: by for s, by in means.items() if s[1] in scales}
        if sub:
            out[band] = average_regret(sub, methods)
    return out


def bound_table(res: dict, bounds: dict, methods=METHODS) -> dict[str, dict[str, tuple[float, float, float]]]:
    """band -> method -> (median, least, largest) over the band's settings of the method's RMSE over the bound
    (``bounds``: setting -> scaled bound); a setting's RMSE is the root of the mean of its trials' squares."""
    bands = {"small": SMALL, "large": LARGE, "all": SCALES}
    out: dict[str, dict] = {}
    for band, scales in bands.items():
        ratios: dict[str, list[float]] = {}
        for s, by in res.items():
            if s[1] not in scales:
                continue
            for m in methods:
                if m in by and len(by[m][0]) > 2:
                    rmse = math.sqrt(statistics.fmean(v[2] ** 2 for v in by[m]))
                    ratios.setdefault(m, []).append(rmse / bounds[s])
        if ratios:
            out[band] = {m: (statistics.median(r), min(r), max(r)) for m, r in ratios.items()}
    return out


def figures(
    res: dict, table: dict, trials_note: str, bounds: dict | None = None, studied: str = STUDIED
) -> list[Figure]:
    figs = []
    for (name, n, eps), by in sorted(res.items()):
        for key, vals in by.items():
            errs = [v[0] for v in vals]
            figs.append(
                Figure(
                    f"{name}/n={n:.0e}/eps={eps:g}/{key}",
                    statistics.fmean(errs),
                    "scaled L1 per query",
                    "informative",
                    None,
                    f"mean over {len(errs)} trials; median time {statistics.median(v[1] for v in vals):.3f} s",
                    extra={"errors": errs},
                )
            )
    for band, reg in table.items():
        for key, r in reg.items():
            figs.append(
                Figure(
                    f"regret/{band}/{key}", r, "average regret", "informative (1 = best everywhere)", None, trials_note
                )
            )
        for key, r in reg.items() if studied in reg else ():
            if key != studied:
                figs.append(
                    Figure(
                        f"dawa_vs/{band}/{key}",
                        reg[studied] / r,
                        "DAWA's regret / its",
                        "informative (< 1: DAWA ahead)",
                        None,
                        f"DAWA {reg[studied]:.3g}, {key} {r:.3g}",
                    )
                )
    for band, by in bound_table(res, bounds or {}).items():
        for key, (med, lo, hi) in by.items():
            figs.append(
                Figure(
                    f"bound/{band}/{key}",
                    med,
                    "RMSE / SVD bound (median over settings)",
                    "informative (matrix mechanisms >= 1)",
                    None,
                    f"least {lo:.3g}, largest {hi:.3g}"
                    + ("; a matrix mechanism" if _matrix(key) else "; outside the bound's class: may go below 1"),
                )
            )
    return figs + findings(res, table, studied=studied)


def findings(res: dict, table: dict, methods=METHODS, studied: str = STUDIED) -> list[Figure]:
    """DPBench's headline findings as the bench measures them: DAWA among the best at small scale; data-dependent
    methods ahead at small scale and the data-independent ones catching up at large scale (the best of each class's
    average regret, per band and at 10^7 points alone); many methods beaten by Identity at large scale. A method's
    class is the one its mechanism declares (``Mechanism.data_independent``)."""
    from ..mechanisms import get

    figs = []
    small = table.get("small", {})
    if studied in small:
        best = min(small, key=small.get)
        figs.append(
            Figure(
                "finding/dawa_best_at_small_scale",
                small[studied],
                "DAWA's average regret at 10^3-10^4",
                "informative: DPBench found DAWA among the best at small scale",
                None,
                f"best at small scale: {best} ({small[best]:.3g}); ranking: "
                + ", ".join(f"{k} {v:.2f}" for k, v in small.items()),
            )
        )
    largest = max(s[1] for s in res) if res else 0
    bands = dict(table)
    if largest >= 10_000_000:
        bands[f"n=10^{round(math.log10(largest))}"] = regret_table(res, methods, scales=(largest,))["only"]
    for band, reg in bands.items():
        indep = {m: r for m, r in reg.items() if get(m).data_independent}
        dep = {m: r for m, r in reg.items() if get(m).data_independent is False}
        if indep and dep:
            bi, bd = min(indep, key=indep.get), min(dep, key=dep.get)
            figs.append(
                Figure(
                    f"finding/independent_over_dependent/{band}",
                    indep[bi] / dep[bd],
                    "best data-independent regret / best data-dependent",
                    "informative: DPBench found data-dependent methods ahead at small scale (> 1) and the "
                    "data-independent ones catching up at large scale",
                    None,
                    f"best data-independent {bi} {indep[bi]:.3g}, best data-dependent {bd} {reg[bd]:.3g}",
                )
            )
        if band == "large" and "identity" in reg:
            beaten = sorted(m for m, r in reg.items() if r > reg["identity"])
            figs.append(
                Figure(
                    "finding/beaten_by_identity/large",
                    len(beaten),
                    f"methods of {len(reg) - 1}",
                    "informative: DPComp found many methods beaten by Identity at large scale",
                    None,
                    f"Identity's regret {reg['identity']:.3g}; above it: " + ", ".join(beaten),
                )
            )
    return figs


def run(quick: bool = False, progress=print) -> list[Figure]:
    t0 = time.perf_counter()
    names = QUICK["datasets"] if quick else DATASETS
    shapes = load_shapes(names, progress=progress)
    scales = QUICK["scales"] if quick else SCALES
    eps_list = QUICK["eps"] if quick else EPS
    rects = random_rectangles(1 << DEPTH)
    res = {}
    for name, shape in shapes.items():
        for n in scales:
            trials = QUICK["trials"] if quick else (TRIALS_LARGEST if n >= 10_000_000 else TRIALS)
            for eps in eps_list:
                res[(name, n, eps)] = run_setting(shape, n, eps, trials, rects, METHODS, seed=zlib.crc32(name.encode()))
            progress(f"{name}: {n:,} points done ({time.perf_counter() - t0:.0f} s)")
    note = f"{len(shapes)} dataset(s), eps {', '.join(f'{e:g}' for e in eps_list)}; " + (
        f"{QUICK['trials']} trials" if quick else f"{TRIALS} trials ({TRIALS_LARGEST} at 10^7)"
    )
    table = regret_table(res)
    bounds = {s: scaled_bound(rects, s[1], s[2]) for s in res}
    progress("average regret (DPComp) and RMSE over the SVD bound:\n" + markdown_table(table, bound_table(res, bounds)))
    figs = figures(res, table, note, bounds)
    figs.append(Figure("dpbench_bench_wall_s", time.perf_counter() - t0, "s", "informative", None, "whole suite"))
    return figs


def _matrix(key: str) -> bool:
    from ..mechanisms import get

    cls = get(key)
    return cls.matrix_mechanism(cls.schema().resolve(PARAMS))


def markdown_table(table: dict, bounds: dict | None = None) -> str:
    """The regret table as Markdown (BENCHMARKS.md): a row per method, a column per band; with ``bounds``
    (:func:`bound_table`) the RMSE over the SVD bound per band, median (least-largest), matrix mechanisms marked."""
    bands = [b for b in ("small", "large", "all") if b in table]
    bbands = [b for b in ("small", "large", "all") if b in (bounds or {})]
    head = [f"avg regret, {b}" for b in bands] + [f"RMSE ÷ bound, {b}: median (range)" for b in bbands]
    rows = ["| method | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for key in sorted(table[bands[0]], key=table[bands[0]].get):
        cells = [f"{table[b].get(key, float('nan')):.2f}" for b in bands]
        for b in bbands:
            med, lo, hi = bounds[b].get(key, (math.nan,) * 3)
            cells.append(f"{med:.3g} ({lo:.3g}-{hi:.3g})")
        name = f"{key} (matrix mechanism)" if bounds and _matrix(key) else key
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    if bounds:
        rows.append(
            "\nRMSE ÷ bound: each method's RMSE per query over the least expected RMSE of any ε-DP matrix mechanism on "
            "the same rectangles (SVD bound, Li and Miklau; Laplace constant 2/ε², engine/metrics/lower_bound.py). "
            "Matrix mechanisms can never go below 1 (in expectation); the others are biased or data-dependent and can. "
            "The bound is on RMSE, not on the L1 the regret ranks (mean absolute error <= RMSE), and is not attained "
            "under ε-DP in general."
        )
    return "\n".join(rows)
