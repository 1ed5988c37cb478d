"""Regional margins on regions of realistic shape (``python -m engine bench city_regions [--quick] [--json]``).

A city's neighbourhoods are not a tessellation of equal cells: they are irregular, of very unequal sizes, small
and many in a dense centre and large at the edge, inside an outline that is not a square. :func:`city_polygons`
builds such a set in code: an irregular outline (a radius of a few harmonics of random phase), seeds drawn
mostly around the centre and the rest over the whole outline, and their Voronoi cells clipped to it (77
neighbourhoods by default, the number of a real city's neighbourhood file; their areas span about two orders of
magnitude). The people are where such a city's are: most within a few kilometres of the centre, a fifth in
tight clusters of Pareto sizes (estates, hospitals), the rest anywhere inside the outline.

Two datasets on the 16 km map of :mod:`.regions` (64 x 64 cells of 250 m):

* ``people``: 3,000 people, one location each;
* ``cases``: 2,000 people with 10 locations each (20,000 case records), each person's around a home of their
  own (300 m spread), counted per person (each person's locations weighted to total 1, the user-level unit).

For every mechanism whose release states a regional margin (:data:`MECHANISMS`), at ε 1 (and 0.5, 5 in the
full run), the coverage over (neighbourhood, run) pairs of ``estimate ± margin95`` holding the true count, over
100 seeds (``--quick``: 15 seeds, ε 1). Target: at least 0.93 (pass); where a mechanism states no margin on a
dataset the figure says so.
"""

from __future__ import annotations

import numpy as np

from . import Figure
from .regions import CRS, DEPTH, SIDE, bench_dataset, run_release

MECHANISMS = (
    "identity",
    "identity_topt",
    "uniform",
    "ug",
    "privtree",
    "hierarchical",
    "hdmm",
    "laplace_regions",
    "laplace_gauss",
    "laplace_topt_gauss",
    "flat_onehot",
    "ldp_grid",
    "adaptive_hh",
    "hh_fixed_eps",
    "hh_scheduled_fixed_t",
)
EPSILONS = (0.5, 1.0, 5.0)
TARGET = 0.93
NEIGHBOURHOODS = 77


def outline(seed: int = 3, points: int = 128):
    """An irregular city outline (metres, inside the map): a radius of a few harmonics of random phase."""
    import shapely

    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 2 * np.pi, points, endpoint=False)
    r = np.ones_like(t)
    for k, a in ((2, 0.12), (3, 0.18), (5, 0.08), (9, 0.04)):
        r += a * np.sin(k * t + rng.uniform(0, 2 * np.pi))
    r *= 0.42 * SIDE / r.max()
    return shapely.Polygon(np.column_stack([r * np.cos(t), r * np.sin(t)]))


def _inside(shape, n: int, draw, rng) -> np.ndarray:
    """``n`` points of ``draw(rng, k)`` kept where they fall inside ``shape``."""
    import shapely

    out = np.empty((0, 2))
    while len(out) < n:
        xy = draw(rng, 2 * n)
        out = np.vstack([out, xy[shapely.contains_xy(shape, xy[:, 0], xy[:, 1])]])
    return out[:n]


def city_polygons(n: int = NEIGHBOURHOODS, seed: int = 5):
    """``n`` neighbourhoods of realistic shape (see the module docstring): shapely polygons in metres."""
    import shapely

    rng = np.random.default_rng(seed)
    city = outline()
    centre = _inside(city, int(0.6 * n), lambda g, k: g.normal(0.0, 0.1 * SIDE, (k, 2)), rng)
    rest = _inside(city, n - len(centre), lambda g, k: g.uniform(-SIDE / 2, SIDE / 2, (k, 2)), rng)
    cells = shapely.voronoi_polygons(shapely.multipoints(np.vstack([centre, rest])), extend_to=city.envelope)
    return np.array([shapely.intersection(g, city) for g in shapely.get_parts(cells)], dtype=object)


def city_geojson(path, n: int = NEIGHBOURHOODS, seed: int = 5, crs: str = CRS, side: float = SIDE):
    """The neighbourhoods as a GeoJSON of WGS84 polygons with ``area_id`` and ``name``, over a map of ``side``
    metres centred on the origin of the local CRS ``crs``; returns ``path``."""
    import json

    import shapely

    from ..data.projection import to_lonlat

    feats = []
    for i, g in enumerate(city_polygons(n, seed)):
        ll = shapely.transform(g, lambda xy: to_lonlat(xy[:, 0] * side / SIDE, xy[:, 1] * side / SIDE, crs))
        feats.append(
            {
                "type": "Feature",
                "properties": {"area_id": f"N{i + 1:02d}", "name": f"Neighbourhood {i + 1}"},
                "geometry": shapely.geometry.mapping(ll),
            }
        )
    path.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
    return path


