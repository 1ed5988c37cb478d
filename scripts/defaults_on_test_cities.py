"""Defaults on data nobody tuned them on: MSE and EMD of the normalised maps on the built-in cities and
the test cities of engine/bench/shapes.py (hot spots, sparse islands, streets at 200 and 20,000 users;
check-ins); 256 x 256; EMD in metres on 64 x 64; medians over seeds 0..SEEDS-1 (default 8).

Parts (``--part``, all by default):

* ``topt``: ``identity_topt``'s default and ``identity``, MSE and EMD each as a multiple of the uniform
  map's, eps 0.1 0.3 1 3 10, on the built-in and the test cities;
* ``trees``: the ``hierarchical`` default on the check-in city, EMD in metres and MSE as a multiple of the
  uniform map's, eps 0.1 0.3 1 3 10;
* ``instruments``: why the hierarchical default's EMD grew with eps on the check-in city (eps 0.1, 1, 10):
  the rule's height from the noisy count and from the true n, the least-squares map (``nonnegative``
  off) at fixed heights, without consistency, with unit = record, the mass its positive cells hold
  (what a clipped map keeps) and the EMD coarsened to 64 and to 128 cells a side.

Run: PYTHONPATH=. python scripts/defaults_on_test_cities.py [--part P] [--seeds N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from engine.bench.shapes import checkin_city, shape_cities
from engine.mechanisms import RunContext, get
from engine.metrics import emd_m, mse
from engine.run.runner import load_dataset

BUILTIN = (
    "berlin_airbnb",
    "snow_cholera",
    "synthetic:monocentric",
    "synthetic:polycentric",
    "synthetic:coastal",
    "synthetic:sprawl",
)
EPS = (0.1, 0.3, 1.0, 3.0, 10.0)


def prepared(d):
    dom = d.public_domain(8)
    d = d.in_domain(dom)
    return d, dom, d.true_histogram(dom, per_user_normalised=True)


def cities():
    out = {k: load_dataset(k, {}) for k in BUILTIN}
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
            for key in ("identity_topt", "identity"):
                v = np.array([errors(t, dom, run(key, d, dom, eps, s).density) for s in range(seeds)]) / base
                row[key] = {"mse": float(np.median(v[:, 0])), "emd": float(np.median(v[:, 1]))}
            out.append(row)
            a, b = row["identity_topt"], row["identity"]
            print(
                f"{name:22s} eps {eps:4}: top-t {a['mse']:.3g} / {a['emd']:.3g}   Identity {b['mse']:.3g} / {b['emd']:.3g}"
                "  (MSE / EMD of the uniform map's)",
                flush=True,
            )


def part_trees(seeds, out):
    d, dom, t = prepared(checkin_city())
    base = mse(t, np.ones_like(t))
    for eps in EPS:
        v = np.array([errors(t, dom, run("hierarchical", d, dom, eps, s).density) for s in range(seeds)])
        row = {"part": "trees", "eps": eps, "emd_m": float(np.median(v[:, 1])), "mse": float(np.median(v[:, 0]) / base)}
        out.append(row)
        print(
            f"check-ins, hierarchical default, eps {eps:4}: EMD {row['emd_m']:.0f} m, MSE {row['mse']:.3f}", flush=True
        )


def part_instruments(seeds, out):
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
        rule = run("hierarchical", d, dom, eps, 0).diagnostics["height"]
        row = {"part": "instruments", "eps": eps, "height_rule": rule, "height_true_n": height_rule(n_true, eps, 8)}
        ls = {"nonnegative": False}
        row["default"] = med(eps)
        row["least_squares"] = med(eps, **ls)
        row["least_squares_128"] = med(eps, 128, **ls)
        row["default_128"] = med(eps, 128)
        row["no_consistency"] = med(eps, consistency=False)
        row["record"] = med(eps, unit="record", **ls)
        row["fixed"] = {h: med(eps, height=h, **ls) for h in range(3, 8)}
        out.append(row)
        print(f"eps {eps}: height {rule} (rule on the noisy count; {row['height_true_n']} for the true n)")
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
