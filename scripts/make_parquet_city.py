"""Write a synthetic city of any size as a Parquet directory, chunk by chunk.

    python scripts/make_parquet_city.py OUT_DIR [--points 100000000] [--chunk 1000000]
        [--preset polycentric] [--seed 0] [--geo]

One file of ``--chunk`` rows per chunk (``part-00000.parquet``, ...), WGS84 ``lon``/``lat``
columns (or with ``--geo`` a GeoParquet WKB ``geometry`` column), the city's public square in
the files' ``heatmap`` metadata. Each chunk is an independent stream of the same city
(engine.data.parquet_source.city_chunk), so memory stays at one chunk (about 100 MB per
million points) whatever the total. Read it out of core with

    python -m engine run --dataset parquet --data-opt path=OUT_DIR --mechanism identity --depth 10
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from engine.core.errors import EngineError
    from engine.data.parquet_source import write_city
    from engine.data.synthetic import PRESETS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output directory (created; existing part files are overwritten)")
    ap.add_argument("--points", type=int, default=100_000_000)
    ap.add_argument("--chunk", type=int, default=1_000_000, help="rows per file")
    ap.add_argument("--preset", default="polycentric", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0, help="the city (same seed, same city)")
    ap.add_argument("--geo", action="store_true", help="GeoParquet WKB points instead of lon/lat columns")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    def progress(done, total):
        print(f"\r{done:,} / {total:,} points ({time.perf_counter() - t0:.0f} s)", end="", file=sys.stderr)

    try:
        files = write_city(args.out, args.points, args.chunk, args.preset, args.seed, args.geo, progress)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\n{len(files)} files in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
