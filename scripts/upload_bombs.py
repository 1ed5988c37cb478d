"""What an upload bomb costs the server: seconds and the server's peak memory growth, for a load in the
server's own process (``load_file``) and for the dashboard's isolated parse (``load_file_isolated``).

    python scripts/upload_bombs.py KIND MODE        # KIND: parquet-dict | multipoint | points | csv; MODE: in | isolated

Each call is a fresh interpreter standing in for the server (so its memory high-water mark starts low);
the bombs are tests/test_upload_limits.py's at the issue's sizes (a 0.4 MB Parquet whose dictionary pages
decode to 1.9 GB; a 104 MB GeoJSON MultiPoint of 5M points; a 141 MB FeatureCollection of 1.5M points;
a 19 MB CSV of 1M points, which is valid and loads).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def _hwm() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _points_fc(n: int) -> bytes:
    import numpy as np

    xy = np.round(np.random.default_rng(1).uniform([-0.2, 51.4], [0.0, 51.6], size=(n, 2)), 6)
    head = '{"type":"Feature","properties":{},"geometry":{"type":"Point","coordinates":['
    feats = ",".join(f"{head}{x},{y}]}}}}" for x, y in xy)
    return ('{"type":"FeatureCollection","features":[' + feats + "]}").encode()


def main() -> int:
    from engine.data.files import load_file
    from engine.data.files.isolate import load_file_isolated
    from tests.test_upload_limits import multipoint_geojson, parquet_dictionary_bomb, points_csv

    kind, mode = sys.argv[1], sys.argv[2]
    name, make = {
        "parquet-dict": ("bomb.parquet", parquet_dictionary_bomb),
        "multipoint": ("mp.geojson", lambda: multipoint_geojson(5_000_000)),
        "points": ("fc.geojson", lambda: _points_fc(1_500_000)),
        "csv": ("ok.csv", lambda: points_csv(1_000_000)),
    }[kind]
    path = Path(tempfile.gettempdir()) / f"upload-bomb-{name}"
    if mode == "make":  # built in a process of its own: building it must not raise the loader's high-water mark
        path.write_bytes(make())
        return 0
    if not path.exists():
        subprocess.run([sys.executable, __file__, kind, "make"], check=True)
    data = path.read_bytes()
    load = load_file if mode == "in" else load_file_isolated
    if mode != "in":
        load_file_isolated(b"lat,lon\n51.5,-0.1\n51.6,-0.2\n", "warm.csv")  # the forkserver starts once
    before, t = _hwm(), time.perf_counter()
    out = {"kind": kind, "mode": mode, "file_mb": round(len(data) / 2**20, 1)}
    try:
        ds = load(data, name)
        out["loaded"] = len(ds)
        out["child_peak_mb"] = round(ds.meta.extra.get("parse_peak_bytes", 0) / 2**20)
    except Exception as exc:
        out["refused"] = str(exc)[:160]
    out["seconds"] = round(time.perf_counter() - t, 2)
    out["server_growth_mb"] = round((_hwm() - before) / 2**20)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
