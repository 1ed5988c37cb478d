"""Release planner calibration: predicted against measured 95 % margins.

For each city (the four synthetic presets and the street-grid city of :mod:`engine.bench.unseen`,
which no proxy resembles), each mechanism with margins and each way of reporting (the grid's cells, H3
hexagons at the resolution the dashboard picks for the map), the planner predicts the median and
worst-tenth margin from public inputs only (:mod:`engine.run.plan`: the city's public frame, its user
count as a stated bound, a synthetic proxy); the **measured** figure is the same statistic of the
margins the releases on the real city state, median over seeded runs (100; 5 with ``--quick``).
Target: predicted / measured within a factor 1.25 where the plan is exact (closed form) and 2 where it
is simulated.
"""

from __future__ import annotations

import math

import numpy as np

from . import Figure

MECHANISMS = ("identity", "hierarchical", "laplace_regions", "ug", "privtree", "adaptive_hh")
CITIES = ("synthetic:monocentric", "synthetic:polycentric", "synthetic:coastal", "synthetic:sprawl", "streets")
DEPTH, N_USERS, EPSILON = 6, 20_000, 1.0
STATS = ("cell_median", "cell_p90", "region_median", "region_p90")


def _city(key: str):
    from ..data.synthetic import generate
    from .unseen import street_grid_city

    if key == "streets":
        return street_grid_city(N_USERS, seed=7)
    return generate(key.split(":", 1)[1], n=N_USERS, seed=11)  # not the proxy's seeds


def measured(mechanism: str, ds, regions, runs: int) -> dict[str, float]:
    """Median over ``runs`` seeded releases on ``ds`` of their stated margins' statistics."""
    from ..regions.margins import cell_margins, region_margins
    from ..run.config import RunConfig
    from ..run.plan import margin_stats
    from ..run.runner import run

    rows = []
    for seed in range(runs):
        cfg = RunConfig(mechanism=mechanism, epsilon=EPSILON, depth=DEPTH, seed=1000 + seed, emd_max_cells=0)
        res = run(cfg, dataset=ds, use_cache=False)
        cm = cell_margins(res.release, mechanism, ds.crs)
        rm = region_margins(res.release, mechanism, regions)
        rows.append([*margin_stats(cm.margin95), *margin_stats(rm.margin95)])
    med = np.nanmedian(np.array(rows), axis=0)
    return dict(zip(STATS, med.tolist(), strict=True))


def calibrate(mechanisms, cities, runs: int, proxy_runs: int) -> list[dict]:
    from ..data.regions import auto_resolution, h3_regions
    from ..mechanisms import load_all, registry
    from ..run import plan as P

    load_all()
    known = registry()
    rows = []
    for city in cities:
        ds = _city(city)
        frame = P.Frame(ds.meta, ds.crs, ds.meta.name)
        dom = frame.domain(DEPTH)
        regions = h3_regions(dom, ds.crs, auto_resolution(dom))
        users = P.stated_users(ds.n_users)
        for m in mechanisms:
            if m not in known:
                continue
            pred = P.predict(m, EPSILON, frame, users, DEPTH, regions=regions, runs=proxy_runs)
            meas = measured(m, ds, regions, runs)
            for stat in STATS:
                p, q = getattr(pred, stat), meas[stat]
                ratio = p / q if p is not None and q and math.isfinite(p) and math.isfinite(q) else math.nan
                rows.append(
                    {
                        "city": city,
                        "mechanism": m,
                        "statistic": stat,
                        "predicted": p,
                        "measured": q,
                        "ratio": ratio,
                        "exact": P.exact(m, regions if stat.startswith("region") else None),
                        "regions": len(regions),
                    }
                )
    return rows


def run(quick: bool = False, progress=print) -> list[Figure]:
    mechanisms = ("identity", "privtree") if quick else MECHANISMS
    cities = ("synthetic:polycentric",) if quick else CITIES
    rows = calibrate(mechanisms, cities, runs=5 if quick else 100, proxy_runs=2 if quick else 5)
    figs = []
    for exact, bound in ((True, 1.25), (False, 2.0)):
        sel = [r for r in rows if r["exact"] == exact and math.isfinite(r["ratio"])]
        worst = max((max(r["ratio"], 1 / r["ratio"]) for r in sel), default=math.nan)
        kind = "closed form" if exact else "simulated"
        figs.append(
            Figure(
                f"plan_{kind.replace(' ', '_')}_worst_factor",
                worst,
                "x",
                f"<= {bound}",
                None if not sel else worst <= bound,
                f"largest of predicted/measured and its inverse over {len(sel)} {kind} figures "
                f"(cities x mechanisms x statistic), depth {DEPTH}, {N_USERS:,} users, eps {EPSILON:g}",
                extra={"rows": [r for r in rows if r["exact"] == exact]},
            )
        )
    for r in rows:
        progress(
            f"{r['city']:<24} {r['mechanism']:<16} {r['statistic']:<14} predicted {r['predicted']:.3g} "
            f"measured {r['measured']:.3g} ratio {r['ratio']:.2f}{' (exact)' if r['exact'] else ''}"
        )
    return figs
