"""Calibration of the regional 95 % margins (``python -m engine bench regions [--quick] [--json]``).

Over seeded runs, how often each region's interval estimate +- margin95 (:mod:`engine.regions.margins`)
holds its true count (locations inside it), for the mechanisms with a closed form, reported over three
kinds of regions on a 16 km map of 64 x 64 cells (250 m): the grid's own cells, H3 hexagons of
resolution 7 (about 5 km^2, 75 on the map, most crossing many cells and the mechanisms' blocks) and a
polygon file the bench writes (40 Voronoi districts as GeoJSON, read back through the hardened reader),
at epsilon 0.5, 1 and 5, on two datasets of 3,000-odd locations:

* ``smooth``: a Gaussian mixture (four centres, 1.2-2.5 km spread);
* ``bunched``: 40 tight clusters (60 m spread) of Pareto-distributed sizes at random places, so the
  people of a block, leaf or hexagon sit unevenly inside it (the case the spreading bound is for).

Laplace over regions counts the regions being reported (its release is exact for them). Figures:
the coverage over all (region, run) pairs, target 0.90-0.99 (pass), and as ``extra`` the mean margin,
the coverage over the regions holding people and the share of (region, run) pairs without a margin.
200 seeds per cell of the table (``--quick``: 15 seeds, epsilon 1 only).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from . import Figure

SIDE = 16_000.0
DEPTH = 6
CRS = "+proj=aeqd +lat_0=51.5 +lon_0=-0.13 +x_0=0 +y_0=0 +datum=WGS84 +units=m +no_defs"
MECHANISMS = ("identity", "ug", "hierarchical", "privtree", "adaptive_hh", "laplace_regions")
EPSILONS = (0.5, 1.0, 5.0)
KINDS = ("grid", "h3", "polygons")
H3_RES = 7


def datasets(seed: int = 7) -> dict:
    """The two datasets (metres, in the 16 km square)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[5000, 5000], [11000, 6000], [8000, 11000], [12500, 12500]])
    spread = np.array([2500, 1800, 1200, 2000])
    k = rng.choice(4, size=3000, p=[0.35, 0.25, 0.25, 0.15])
    smooth = rng.normal(centres[k], spread[k, None])
    where = rng.uniform(500, SIDE - 500, (40, 2))
    sizes = (rng.pareto(1.2, 40) * 20 + 5).astype(int)
    bunched = np.vstack([rng.normal(c, 60, (s, 2)) for c, s in zip(where, sizes)])
    return {name: xy.clip(1, SIDE - 1) for name, xy in (("smooth", smooth), ("bunched", bunched))}


def bench_dataset(xy):
    from ..data.dataset import Dataset, DatasetMeta
    from ..data.projection import to_lonlat

    ll = to_lonlat(xy[:, 0] - SIDE / 2, xy[:, 1] - SIDE / 2, CRS)
    meta = DatasetMeta(name="bench regions", source="bench", synthetic=True, bbox=(0.0, 0.0, 1.0, 1.0))
    return Dataset(xy=xy - SIDE / 2, lonlat=ll, crs=CRS, meta=meta)


def voronoi_geojson(path: Path, n: int = 40, seed: int = 11) -> Path:
    """``n`` Voronoi districts over the map as a GeoJSON of WGS84 polygons with ``code`` and ``district``. They
    reach a little beyond the map: a file's edges are straight in longitude and latitude, so edges drawn along
    the map's sides would bow off them."""
    import shapely

    from ..data.projection import to_lonlat

    rng = np.random.default_rng(seed)
    pts = shapely.points(rng.uniform(-SIDE / 2, SIDE / 2, (n, 2)))
    box = shapely.box(-SIDE * 0.51, -SIDE * 0.51, SIDE * 0.51, SIDE * 0.51)
    cells = shapely.voronoi_polygons(shapely.multipoints(pts), extend_to=box)
    polys = [shapely.intersection(g, box) for g in shapely.get_parts(cells)]
    feats = []
    for i, g in enumerate(polys):
        ll = shapely.transform(g, lambda xy: to_lonlat(xy[:, 0], xy[:, 1], CRS))
        feats.append(
            {
                "type": "Feature",
                "properties": {"code": f"D{i + 1:02d}", "district": f"District {i + 1}"},
                "geometry": shapely.geometry.mapping(ll),
            }
        )
    path.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
    return path


def _counts_regions(key: str) -> bool:
    """Whether the mechanism counts regions it is given (a ``regions`` parameter: Laplace over regions)."""
    from ..mechanisms import get

    return "regions" in get(key).schema().defaults()