def city_people(n: int = 3000, seed: int = 7) -> np.ndarray:
    """Where ``n`` people of the city are (metres): most near the centre, a fifth in clusters, the rest spread."""
    rng = np.random.default_rng(seed)
    city = outline()
    near = _inside(city, int(0.55 * n), lambda g, k: g.normal(0.0, 0.09 * SIDE, (k, 2)), rng)
    sizes = (rng.pareto(1.3, 25) * 15 + 5).astype(int)
    sizes = np.maximum(1, np.round(sizes * (0.2 * n) / sizes.sum()).astype(int))
    heads = _inside(city, len(sizes), lambda g, k: g.normal(0.0, 0.2 * SIDE, (k, 2)), rng)
    bunch = np.vstack([rng.normal(c, 80, (s, 2)) for c, s in zip(heads, sizes)])
    spread = _inside(city, n - len(near) - len(bunch), lambda g, k: g.uniform(-SIDE / 2, SIDE / 2, (k, 2)), rng)
    return np.vstack([near, bunch, spread])


def datasets() -> dict:
    """The two datasets (:mod:`engine.data.dataset.Dataset`, the second with user ids)."""
    from dataclasses import replace

    rng = np.random.default_rng(13)
    homes = city_people(2000, seed=17)
    cases = np.repeat(homes, 10, axis=0) + rng.normal(0.0, 300.0, (20000, 2))
    ds_cases = bench_dataset(cases.clip(-SIDE / 2 + 1, SIDE / 2 - 1) + SIDE / 2)
    users = np.repeat(np.arange(2000), 10)
    return {
        "people": bench_dataset(city_people().clip(-SIDE / 2 + 1, SIDE / 2 - 1) + SIDE / 2),
        "cases": replace(ds_cases, user_id=users),
    }


def coverage_table(seeds: int, epsilons=EPSILONS, mechanisms=MECHANISMS, progress=print) -> list[dict]:
    """One row per (data, mechanism, epsilon): the coverage over (neighbourhood, run) pairs, the coverage over
    the neighbourhoods holding people, the mean margin, and the share of pairs without a margin."""
    import tempfile
    import time
    from pathlib import Path

    from ..core.grid import Domain
    from ..data.region_geometry import build
    from ..regions import region_margins, true_counts

    domain = Domain(-SIDE / 2, -SIDE / 2, SIDE, DEPTH)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = f"{city_geojson(Path(tmp) / 'neighbourhoods.geojson')}:area_id"
        regions = build(spec, domain, CRS)
        for data_name, ds in datasets().items():
            truth = true_counts(ds, regions)
            for key in mechanisms:
                for eps in epsilons:
                    t0 = time.process_time()
                    cover, occ, margin, none = [], [], [], []
                    for seed in range(seeds):
                        rel = run_release(key, ds, domain, eps, seed, spec)
                        m = region_margins(rel, regions)
                        has = np.isfinite(m.margin95)
                        ok = np.abs(m.estimate - truth) <= m.margin95
                        cover.append(ok[has].mean() if has.any() else np.nan)
                        held = has & (truth > 0)
                        occ.append(ok[held].mean() if held.any() else np.nan)
                        margin.append(np.nanmedian(m.margin95) if has.any() else np.nan)
                        none.append(1.0 - has.mean())
                    rows.append(
                        {
                            "data": data_name,
                            "mechanism": key,
                            "epsilon": eps,
                            "coverage": _mean(cover),
                            "coverage_occupied": _mean(occ),
                            "median_margin": _mean(margin),
                            "no_margin": float(np.mean(none)),
                            "regions_count": len(regions),
                            "seeds": seeds,
                        }
                    )
                    progress(f"{data_name} {key} eps={eps}: {time.process_time() - t0:.1f} s CPU")
    return rows


def _mean(v) -> float:
    v = np.asarray(v, dtype=np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def run(quick: bool = False, progress=print) -> list[Figure]:
    seeds = 15 if quick else 100
    figs = []
    for r in coverage_table(seeds, (1.0,) if quick else EPSILONS, progress=progress):
        name = f"coverage {r['data']} {r['mechanism']} eps={r['epsilon']:g}"
        stated = np.isfinite(r["coverage"])
        figs.append(
            Figure(
                name,
                r["coverage"] if stated else None,
                "share of (neighbourhood, run) pairs",
                f">= {TARGET}",
                None if quick or not stated else r["coverage"] >= TARGET,
                f"median margin {r['median_margin']:.2f}; where people are {r['coverage_occupied']:.3f}"
                if stated
                else "no margin stated on this dataset",
                extra={k: r[k] for k in ("coverage_occupied", "median_margin", "no_margin", "regions_count", "seeds")},
            )
        )
    return figs


def markdown(rows: list[dict]) -> str:
    """The BENCHMARKS.md table: mechanism x epsilon, per dataset the coverage, where people are, median margin."""
    out = [
        "| mechanism | eps | people: coverage | where people are | median margin "
        "| cases: coverage | where people are | median margin |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["data"], r["mechanism"], r["epsilon"]): r for r in rows}

    def cells(r) -> str:
        if r is None or not np.isfinite(r["coverage"]):
            return "no margin | — | —"
        return f"{r['coverage']:.3f} | {r['coverage_occupied']:.3f} | {r['median_margin']:.2f}"

    for key in MECHANISMS:
        for eps in EPSILONS:
            p, c = by.get(("people", key, eps)), by.get(("cases", key, eps))
            if p is None and c is None:
                continue
            out.append(f"| {key} | {eps:g} | {cells(p)} | {cells(c)} |")
    return "\n".join(out)
