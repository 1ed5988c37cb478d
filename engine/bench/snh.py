"""Benchmark of SNH (Zeighami et al., PVLDB 2022): ``python -m engine bench snh [--quick]``.

Figures:

* ``sf_cabs_reference_rel_error``: the reference code's sample run on
  ``../shared/data/sf_cabs_pickups.npy`` (skipped with a message when absent): all
  217,438 pick-ups, epsilon 0.05, cell width 0.293% of the side (the reference's
  ``rho = 0.0293`` of a 10-wide domain), k = 8 sizes over [0.2%, 0.8%], the first network
  (sizes 0.2%-0.275%) trained with the paper's architecture (depth 20, width 80, Adam
  lr 1e-3) for 1,000 epochs (10 with --quick), 5,000 test squares centred on random
  data points, psi = 0.1% n. The square domain is the dataset's published bounding box
  (data/README.md), as the reference normalises to the data's extent; it is recorded as
  side information. No public SF dataset is available offline, so the workload is taken
  from the noisy grid (``workload = noisy``; the reference used Gowalla SF). Informative:
  the reference's 0.074 needs its public workload. The learning curve (every
  100 epochs) and IDENTITY on the same grid are in ``extra``.
* ``ratio_snh_best_baseline[<dataset>, <centres>]``: at epsilon 0.2 and n = 100,000, query
  sides 0.5%-2% of the domain side, SNH (defaults: fast preset, ParamSelect rho, public
  proxy for synthetic cities / no public data for SF) against the best of UG, AG and
  PrivTree, medians over seeds of the mean relative error (psi = 0.1% n) of 2,000 queries
  centred uniformly at random (``unif``, the paper's Section 6.1.3) or on random data
  points (``data``, the reference code); true answers are exact point counts. Target
  <= 1.0 with data-point centres on the synthetic cities; uniform centres and
  SF cabs are informative. Baselines release on a 1024 x 1024
  grid (20 m cells at 20 km) so their output resolution adds no error.
  IDENTITY@ParamSelect is run alongside.
* ``ratio_snh_best_baseline[<dataset>, <centres>][sides 0.125-0.5%]`` (informative): the same
  at the paper's query sizes (25-100 m on its 20 km regions), polycentric and sprawl, 2 seeds.
* ``identity_paramselect_wins[<dataset>]``: epsilon in {0.05, 0.2, 0.8, 3.2} at
  n = 100,000: the number of epsilons where IDENTITY@ParamSelect beats SNH (uniform
  centres; informative: the paper says it wins for large eps x n). Errors in ``extra``.
* ``paramselect_within_2x_of_published``: ParamSelect (our table, synthetic cities only)
  predicted for the 60 labelled rows of ``../shared/data/snh_paramselect`` (their n,
  epsilon and Gowalla entropy; query range 0.2%-0.8%, the reference's), fraction within a
  factor 2 of the published best rho (label / 10). Informative: our table is trained on
  synthetic cities, not Gowalla, and neither the paper nor the data support a target for this
  fraction. Spearman correlation and median
  ratio in ``extra``.
* Speed on this CPU: ``snh_fast_run_s`` (the default interactive preset, data collection
  to density grid, polycentric n = 100,000 at 256 x 256, median of the comparison runs;
  < 60 s), ``snh_single_query_ms`` (one rectangle through ``Release.answer_range`` after
  warm-up, median of 300; < 1 ms), ``snh_model_mb`` for the fast and paper presets
  (< 10 MB). The machine's load average is in every speed note.

DAWA is left out: a faithful DAWA needs its L1 least-cost partitioning and the greedy
workload-aware (GreedyH) matrix mechanism, which the engine does not have.
"""

from __future__ import annotations

import csv
import os
import statistics
import time

import numpy as np

from ..mechanisms.snh import readings as snh_readings
from ..metrics import snh_relative_error
from . import SF_CABS_PATH, SHARED_DATA, Figure

