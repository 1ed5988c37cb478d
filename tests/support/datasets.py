"""In-memory datasets for the mechanisms' own tests: points in metres on the square [0, SIDE]^2, with the square's
bounding box in degrees at the equator's scale."""

from __future__ import annotations

import numpy as np

from engine.data.dataset import Dataset, DatasetMeta

SIDE = 16_000.0  # metres
CRS = "+proj=aeqd +lat_0=0 +lon_0=0 +datum=WGS84 +units=m +no_defs"  # metres around (0, 0): the datasets' CRS when one is given
DEG = 1.0 / 111_320.0  # degrees per metre at the equator


def square_dataset(xy, name: str, crs: str = "", **columns) -> Dataset:
    """Locations ``xy`` (metres) as a synthetic dataset named ``name``; ``columns`` are Dataset's (user_id, value)."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    meta = DatasetMeta(name=name, source="test", synthetic=True, bbox=(0.0, 0.0, SIDE * DEG, SIDE * DEG))
    return Dataset(xy=xy, lonlat=xy * DEG, crs=crs, meta=meta, **columns)
