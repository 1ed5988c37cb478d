"""How often an accidental copy of the same people would get a fresh ledger (BENCHMARKS.md "Ledger copies").

For 200 sets of 2,000 people around each place (float64 locations, spread 0.03° x 0.02°), two copies: the
locations rounded to 6 decimals (a CSV written with float_format="%.6f") and cast to float32 (a float32
GeoParquet). A key made by rounding every location to a grid of G degrees and hashing the set changes when any
location crosses an edge of the grid; the people keys (engine/run/bookkeeping/_people.py) share a ledger when the copy reads
the key the original books under. Also the CPU time of a fingerprint (median of 3).

    python scripts/ledger_copies.py [--sets 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from engine.run.bookkeeping import exact_key, fingerprint_people, ledger_keys  # noqa: E402

PLACES = {"London": (-0.12, 51.5), "Tokyo": (139.7, 35.7), "lon 179.9": (179.9, -16.5)}
GRIDS = (1e-7, 1e-6, 1e-5, 1e-4, 1e-3)


class Points:
    def __init__(self, lonlat):
        self.lonlat, self.user_id = lonlat, None


def _rounded(ll: np.ndarray, g: float) -> bytes:
    q = np.rint(ll / g).astype(np.int64)
    return q[np.lexsort((q[:, 1], q[:, 0]))].tobytes()


def copies(sets: int) -> list[dict]:
    rows = []
    for place, (lon0, lat0) in PLACES.items():
        for copy in ("6 decimals", "float32"):
            changed = dict.fromkeys(GRIDS, 0)
            shared, reads = 0, []
            for seed in range(sets):
                rng = np.random.default_rng(seed)
                ll = np.column_stack([lon0 + rng.normal(0, 0.03, 2000), lat0 + rng.normal(0, 0.02, 2000)])
                cp = np.round(ll, 6) if copy == "6 decimals" else ll.astype(np.float32).astype(np.float64)
                for g in GRIDS:
                    changed[g] += _rounded(ll, g) != _rounded(cp, g)
                a, b = ledger_keys(fingerprint_people(Points(ll))), ledger_keys(fingerprint_people(Points(cp)))
                shared += a[0] in b and b[0] in a
                reads.append(len(a) - 1)
            rows.append(
                {
                    "place": place,
                    "copy": copy,
                    **{f"fresh at {g:g}°": changed[g] / sets for g in GRIDS},
                    "people keys: shared": shared / sets,
                    "keys read": float(np.mean(reads)),
                }
            )
    return rows


def cpu(n: int) -> dict:
    rng = np.random.default_rng(0)
    ll = np.column_stack([rng.uniform(-0.5, 0.3, n), rng.uniform(51.2, 51.7, n)])
    out = {"locations": n}
    for name, f in (
        ("exact key alone", exact_key),
        ("people keys (centroid keys and the exact key)", fingerprint_people),
    ):
        ts = []
        for _ in range(3):
            t0 = time.process_time()
            f(Points(ll))
            ts.append(time.process_time() - t0)
        out[name] = statistics.median(ts)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=200)
    args = ap.parse_args()
    for r in copies(args.sets):
        print("  ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in r.items()))
    for n in (100_000, 1_000_000, 5_000_000):
        r = cpu(n)
        print(f"{n:,} locations: CPU s, " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "locations"))


if __name__ == "__main__":
    main()
