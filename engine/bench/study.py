"""The study planner (:mod:`engine.run.planning._study_plan`): what one budget over several releases saves, whether the releases
meet their targets, and how long a plan takes.

The study: three products of the synthetic polycentric city (20,000 people, a number stated as a public bound),
each over four mechanisms: a city map (64 x 64 cells, ±20 people in nine cells of ten), a district map released
monthly (16 x 16 cells, ±25, four times), and counts per H3 hexagon (resolution 7, ±12). Figures:

* ``study_plan_cpu_seconds``: CPU seconds of the whole plan (median of 3; 1 with ``--quick``); target ≤ 10 s
  on an idle two-core machine;
* ``study_saving_vs_even_split``: the ε an even split (every release the same ε) needs to meet every target,
  against the plan's least total: the share saved;
* ``study_saving_vs_each_alone``: planning each product alone with its first-listed mechanism (hierarchical
  histograms, PrivTree, Laplace over regions) against the study choosing across its list: the share saved;
* ``study_even_split_worst_ratio``: the plan's total split evenly: the worst product's margin / target (the
  plan's is at most 1);
* for each product, 100 seeded releases (20 with ``--quick``) at its planned ε on the real city: the 95 %
  quantile of the errors of its cells (or regions) / target (a closed form's margin is that quantile: ≤ 1.05),
  and the share of cells (regions) within the target.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import Figure

STUDY = """
[study]
dataset = "synthetic:polycentric"
data = {{ n = {users} }}
users = {users}
name = "benchmark study"
[[product]]
name = "city map"
kind = "map"
depth = 6
target = 20
mechanisms = ["hierarchical", "identity", "privtree", "hdmm"]
[[product]]
name = "district map, monthly"
kind = "map"
depth = 4
target = 25
repeat = 4
mechanisms = ["privtree", "identity", "hierarchical", "ug"]
[[product]]
name = "hexagons"
kind = "regions"
regions = "h3:7"
depth = 6
target = 12
mechanisms = ["laplace_regions", "identity", "hierarchical", "privtree"]
"""
USERS = 20_000


def _plan(text: str):
    from ..run import planning

    t = time.process_time()
    plan = planning.make_study_plan(planning.parse_study(text), seconds=600)
    return plan, time.process_time() - t


def _alone(study):
    """Each product planned alone with its first-listed mechanism (what planning one release at a time with the
    mechanism one would have picked gives: the targets are separate, so this is each product's own plan)."""
    from dataclasses import replace

    products = tuple(replace(p, mechanisms=p.mechanisms[:1]) for p in study.products)
    return _plan_of(replace(study, products=products))


def _plan_of(study):
    from ..run import planning

    return planning.make_study_plan(study, seconds=600)


def _even(plan) -> tuple[float, float]:
    """(the ε every release needs for all targets to be met, the worst margin / target at the plan's total split
    evenly), on the plan's own curves (predicted again at the even ε)."""
    from ..run import planning

    d = plan.to_dict()
    releases = sum(p["repeat"] for p in d["products"])
    need = max(p["epsilon"] for p in d["products"])
    even = d["total_epsilon"] / releases
    frame, users = (
        planning.frame_of(plan.study.dataset, planning.dataset_options(plan.study)),
        planning.stated_users(plan.study.users),
    )
    worst = 0.0
    for c in plan.choices:
        regions = planning.frame_regions(frame, c.product.depth, c.product.regions) if c.product.regions else None
        params = planning.choice_params(c)
        p = planning.predict(c.mechanism, even, frame, users, c.product.depth, params, regions, plan.study.runs)
        worst = max(worst, planning.figure(p, c.product) / c.product.target)
    return need * releases, worst


def _achieved(choice, seeds: int) -> tuple[float, float]:
    """(95 % quantile of |error| / target, share within the target) over ``seeds`` seeded releases at the plan."""
    from ..data.region_geometry import build
    from ..regions import regional_report
    from ..run import RunConfig, planning, prepare, run

    p = choice.product
    errors = []
    for seed in range(seeds):
        cfg = RunConfig(
            dataset="synthetic:polycentric",
            dataset_options={"n": USERS},
            mechanism=choice.mechanism,
            params=planning.choice_params(choice),
            epsilon=choice.epsilon,
            depth=p.depth,
            seed=seed,
            emd_max_cells=0,
        )
        res = run(cfg, use_cache=False)
        if p.regions is None:
            errors.append(np.abs(res.release.density - res.truth).ravel())
        else:
            regions = build(p.regions, res.release.domain, res.crs)
            rows = regional_report(res, regions, prepare(cfg)[0]).rows()
            errors.append(np.abs([r["estimate"] - r["true"] for r in rows]))
    e = np.concatenate(errors)
    return float(np.quantile(e, 0.95)) / p.target, float(np.mean(e <= p.target))


FACTOR_MECHANISMS = ("privtree", "ug")


def _factors(seeds: int, progress) -> list[Figure]:
    """A pilot release as the proxy on a sparse, a dense and a coastal test city: the predicted figure (p90 and median of the
    cells' margins, 64 x 64, ε 1) against the same statistic of the margins seeded releases of the real city state
    (median over ``seeds``), and whether the prediction's interval holds it."""
    from ..data.region_geometry import grid_regions
    from ..data.synthetic import generate
    from ..run import planning
    from ..run.planning import Product
    from .plan import DEPTH, EPSILON, PILOT_EPSILON, measured, pilot_proxy
    from .shapes import islands_city

    cities = {
        "sparse (islands)": islands_city(USERS, seed=3),
        "dense (polycentric)": generate("polycentric", n=USERS, seed=11),
        "coastal": generate("coastal", n=USERS, seed=11),
    }
    figs = []
    for label, ds in cities.items():
        frame = planning.Frame(ds.meta, ds.crs, ds.meta.name)
        users, proxy = planning.stated_users(ds.n_users), pilot_proxy(ds)
        watch = planning.StudyWatch(600, None)
        inp = planning.Inputs(frame, users, proxy, 3, watch, lambda f, m: None, pilot_scale=1.0 / PILOT_EPSILON)
        for m in FACTOR_MECHANISMS:
            progress(f"pilot factor: {m} on the {label} city")
            meas = measured(m, ds, grid_regions(frame.domain(DEPTH), ds.crs), seeds)
            for stat in ("p90", "median"):
                prod = Product("map", "map", 1.0, statistic=stat, depth=DEPTH, mechanisms=(m,))
                pred = planning.figure(inp.predict(prod, m, EPSILON), prod)
                lo, hi = planning.interval(inp, prod, m, EPSILON)
                lo, hi = min(lo, pred), max(hi, pred)
                q = meas[f"cell_{stat}"]
                figs.append(
                    Figure(
                        f"study_pilot_factor_{label.split()[0]}_{m}_{stat}",
                        max(pred / q, q / pred),
                        "x",
                        "informative",
                        None,
                        f"{label}: predicted {pred:.3g} [{lo:.3g}, {hi:.3g}] from a pilot (Identity, ε {PILOT_EPSILON:g}, "
                        f"16 x 16), measured {q:.3g} (median of {seeds} seeded releases); the interval "
                        f"{'holds' if lo <= q <= hi else 'misses'} it",
                        {"predicted": pred, "measured": q, "interval": [lo, hi], "covered": bool(lo <= q <= hi)},
                    )
                )
    return figs


def run(quick: bool = False, progress=print) -> list[Figure]:
    text = STUDY.format(users=USERS)
    times, plan = [], None
    for _ in range(1 if quick else 3):
        plan, cpu = _plan(text)
        times.append(cpu)
        progress(f"study plan: {cpu:.1f} CPU s")
    d = plan.to_dict()
    figs = [
        Figure(
            "study_plan_cpu_seconds",
            statistics.median(times),
            "s",
            "<= 10",
            statistics.median(times) <= 10,
            f"3 products x 4 mechanisms, CPU seconds (median of {len(times)}); total ε {d['total_epsilon']:g}: "
            + "; ".join(f"{p['name']}: {p['mechanism']} at ε {p['epsilon']:g} x {p['repeat']}" for p in d["products"]),
            {"runs": times},
        )
    ]
    need, worst = _even(plan)
    figs.append(
        Figure(
            "study_saving_vs_even_split",
            1 - d["total_epsilon"] / need,
            "share",
            "> 0",
            d["total_epsilon"] < need,
            f"an even split needs ε {need:g} in all (every release at the largest ε a product needs); the plan "
            f"{d['total_epsilon']:g}",
        )
    )
    figs.append(
        Figure(
            "study_even_split_worst_ratio",
            worst,
            "margin/target",
            "> 1 (the plan's: <= 1)",
            worst > 1,
            f"the plan's total ε {d['total_epsilon']:g} split evenly over its {sum(p['repeat'] for p in d['products'])} "
            "releases: the worst product's predicted margin / target",
        )
    )
    alone = _alone(plan.study).to_dict()
    figs.append(
        Figure(
            "study_saving_vs_each_alone",
            1 - d["total_epsilon"] / alone["total_epsilon"],
            "share",
            ">= 0",
            d["total_epsilon"] <= alone["total_epsilon"] * (1 + 1e-9),
            f"each product alone with its first-listed mechanism needs ε {alone['total_epsilon']:g} "
            f"({', '.join(p['mechanism'] or 'none' for p in alone['products'])}); the study {d['total_epsilon']:g}",
        )
    )
    seeds = 20 if quick else 100
    for c in plan.choices:
        progress(f"{seeds} seeded releases of {c.product.name}")
        t = time.process_time()
        q95, share = _achieved(c, seeds)
        cpu = time.process_time() - t
        closed = c.method == "closed form"
        figs.append(
            Figure(
                f"study_achieved_{c.product.name.split(',')[0].replace(' ', '_')}",
                q95,
                "q95 |error| / target",
                "<= 1.05" if closed else "informative",
                q95 <= 1.05 if closed else None,
                f"{c.mechanism} at ε {c.epsilon:g} ({c.method}); {seeds} seeded releases of the real city; "
                f"{100 * share:.1f} % of its {'regions' if c.product.regions else 'cells'} within ±{c.product.target:g};"
                f" {cpu:.1f} CPU s",
                {"within_target": share, "cpu_seconds": cpu},
            )
        )
    return figs + _factors(5 if quick else 20, progress)
