"""The frame of an upload: its box rounded outward to a coarse grid, or fitted by DP quantiles
(``python -m engine bench frame [--quick] [--json]``; :mod:`engine.run.execution._frame`).

The test cities, each read as an upload would be (its lon/lat only, so its region is read off the points
and rounded outward, :func:`engine.data.projection.public_frame`): the four synthetic presets (20 km squares
of :mod:`engine.data.synthetic`) and the three shapes of :mod:`engine.bench.shapes` (hot spots, islands,
streets) as 4 km and as 12 km squares, :data:`PEOPLE` people each. An upload lands anywhere on the rounding
grid, so each seed moves the city by a random offset of up to 0.2° in longitude and latitude. Every mechanism
of :data:`MECHANISMS` runs at each ε of :data:`EPSILONS` on a 64 x 64 grid with the same seed over the rounded
frame and over DP frames (``frame="dp"``, its default share of ε, 10 %) of quantiles 1 % / 99 % and
0.1 % / 99.9 % (:data:`QUANTILES`).

Figures, medians over seeds (and cities):

* ``wasted_<city>``: the share of the grid's cells holding no true person over the rounded frame (``value``)
  and over the DP frames at each ε (``extra``), with the share of the square's area outside the people's
  exact bounding box (the frame's empty ground), the squares' sides and the people a DP frame leaves out;
* ``<mechanism>_eps<ε>_q<q>``: a DP frame's EMD over the rounded frame's (below 1: better), with the medians
  of both EMDs (metres), both MSEs and their ratio. Both are scored against every person of the city (those
  the DP frame leaves out included) on one reference grid, the rounded frame at 128 x 128, onto which each
  release is spread by area: the EMD is exact there, the MSE over its cells of the normalised maps.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import Figure

PEOPLE = 5000
DEPTH = 6
REF_DEPTH = 7
MECHANISMS = ("identity", "hierarchical", "privtree")
EPSILONS = (0.1, 1.0, 10.0)
QUANTILES = (0.01, 0.001)
SHAPES = ("hot_spots", "islands", "streets")
CITIES = ("polycentric", "monocentric", "coastal", "sprawl", *SHAPES, *(f"{s}_12km" for s in SHAPES))


def city(name: str, n: int, seed: int = 0):
    """The city as an upload placed at the seed's offset: its locations only, its region read off them."""
    from ..data.dataset import DatasetMeta, make_dataset
    from ..data.synthetic import PRESETS, generate
    from .shapes import hot_spot_city, islands_city
    from .unseen import street_grid_city

    if name in PRESETS:
        ds = generate(name, n=n, seed=seed)
    else:
        shape, _, size = name.partition("_12km")
        side = 12_000.0 if name.endswith("_12km") else 4000.0
        make = {"hot_spots": hot_spot_city, "islands": islands_city, "streets": street_grid_city}[shape]
        ds = make(n, seed, side_m=side)
    shift = np.random.default_rng([int(seed), 37]).uniform(0.0, 0.2, 2)
    meta = DatasetMeta(name=f"{name} (as an upload)", source=f"bench:{name}")
    return make_dataset(ds.lonlat[:, 0] + shift[0], ds.lonlat[:, 1] + shift[1], meta)


def _overlap(edges_from: np.ndarray, edges_to: np.ndarray) -> np.ndarray:
    """(len(to) - 1, len(from) - 1): the share of each source interval inside each target interval."""
    lo = np.maximum(edges_to[:-1, None], edges_from[None, :-1])
    hi = np.minimum(edges_to[1:, None], edges_from[None, 1:])
    return np.clip(hi - lo, 0, None) / np.diff(edges_from)[None, :]


def on_grid(density: np.ndarray, domain, ref) -> np.ndarray:
    """``density`` over ``domain`` spread by area onto the reference domain ``ref`` (same CRS)."""
    e = np.arange(domain.n + 1) * domain.cell
    r = np.arange(ref.n + 1) * ref.cell
    wx = _overlap(domain.x0 + e, ref.x0 + r)
    wy = _overlap(domain.y0 + e, ref.y0 + r)
    return wy @ np.asarray(density, dtype=np.float64) @ wx.T