PS_DIR = SHARED_DATA / "snh_paramselect"
SF_BBOX = (-122.50764, 37.70794, -122.35978, 37.81944)  # published bounding box (data/README.md)
BASELINES = ("ug", "ag", "privtree")
CITIES = ("polycentric", "monocentric", "sprawl", "coastal")
# SNH / best of UG, AG, PrivTree with data-point centres on the synthetic cities (measured
# 0.73-0.82). No tighter target, and the uniform-centre rows are informative only: there the noisy grid
# SNH learns from is already at the baselines' level, and IDENTITY@ParamSelect on the same grid is within
# +-4% of SNH (BENCHMARKS.md).
RATIO_TARGET = 1.0


def _load() -> str:
    try:
        a, b, c = os.getloadavg()
        return f"load average {a:.1f}, {b:.1f}, {c:.1f} on {os.cpu_count() or 1} cores"
    except OSError:  # pragma: no cover
        return "load unknown"


def _exact(ds, centres, sides):
    from scipy.spatial import cKDTree

    return cKDTree(ds.xy).query_ball_point(centres, sides / 2, p=np.inf, return_length=True).astype(np.float64)


def query_sets(ds, dom, rng, lo, hi, count=2000):
    """Squares with sides uniform in [lo, hi] (fractions of the side), centres uniform in the
    domain (``unif``) or on random data points (``data``), with exact true counts."""
    out = {}
    for kind in ("unif", "data"):
        sides = rng.uniform(lo, hi, count) * dom.side
        if kind == "data":
            c = ds.xy[rng.integers(0, len(ds), count)]
        else:
            c = np.column_stack(
                [
                    rng.uniform(dom.x0 + sides / 2, dom.x0 + dom.side - sides / 2),
                    rng.uniform(dom.y0 + sides / 2, dom.y0 + dom.side - sides / 2),
                ]
            )
        rects = np.column_stack([c - sides[:, None] / 2, c + sides[:, None] / 2])
        out[kind] = (rects, _exact(ds, c, sides))
    return out


def rel_error(answers, true, n) -> float:
    """The paper's relative error, psi = 0.1% n (engine.metrics.snh_relative_error)."""
    return snh_relative_error(true, answers, n)


def _dataset(name: str, n: int, seed: int):
    """(dataset clipped to its public domain at depth 10, domain)."""
    if name == "sf_cabs":
        from ..data.online import load_sf_cabs

        full = load_sf_cabs(path=str(SF_CABS_PATH))
        dom = full.public_domain(10)
        full = full.in_domain(dom)
        return full.sample_users(n, np.random.default_rng([seed, 7])), dom
    from ..data.synthetic import generate

    ds = generate(name, n, 0)  # the benchmark city is seed 0; ParamSelect trained on seeds 101+
    dom = ds.public_domain(10)
    return ds.in_domain(dom), dom


def _run(mech: str, ds, dom, eps: float, seed: int, params: dict | None = None):
    from ..mechanisms import RunContext, get

    cls = get(mech)
    p = cls.schema().resolve(params or {})
    t = time.perf_counter()
    rel = cls().run(ds, dom, eps, p, RunContext(rng=np.random.default_rng([seed, sum(map(ord, mech))])))
    return rel, time.perf_counter() - t


