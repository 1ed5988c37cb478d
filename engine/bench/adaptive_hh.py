"""Benchmark of the distributed-DP adaptive hierarchical histograms (Bagdasaryan et
al. 2022): the shape of Table 1 (accuracy and communication of every baseline),
Table 3's interactive variants, dropout, and speed.

``python -m engine bench adaptive_hh [--quick] [--json]``

Protocol (as Section 6): epsilon = 1, S_max = 10,000, 100,000 sampled users
(also 10,000), a 1024 x 1024 domain, MSE over all pixels of normalised maps
(``engine.metrics.mse``), medians over seeds. The ground truth is the
*population* map, as in the paper (its truth is the full image, its users a
sample): for the synthetic cities, the generator's exact intensity raster (an
infinite population; the domain is the city's square, aligned with the raster);
for SF cabs (``../shared/data/sf_cabs_pickups.npy``, skipped when absent), all
217,438 pick-ups, of which 100,000 are sampled. "Non-private" is the paper's
oracle: the quadtree level with the lowest error against the truth (and the
cross-validated choice, which needs no truth, for reference). Hierarchical
one-hot is shown both with the oracle level (the paper's evaluation) and with
the DP threshold selection. Table 3's "no noise" and "fixed epsilon" interactive
rows are shown with their final map and, as the paper scores them (its "no noise"
row equals the non-private baseline), with their best sub-query against the truth.

"Calibrated" runs of the adaptive algorithm pick (c, k) by MSE on a held-out city
(another seed, never evaluated) among a small grid, as the paper suggests (Section 5.4, "c can be estimated on
similar inputs (e.g. maps of other cities)").
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

from ..mechanisms.federated_hh import readings
from ..mechanisms.federated_hh.baselines import cms_level_estimates
from ..mechanisms.federated_hh.mechanism import level_density
from ..mechanisms.federated_hh.readings import level_counts
from . import SF_CABS_PATH, Figure, median_time

EPS = 1.0
S_MAX = 10_000
DEPTH = 10
SF_BBOX = (-122.50764, 37.70794, -122.35978, 37.81944)  # lon_min, lat_min, lon_max, lat_max (data/README.md)
CALIBRATION_GRID = [(c, k) for c in (0.1, 0.2, 0.3) for k in (2.0, 8.0, 16.0)]


def _run(key, data, domain, seed, eps=EPS, **params):
    from ..mechanisms import RunContext, get

    cls = get(key)
    return cls().run(data, domain, eps, cls.schema().resolve(params), RunContext(np.random.default_rng(seed)))


def _mse(truth, density) -> float:
    from ..metrics import mse

    return mse(truth, density)


def _synthetic_case(preset: str, n: int, seed: int):
    from ..core.grid import Domain
    from ..data.synthetic import generate, intensity

    ds = generate(preset, n=n, seed=seed)
    side = float(ds.meta.extra["side_m"])
    dom = Domain(-side / 2, -side / 2, side, DEPTH)
    truth = np.asarray(intensity(preset, seed), dtype=np.float64)
    if truth.shape != (dom.n, dom.n):  # a generator raster of another size: bin to the domain
        f = truth.shape[0] // dom.n
        truth = truth.reshape(dom.n, f, dom.n, f).sum(axis=(1, 3))
    return ds, dom, truth


def _sf_population():
    from ..data import make_dataset
    from ..data.dataset import DatasetMeta

    arr = np.load(SF_CABS_PATH, allow_pickle=False)
    meta = DatasetMeta(
        name="SF cab pick-ups",
        source="file:sf_cabs_pickups.npy",
        citation="Piorkowski et al., CRAWDAD epfl/mobility (via szeighami/SNH)",
        bbox=SF_BBOX,
    )
    pop = make_dataset(arr[:, 1], arr[:, 0], meta)
    dom = pop.public_domain(DEPTH)
    pop = pop.in_domain(dom)
    return pop, dom, pop.true_histogram(dom)


def _oracle_level(truth, data, dom, seed) -> tuple[float, int]:
    errs = [_mse(truth, _run("nonprivate_level", data, dom, seed, level=lv).density) for lv in range(2, DEPTH + 1)]
    i = int(np.argmin(errs))
    return errs[i], i + 2


def _hier_oracle(truth, level_counts: dict, D) -> float:
    """The paper's evaluation of the non-interactive hierarchies: the best single
    level against the truth."""
    from ..core.grid import morton_of_pixels

    best = math.inf
    for lv, counts in level_counts.items():
        block = 4 ** (D - lv)
        dens = counts[morton_of_pixels(D) >> (2 * (D - lv))] / block
        best = min(best, _mse(truth, dens))
    return best


# rows scored a second way besides the release's map: "level oracle" (the best single level of a hierarchy
# against the truth, as the paper scores the non-interactive ones), "sketch oracle" (the same from a count-min
# sketch's estimates), "best sub-query" (Table 3 scores the interactive rows at their best sub-query)
LEVEL_ORACLE, SKETCH_ORACLE, BEST_SUBQUERY = "level oracle", "sketch oracle", "best sub-query"


def _methods(calibrated: dict | None):
    """(label, key, params, second scoring or None) of the compared configurations."""
    m = [
        ("Ours (scheduled eps, adaptive T)", "adaptive_hh", {}, None),
        ("Ours, Eq. 7 as printed", "adaptive_hh", {"schedule": "paper"}, None),
        ("Flat one-hot", "flat_onehot", {}, None),
        ("Hierarchical one-hot (DP threshold)", "hierarchical_onehot", {}, LEVEL_ORACLE),
        ("CM-sketch hierarchical", "cms_hierarchical", {}, SKETCH_ORACLE),
        ("Adaptive grid (Polya)", "ag_polya", {}, None),
        ("Fixed eps, non-adaptive (T=10)", "hh_fixed_eps", {}, BEST_SUBQUERY),
        ("Scheduled eps, non-adaptive (T=10)", "hh_scheduled_fixed_t", {}, None),
        ("No noise interactive (T=10)", "hh_interactive_nonprivate", {}, BEST_SUBQUERY),
        ("Local DP (k-RR, 64x64)", "ldp_grid", {}, None),
    ]
    if calibrated:
        m.insert(1, ("Ours, calibrated c,k", "adaptive_hh", dict(calibrated), None))
    return m


def _calibrate(progress) -> dict:
    """Pick (c, k) by MSE on a held-out synthetic city (a seed never evaluated),
    without a communication budget: shows what tuning buys and what it costs."""
    ds, dom, truth = _synthetic_case("polycentric", 100_000, 1000)
    best = None
    for c, k in CALIBRATION_GRID:
        rel = _run("adaptive_hh", ds, dom, 1000, c=c, k=k)
        e = _mse(truth, rel.density)
        if best is None or e < best[0]:
            best = (e, c, k)
    progress(f"calibration on a held-out city: c = {best[1]}, k = {best[2]}")
    return {"c": best[1], "k": best[2]}


def _evaluate(cases, methods, progress, name):
    """cases: list of (data, domain, truth, seed). Returns {label: {"mse": [...], "comm": [...]}}."""
    out: dict[str, dict[str, list]] = {}

    def add(label, mse, comm):
        d = out.setdefault(label, {"mse": [], "comm": []})
        d["mse"].append(mse)
        d["comm"].append(comm)

    for i, (data, dom, truth, seed) in enumerate(cases):
        progress(f"{name}: case {i + 1}/{len(cases)}")
        e, lv = _oracle_level(truth, data, dom, seed)
        add("Non-private (oracle level)", e, 2)
        out["Non-private (oracle level)"].setdefault("level", []).append(lv)
        rel = _run("nonprivate_level", data, dom, seed)
        add("Non-private (cross-validated level)", _mse(truth, rel.density), 2)
        for label, key, params, second in methods:
            rel = _run(key, data, dom, seed, **params)
            add(label, _mse(truth, rel.density), rel.communication.elements_per_client)
            if second == LEVEL_ORACLE:
                add(
                    "Hierarchical one-hot (oracle level)",
                    _hier_oracle(truth, level_counts(rel), dom.depth),
                    rel.communication.elements_per_client,
                )
            if second == BEST_SUBQUERY:
                # Table 3 scores these rows like the non-interactive ones: the best sub-query's map against
                # the truth (its "no noise" row equals the non-private baseline, 7.75 at 10k users)
                best = min(_mse(truth, level_density(rel, q)) for q in range(len(rel.levels)))
                add(f"{label}, best sub-query", best, rel.communication.elements_per_client)
            if second == SKETCH_ORACLE:
                levels = {lv: cms_level_estimates(rel, lv) for lv in range(2, dom.depth + 1)}
                add(
                    "CM-sketch (oracle level)",
                    _hier_oracle(truth, levels, dom.depth),
                    rel.communication.elements_per_client,
                )
        # Table 1's third column: 10% dropout with a DP shard of 9,000
        rel = _run("adaptive_hh", data, dom, seed, dropout=0.1, dp_shard=9000)
        add("Ours, 10% dropout, DP shard 9,000", _mse(truth, rel.density), rel.communication.elements_per_client)
        e90, _ = _oracle_level(truth, data.subset(_survivors(len(data), seed)), dom, seed)
        add("Non-private, 90% of the users (oracle level)", e90, 2)
    return out


def _survivors(n, seed):
    rng = np.random.default_rng([seed, 77])
    return np.sort(rng.choice(n, int(round(0.9 * n)), replace=False))


def _median(v):
    return float(statistics.median(v))


# Why the ratio to the non-private map is informative on the sharp cities and SF cabs (BENCHMARKS.md):
# the schedule's budget stops the tree near level 5, as the paper's own 100k run did, while these maps
# have detail at level 7 (SF cabs: the sample is 46% of the population that defines the truth). The
# ratio is judged on the textured city (``_smoothness``), the kind of map the paper's Table 1 used.
SHARP_NOTE = "informative: detail below the tree's final cells (target on the textured city)"


def _table_figures(tag: str, res: dict, with_targets: bool, synthetic: bool = True) -> list[Figure]:
    """``with_targets``: communication and dropout are judged; ``synthetic``: flat one-hot >= 2x
    worse is judged too (on SF cabs it is informative)."""
    figs = []
    base = _median(res["Non-private (oracle level)"]["mse"])
    for label, d in res.items():
        figs.append(
            Figure(
                f"{tag} | {label} MSE",
                _median(d["mse"]),
                "MSE",
                "informative",
                None,
                note=f"{_median(d['mse']) / base:.3g} x non-private; comm {_median(d['comm']):,.0f} elements/client",
                extra={"ratio_to_nonprivate": _median(d["mse"]) / base, "communication": _median(d["comm"])},
            )
        )
    ours = res["Ours (scheduled eps, adaptive T)"]
    r = _median(ours["mse"]) / base
    comm = _median(ours["comm"])
    flat = _median(res["Flat one-hot"]["mse"]) / _median(ours["mse"])
    drop = _median(res["Ours, 10% dropout, DP shard 9,000"]["mse"]) / _median(ours["mse"])
    tp = (lambda ok: bool(ok)) if with_targets else (lambda ok: None)
    flat_judged = with_targets and synthetic
    figs += [
        Figure(f"{tag} | ours / non-private MSE", r, "x", "informative", None, note=SHARP_NOTE),
        Figure(f"{tag} | ours communication per client", comm, "elements", "< 2000", tp(comm < 2000)),
        Figure(
            f"{tag} | flat / ours MSE",
            flat,
            "x",
            ">= 2" if flat_judged else "informative",
            bool(flat >= 2) if flat_judged else None,
        ),
        Figure(f"{tag} | ours 10% dropout (DP shard 9,000) / no dropout MSE", drop, "x", "<= 1.15", tp(drop <= 1.15)),
    ]
    if "Ours, calibrated c,k" in res:
        cal = res["Ours, calibrated c,k"]
        rc = _median(cal["mse"]) / base
        figs.append(
            Figure(
                f"{tag} | ours (calibrated c,k) / non-private MSE",
                rc,
                "x",
                "informative",
                None,
                note=f"c, k tuned on a held-out city: {cal.get('params', '')}; comm {_median(cal['comm']):,.0f} elements/client",
            )
        )
    return figs


def _speed(quick: bool, progress) -> list[Figure]:
    from ..core.grid import Domain
    from ..data.synthetic import generate

    progress("speed: generating 1,000,000 users")
    ds = generate("polycentric", n=1_000_000, seed=0)
    side = float(ds.meta.extra["side_m"])
    dom = Domain(-side / 2, -side / 2, side, DEPTH)
    out = {}

    def once():
        out["rel"] = _run("adaptive_hh", ds, dom, 0, max_levels=10)

    t, _ = median_time(once, repeats=2 if quick else 3, warmup=1)
    rel = out["rel"]
    figs = [
        Figure(
            "speed | 1M users, full adaptive run (1024x1024, up to 10 levels)",
            t,
            "s",
            "< 5 s",
            t < 5.0,
            note=f"{readings.subqueries(rel)} sub-queries, {readings.final_cells(rel)} final cells",
        )
    ]

    def clipped():
        _run("adaptive_hh", ds, dom, 0, clip_bits=24, schedule="paper")

    t2, _ = median_time(clipped, repeats=1, warmup=0)
    figs.append(
        Figure(
            "speed | 1M users, Eq. 7 as printed + 24-bit clipping (per-shard noise)",
            t2,
            "s",
            "informative",
            None,
            note="deeper tree and one noise draw per shard and coordinate",
        )
    )
    return figs


def _dropout_effect(progress) -> list[Figure]:
    """More clients drop than planned: effective epsilon and noise (Section 4, Appendix A.3)."""
    ds, dom, truth = _synthetic_case("polycentric", 100_000, 5)
    figs = []
    for drop, plan in ((0.1, 0.0), (0.1, 0.1), (0.2, 0.1)):
        rel = _run("adaptive_hh", ds, dom, 5, dropout=drop, planned_dropout=plan)
        lv = readings.last_subquery(rel)
        eff = readings.effective_epsilon(rel)
        figs.append(
            Figure(
                f"dropout {drop:.0%}, planned {plan:.0%} | effective epsilon",
                eff,
                "epsilon",
                "= 1 when planned >= actual",
                bool(eff <= 1 + 1e-9) if plan >= drop else None,
                note=(
                    f"last sub-query noise std {lv['noise_std']:.3g} users (alpha_total {lv['noise_alpha_total']:.3g} "
                    f"full shards); MSE {_mse(truth, rel.density):.3g}"
                ),
            )
        )
    return figs


TEXTURED_TARGET = 1.15  # the paper's own Table 1 ratio at 100k users is 6.99 / 6.19 = 1.13


def _cms_over_epsilon(quick: bool, progress) -> list[Figure]:
    """The count-min baseline on a street grid with a few very hot venues
    (engine/bench/unseen.py; 20k users, 256 x 256), MSE as a ratio to a uniform map at
    eps 1, 3, 10 (medians over seeds), with the default estimator and the minimum over the rows ('min')."""
    from ..mechanisms import RunContext, get
    from .unseen import street_grid_city

    progress("count-min sketch over epsilon: street grid with hot venues")
    data = street_grid_city(20_000, seed=1)
    dom = data.public_domain(8)
    truth = data.true_histogram(dom)
    uni = get("uniform")
    u = _mse(truth, uni().run(data, dom, 10.0, uni.schema().resolve({}), RunContext(np.random.default_rng(0))).density)
    cms = get("cms_hierarchical")
    seeds = 3 if quick else 7
    out = {}
    for est in ("median", "min"):
        for eps in (1.0, 3.0, 10.0):
            p = cms.schema().resolve({"estimator": est})
            e = [
                _mse(truth, cms().run(data, dom, eps, p, RunContext(np.random.default_rng(s))).density)
                for s in range(seeds)
            ]
            out[(est, eps)] = _median(e) / u
    ok = out[("median", 3.0)] <= 1.25 * out[("median", 1.0)] and out[("median", 10.0)] <= 1.25 * out[("median", 3.0)]
    note = "; ".join(
        f"{est}: " + ", ".join(f"{out[(est, e)]:.3g}" for e in (1.0, 3.0, 10.0)) for est in ("median", "min")
    )
    return [
        Figure(
            "CM-sketch on a hot-venue street grid: MSE / uniform at eps 10",
            out[("median", 10.0)],
            "x uniform",
            "non-increasing in eps (1, 3, 10; 25% tolerance)",
            ok,
            f"MSE / uniform at eps 1, 3, 10 (medians of {seeds} seeds) by estimator: {note}",
        )
    ]


def _smoothness(quick: bool, progress) -> list[Figure]:
    """The gap to the non-private baseline depends on how much detail
    the city has below the tree's final cell size. 100,000 users are drawn from the
    polycentric city's intensity (a) smoothed with a Gaussian of sigma pixels, so the
    detail the tree cannot reach disappears, or (b) times independent Gamma(shape, 1/shape)
    factors per pixel (mean 1), pixel-scale texture that no level resolves and that every
    method pays for alike, as in a rendered heatmap such as the paper's Manhattan map
    (its non-private error falls only 1.25x from 10k to 100k users). The Gamma shape 1
    city is the target of the adaptive algorithm's accuracy (<= 1.15x, Table 1's own 1.13x);
    the other rows are informative."""
    from scipy.ndimage import gaussian_filter

    from ..data.dataset import Dataset

    base, dom, lam0 = _synthetic_case("polycentric", 10, 0)
    side = dom.side
    variants = [
        (f"smoothed polycentric city (sigma {sm} px)", gaussian_filter(lam0, sm) if sm else lam0, False)
        for sm in (0, 8, 32)
    ]
    for shape in (4.0, 1.0):
        texture = np.random.default_rng([int(shape), 5]).gamma(shape, 1.0 / shape, lam0.shape)
        variants.append((f"textured polycentric city (Gamma shape {shape:g} per pixel)", lam0 * texture, shape == 1))
    figs = []
    for name, lam, judged in variants:
        lam = lam / lam.sum()
        ratios = []
        for seed in range(1 if quick else 3):
            progress(f"{name}: seed {seed}")
            rng = np.random.default_rng([seed, 31])
            cells = rng.choice(lam.size, 100_000, p=lam.ravel())
            iy, ix = np.divmod(cells, dom.n)
            u = rng.random((cells.size, 2))
            xy = np.column_stack([(ix + u[:, 0]) * side / dom.n - side / 2, (iy + u[:, 1]) * side / dom.n - side / 2])
            ds = Dataset(xy, np.zeros_like(xy), base.crs, base.meta)
            npo, _ = _oracle_level(lam, ds, dom, seed)
            ratios.append(_mse(lam, _run("adaptive_hh", ds, dom, seed).density) / npo)
        r = _median(ratios)
        figs.append(
            Figure(
                f"{name} | ours / non-private MSE",
                r,
                "x",
                f"<= {TEXTURED_TARGET:g} (Table 1: 1.13)" if judged else "informative",
                bool(r <= TEXTURED_TARGET) if judged else None,
                note="100k users, per seed " + ", ".join(f"{x:.3g}" for x in ratios) + "; the ratio falls as detail "
                "below the tree's cells disappears (smoothing) or as an unresolvable pixel-scale floor is added "
                "(texture)",
            )
        )
    return figs


def run(quick: bool = False, progress=print) -> list[Figure]:
    t0 = time.perf_counter()
    seeds = range(2) if quick else range(5)
    presets = ("polycentric", "coastal") if quick else ("polycentric", "monocentric", "coastal", "sprawl")
    figures: list[Figure] = []
    calibrated = _calibrate(progress)
    methods = _methods(calibrated)

    pooled: dict[str, dict[str, list]] = {}
    for n in (100_000,) if quick else (100_000, 10_000):
        for preset in presets:
            cases = []
            for s in seeds:
                ds, dom, truth = _synthetic_case(preset, n, s)
                cases.append((ds, dom, truth, s))
            res = _evaluate(cases, methods, progress, f"{preset} {n:,}")
            res["Ours, calibrated c,k"]["params"] = calibrated
            figures += _table_figures(f"{preset}, {n // 1000}k users", res, with_targets=n == 100_000)
            if n == 100_000:
                for label, d in res.items():
                    p = pooled.setdefault(label, {"mse": [], "comm": []})
                    # pool ratios to the case's own non-private error so cities weigh equally
                    base = res["Non-private (oracle level)"]["mse"]
                    p["mse"] += [m / b for m, b in zip(d["mse"], base)]
                    p["comm"] += d["comm"]
    if pooled:
        pooled["Ours, calibrated c,k"]["params"] = calibrated
        figures += _table_figures("all synthetic cities (ratios), 100k users", pooled, with_targets=True)

    if SF_CABS_PATH.exists():
        pop, dom, truth = _sf_population()
        cases = [(pop.sample_users(100_000, np.random.default_rng([s, 9])), dom, truth, s) for s in seeds]
        res = _evaluate(cases, methods, progress, "SF cabs 100k")
        res["Ours, calibrated c,k"]["params"] = calibrated
        figs = _table_figures("SF cabs, 100k of 217k users", res, with_targets=True, synthetic=False)
        lv = res["Non-private (oracle level)"].get("level", [])
        for f in figs:
            if f.name.endswith("ours / non-private MSE") or f.name.endswith("flat / ours MSE"):
                f.note = (
                    f"informative: the sample is 46% of the population that defines the truth, so the non-private "
                    f"map at level {statistics.median(lv) if lv else '?'} nearly reproduces it and every private "
                    "method is far from it"
                )
        figures += figs
    else:
        progress(f"SF cabs data not found at {SF_CABS_PATH}: skipping the SF figures")
        figures.append(Figure("SF cabs", None, "", "data present", None, note=f"skipped: {SF_CABS_PATH} not found"))

    figures += _cms_over_epsilon(quick, progress)
    figures += _smoothness(quick, progress)
    figures += _dropout_effect(progress)
    figures += _speed(quick, progress)
    figures.append(Figure("benchmark wall time", time.perf_counter() - t0, "s", "informative", None))
    return figures
