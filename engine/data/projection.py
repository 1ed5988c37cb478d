"""WGS84 <-> local metric CRS (azimuthal equidistant centred on the public region)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from pyproj import CRS, Transformer

# the coarse public grid a region read off the data is rounded out to (degrees)
FRAME_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 45.0, 90.0)


def public_frame(bbox: tuple[float, float, float, float]) -> tuple[tuple[float, float, float, float], float]:
    """A region read off the data, rounded outward to a public grid: (frame, step in degrees).

    The step is the smallest of :data:`FRAME_STEPS` at least a quarter of the box's larger side, so the
    frame's edges say where the extreme locations are only to within a quarter of the region (the exact
    box would give four of them). The step depends on the data only through the region's size."""
    west, south, east, north = bbox
    step = next((s for s in FRAME_STEPS if s >= max(east - west, north - south) / 4), FRAME_STEPS[-1])

    def down(v):
        return float(np.round(np.floor(v / step + 1e-9) * step, 9))

    def up(v):
        return float(np.round(np.ceil(v / step - 1e-9) * step, 9))

    frame = (down(west), max(down(south), -90.0), up(east), min(up(north), 90.0))
    return frame, step


def local_crs(bbox: tuple[float, float, float, float]) -> str:
    lon0 = ((bbox[0] + bbox[2]) / 2 + 180) % 360 - 180  # a box across the antimeridian ends past 180
    lat0 = (bbox[1] + bbox[3]) / 2
    return f"+proj=aeqd +lat_0={lat0:.6f} +lon_0={lon0:.6f} +x_0=0 +y_0=0 +datum=WGS84 +units=m +no_defs"


@lru_cache(maxsize=64)
def _fwd(crs: str) -> Transformer:
    return Transformer.from_crs(CRS.from_epsg(4326), CRS.from_proj4(crs), always_xy=True)


@lru_cache(maxsize=64)
def _inv(crs: str) -> Transformer:
    return Transformer.from_crs(CRS.from_proj4(crs), CRS.from_epsg(4326), always_xy=True)


def to_local(lon: np.ndarray, lat: np.ndarray, crs: str) -> np.ndarray:
    x, y = _fwd(crs).transform(np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64))
    return np.column_stack([x, y])


def to_lonlat(x: np.ndarray, y: np.ndarray, crs: str) -> np.ndarray:
    lon, lat = _inv(crs).transform(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    return np.column_stack([lon, lat])


def lon_extent(lon: np.ndarray) -> tuple[float, float]:
    """The longitude interval (west, east) of the points, antimeridian-aware.

    It is (min, max) unless that spans more than 180 degrees while the points fit in less
    than 180 degrees across the antimeridian (a cluster at 179.95E..179.95W); the interval
    then runs east from its westmost point past 180, so ``east`` exceeds 180 (179.95, 180.05).
    The covering interval is the complement of the widest gap between neighbouring longitudes."""
    lon = np.asarray(lon, dtype=np.float64)
    west, east = float(lon.min()), float(lon.max())
    if east - west <= 180:
        return west, east
    s = np.unique(lon)
    i = int(np.argmax(np.diff(s)))
    if 360 - (s[i + 1] - s[i]) < 180:
        return float(s[i + 1]), float(s[i] + 360)
    return west, east


def bbox_to_local(bbox, crs: str) -> tuple[float, float, float, float]:
    """Bounding box in metres of a lon/lat box (sampled along its edges)."""
    lon0, lat0, lon1, lat1 = bbox
    t = np.linspace(0, 1, 33)
    lons = np.concatenate([lon0 + (lon1 - lon0) * t, np.full(33, lon1), lon0 + (lon1 - lon0) * t, np.full(33, lon0)])
    lats = np.concatenate([np.full(33, lat0), lat0 + (lat1 - lat0) * t, np.full(33, lat1), lat0 + (lat1 - lat0) * t])
    xy = to_local(lons, lats, crs)
    return float(xy[:, 0].min()), float(xy[:, 1].min()), float(xy[:, 0].max()), float(xy[:, 1].max())