def run_release(key, ds, domain, eps, seed, spec):
    from ..mechanisms import RunContext, registry

    cls = registry()[key]
    params = cls.schema().resolve({"regions": spec} if _counts_regions(key) else {})
    return cls().run(ds, domain, eps, params, RunContext(rng=np.random.default_rng(seed)))


def coverage_table(seeds: int, epsilons=EPSILONS, mechanisms=MECHANISMS, progress=print) -> list[dict]:
    """One row per (data, mechanism, kind, epsilon): coverage, coverage where people are, mean margin."""
    from ..core.grid import Domain
    from ..data.region_geometry import build
    from ..regions import region_margins, true_counts

    domain = Domain(-SIDE / 2, -SIDE / 2, SIDE, DEPTH)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        poly = voronoi_geojson(Path(tmp) / "districts.geojson")
        specs = {"grid": "grid", "h3": f"h3:{H3_RES}", "polygons": f"{poly}:code"}
        regions = {k: build(s, domain, CRS) for k, s in specs.items()}
        for data_name, xy in datasets().items():
            ds = bench_dataset(xy)
            truth = {k: true_counts(ds, r) for k, r in regions.items()}
            for key in mechanisms:
                for eps in epsilons:
                    t0 = time.perf_counter()
                    acc = {k: {"cover": [], "occ": [], "margin": [], "none": []} for k in KINDS}
                    for seed in range(seeds):
                        rel = None if _counts_regions(key) else run_release(key, ds, domain, eps, seed, None)
                        for kind in KINDS:
                            r = rel or run_release(key, ds, domain, eps, seed, specs[kind])
                            m = region_margins(r, regions[kind])
                            ok = np.abs(m.estimate - truth[kind]) <= m.margin95
                            has = np.isfinite(m.margin95)
                            a = acc[kind]
                            a["cover"].append(ok[has].mean() if has.any() else np.nan)
                            occ = has & (truth[kind] > 0)
                            a["occ"].append(ok[occ].mean() if occ.any() else np.nan)
                            a["margin"].append(np.nanmean(m.margin95) if has.any() else np.nan)
                            a["none"].append(1.0 - has.mean())
                    for kind in KINDS:
                        a = acc[kind]
                        rows.append(
                            {
                                "data": data_name,
                                "mechanism": key,
                                "regions": kind,
                                "epsilon": eps,
                                "coverage": float(np.nanmean(a["cover"])),
                                "coverage_occupied": float(np.nanmean(a["occ"])),
                                "mean_margin": float(np.nanmean(a["margin"])),
                                "no_margin": float(np.mean(a["none"])),
                                "regions_count": len(regions[kind]),
                                "seeds": seeds,
                            }
                        )
                    progress(f"{data_name} {key} eps={eps}: {time.perf_counter() - t0:.1f} s")
    return rows


def run(quick: bool = False, progress=print) -> list[Figure]:
    seeds = 15 if quick else 200
    rows = coverage_table(seeds, (1.0,) if quick else EPSILONS, progress=progress)
    figs = []
    for r in rows:
        name = f"coverage {r['data']} {r['mechanism']} {r['regions']} eps={r['epsilon']:g}"
        ok = 0.90 <= r["coverage"] <= 0.99
        figs.append(
            Figure(
                name,
                r["coverage"],
                "share of (region, run) pairs",
                "0.90-0.99",
                None if quick else ok,
                f"mean margin {r['mean_margin']:.2f}; where people are {r['coverage_occupied']:.3f}",
                extra={k: r[k] for k in ("coverage_occupied", "mean_margin", "no_margin", "regions_count", "seeds")},
            )
        )
    return figs


def markdown(rows: list[dict]) -> str:
    """The BENCHMARKS.md table: mechanism x regions x epsilon, coverage and mean margin per dataset."""
    out = [
        "| mechanism | regions | eps | smooth: coverage | smooth: where people are | smooth: mean margin "
        "| bunched: coverage | bunched: where people are | bunched: mean margin |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["data"], r["mechanism"], r["regions"], r["epsilon"]): r for r in rows}
    for key in MECHANISMS:
        for kind in KINDS:
            for eps in EPSILONS:
                s, b = by.get(("smooth", key, kind, eps)), by.get(("bunched", key, kind, eps))
                if s is None or b is None:
                    continue
                out.append(
                    f"| {key} | {kind} | {eps:g} | {s['coverage']:.3f} | {s['coverage_occupied']:.3f} | "
                    f"{s['mean_margin']:.2f} | {b['coverage']:.3f} | {b['coverage_occupied']:.3f} | "
                    f"{b['mean_margin']:.2f} |"
                )
    return "\n".join(out)
