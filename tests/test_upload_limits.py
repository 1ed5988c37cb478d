"""Uploads cannot exhaust the server: bombs are refused from metadata where the format allows, and every
upload is parsed in a child process whose memory and time are bounded (engine.data.files.isolate).

Memory is measured, not assumed: each load runs in a fresh interpreter standing in for the server (so its
high-water mark starts low), which reports its own peak resident memory growth and what the parsing child
reported.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.core.errors import DataError
from engine.data.files import load_file
from engine.data.files.isolate import load_file_isolated
from engine.data.files.upload_limits import memory_budget

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def parquet_dictionary_bomb(groups: int = 1000, value_bytes: int = 2_000_000) -> bytes:
    """A dictionary bomb: a string column whose dictionary holds one 2 MB value, in many small row groups
    (each row group carries its own dictionary page): a few hundred kB on disk, gigabytes decoded."""
    big = "5" * value_bytes
    t = pa.table(
        {
            "lat": pa.DictionaryArray.from_arrays(pa.array(np.zeros(1, dtype=np.int32)), pa.array([big])),
            "lon": pa.array(np.zeros(1)),
        }
    )
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, t.schema, compression="zstd") as w:
        for _ in range(groups):
            w.write_table(t)
    return buf.getvalue()


def multipoint_geojson(n: int) -> bytes:
    xy = np.round(np.random.default_rng(1).uniform([-0.2, 51.4], [0.0, 51.6], size=(n, 2)), 6)
    coords = ",".join(f"[{x},{y}]" for x, y in xy)
    geom = '{"type":"MultiPoint","coordinates":[' + coords + "]}"
    return (
        '{"type":"FeatureCollection","features":[{"type":"Feature","properties":{},"geometry":' + geom + "}]}"
    ).encode()


def points_csv(n: int) -> bytes:
    xy = np.random.default_rng(2).uniform([-0.2, 51.4], [0.0, 51.6], size=(n, 2))
    return ("lon,lat\n" + "\n".join(f"{x:.6f},{y:.6f}" for x, y in xy) + "\n").encode()


_SERVER = textwrap.dedent(
    """
    import json, os, sys, time

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    def main():
        from engine.data.files.isolate import load_file_isolated
        load_file_isolated(b"lat,lon\\n51.5,-0.1\\n51.6,-0.2\\n", "warm.csv")  # the forkserver starts once
        path, name = sys.argv[1], sys.argv[2]
        os.environ.update(json.loads(sys.argv[3]))  # the limits under test, after the warm-up
        data = open(path, "rb").read()
        before = hwm()
        t = time.perf_counter()
        out = {}
        try:
            ds = load_file_isolated(data, name)
            out["loaded"] = len(ds)
            out["child_peak"] = ds.meta.extra["parse_peak_bytes"]
        except Exception as exc:
            out["error"] = type(exc).__name__ + ": " + str(exc)
        out["seconds"] = time.perf_counter() - t
        out["server_growth"] = hwm() - before
        print(json.dumps(out))

    if __name__ == "__main__":
        main()
    """
)


def serve(tmp_path, name: str, data: bytes, **env) -> dict:
    path = tmp_path / name
    path.write_bytes(data)
    script = tmp_path / "server.py"
    script.write_text(_SERVER)
    limits = json.dumps({k: str(v) for k, v in env.items()})
    done = subprocess.run(
        [sys.executable, str(script), str(path), name, limits],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_parquet_dictionary_bomb_is_refused_from_its_footer(tmp_path, monkeypatch):
    data = parquet_dictionary_bomb()
    assert len(data) < 600_000
    decoded = pq.ParquetFile(io.BytesIO(data)).metadata
    assert sum(decoded.row_group(g).column(0).total_uncompressed_size for g in range(decoded.num_row_groups)) > 1e9

    def _fail(*a, **k):
        raise AssertionError("a page was decoded")

    monkeypatch.setattr(pq.ParquetFile, "read", _fail)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", _fail)
    with pytest.raises(DataError, match="once decoded, over the limit"):
        load_file(data, "bomb.parquet")
    out = serve(tmp_path, "bomb.parquet", data)
    assert "once decoded, over the limit" in out["error"]
    assert out["server_growth"] < 2 * len(data) + 30 * MiB, out


def test_a_large_geojson_multipoint_is_refused_before_it_is_decoded(tmp_path):
    data = multipoint_geojson(1_000_000)  # ~21 MB; scripts/upload_bombs.py measures a 104 MB one (BENCHMARKS.md)
    out = serve(tmp_path, "mp.geojson", data, HEATMAP_PARSE_MEMORY_MB=20)
    assert "of memory to parse as GeoJSON" in out["error"], out
    assert out["server_growth"] < 2 * len(data) + 30 * MiB, out


def test_a_bomb_the_metadata_misses_ends_the_child_not_the_server(tmp_path):
    """A valid CSV parsed under a memory budget smaller than it needs: the watching parent kills the child."""
    data = points_csv(400_000)
    out = serve(tmp_path, "big.csv", data, HEATMAP_PARSE_MEMORY_FACTOR=0.1, HEATMAP_PARSE_MEMORY_MB=5)
    assert "of memory to read" in out["error"] and "was stopped" in out["error"], out
    assert out["server_growth"] < 2 * len(data) + 30 * MiB, out


def test_a_valid_file_is_parsed_within_its_memory_budget(tmp_path):
    data = points_csv(1_000_000)  # ~20 MB
    out = serve(tmp_path, "ok.csv", data)
    assert out.get("loaded") == 1_000_000, out
    assert 0 < out["child_peak"] <= memory_budget(len(data)), out
    assert out["server_growth"] < 2 * len(data) + 100 * MiB, out  # the bytes, and the Dataset sent back


def test_the_isolated_load_gives_the_same_dataset_and_messages():
    data = points_csv(2000)
    a, b = load_file(data, "x.csv"), load_file_isolated(data, "x.csv")
    assert np.array_equal(a.lonlat, b.lonlat) and a.meta.description == b.meta.description
    for bad, name in ((b"lat,lon\n1,2\n", "one.csv"), (b"\x00\x01", "x.parquet"), (b"[", "x.geojson")):
        with pytest.raises(DataError) as here:
            load_file(bad, name)
        with pytest.raises(DataError) as there:
            load_file_isolated(bad, name)
        assert str(here.value) == str(there.value)


def test_a_slow_parse_is_stopped(monkeypatch):
    monkeypatch.setenv("HEATMAP_PARSE_SECONDS", "0.001")
    monkeypatch.setenv("HEATMAP_PARSE_SECONDS_PER_MB", "0.001")
    with pytest.raises(DataError, match="took longer than"):
        load_file_isolated(points_csv(200_000), "slow.csv")


def test_the_parser_child_never_runs_the_callers_main_script(tmp_path, monkeypatch):
    """A child re-imports its parent's ``__main__``: in the dashboard that is the page Streamlit runs, in a test
    run an AppTest script that fails outside its runner. The parser starts its child under a bare ``__main__``,
    so a main script that raises (here, on import) costs nothing, and the caller's ``__main__`` is put back."""
    import sys
    import types

    script = tmp_path / "page.py"
    script.write_text("raise SystemExit('the caller main script ran in the parser child')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    ds = load_file_isolated(b"lon,lat\n0.1,51.5\n0.2,51.6\n", "points.csv")
    assert len(ds) == 2
    assert sys.modules["__main__"] is main