# ------------------------------------------------------------------ comparisons
def comparison_figures(
    quick: bool, progress, lo: float = 0.005, hi: float = 0.02, datasets=None, seeds=None
) -> tuple[list[Figure], list[float]]:
    """SNH against the best of UG, AG and PrivTree for query sides in ``[lo, hi]`` (fractions
    of the side; SNH and IDENTITY@ParamSelect are told the range). Target: ratio
    <= 1.0 in the band 0.5-2% with data-point centres on the synthetic cities; uniform
    centres, SF cabs and other bands are informative (BENCHMARKS.md says why)."""
    band_judged = (lo, hi) == (0.005, 0.02)
    if datasets is None:
        datasets = ["polycentric"] if quick else [*CITIES, "sf_cabs"]
    datasets = list(datasets)
    if "sf_cabs" in datasets and not SF_CABS_PATH.is_file():
        datasets.remove("sf_cabs")
        progress(f"{SF_CABS_PATH} absent: SF cabs comparisons skipped")
    if seeds is None:
        seeds = (0,) if quick else (0, 1, 2)
    eps, n = 0.2, 100_000
    told = {"query_min_pct": 100 * lo, "query_max_pct": 100 * hi}
    band = f"sides {100 * lo:g}-{100 * hi:g}%"
    figs, fast_times = [], []
    for name in datasets:
        errs: dict[str, dict[str, list[float]]] = {}
        rhos = []
        for seed in seeds:
            ds, dom = _dataset(name, n, seed)
            qs = query_sets(ds, dom, np.random.default_rng([seed, 3]), lo, hi)
            progress(f"{name} seed {seed} ({band}): snh")
            rel, dt = _run("snh", ds, dom, eps, seed, told)
            rhos.append(snh_readings.cell_width_m(rel))
            if name != "sf_cabs" and band_judged:
                fast_times.append(dt)
            releases = [("snh", rel)]
            # SNH's grid alone is told the query sizes as SNH is; the baselines take none
            for mech, told_sizes in (("identity_paramselect", told), *((b, None) for b in BASELINES)):
                progress(f"{name} seed {seed} ({band}): {mech}")
                releases.append((mech, _run(mech, ds, dom, eps, seed, told_sizes)[0]))
            for mech, rel in releases:
                for kind, (rects, true) in qs.items():
                    errs.setdefault(mech, {}).setdefault(kind, []).append(
                        rel_error(rel.answer_range(rects), true, len(ds))
                    )
        med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in errs.items()}
        for kind in ("unif", "data"):
            best = min(BASELINES, key=lambda m: med[m][kind])
            ratio = med["snh"][kind] / med[best][kind]
            judged = band_judged and kind == "data" and name in CITIES
            figs.append(
                Figure(
                    f"ratio_snh_best_baseline[{name},{kind}]" + ("" if band_judged else f"[{band}]"),
                    ratio,
                    "x",
                    f"<= {RATIO_TARGET:g}" if judged else "informative",
                    bool(ratio <= RATIO_TARGET) if judged else None,
                    f"SNH {med['snh'][kind]:.4f} vs {best} {med[best][kind]:.4f}; IDENTITY@PS "
                    f"{med['identity_paramselect'][kind]:.4f}; eps 0.2, n 100k, {band}, "
                    f"{'uniform' if kind == 'unif' else 'data'} centres, median of {len(seeds)} seed(s)",
                    extra={"median_rel_error": {m: med[m][kind] for m in med}, "snh_rho_m": rhos},
                )
            )
    return figs, fast_times


def identity_sweep_figures(quick: bool, progress) -> list[Figure]:
    datasets = ["polycentric"] if quick else ["polycentric", "sf_cabs"]
    if "sf_cabs" in datasets and not SF_CABS_PATH.is_file():
        datasets.remove("sf_cabs")
    epss = (3.2,) if quick else (0.05, 0.2, 0.8, 3.2)
    figs = []
    for name in datasets:
        ds, dom = _dataset(name, 100_000, 0)
        qs = query_sets(ds, dom, np.random.default_rng(11), 0.005, 0.02)
        rows = {}
        for eps in epss:
            row = {}
            for mech in ("snh", "identity_paramselect"):
                progress(f"{name} eps {eps}: {mech}")
                rel, _ = _run(mech, ds, dom, eps, 0)
                row[mech] = {k: rel_error(rel.answer_range(r), t, len(ds)) for k, (r, t) in qs.items()}
            rows[eps] = row
        wins = [e for e, r in rows.items() if r["identity_paramselect"]["unif"] < r["snh"]["unif"]]
        wins_data = [e for e, r in rows.items() if r["identity_paramselect"]["data"] < r["snh"]["data"]]
        figs.append(
            Figure(
                f"identity_paramselect_wins[{name}]",
                float(len(wins)),
                f"of {len(epss)} eps",
                "informative",
                None,
                f"IDENTITY@ParamSelect beats SNH at eps {wins or 'none'} with uniform centres, at eps "
                f"{wins_data or 'none'} with data-point centres; n 100k, sides 0.5-2%",
                extra={"errors": {str(e): r for e, r in rows.items()}},
            )
        )
    return figs


