"""Defaults on data nobody tuned them on: MSE and EMD of the normalised maps on the built-in cities and
the test cities of engine/bench/shapes.py (hot spots, sparse islands, streets at 200 and 20,000 users;
check-ins); 256 x 256; EMD in metres on 64 x 64; medians over seeds 0..SEEDS-1 (default 8).

Parts (``--part``, all by default):

* ``topt``: ``identity_topt``'s default and ``identity``, MSE and EMD each as a multiple of the uniform
  map's, eps 0.1 0.3 1 3 10, on the built-in and the test cities, with the runs in which top-t kept no
  cell and the fill models its runs used (no cell kept and an even fill: the uniform map);
* ``trees``: the ``hierarchical`` default on the check-in city and the same with ``nonnegative`` off (the
  least-squares leaves), EMD in metres and MSE as a multiple of the uniform map's, eps 0.1 0.3 1 3 10;
* ``instruments``: why the hierarchical default's EMD grew with eps on the check-in city (eps 0.1, 1, 10):
  the rule's height from the noisy count and from the true n, the share of its leaves that hold no data,
  the least-squares map (``nonnegative`` off) at fixed heights, without consistency, with unit = record,
  the mass its positive cells hold (what a clipped map keeps) and the EMD coarsened to 64 and to 128
  cells a side.

Run: PYTHONPATH=. python scripts/defaults_on_test_cities.py [--part P] [--seeds N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from engine.bench.shapes import BUILTIN_CITIES, checkin_city, shape_cities
from engine.mechanisms import RunContext, get
from engine.mechanisms.central.readings import topt_fill
from engine.metrics import emd_m, mse
from engine.run import load_dataset

EPS = (0.1, 0.3, 1.0, 3.0, 10.0)


def prepared(d):
    dom = d.public_domain(8)
    d = d.in_domain(dom)
    return d, dom, d.true_histogram(dom, per_user_normalised=True)


def cities():
    out = {k: load_dataset(k, {}) for k in BUILTIN_CITIES}
    for n in (200, 20_000):
        out.update({f"{k}_{n}": d for k, d in shape_cities(n, 0).items()})
    return out


def run(key, d, dom, eps, seed, **params):
    M = get(key)
    return M().run(d, dom, eps, M.schema().resolve(params), RunContext(rng=np.random.default_rng(seed)))


def errors(truth, dom, density, emd_cells=64):
    return mse(truth, density), emd_m(truth, density, dom.cell, emd_cells)[0]


def part_topt(seeds, out):
    for name, d in cities().items():
        d, dom, t = prepared(d)
        flat = np.ones_like(t)
        base = errors(t, dom, flat)
        for eps in EPS:
            row = {"part": "topt", "city": name, "eps": eps}
            rels = {key: [run(key, d, dom, eps, s) for s in range(seeds)] for key in ("identity_topt", "identity")}
            for key, runs in rels.items():
                v = np.array([errors(t, dom, r.density) for r in runs]) / base
                row[key] = {"mse": float(np.median(v[:, 0])), "emd": float(np.median(v[:, 1]))}
            fills = [topt_fill(r) for r in rels["identity_topt"]]
            row["none_kept"] = sum(kept == 0 for kept, _ in fills)  # with an even fill: exactly the uniform map
            row["fill_models"] = sorted({model for _, model in fills})
            out.append(row)
            a, b = row["identity_topt"], row["identity"]
            print(
                f"{name:22s} eps {eps:4}: top-t {a['mse']:.3g} / {a['emd']:.3g}   Identity {b['mse']:.3g} / {b['emd']:.3g}"
                f"  (MSE / EMD of the uniform map's); no cell kept in {row['none_kept']} of {seeds} runs,"
                f" fill {', '.join(row['fill_models'])}",
                flush=True,
            )


def part_trees(seeds, out):
    d, dom, t = prepared(checkin_city())
    base = mse(t, np.ones_like(t))
    for eps in EPS:
        row = {"part": "trees", "eps": eps}
        for k, p in (("default", {}), ("least_squares", {"nonnegative": False})):
            v = np.array([errors(t, dom, run("hierarchical", d, dom, eps, s, **p).density) for s in range(seeds)])
            row[k] = {"emd_m": float(np.median(v[:, 1])), "mse": float(np.median(v[:, 0]) / base)}
        out.append(row)
        a, b = row["default"], row["least_squares"]
        print(
            f"check-ins, hierarchical, eps {eps:4}: default EMD {a['emd_m']:.0f} m, MSE {a['mse']:.3f};"
            f" nonnegative off EMD {b['emd_m']:.0f} m, MSE {b['mse']:.3f}",
            flush=True,
        )


def part_instruments(seeds, out):
    from engine.mechanisms.central.readings import tree_height
    from engine.mechanisms.central.sizing import height_rule

    d, dom, t = prepared(checkin_city())
    base = mse(t, np.ones_like(t))
    n_true = float(t.sum())
    print(f"check-ins: {n_true:.0f} users, {int((t > 0).sum())} of {t.size} cells hold data")

    def med(eps, emd_cells=64, **p):
        rels = [run("hierarchical", d, dom, eps, s, **p) for s in range(seeds)]
        v = np.array([errors(t, dom, r.density, emd_cells) for r in rels])
        pos = np.median([np.clip(r.density, 0, None).sum() / n_true for r in rels])
        return {
            "emd_m": float(np.median(v[:, 1])),
            "mse": float(np.median(v[:, 0]) / base),
            "positive_mass": float(pos),
        }

    for eps in (0.1, 1.0, 10.0):
        rule = tree_height(run("hierarchical", d, dom, eps, 0))
        row = {"part": "instruments", "eps": eps, "height_rule": rule, "height_true_n": height_rule(n_true, eps, 8)}
        m = 1 << rule
        leaves = t.reshape(m, t.shape[0] // m, m, -1).sum(axis=(1, 3))
        row["empty_leaves"] = float((leaves == 0).mean())
        ls = {"nonnegative": False}
        row["default"] = med(eps)
        row["least_squares"] = med(eps, **ls)
        row["least_squares_128"] = med(eps, 128, **ls)
        row["default_128"] = med(eps, 128)
        row["no_consistency"] = med(eps, consistency=False)
        row["record"] = med(eps, unit="record", **ls)
        row["fixed"] = {h: med(eps, height=h, **ls) for h in range(3, 8)}
        out.append(row)
        print(
            f"eps {eps}: height {rule} (rule on the noisy count; {row['height_true_n']} for the true n);"
            f" {row['empty_leaves']:.0%} of its {m}^2 leaves hold no data"
        )
        for k in ("default", "least_squares", "least_squares_128", "default_128", "no_consistency", "record"):
            r = row[k]
            print(
                f"  {k:18s} EMD {r['emd_m']:6.0f} m  MSE {r['mse']:.3f}  positive mass / users {r['positive_mass']:.2f}"
            )
        for h, r in row["fixed"].items():
            print(
                f"  least squares, height {h}: EMD {r['emd_m']:6.0f} m  MSE {r['mse']:.3f}  positive mass {r['positive_mass']:.2f}"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("topt", "trees", "instruments", "all"), default="all")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args()
    res: list = []
    for part, fn in (("topt", part_topt), ("trees", part_trees), ("instruments", part_instruments)):
        if a.part in (part, "all"):
            fn(a.seeds, res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
