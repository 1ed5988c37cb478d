"""Defaults on data nobody tuned them on: MSE and EMD of the normalised maps,
each divided by the uniform map's, on the built-in cities and the test cities of engine/bench/shapes.py
(hot spots, sparse islands, streets; 200 and 20,000 users); 256 x 256; means over seeds 0-4.

Rows: identity_topt and laplace_topt_gauss at their defaults, eps 0.1 0.3 1 3 10; hierarchical at its
default and Identity, eps 0.1. Run: PYTHONPATH=. python scripts/defaults_on_test_cities.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from engine.bench.shapes import shape_cities
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
ROWS = [(k, e) for k in ("identity_topt", "laplace_topt_gauss") for e in (0.1, 0.3, 1.0, 3.0, 10.0)]
ROWS += [("hierarchical", 0.1), ("identity", 0.1)]


def cities():
    out = {k: load_dataset(k, {}) for k in BUILTIN}
    for n in (200, 20_000):
        out.update({f"{k}_{n}": d for k, d in shape_cities(n, 0).items()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    res = []
    for name, d in cities().items():
        dom = d.public_domain(8)
        d = d.in_domain(dom)
        t = d.true_histogram(dom, per_user_normalised=True)
        flat = np.ones_like(t)
        base = mse(t, flat), emd_m(t, flat, dom.cell, 64)[0]
        for key, eps in ROWS:
            M = get(key)
            v = []
            for s in range(5):
                r = M().run(d, dom, eps, M.schema().resolve({}), RunContext(rng=np.random.default_rng(s)))
                v.append((mse(t, r.density) / base[0], emd_m(t, r.density, dom.cell, 64)[0] / base[1]))
            m = np.mean(v, axis=0)
            res.append({"city": name, "mechanism": key, "eps": eps, "mse_vs_uniform": m[0], "emd_vs_uniform": m[1]})
            print(
                f"{name:22s} {key:20s} eps {eps:4}: MSE {m[0]:.3g}x  EMD {m[1]:.3g}x (of the uniform map)", flush=True
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