# ------------------------------------------------------------------ ParamSelect
def paramselect_figures(progress) -> list[Figure]:
    from ..mechanisms.snh.paramselect import predict_rho

    labels = PS_DIR / "best_rho_GW_train_test.csv"
    feats = PS_DIR / "city_features_fromGW.csv"
    if not (labels.is_file() and feats.is_file()):
        return [Figure("paramselect_within_2x_of_published", None, "fraction", "informative", None, f"{PS_DIR} absent")]
    progress("ParamSelect vs the published labels")
    with feats.open() as f:
        ent = {r["city"]: float(r["entropy_512"]) for r in csv.DictReader(f)}
    pred, true, names = [], [], []
    with labels.open() as f:
        for r in csv.DictReader(f):
            if not r["best"] or r["city"] not in ent:
                continue
            rho, _ = predict_rho(float(r["n"]), float(r["eps"]), 0.002, 0.008, ent[r["city"]])
            pred.append(rho)
            true.append(float(r["best"]) / 10.0)  # published: units of a 10-wide domain
            names.append(f"{r['city']} n={r['n']} eps={r['eps']}")
    from scipy.stats import spearmanr

    pred, true = np.array(pred), np.array(true)
    ratio = pred / true
    within = float(np.mean((ratio <= 2) & (ratio >= 0.5)))
    rho_s = float(spearmanr(pred, true).statistic)
    return [
        Figure(
            "paramselect_within_2x_of_published",
            within,
            "fraction",
            "informative",
            None,
            f"{len(pred)} labelled rows; median predicted/published {np.median(ratio):.2f}; Spearman {rho_s:.2f}",
            extra={"rows": [{"row": s, "pred": float(p), "published": float(t)} for s, p, t in zip(names, pred, true)]},
        )
    ]


# ------------------------------------------------------------------ speed
def speed_figures(fast_times: list[float], progress, quick: bool = False) -> list[Figure]:
    from ..data.synthetic import generate
    from ..mechanisms import RunContext
    from ..mechanisms.snh.mechanism import SNH
    from ..mechanisms.snh.networks import NetConfig
    from ..mechanisms.snh.training import PRESETS, fit_snh

    figs = []
    load = _load()
    if fast_times:
        t = statistics.median(fast_times)
        figs.append(
            Figure(
                "snh_fast_run_s",
                t,
                "s",
                "< 60",
                t < 60,
                f"default preset (k=8, depth 4, width 64, <= 1,500 steps), polycentric n=100k eps=0.2, data "
                f"collection to density grid, median of {len(fast_times)} runs; {load}",
            )
        )
    progress("single-query latency")
    ds = generate("polycentric", 100_000, 0)
    dom = ds.public_domain(8)
    ds = ds.in_domain(dom)
    # --quick: the fast preset's networks, barely trained (the latency depends on their size only)
    short = {"preset": "custom", **PRESETS["fast"], "max_steps": 50} if quick else {}
    p = SNH.schema().resolve({"rho_m": 200.0, **short})
    fit = fit_snh(ds, dom, 0.2, p, RunContext(rng=np.random.default_rng(0)))
    model = fit["model"]
    rng = np.random.default_rng(1)
    rects = dom.random_square_queries(rng, 300, (0.005, 0.02))
    model(rects[:1])  # warm-up (compiles the batch function)
    times = []
    for r in rects:
        t0 = time.perf_counter()
        model(r[None, :])
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1000
    figs.append(Figure("snh_single_query_ms", ms, "ms", "< 1", ms < 1, f"median of 300 single rectangles; {load}"))
    mb_fast = model.nbytes / 1e6
    net = NetConfig(depth=20, width=80)
    sizes = [2] + [net.width] * (net.depth + 1) + [1]
    paper_bytes = 8 * 4 * sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    figs.append(Figure("snh_model_mb[fast]", mb_fast, "MB", "< 10", mb_fast < 10, "8 networks, float32"))
    figs.append(
        Figure(
            "snh_model_mb[paper]",
            paper_bytes / 1e6,
            "MB",
            "< 10",
            paper_bytes / 1e6 < 10,
            "8 networks of depth 20 x width 80, float32 (computed from the architecture)",
        )
    )
    return figs


