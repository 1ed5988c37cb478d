"""UG and AG with align = on / off / auto under two protocols.

* SNH's range-query protocol (engine/bench/snh.py): 100,000 points, 1024 x 1024, eps 0.2,
  2,000 squares with sides 0.5-2% of the side, uniform and data-point centres, the paper's
  relative error; the four synthetic cities, seeds 0-2; medians.
* The map protocol: 256 x 256, MSE and EMD (m, 64 x 64) of the normalised maps; the built-in and
  test cities (engine/bench/shapes.py, 20,000 users); eps 0.1, 1, 10; seeds 0-4; means.

Prints each cell's ratio auto / min(on, off): the loss of the default against the better fixed
choice. With ``--monotone N``: EMD per eps on the test cities at N users instead.
Run: PYTHONPATH=. python scripts/alignment_protocols.py [--quick | --monotone 40000]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from engine.bench.shapes import shape_cities
from engine.bench.snh import CITIES, _dataset, query_sets, rel_error
from engine.mechanisms import RunContext, get
from engine.mechanisms.central.readings import grid_size
from engine.metrics import emd_m, mse
from engine.run import load_dataset

MODES = ("on", "off", "auto")


def _rel(key, ds, dom, eps, seed, mode):
    M = get(key)
    p = M.schema().resolve({"align": mode})
    return M().run(ds, dom, eps, p, RunContext(rng=np.random.default_rng([seed, 32])))


def snh_protocol(seeds, cities):
    worst = 1.0
    for name in cities:
        errs = {}
        for seed in seeds:
            ds, dom = _dataset(name, 100_000, seed)
            qs = query_sets(ds, dom, np.random.default_rng([seed, 3]), 0.005, 0.02)
            for key in ("ug", "ag"):
                for mode in MODES:
                    rel = _rel(key, ds, dom, 0.2, seed, mode)
                    for kind, (rects, true) in qs.items():
                        e = rel_error(rel.answer_range(rects), true, len(ds))
                        errs.setdefault((key, kind, mode), []).append(e)
        for key in ("ug", "ag"):
            for kind in ("unif", "data"):
                med = {m: statistics.median(errs[(key, kind, m)]) for m in MODES}
                r = med["auto"] / min(med["on"], med["off"])
                worst = max(worst, r)
                print(
                    f"snh  {name:12s} {key} {kind:4s} on {med['on']:.4f} off {med['off']:.4f} "
                    f"auto {med['auto']:.4f}  auto/best {r:.3f}",
                    flush=True,
                )
    return worst


def map_protocol(seeds, eps_list, names):
    worst = 1.0
    cities = {k: load_dataset(k, {}) for k in names if ":" in k or k in ("berlin_airbnb", "snow_cholera")}
    cities.update({k: v for k, v in shape_cities(20_000, 0).items() if k in names})
    for name, d in cities.items():
        dom = d.public_domain(8)
        d = d.in_domain(dom)
        t = d.true_histogram(dom, per_user_normalised=True)
        for key in ("ug", "ag"):
            for eps in eps_list:
                acc = {m: [] for m in MODES}
                for mode in MODES:
                    for seed in seeds:
                        x = _rel(key, d, dom, eps, seed, mode).density
                        acc[mode].append((mse(t, x), emd_m(t, x, dom.cell, 64)[0]))
                mean = {m: np.mean(v, axis=0) for m, v in acc.items()}
                r = [mean["auto"][i] / min(mean["on"][i], mean["off"][i]) for i in (0, 1)]
                worst = max(worst, *r)
                print(
                    f"map  {name:22s} {key} eps {eps:4}: MSE on {mean['on'][0]:.3g} off {mean['off'][0]:.3g} "
                    f"auto {mean['auto'][0]:.3g} ({r[0]:.3f}); EMD on {mean['on'][1]:.0f} off {mean['off'][1]:.0f} "
                    f"auto {mean['auto'][1]:.0f} ({r[1]:.3f})",
                    flush=True,
                )
    return worst


def monotone(users):
    """EMD (m) per eps 0.1 .. 10 on the test cities at ``users`` users, each mode, 4 seeds, with the grid size."""
    for name, d in shape_cities(users, 0).items():
        dom = d.public_domain(8)
        d = d.in_domain(dom)
        t = d.true_histogram(dom, per_user_normalised=True)
        for key in ("ug", "ag"):
            for mode in MODES:
                row = []
                for eps in (0.1, 0.3, 1.0, 3.0, 10.0):
                    rels = [_rel(key, d, dom, eps, s, mode) for s in range(4)]
                    m = grid_size(rels[0])
                    row.append(f"{np.mean([emd_m(t, r.density, dom.cell, 64)[0] for r in rels]):.0f} (m {m})")
                print(f"emd  {name} {users} {key} {mode}: " + ", ".join(row), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--monotone", type=int, default=0, help="only the EMD-per-eps rows, at this many users")
    a = ap.parse_args()
    if a.monotone:
        monotone(a.monotone)
        raise SystemExit
    seeds = (0,) if a.quick else (0, 1, 2)
    w1 = snh_protocol(seeds, CITIES[:1] if a.quick else CITIES)
    names = ["berlin_airbnb", "snow_cholera", *(f"synthetic:{c}" for c in CITIES), "hot_spots", "islands", "streets"]
    w2 = map_protocol(range(2 if a.quick else 5), (0.1, 1.0, 10.0), names[:3] if a.quick else names)
    print(f"worst auto / best: SNH protocol {w1:.3f}, map protocol {w2:.3f}")
