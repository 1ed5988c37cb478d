"""A polygon file's regions in the right place: its edges are straight in longitude and latitude (RFC 7946), so
they are densified before they are projected onto the map; a polygon larger than the map (up to the whole
globe) is clipped to it; regions that overlap each count the people inside them, and say that they overlap.

2,000 people around London, read from a CSV upload; the map is the upload's public frame at 256 x 256 cells.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engine.data.files import load_file
from engine.data.files.polygons import load_polygons
from engine.data.region_geometry import build
from engine.regions import true_counts


def _people_csv() -> bytes:
    xy = np.random.default_rng(5).normal([-0.12, 51.5], [0.06, 0.04], (2000, 2))
    return ("lon,lat\n" + "\n".join(f"{x:.6f},{y:.6f}" for x, y in xy) + "\n").encode()


@pytest.fixture(scope="module")
def people():
    return load_file(_people_csv(), "people.csv")


def box(w: float, s: float, e: float, n: float) -> dict:
    """A lon/lat box as GeoJSON: five vertices, its edges straight in longitude and latitude."""
    return {"type": "Polygon", "coordinates": [[[w, s], [e, s], [e, n], [w, n], [w, s]]]}


def geojson(*geoms) -> bytes:
    feats = [{"type": "Feature", "properties": {"id": f"r{i + 1}"}, "geometry": g} for i, g in enumerate(geoms)]
    return json.dumps({"type": "FeatureCollection", "features": feats}).encode()


def regions_of(people, data: bytes, name: str):
    return build(name, people.public_domain(8), people.crs, polygons=load_polygons(data, name))


def test_a_box_whose_edges_run_along_parallels_holds_everyone_inside_it(people):
    """10°W to 10°E, 51.1°N to 60°N: every person (51.3°N to 51.7°N) is inside. Projected by its corners alone,
    its southern edge would run 50 km north of the 51.1°N parallel at London, across the map, leaving most
    people out."""
    lon, lat = people.lonlat[:, 0], people.lonlat[:, 1]
    assert lon.min() > -10 and lon.max() < 10 and lat.min() > 51.1 and lat.max() < 60
    regions = regions_of(people, geojson(box(-10, 51.1, 10, 60)), "box.geojson")
    assert true_counts(people, regions)[0] == len(people) == 2000
    n = regions.domain.n
    assert regions.weights.sum() == pytest.approx(n * n, rel=1e-9)  # the map lies wholly inside the box


def test_a_polygon_covering_the_globe_is_clipped_to_the_map(people):
    regions = regions_of(people, geojson(box(-180, -90, 180, 90)), "globe.geojson")
    n = regions.domain.n
    assert len(regions) == 1 and regions.weights.sum() == pytest.approx(n * n, rel=1e-9)
    assert true_counts(people, regions)[0] == 2000
    assert any("reach beyond the map's square" in note for note in regions.notes)


def test_overlapping_regions_each_count_the_people_inside_them_and_say_so(people):
    """A box and a smaller one inside it: the people of the inner one count in both (given to the first region
    holding them, the inner one would count none), the counts add up to more than the people, and the regions'
    notes say why."""
    outer, inner = (-0.3, 51.3, 0.1, 51.8), (-0.15, 51.45, 0.1, 51.8)
    regions = regions_of(people, geojson(box(*outer), box(*inner)), "overlap.geojson")
    lon, lat = people.lonlat[:, 0], people.lonlat[:, 1]
    want = [int(((lon > w) & (lon < e) & (lat > s) & (lat < n)).sum()) for w, s, e, n in (outer, inner)]
    assert 0 < want[1] < want[0]
    assert true_counts(people, regions).tolist() == want
    assert any("overlap one another" in note and "counts in each" in note for note in regions.notes)


def test_regions_that_share_a_boundary_count_a_person_on_it_once(people):
    """Two boxes meeting along 0.12°W, both with a vertex at 51.5°N on it, and a person exactly there: in
    neither's interior, counted once, in the first."""
    from engine.data.projection import to_local

    west = {"type": "Polygon", "coordinates": [[[-1, 51], [-0.12, 51], [-0.12, 51.5], [-0.12, 52], [-1, 52], [-1, 51]]]}
    east = {
        "type": "Polygon",
        "coordinates": [[[-0.12, 51], [1, 51], [1, 52], [-0.12, 52], [-0.12, 51.5], [-0.12, 51]]],
    }
    regions = regions_of(people, geojson(west, east), "halves.geojson")
    xy = to_local(np.array([-0.2, -0.05, -0.12]), np.array([51.5, 51.5, 51.5]), people.crs)
    loc, reg = regions.members(xy)
    assert sorted(zip(loc.tolist(), reg.tolist())) == [(0, 0), (1, 1), (2, 0)]


def test_the_command_line_reports_each_regions_truth_and_the_overlap(tmp_path):
    """Evaluate (``run``) lists each region's truth and the note; a release's manifest carries the note."""
    (tmp_path / "people.csv").write_bytes(_people_csv())
    outer, inner = (-0.3, 51.3, 0.1, 51.8), (-0.15, 51.45, 0.1, 51.8)
    (tmp_path / "overlap.geojson").write_bytes(geojson(box(*outer), box(*inner)))
    args = ["--dataset", "file", "--data-opt", f"path={tmp_path / 'people.csv'}", "--mechanism", "identity"]
    args += ["--regions", str(tmp_path / "overlap.geojson")]

    def cli(*more):
        p = subprocess.run([sys.executable, "-m", "engine", *more], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        return p.stdout

    doc = json.loads(cli("run", *args, "--no-cache"))
    truth = [r["true"] for r in doc["regions"]]
    assert truth[1] > 0 and sum(truth) > doc["n_points"]  # the inner region's people count in both
    assert any("overlap one another" in note for note in doc["regions_info"]["notes"])
    cli("release", *args, "--epsilon", "1", "--out", str(tmp_path / "rel"))
    manifest = json.loads((tmp_path / "rel" / "manifest.json").read_text())
    assert any("overlap one another" in note for note in manifest["regions"]["notes"])