# ------------------------------------------------------------------ the reference run
# informative: the reference trained where Gowalla SF check-ins are (its public workload), which is not
# available offline; with the noisy-grid workload the paper network stays above IDENTITY on its grid
REFERENCE_TARGET = "informative (reference code: 0.074; its public workload is not available)"


def reference_figure(quick: bool, progress) -> list[Figure]:
    name = "sf_cabs_reference_rel_error"
    if not SF_CABS_PATH.is_file():
        return [Figure(name, None, "", REFERENCE_TARGET, None, f"skipped: {SF_CABS_PATH} is absent")]
    from ..core.grid import Domain
    from ..data.online import load_sf_cabs
    from ..data.projection import bbox_to_local
    from ..mechanisms import RunContext
    from ..mechanisms.snh.answers import GridAnswerer
    from ..mechanisms.snh.mechanism import SNH
    from ..mechanisms.snh.training import fit_snh

    ds = load_sf_cabs(path=str(SF_CABS_PATH))
    dom = Domain.around(*bbox_to_local(SF_BBOX, ds.crs), 8)
    ds = ds.in_domain(dom)
    rng = np.random.default_rng(5)
    sides = rng.uniform(0.002, 0.00275, 5000) * dom.side
    c = ds.xy[rng.integers(0, len(ds), 5000)]
    rects = np.column_stack([c - sides[:, None] / 2, c + sides[:, None] / 2])
    true = _exact(ds, c, sides)
    epochs = 10 if quick else 1000
    params = SNH.schema().resolve(
        {
            "rho_m": 0.00293 * dom.side,
            "k": 8,
            "query_min_pct": 0.2,
            "query_max_pct": 0.8,
            "aux": "none",
            "workload": "noisy",
            "weight_floor": 0.0,  # the reference has no uniform share in its workload
            "preset": "custom",
            "depth": 20,
            "width": 80,
            "sin_scale": 1.0,
            "lr": 1e-3,
            "lr_decay": 1.0,
            "epochs": epochs,
            "batch_size": 16384,
            "patience": epochs,
            "max_steps": 0,
        }
    )
    curve = {}
    t0 = time.perf_counter()

    def on_epoch(e, model):
        curve[e] = rel_error(model(rects), true, len(ds))
        progress(f"SF reference: epoch {e}, relative error {curve[e]:.4f} ({time.perf_counter() - t0:.0f} s)")

    fit = fit_snh(
        ds,
        dom,
        0.05,
        params,
        RunContext(rng=np.random.default_rng(0)),
        sizes_subset=[0],
        on_epoch=on_epoch,
        every=max(1, epochs // 10),
    )
    err = rel_error(fit["model"](rects), true, len(ds))
    ident = rel_error(GridAnswerer(fit["noisy"], fit["grid"])(rects), true, len(ds))
    d = fit["diagnostics"]
    return [
        Figure(
            name,
            err,
            "rel. error",
            REFERENCE_TARGET,
            None,
            f"{epochs} epochs of the first network (depth 20, width 80, batch 16384), {d['training_seconds']:.0f} s; "
            f"IDENTITY on the same grid {ident:.4f}; n={len(ds):,}, {d['grid_cells_per_side']} cells per side; "
            f"{_load()}" + ("; --quick: not the reference's 1,000 epochs" if quick else ""),
            extra={"curve": curve, "identity_same_grid": ident, "rho_m": d["rho_m"], "domain_side_m": dom.side},
        )
    ]


def run(quick: bool = False, progress=print) -> list[Figure]:
    figs: list[Figure] = []
    figs += paramselect_figures(progress)
    comp, fast_times = comparison_figures(quick, progress)
    figs += comp
    if not quick:  # the paper's own query sizes (25-100 m on its 20 km regions, Section 6.1.3): informative
        figs += comparison_figures(quick, progress, 0.00125, 0.005, ["polycentric", "sprawl"], (0, 1))[0]
    figs += speed_figures(fast_times, progress, quick)
    figs += identity_sweep_figures(quick, progress)
    figs += reference_figure(quick, progress)
    figs.append(
        Figure(
            "dawa",
            None,
            "",
            "optional",
            None,
            "left out: a faithful DAWA (L1 least-cost partition + GreedyH) is not implemented in the engine",
        )
    )
    return figs