def _outside(domain, box) -> float:
    """The share of ``domain``'s area outside ``box`` (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = domain.bounds
    w = max(0.0, min(x1, box[2]) - max(x0, box[0]))
    h = max(0.0, min(y1, box[3]) - max(y0, box[1]))
    return 1.0 - w * h / domain.side**2


def _one(ds, ref, truth, mech: str, eps: float, seed: int, q: float | None) -> dict:
    from .. import metrics as M
    from ..run.execution import FRAME_SHARE, RunConfig, run

    kw = {"frame": "dp", "frame_share": FRAME_SHARE, "frame_quantile": q} if q else {}
    cfg = RunConfig(dataset="bench", mechanism=mech, epsilon=eps, depth=DEPTH, seed=seed, **kw)
    res = run(cfg, dataset=ds)
    pred = on_grid(res.release.density, res.release.domain, ref)
    box = (*ds.xy.min(axis=0), *ds.xy.max(axis=0))
    return {
        "emd_m": M.emd_m(truth, pred, ref.cell, max_cells=ref.n)[0],
        "mse": M.mse(truth, pred),
        "wasted": float(np.mean(res.truth == 0)),
        "outside": _outside(res.release.domain, box),
        "side_km": res.release.domain.side / 1000,
        "left_out": res.evaluation.get("frame_left_out", 0) / len(ds),
    }


def run(quick: bool = False, progress=print) -> list[Figure]:
    cities = ("polycentric", "hot_spots") if quick else CITIES
    seeds = range(1 if quick else 5)
    rows: list[dict] = []
    t0 = time.process_time()
    for name in cities:
        for seed in seeds:
            ds = city(name, PEOPLE, seed)
            ref = ds.public_domain(REF_DEPTH)
            truth = ds.true_histogram(ref)
            progress(f"frame: {name}, seed {seed} (rounded square {ref.side / 1000:.1f} km)")
            for mech in MECHANISMS:
                for eps in EPSILONS:
                    for q in (None, *QUANTILES):
                        rows.append(
                            {"city": name, "mech": mech, "eps": eps, "seed": seed, "q": q}
                            | _one(ds, ref, truth, mech, eps, seed, q)
                        )
    figs = _wasted(rows, cities) + _errors(rows)
    figs.append(Figure("cpu_s", time.process_time() - t0, "s", "informative", None, f"{len(rows)} runs"))
    return figs


def _median(rows, key, **where) -> float:
    vals = [r[key] for r in rows if all(r[k] == v for k, v in where.items())]
    return float(statistics.median(vals))


def _wasted(rows, cities) -> list[Figure]:
    out = []
    for name in cities:
        rounded = _median(rows, "wasted", city=name, q=None)
        extra = {
            "rounded_outside": round(_median(rows, "outside", city=name, q=None), 3),
            "rounded_side_km": round(_median(rows, "side_km", city=name, q=None), 2),
        }
        for q in QUANTILES:
            for eps in EPSILONS:
                tag = f"q{q:g}_eps{eps:g}"
                for key in ("wasted", "outside", "side_km", "left_out"):
                    extra[f"{key}_{tag}"] = round(_median(rows, key, city=name, q=q, eps=eps), 4)
        q = QUANTILES[-1]
        note = f"empty ground {extra['rounded_outside']:.2f}; DP q {q:g}: " + ", ".join(
            f"ε {e:g}: {extra[f'wasted_q{q:g}_eps{e:g}']:.2f} ({extra[f'outside_q{q:g}_eps{e:g}']:.2f})"
            for e in EPSILONS
        )
        out.append(Figure(f"wasted_{name}", round(rounded, 3), "share of cells", "informative", None, note, extra))
    return out


def _errors(rows) -> list[Figure]:
    out = []
    for mech in MECHANISMS:
        for eps in EPSILONS:
            for q in QUANTILES:
                pairs = {}
                for r in rows:
                    if r["mech"] == mech and r["eps"] == eps and r["q"] in (None, q):
                        pairs.setdefault((r["city"], r["seed"]), {})[r["q"]] = r
                ratio = [p[q]["emd_m"] / p[None]["emd_m"] for p in pairs.values()]
                mse_ratio = [p[q]["mse"] / p[None]["mse"] for p in pairs.values()]
                extra = {
                    "emd_rounded_m": round(_median(rows, "emd_m", mech=mech, eps=eps, q=None), 1),
                    "emd_dp_m": round(_median(rows, "emd_m", mech=mech, eps=eps, q=q), 1),
                    "mse_rounded": _median(rows, "mse", mech=mech, eps=eps, q=None),
                    "mse_dp": _median(rows, "mse", mech=mech, eps=eps, q=q),
                    "mse_ratio": round(float(statistics.median(mse_ratio)), 3),
                    "left_out": round(_median(rows, "left_out", mech=mech, eps=eps, q=q), 4),
                }
                note = (
                    f"MSE ratio {extra['mse_ratio']:.2f}; EMD {extra['emd_rounded_m']:g} -> {extra['emd_dp_m']:g} m; "
                    f"left out {extra['left_out']:.2%}"
                )
                value = round(float(statistics.median(ratio)), 3)
                name = f"{mech}_eps{eps:g}_q{q:g}"
                out.append(Figure(name, value, "EMD dp / rounded", "informative", None, note, extra))
    return out
