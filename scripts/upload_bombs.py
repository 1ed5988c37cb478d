"""What an upload bomb costs the server: seconds and the server's peak memory growth, for a load in the
server's own process (``load_file``) and for the dashboard's isolated parse (``load_file_isolated``); and
what a region or context upload costs it, the way the dashboard's page takes it.

    python scripts/upload_bombs.py KIND MODE        # KIND: parquet-dict | multipoint | points | csv; MODE: in | isolated
    python scripts/upload_bombs.py KIND page        # KIND: comb-4k | comb-40k | specks-100k | context-136mb | neighbourhoods-77

Each call is a fresh interpreter standing in for the server (so its memory high-water mark starts low);
the bombs are tests/test_upload_limits.py's at full size (a 0.4 MB Parquet whose dictionary pages
decode to 1.9 GB; a 104 MB GeoJSON MultiPoint of 5M points; a 141 MB FeatureCollection of 1.5M points;
a 19 MB CSV of 1M points, which is valid and loads).

``page``: a region file is read as the regions uploader reads it and its regions built over a 256 x 256 map
(the command line's default depth) twice, as a page builds them on a run and on the rerun after; a context
layer is read as the context uploader reads it. The files are tests/test_region_limits.py's: combs of 4,000
and 40,000 vertices over London, one MultiPolygon of 100,000 specks, a context layer of 136 MB (6,000,000
vertices) and 77 neighbourhoods of 90-320 vertices over Chicago (a legitimate file). The page's
functions are the isolated ones where the code has them, else the in-process ones (run it from a worktree of
older code to measure that code). It reports the server's CPU seconds and peak memory growth and, where the
work ran in a child, the child's CPU seconds.
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


REGION_FILES = {  # kind: (file name, maker, the map's lon/lat box)
    "comb-4k": ("comb4k.geojson", lambda t: t.comb_geojson(4_000), "LONDON"),
    "comb-40k": ("comb40k.geojson", lambda t: t.comb_geojson(40_000), "LONDON"),
    "specks-100k": ("specks.geojson", lambda t: t.specks_geojson(100_000), "LONDON"),
    "neighbourhoods-77": ("neighbourhoods.geojson", lambda t: t.neighbourhoods_geojson(), "CHICAGO"),
    "context-136mb": ("roads.geojson", lambda t: _roads(60_000, 100), "LONDON"),
}


def _roads(lines: int, per_line: int) -> bytes:
    """tests/test_region_limits.py's context layer (LineStrings over London), written a thousand lines at a time:
    Python lists of six million positions would take gigabytes to make it."""
    import numpy as np

    rng, parts = np.random.default_rng(1), []
    for start in range(0, lines, 1000):
        xy = np.round(rng.uniform([-0.2, 51.4], [0.0, 51.6], (min(1000, lines - start), per_line, 2)), 6)
        for i, line in enumerate(xy, start):
            coords = ",".join(f"[{x},{y}]" for x, y in line)
            parts.append(
                f'{{"type":"Feature","properties":{{"name":"road {i}"}},"geometry":{{"type":"LineString","coordinates":[{coords}]}}}}'
            )
    return ('{"type":"FeatureCollection","features":[' + ",".join(parts) + "]}").encode()


def _page(kind: str) -> dict:
    """A region or context upload as the dashboard's page takes it (see the module docstring)."""
    import tests.test_region_limits as t
    from engine.data import context, region_geometry
    from engine.data.files import isolate, polygons

    name, make, box = REGION_FILES[kind]
    path = Path(tempfile.gettempdir()) / f"upload-bomb-{name}"
    if not path.exists():
        subprocess.run([sys.executable, __file__, kind, "make"], check=True)
    data = path.read_bytes()
    domain, crs = t.domain_of(getattr(t, box), 8)
    region_geometry.grid_regions(domain, crs)  # scipy's sparse matrices, as a running server has them
    isolate.load_file_isolated(b"lat,lon\n51.5,-0.1\n51.6,-0.2\n", "warm.csv")  # the forkserver starts once
    tally = getattr(isolate, "TALLY", {})
    child0 = tally.get("cpu_s", 0.0)
    out = {"kind": kind, "file_mb": round(len(data) / 2**20, 2)}
    before, t0, w0 = _hwm(), time.process_time(), time.perf_counter()
    try:
        if kind.startswith("context"):
            read = getattr(context, "load_context_isolated", context.load_context)
            out["paths"] = len(read(data, name).paths)
        else:
            read = getattr(polygons, "load_polygons_isolated", polygons.load_polygons)
            pf = read(data, name)
            out["regions"] = len(region_geometry.build(name, domain, crs, polygons=pf))
            t1 = time.process_time()
            region_geometry.build(name, domain, crs, polygons=pf)
            out["rerun_cpu_s"] = round(time.process_time() - t1, 3)
    except Exception as exc:
        out["refused"] = str(exc)[:200]
    out["server_cpu_s"] = round(time.process_time() - t0, 2)
    out["child_cpu_s"] = round(tally.get("cpu_s", 0.0) - child0, 2) if tally else None
    out["seconds"] = round(time.perf_counter() - w0, 2)
    out["server_growth_mb"] = round((_hwm() - before) / 2**20)
    return out


def main() -> int:
    kind, mode = sys.argv[1], sys.argv[2]
    if kind in REGION_FILES:
        if mode == "make":
            import tests.test_region_limits as t

            name, make, _ = REGION_FILES[kind]
            (Path(tempfile.gettempdir()) / f"upload-bomb-{name}").write_bytes(make(t))
            return 0
        print(json.dumps(_page(kind)))
        return 0
    from engine.data.files import load_file
    from engine.data.files.isolate import load_file_isolated
    from tests.test_upload_limits import multipoint_geojson, parquet_dictionary_bomb, points_csv

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
