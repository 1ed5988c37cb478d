"""Region and context uploads cannot exhaust the server: a file of regions is read and its area weights built
in the bounded child process (engine.data.files.isolate), refused from its vertex and polygon counts where
they are over the limits, and a context layer is refused from its text or read in the child.

As in tests/test_upload_limits.py, memory is measured, not assumed: each hostile file is loaded by a fresh
interpreter standing in for the server (so its high-water mark starts low), which reports its own CPU time
and peak resident memory growth. The files are made here: combs whose teeth cross every cell of the map
(4,000 and 40,000 vertices), one MultiPolygon of 100,000 specks, a context layer of 2,000,000 vertices, and
a city's 77 neighbourhoods of 90 to 320 vertices each, a legitimate file that must stay cheap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import shapely

from engine.bench.geofiles import CHICAGO, feature, feature_collection, neighbourhoods_geojson
from engine.core.errors import DataError
from engine.data.projection import to_local

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
LONDON = (-0.2, 51.4, 0.0, 51.6)  # the map the hostile regions are drawn over


def comb_geojson(vertices: int, box=LONDON) -> bytes:
    """One polygon of ``vertices`` vertices (the closing one counted): a base along the map's bottom and
    (vertices - 4) / 4 teeth up to its top, each thinner than a cell of a 256-cell map, so that its boundary
    crosses nearly every cell."""
    x0, y0, x1, y1 = box
    teeth = max((vertices - 4) // 4, 1)
    xs = np.linspace(x0, x1, 2 * teeth + 1)
    base = y0 + 0.1 * (y1 - y0)
    ring = [[x0, y0]]
    for t in range(teeth):
        a, b = xs[2 * t], xs[2 * t + 1]
        ring += [[a, base], [a, y1], [b, y1], [b, base]]
    ring += [[x1, base], [x1, y0], [x0, y0]]
    ring = np.round(np.array(ring), 5).tolist()
    return feature_collection([feature({"type": "Polygon", "coordinates": [ring]}, id="comb")])


def comb_ring(data: bytes) -> list:
    return json.loads(data)["features"][0]["geometry"]["coordinates"][0]


def specks_geojson(parts: int, box=LONDON) -> bytes:
    """One MultiPolygon of ``parts`` triangles a metre across, scattered over the map."""
    x0, y0, x1, y1 = box
    c = np.round(np.random.default_rng(0).uniform([x0, y0], [x1, y1], (parts, 2)), 6)
    d = 1e-5
    polys = [[[[x, y], [x + d, y], [x + d, y + d], [x, y]]] for x, y in c.tolist()]
    return feature_collection([feature({"type": "MultiPolygon", "coordinates": polys}, id="specks")])


def roads_geojson(lines: int, per_line: int, box=LONDON) -> bytes:
    """A context layer of ``lines`` LineStrings of ``per_line`` vertices each."""
    x0, y0, x1, y1 = box
    xy = np.round(np.random.default_rng(1).uniform([x0, y0], [x1, y1], (lines, per_line, 2)), 6).tolist()
    return feature_collection(
        [feature({"type": "LineString", "coordinates": c}, name=f"road {i}") for i, c in enumerate(xy)]
    )


def domain_of(box, depth: int):
    from engine.core.grid import Domain
    from engine.data.projection import bbox_to_local, local_crs

    crs = local_crs(box)
    return Domain.around(*bbox_to_local(box, crs), depth), crs


_SERVER = textwrap.dedent(
    """
    import json, os, sys, time

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    def main():
        from engine.data.files.isolate import warm
        from engine.data import context, region_geometry  # imported before the measure, as in a running server
        from tests.test_region_limits import domain_of

        warm()  # the forkserver starts once
        kind, path, box, depth = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
        os.environ.update(json.loads(sys.argv[5]))  # the limits under test, after the warm-up
        domain, crs = domain_of(box, depth)
        region_geometry.grid_regions(domain, crs)  # scipy's sparse matrices, imported as a running server has them
        before, t = hwm(), time.process_time()
        out = {}
        try:
            if kind == "regions":  # the command line's path: --regions FILE
                r = region_geometry.build(path, domain, crs)
                out["regions"], out["cells"] = len(r), float(r.weights.sum())
            else:  # the dashboard's: the layer the context uploader reads
                data = open(path, "rb").read()
                before, t = hwm(), time.process_time()
                out["paths"] = len(context.load_context_isolated(data, os.path.basename(path)).paths)
        except Exception as exc:
            out["error"] = type(exc).__name__ + ": " + str(exc)
        out["cpu"] = time.process_time() - t
        out["server_growth"] = hwm() - before
        print(json.dumps(out))

    if __name__ == "__main__":
        main()
    """
)


def serve(tmp_path, kind: str, name: str, data: bytes, box=LONDON, depth: int = 8, **env) -> dict:
    """Load ``data`` as a server would, in a fresh interpreter; its answer, CPU seconds and memory growth.
    A server stuck in the file (minutes of CPU) fails the test at the timeout."""
    path = tmp_path / name
    path.write_bytes(data)
    script = tmp_path / "server.py"
    script.write_text(_SERVER)
    limits = json.dumps({k: str(v) for k, v in env.items()})
    t = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), kind, str(path), json.dumps(box), str(depth), limits],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall"] = time.monotonic() - t
    return out


@pytest.mark.parametrize("vertices", [4_000, 40_000])
def test_a_comb_polygon_is_weighed_in_the_child_in_seconds(tmp_path, vertices):
    """The comb crosses nearly every cell of the 256 x 256 map, so intersecting it with each cell it crosses
    costs the polygon's size per cell (minutes of CPU at 40,000 vertices). It is read and weighed in the child,
    exactly, in a second or two, and the server does no more than send and receive."""
    data = comb_geojson(vertices)
    out = serve(tmp_path, "regions", "comb.geojson", data)
    assert out.get("regions") == 1, out
    domain, crs = domain_of(LONDON, 8)
    # its area on the map: the base's 14 km edges, straight in lon/lat, bow by 5 m in metres (split every 50 m)
    ring = shapely.get_coordinates(shapely.segmentize(shapely.Polygon(comb_ring(data)), 0.0005))
    comb = shapely.Polygon(to_local(ring[:, 0], ring[:, 1], crs))
    assert out["cells"] == pytest.approx(comb.area / domain.cell**2, rel=1e-5), out
    assert out["cpu"] < 2.0 and out["wall"] < 30, out  # the server's own CPU, and the whole visit
    assert out["server_growth"] < 2 * len(data) + 60 * MiB, out  # the file's bytes and the weights sent back


def test_a_multipolygon_of_100000_specks_is_refused_from_its_count(tmp_path):
    data = specks_geojson(100_000)
    out = serve(tmp_path, "regions", "specks.geojson", data)
    assert "100,000 polygons" in out.get("error", "") and "HEATMAP_MAX_REGION_PARTS" in out["error"], out
    assert out["cpu"] < 2.0 and out["wall"] < 30, out
    assert out["server_growth"] < 2 * len(data) + 30 * MiB, out


def test_a_large_context_layer_is_refused_in_the_child(tmp_path):
    """2,000,000 vertices (45 MB; JSON takes about 10 times its text once parsed): refused in the child from
    its text, whose parse would take over 4 times the file and 200 MB; the server keeps the bytes it sent."""
    data = roads_geojson(20_000, 100)
    out = serve(tmp_path, "context", "roads.geojson", data)
    assert "of memory to read" in out.get("error", "") and "HEATMAP_PARSE_MEMORY_FACTOR" in out["error"], out
    assert out["cpu"] < 2.0, out
    assert out["server_growth"] < 2 * len(data) + 30 * MiB, out


def test_a_context_layer_too_large_to_parse_is_refused_before_it_is_decoded(monkeypatch):
    from engine.data.context import load_context

    monkeypatch.setenv("HEATMAP_PARSE_MEMORY_MB", "5")

    def fail(*a, **k):
        raise AssertionError("the layer was decoded")

    monkeypatch.setattr(json, "loads", fail)
    with pytest.raises(DataError, match="of memory to read.*HEATMAP_PARSE_MEMORY_MB"):
        load_context(roads_geojson(500, 100), "roads.geojson")


def test_region_files_are_refused_from_the_size_of_their_geometries_before_decoding(tmp_path, monkeypatch):
    """GeoParquet (its footer), a zipped Shapefile (the zip's headers) and a GeoPackage (its blobs) say how many
    bytes their geometries take, which bounds their vertices: a file over the limit is refused before any
    geometry is decoded."""
    import io
    import zipfile

    import geopandas as gpd

    from engine.data.files.polygons import load_polygons

    comb = shapely.from_geojson(json.dumps(json.loads(comb_geojson(40_000))["features"][0]["geometry"]))
    gdf = gpd.GeoDataFrame({"code": ["comb"]}, geometry=[comb], crs=4326)
    gdf.to_parquet(tmp_path / "comb.parquet")
    gdf.to_file(tmp_path / "comb.gpkg", driver="GPKG")
    gdf.to_file(tmp_path / "shp", driver="ESRI Shapefile")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in (tmp_path / "shp").iterdir():
            z.write(f, f.name)
    (tmp_path / "comb.zip").write_bytes(buf.getvalue())
    monkeypatch.setenv("HEATMAP_MAX_REGION_VERTICES", "5000")
    monkeypatch.setenv("HEATMAP_MAX_REGION_PARTS", "100")

    def fail(*a, **k):
        raise AssertionError("a geometry was decoded")

    monkeypatch.setattr(shapely, "from_wkb", fail)
    import fiona

    monkeypatch.setattr(fiona, "open", fail)
    for name in ("comb.parquet", "comb.gpkg", "comb.zip"):
        with pytest.raises(DataError, match="HEATMAP_MAX_REGION_VERTICES") as err:
            load_polygons(tmp_path / name)
        assert "its geometries take" in str(err.value), name
    with pytest.raises(DataError, match="40,000 vertices .counted before decoding.*HEATMAP_MAX_REGION_VERTICES"):
        load_polygons(comb_geojson(40_000), "comb.geojson")


def test_77_neighbourhoods_read_and_weighed_in_under_a_second_of_cpu():
    """A city's neighbourhood file (77 community areas, as Chicago's) over the finest map, 1,024
    cells a side: the server's CPU and its children's together (the forkserver is started first)."""
    from engine.data.files import isolate
    from engine.data.files.polygons import load_polygons_isolated
    from engine.data.region_geometry import build

    isolate.warm()
    data = neighbourhoods_geojson()
    domain, crs = domain_of(CHICAGO, 10)
    cpu = []
    for i in range(3):  # the median of three: a busy machine shifts one
        child0, t = isolate.TALLY["cpu_s"], time.process_time()
        pf = load_polygons_isolated(data, "neighbourhoods.geojson")
        regions = build(f"round {i}", domain, crs, polygons=pf)  # a spec of its own: not kept from a round before
        cpu.append(time.process_time() - t + isolate.TALLY["cpu_s"] - child0)
    shared = np.asarray(regions.weights.sum(axis=0)).ravel()
    assert len(regions) == 77 and shared.max() < 1 + 1e-6  # they tile the city: no cell is shared out twice
    assert np.mean(shared[shared > 0] > 1 - 1e-6) > 0.95  # most cells of the city are wholly shared out
    assert float(np.median(cpu)) < 1.0, cpu


def test_a_page_rerun_does_not_weigh_the_regions_again():
    """The dashboard reads an upload once (its reader is cached) and builds its regions for each result on every
    rerun: the regions are kept by the file's digest and the map, so a rerun, even with a fresh copy of the
    read file (what Streamlit's cache hands back), costs no child and no time."""
    import copy

    from engine.data.files import isolate
    from engine.data.files.polygons import load_polygons_isolated
    from engine.data.region_geometry import build

    data = neighbourhoods_geojson()
    domain, crs = domain_of(CHICAGO, 10)
    pf = load_polygons_isolated(data, "neighbourhoods.geojson")
    first = build("neighbourhoods.geojson", domain, crs, polygons=pf)
    runs, t = isolate.TALLY["runs"], time.process_time()
    again = build("neighbourhoods.geojson", domain, crs, polygons=copy.deepcopy(pf))
    assert again is first and isolate.TALLY["runs"] == runs
    assert time.process_time() - t < 0.05
    other = build("neighbourhoods.geojson", domain.with_depth(9), crs, polygons=pf)  # another map: built anew
    assert isolate.TALLY["runs"] == runs + 1 and other.domain.n == 512
