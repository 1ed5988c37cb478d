"""Build ParamSelect's training table (Zeighami et al. 2022, Section 5.1, Algorithm 2) on
synthetic cities only, and write ``data/paramselect_table.csv``.

    python scripts/train_paramselect.py [--quick] [--out data/paramselect_table.csv]

For every public training dataset D (synthetic cities of the four presets, city seeds
101-104 so they differ from the benchmark cities, seed 0; and two concentrated "venue"
cities, seeds 105-106, whose records sit at venues: see ``venue_city``), every n, every
epsilon and every query range [l, u]:

* ``pi_hat(D, eps)``: SNH is run at several cell widths rho (multiples of the mid query
  side) with the engine's interactive ``fast`` preset; its relative error (psi = 0.1% n)
  is measured on 2,000 square queries with sides uniform in [l, u], centred on random
  data points (the reference code's protocol), true answers counted exactly. To keep
  the table affordable on a CPU only one of the k = 8 networks is trained (j = 3, at 7/16
  of [l, u]) and the test queries have sides within its eighth of [l, u]. The
  label is the minimum of a parabola through the three best points in log(rho) (the
  best candidate when the parabola is not convex).
* ``h``: the entropy of the 512 x 512 histogram of the public *proxy* of D (50,000
  points of its sibling city, see engine.mechanisms.snh.collection.synthetic_proxy; for a venue
  city, 50,000 records of its public sibling), exactly the feature ParamSelect computes
  at inference. The proxy is also SNH's public workload (Eq. 6).

The private datasets of the benchmarks (SF cabs, the seed-0 cities) are never used.
Rows are appended as they finish, so an interrupted run can be resumed (--resume).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLUMNS = (
    "dataset",
    "city_seed",
    "n",
    "eps",
    "q_lo",
    "q_hi",
    "entropy",
    "best_rho",
    "best_err",
    "candidates",
    "errors",
)
PRESETS = ("polycentric", "monocentric", "sprawl", "coastal")
N_VALUES = (25_000, 100_000, 400_000)
EPS_VALUES = (0.05, 0.2, 0.8)
Q_RANGES = ((0.002, 0.008), (0.005, 0.02))  # the reference code's range, the snh benchmark's (fractions of the side)
RHO_MULT = (0.25, 0.5, 1.0, 2.0, 4.0)  # candidate rho = multiple of the mid query side
# concentrated cities (records at venues: preset, venues, scatter in m), so the entropy feature
# spans more than the presets' 10.2-10.5 nats: ~7.3 nats (Gowalla cities 4.0-7.8) and ~9.5 (SF cabs 9.0)
VENUE_CITIES = (("polycentric", 1000, 20.0), ("monocentric", 3000, 80.0))
TRAIN_MODELS = (3,)


def exact_counts(tree, centres, sides):
    return tree.query_ball_point(centres, sides / 2, p=np.inf, return_length=True).astype(np.float64)


def label(errors: dict[float, float]) -> float:
    """Best rho: vertex of the parabola through the best point and its neighbours in log rho."""
    rhos = sorted(errors)
    errs = [errors[r] for r in rhos]
    i = int(np.argmin(errs))
    if 0 < i < len(rhos) - 1:
        x = np.log([rhos[i - 1], rhos[i], rhos[i + 1]])
        a, b, _ = np.polyfit(x, errs[i - 1 : i + 2], 2)
        if a > 0:
            v = -b / (2 * a)
            if x[0] <= v <= x[2]:
                return float(math.exp(v))
    return float(rhos[i])


def venue_city(preset: str, n: int, city_seed: int, n_venues: int, scatter_m: float, public: bool = False):
    """A concentrated city: ``n`` records at ``n_venues`` venues (sites drawn from the preset's
    density, lognormal popularity), each scattered by a Gaussian of ``scatter_m`` metres. ``public=True`` is
    its public sibling (the proxy): the same venues, a correlated popularity (times another
    lognormal) and its own records, like another check-in source of the same region."""
    from dataclasses import replace

    from engine.data.dataset import Dataset
    from engine.data.projection import to_lonlat
    from engine.data.synthetic import generate

    base = generate(preset, n_venues, city_seed)  # venue sites follow where people are
    pop = np.random.default_rng([city_seed, n_venues, 11]).lognormal(0.0, 1.5, n_venues)
    if public:
        pop = pop * np.random.default_rng([city_seed, n_venues, 12]).lognormal(0.0, 0.7, n_venues)
    rng = np.random.default_rng([city_seed, n_venues, n, 13 if public else 14])
    xy = base.xy[rng.choice(n_venues, size=n, p=pop / pop.sum())] + rng.normal(0.0, scatter_m, (n, 2))
    meta = replace(base.meta, name=f"{preset} venues ({n_venues})", source=f"venues{n_venues}:{preset}", extra={})
    return Dataset(xy=xy, lonlat=to_lonlat(xy[:, 0], xy[:, 1], base.crs), crs=base.crs, meta=meta)


def run_setting(preset, city_seed, n, eps, q, mults, n_queries, progress, venues: int = 0, scatter_m: float = 0.0):
    from scipy.spatial import cKDTree

    from engine.data.synthetic import generate
    from engine.mechanisms import RunContext
    from engine.mechanisms.snh.collection import synthetic_proxy
    from engine.mechanisms.snh.mechanism import SNH
    from engine.mechanisms.snh.paramselect import entropy_512
    from engine.mechanisms.snh.training import fit_snh
    from engine.metrics import snh_relative_error

    if venues:
        dom = generate(preset, 1000, city_seed).public_domain(8)
        ds = venue_city(preset, n, city_seed, venues, scatter_m).in_domain(dom)
        proxy = venue_city(preset, 50_000, city_seed, venues, scatter_m, public=True).xy
        aux_given = (proxy, "public sibling check-ins at the same venues")
    else:
        ds = generate(preset, n, city_seed)
        dom = ds.public_domain(8)
        ds = ds.in_domain(dom)
        proxy, _ = synthetic_proxy(ds, dom, 50_000)
        aux_given = None  # SNH's own aux = proxy (the same points)
    ent = entropy_512(proxy, dom)
    lo, hi = q
    mid = (lo + hi) / 2 * dom.side
    rng = np.random.default_rng([city_seed, n, int(eps * 1000), int(lo * 1e5)])
    tree = cKDTree(ds.xy)
    # queries near each trained size: sides in the j-th eighth of [l, u] ± half an eighth
    k = 8
    width = (hi - lo) / k * dom.side
    centres = ds.xy[rng.integers(0, len(ds), n_queries)]
    which = rng.integers(0, len(TRAIN_MODELS), n_queries)
    r_mid = np.array([lo * dom.side + width * (j + 0.5) for j in TRAIN_MODELS])[which]
    sides = r_mid + rng.uniform(-width / 2, width / 2, n_queries)
    rects = np.column_stack([centres - sides[:, None] / 2, centres + sides[:, None] / 2])
    true = exact_counts(tree, centres, sides)
    errors = {}

    def trial(mult):
        rho = mult * mid
        params = SNH.schema().resolve(
            # weight_floor 0: the settings the shipped table was made with (SNH's default is 1)
            {
                "rho_m": rho,
                "k": k,
                "query_min_pct": lo * 100,
                "query_max_pct": hi * 100,
                "preset": "fast",
                "weight_floor": 0.0,
            }
        )
        t = time.perf_counter()
        fit = fit_snh(
            ds,
            dom,
            eps,
            params,
            RunContext(rng=np.random.default_rng(city_seed)),
            sizes_subset=list(TRAIN_MODELS),
            aux_given=aux_given,
        )
        y = fit["model"](rects)
        errors[rho / dom.side] = snh_relative_error(true, y, len(ds))
        progress(f"  rho={rho:.0f} m err={errors[rho / dom.side]:.4f} ({time.perf_counter() - t:.0f} s)")

    for mult in mults:
        trial(mult)
    # a minimum at the edge of the candidates: extend by factors of 2 (at most 3 times each way)
    for _ in range(3):
        rhos = sorted(errors)
        best = min(errors, key=errors.get)
        if best == rhos[-1] and 2 * best * dom.side / mid <= 32:
            trial(2 * best * dom.side / mid)
        elif best == rhos[0] and best / 2 * dom.side >= 2.0 and best / 2 >= 1 / 2000:
            trial(best / 2 * dom.side / mid)
        else:
            break
    best = label(errors)
    return {
        "dataset": f"venues{venues}:{preset}" if venues else f"synthetic:{preset}",
        "city_seed": city_seed,
        "n": n,
        "eps": eps,
        "q_lo": lo,
        "q_hi": hi,
        "entropy": round(ent, 6),
        "best_rho": round(best, 7),
        "best_err": round(min(errors.values()), 6),
        "candidates": " ".join(f"{r:.6g}" for r in errors),
        "errors": " ".join(f"{e:.6g}" for e in errors.values()),
    }


HEADER = (
    "# ParamSelect training table (Zeighami et al. 2022, Algorithm 2) made by scripts/train_paramselect.py on "
    "synthetic cities only.\n"
    "# best_rho: SNH's best cell width as a fraction of the domain side; q_lo, q_hi: query sides (fractions); "
    "entropy: nats, 512x512 histogram of the city's public proxy.\n"
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "data" / "paramselect_table.csv"))
    ap.add_argument("--quick", action="store_true", help="2 presets, n = 100k, 2 epsilons (a smoke run)")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--city-seed", type=int, default=101)
    args = ap.parse_args(argv)
    presets, ns, epss = PRESETS, N_VALUES, EPS_VALUES
    if args.quick:
        presets, ns, epss = PRESETS[:2], (100_000,), (0.1, 0.8)
    out = Path(args.out)
    done = set()
    if args.resume and out.is_file():
        with out.open() as f:
            for rec in csv.DictReader(line for line in f if not line.startswith("#")):
                done.add((rec["dataset"], int(rec["n"]), float(rec["eps"]), float(rec["q_lo"])))
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="") as f:
            f.write(HEADER)
            csv.writer(f).writerow(COLUMNS)
    cities = [(f"synthetic:{p}", p, args.city_seed + i, 0, 0.0) for i, p in enumerate(presets)]
    venue_cities = VENUE_CITIES[:1] if args.quick else VENUE_CITIES
    cities += [
        (f"venues{v}:{p}", p, args.city_seed + len(PRESETS) + i, v, sc) for i, (p, v, sc) in enumerate(venue_cities)
    ]
    settings = list(itertools.product(cities, ns, epss, Q_RANGES))
    t0 = time.perf_counter()
    for i, ((name, preset, city_seed, venues, scatter_m), n, eps, q) in enumerate(settings):
        if (name, n, eps, q[0]) in done:
            continue
        print(
            f"[{i + 1}/{len(settings)}] {name} n={n:,} eps={eps} q={q} ({time.perf_counter() - t0:.0f} s)", flush=True
        )
        row = run_setting(
            preset,
            city_seed,
            n,
            eps,
            q,
            RHO_MULT,
            args.queries,
            lambda m: print(m, flush=True),
            venues=venues,
            scatter_m=scatter_m,
        )
        with out.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=COLUMNS).writerow(row)
    print(f"wrote {out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
