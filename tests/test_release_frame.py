"""Releases of uploads are over a public frame, never the data's exact bounding box (whose edges are four
people's coordinates): the analyst's stated region, or the box rounded outward to a coarse public grid;
the manifest says which."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from engine.data.files import load_file
from engine.data.projection import FRAME_STEPS, public_frame, to_local
from engine.run import RunConfig, run
from engine.run.execution._release_files import manifest


def upload(seed: int = 5, n: int = 400, **kw):
    rng = np.random.default_rng(seed)
    lon = rng.uniform(-0.2137, -0.0713, n)
    lat = rng.uniform(51.4711, 51.5583, n)
    data = pd.DataFrame({"lon": lon, "lat": lat}).to_csv(index=False).encode()
    return load_file(data, "people.csv", **kw), lon, lat


def release_of(ds):
    cfg = RunConfig(dataset="file:people.csv", mechanism="ug", epsilon=1.0, depth=5, mode="release")
    return manifest(run(cfg, dataset=ds))


def _on_grid(v: float, step: float) -> bool:
    return abs(v / step - round(v / step)) < 1e-6


@pytest.mark.parametrize("seed", range(20))
def test_an_uploads_region_is_its_box_rounded_out_to_a_coarse_grid(seed):
    ds, lon, lat = upload(seed)
    west, south, east, north = ds.meta.bbox
    assert west <= lon.min() and east >= lon.max() and south <= lat.min() and north >= lat.max()
    step = next(s for s in FRAME_STEPS if f"{s:g}°" in ds.meta.extra["region_frame"])
    assert step >= max(lon.max() - lon.min(), lat.max() - lat.min()) / 4
    assert all(_on_grid(v, step) for v in ds.meta.bbox)
    for v in (lon.min(), lon.max(), lat.min(), lat.max()):
        assert not np.isclose(ds.meta.bbox, v, rtol=0, atol=1e-9).any()  # no edge is a person's coordinate


def test_the_manifest_carries_no_extreme_coordinate_and_says_which_frame():
    ds, lon, lat = upload(11)
    doc = release_of(ds)
    assert doc["dataset"]["region_from_data"] is True
    assert "rounded outward to a" in doc["dataset"]["region_frame"]
    assert any("rounded outward" in s for s in doc["side_information"])
    text = json.dumps(doc)
    for v in (lon.min(), lon.max(), lat.min(), lat.max()):
        assert repr(float(v))[:9] not in text  # not even its first six decimals
    xy = to_local(np.array([lon.min(), lon.max()]), np.array([lat.min(), lat.max()]), ds.crs)
    g = doc["grid"]
    assert not np.isclose([g["x0_m"], g["y0_m"]], [xy[0, 0], xy[0, 1]], atol=1.0).any()


def test_a_stated_frame_is_used_and_named():
    ds, _, _ = upload(3, bbox=(-0.25, 51.45, -0.05, 51.6))
    assert ds.meta.bbox == (-0.25, 51.45, -0.05, 51.6) and not ds.meta.bbox_from_data
    doc = release_of(ds)
    assert doc["dataset"]["region_frame"] == "the region the analyst stated"
    assert doc["dataset"]["region_lonlat"] == [-0.25, 51.45, -0.05, 51.6]


def test_the_frame_of_a_catalogue_dataset_is_its_public_region():
    res = run(RunConfig(dataset="snow_cholera", mechanism="ug", epsilon=1.0, depth=4, mode="release"))
    assert manifest(res)["dataset"]["region_frame"] == "the dataset's public region (its catalogue entry)"


def test_public_frame_handles_edges_and_the_antimeridian():
    assert public_frame((179.95, -17.0, 180.05, -16.95)) == ((179.95, -17.0, 180.05, -16.95), 0.05)
    frame, step = public_frame((-179.9, -89.99, 179.9, 89.99))
    assert step == 90.0 and frame == (-180.0, -90.0, 180.0, 90.0)
    frame, step = public_frame((13.40123, 52.50077, 13.40391, 52.50211))
    assert step == 0.001 and frame == (13.401, 52.5, 13.404, 52.503)
