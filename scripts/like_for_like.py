"""SIM, CC and KL of a comparison, as each run scores itself and like for like (every map through the same
Gaussian filter, or none): ``python scripts/like_for_like.py [--n 20000] [--eps 1] [--seeds 5]``.

Prints one row per mechanism: the mean over seeds of each score three ways, and the mechanism each way stars."""

from __future__ import annotations

import argparse

import numpy as np

from engine.metrics import likeforlike
from engine.run import RunConfig, run

MECHS = ("sparse_emd", "laplace_gauss", "identity", "ug", "privtree", "hierarchical")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=8)
    a = ap.parse_args()
    res = {
        m: [
            run(RunConfig(dataset_options={"n": a.n}, mechanism=m, epsilon=a.eps, seed=s, depth=a.depth))
            for s in range(a.seeds)
        ]
        for m in MECHS
    }
    sigma = likeforlike.common_sigma(r.release for rs in res.values() for r in rs)
    ways = {"as each run scores itself": None, f"all smoothed (sigma {sigma:.3g} cells)": sigma, "all unsmoothed": 0.0}
    table = {}
    for way, s in ways.items():
        for m, rs in res.items():
            vals = []
            for r in rs:
                if s is None:
                    vals.append([r.metrics[k] for k in likeforlike.SMOOTHED])
                else:
                    sc = likeforlike.rescore(likeforlike.smoothed_truth(r.truth, s), r.release, s)
                    vals.append([sc[k] for k in likeforlike.SMOOTHED])
            table[way, m] = np.mean(vals, axis=0)
    print(f"polycentric, {a.n:,} people, eps {a.eps:g}, {2**a.depth}^2, mean of {a.seeds} seeds")
    for way in ways:
        print(f"\n{way}")
        print(f"{'mechanism':<16}{'SIM':>8}{'CC':>8}{'KL':>8}")
        for m in MECHS:
            sim_, cc_, kl_ = table[way, m]
            print(f"{m:<16}{sim_:8.3f}{cc_:8.3f}{kl_:8.3f}")
        best = [
            max(MECHS, key=lambda m: table[way, m][0]),
            max(MECHS, key=lambda m: table[way, m][1]),
            min(MECHS, key=lambda m: table[way, m][2]),
        ]
        print(f"{'starred':<16}" + "".join(f"{b[:7]:>8}" for b in best))


if __name__ == "__main__":
    main()
