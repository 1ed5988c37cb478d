"""``python -m engine bench dpbench [--quick] [--json]``: DPBench's protocol on DPBench's own 2-D data, every
central mechanism and DAWA, ranked by average regret as DPComp ranks them.

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
* Error. Scaled average per-query L1 error ``||Wx - W x_hat||_1 / (q ||x||_1)``, x the sample's histogram.
* Methods. Every central baseline (``CENTRAL_KEYS``) and DAWA, at their defaults but ``unit = record``
  (DPBench's unit; the sample has no user ids, so it is also one point per user).
* Trials. ``TRIALS`` per (dataset, scale, epsilon): fresh sample and noise per trial; a setting's error is
  the mean over its trials. At 10^7 points fewer trials (``TRIALS_LARGEST``) to keep the run near 15 min.
* Ranking. Average regret (:func:`engine.metrics.regret.average_regret`): per setting, a method's error
  over the best error of that setting, averaged over the settings of a scale band: small (10^3, 10^4),
  large (10^6, 10^7), and all.

Figures: the average regret of every method at small and large scale and overall; DAWA's regret over each
other method's (below 1: DAWA ranks ahead); the per-setting errors; and one check of DPBench's finding,
that DAWA is the best at small scale (informative: DPBench saw it among the best, not always first).
"""

from __future__ import annotations

import statistics
import time
import zlib
from pathlib import Path

import numpy as np

from ..metrics.regret import average_regret
from . import SHARED_DATA, Figure
from .central import random_rectangles, scaled_l1

DPBENCH_DIR = SHARED_DATA / "dpbench_2d"
DATASETS = ("cabspottingS", "cabspottingE", "checkin", "BeijingTaxiS", "BeijingTaxiE", "twitter")
DEPTH = 8
SIDE_M = 25_600.0  # 100 m cells: the domain is public and only labels the cells
SCALES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
SMALL, LARGE = (1_000, 10_000), (1_000_000, 10_000_000)
EPS = (0.1, 1.0, 10.0)
TRIALS = 3
TRIALS_LARGEST = 2
QUICK = {"datasets": ("cabspottingS",), "scales": (1_000, 10_000, 1_000_000), "eps": (1.0,), "trials": 2}
PARAMS = {"unit": "record"}  # DPBench is record-level; defaults otherwise
METHODS = ("identity", "identity_topt", "uniform", "ug", "ag", "privtree", "hierarchical", "dawa")


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


def run_setting(shape, n: int, eps: float, trials: int, rects, methods, seed: int) -> dict[str, list[tuple]]:
    """method -> [(scaled L1 error, seconds)] over the trials of one (shape, scale, epsilon)."""
    from ..mechanisms import RunContext, get

    out: dict[str, list[tuple]] = {}
    for t in range(trials):
        data, dom, truth = sample_points(shape, n, np.random.default_rng([seed, n, t]))
        for key in methods:
            cls = get(key)
            ctx = RunContext(rng=np.random.default_rng([seed, t, zlib.crc32(key.encode()), int(round(eps * 1000))]))
            t0 = time.perf_counter()
            rel = cls().run(data, dom, float(eps), cls.schema().resolve(PARAMS), ctx)
            out.setdefault(key, []).append((scaled_l1(truth, np.asarray(rel.density), rects), time.perf_counter() - t0))
    return out


def regret_table(res: dict, methods=METHODS) -> dict[str, dict[str, float]]:
    """band -> method -> average regret, bands 'small', 'large' and 'all' (only the bands with settings)."""
    means = {s: {m: statistics.fmean(v[0] for v in by[m]) for m in by} for s, by in res.items()}
    bands = {"small": SMALL, "large": LARGE, "all": SCALES}
    out = {}
    for band, scales in bands.items():
        sub = {s: by for s, by in means.items() if s[1] in scales}
        if sub:
            out[band] = average_regret(sub, methods)
    return out


def figures(res: dict, table: dict, trials_note: str) -> list[Figure]:
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
        if "dawa" in reg:
            for key, r in reg.items():
                if key != "dawa":
                    figs.append(
                        Figure(
                            f"dawa_vs/{band}/{key}",
                            reg["dawa"] / r,
                            "DAWA's regret / its",
                            "informative (< 1: DAWA ahead)",
                            None,
                            f"DAWA {reg['dawa']:.3g}, {key} {r:.3g}",
                        )
                    )
    small = table.get("small", {})
    if "dawa" in small:
        best = min(small, key=small.get)
        figs.append(
            Figure(
                "finding/dawa_best_at_small_scale",
                small["dawa"],
                "DAWA's average regret at 10^3-10^4",
                "informative: DPBench found DAWA among the best at small scale",
                None,
                f"best at small scale: {best} ({small[best]:.3g}); ranking: "
                + ", ".join(f"{k} {v:.2f}" for k, v in small.items()),
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
    progress("average regret (DPComp):\n" + markdown_table(table))
    figs = figures(res, table, note)
    figs.append(Figure("dpbench_bench_wall_s", time.perf_counter() - t0, "s", "informative", None, "whole suite"))
    return figs


def markdown_table(table: dict) -> str:
    """The regret table as Markdown (BENCHMARKS.md): a row per method, a column per band."""
    bands = [b for b in ("small", "large", "all") if b in table]
    rows = ["| method | " + " | ".join(f"avg regret, {b}" for b in bands) + " |", "|---" * (len(bands) + 1) + "|"]
    for key in sorted(table[bands[0]], key=table[bands[0]].get):
        rows.append(f"| {key} | " + " | ".join(f"{table[b].get(key, float('nan')):.2f}" for b in bands) + " |")
    return "\n".join(rows)
