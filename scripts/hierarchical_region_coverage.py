"""Coverage of the hierarchical release's regional 95 % margins, default and ``nonnegative`` off.

The region tests' setting (tests/test_regions.py): their smooth and bunched data, a 32 x 32 map, eps 1; regions
H3 res 7, 12 Voronoi districts, and a hover's blocks of 4 x 4 and 2 x 2 cells. Per seed, the share of regions whose
estimate lies within its margin; prints the mean over seeds and its standard error. For the default it also scores
its least-squares leaves' sums against the same margins.

Run: PYTHONPATH=. nice python scripts/hierarchical_region_coverage.py [SEEDS] [SPEC,SPEC,...]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from engine.bench.regions import CRS, SIDE, bench_dataset, datasets, voronoi_geojson
from engine.core.grid import Domain, downsample
from engine.data.region_geometry import block_regions, build
from engine.mechanisms import RunContext, get
from engine.regions import region_margins, true_counts

DOMAIN = Domain(-SIDE / 2, -SIDE / 2, SIDE, 5)


def _regions(spec: str, ds):
    if spec.startswith("blocks:"):
        k = int(spec.split(":")[1])
        return block_regions(DOMAIN, CRS, k), downsample(ds.true_histogram(DOMAIN), k).ravel()
    regions = build(spec, DOMAIN, CRS)
    return regions, true_counts(ds, regions)


def main(seeds: int, specs: list[str] | None) -> None:
    poly = voronoi_geojson(Path(tempfile.mkdtemp()) / "districts.geojson", n=12)
    specs = specs or ["h3:7", f"{poly}:code", "blocks:4", "blocks:2"]
    cls = get("hierarchical")
    t0 = time.process_time()
    for data in ("smooth", "bunched"):
        ds = bench_dataset(datasets()[data])
        for spec in specs:
            regions, truth = _regions(spec, ds)
            for nonneg in (True, False):
                cover, ls_cover = [], []
                for s in range(seeds):
                    params = cls.schema().resolve({"nonnegative": nonneg})
                    r = cls().run(ds, DOMAIN, 1.0, params, RunContext(rng=np.random.default_rng(s)))
                    m = region_margins(r, regions)
                    cover.append((np.abs(m.estimate - truth) <= m.margin95).mean())
                    if nonneg:
                        est = regions.aggregate(r.summed_map())
                        ls_cover.append((np.abs(est - truth) <= m.margin95).mean())
                v = np.array(cover)
                line = f"{data:8s} {Path(spec).name:20s} nonnegative={nonneg!s:5s} coverage {v.mean():.4f}"
                line += f" (s.e. {v.std(ddof=1) / np.sqrt(seeds):.4f})"
                if ls_cover:
                    line += f"; least-squares sums within the same margins {np.mean(ls_cover):.4f}"
                print(line, flush=True)
    print(f"CPU {time.process_time() - t0:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100, sys.argv[2].split(",") if len(sys.argv) > 2 else None)
