"""Files that carry margins: the grid as a GeoParquet of cell polygons (estimate and 95 % margin per cell,
in place of a GeoJSON of every cell) and the regional table as CSV and GeoPackage, written into a
release folder beside the manifest (:func:`write_regions`)."""

from __future__ import annotations

import hashlib
import io
import math

import numpy as np

REGION_FILES = {"csv": "regions.csv", "gpkg": "regions.gpkg"}


def geoparquet_grid(density, margin, domain, crs: str, stamp: str | None = None) -> bytes:
    """The non-empty cells as a GeoParquet of WGS84 squares with ``ix``, ``iy``, ``estimate`` (count per cell),
    ``margin95`` (null where there is none) and ``per_km2``. A cell of exactly zero, or with no estimate,
    is left out, as in the GeoJSON. ``stamp``: an ``evaluation`` column."""
    import geopandas as gpd
    import pandas as pd
    import shapely

    from ..data.projection import to_lonlat

    d = np.asarray(density, dtype=np.float64)
    iy, ix = np.nonzero((d != 0) & np.isfinite(d))
    s = domain.cell
    x0, y0 = domain.x0 + ix * s, domain.y0 + iy * s
    boxes = shapely.box(x0, y0, x0 + s, y0 + s)
    ll = shapely.transform(boxes, lambda xy: to_lonlat(xy[:, 0], xy[:, 1], crs))
    m = np.asarray(margin, dtype=np.float64)[iy, ix] if margin is not None else np.full(iy.size, np.nan)
    df = pd.DataFrame(
        {
            "ix": ix,
            "iy": iy,
            "estimate": d[iy, ix],
            "margin95": pd.array([None if not math.isfinite(v) else float(v) for v in m], dtype="Float64"),
            "per_km2": d[iy, ix] / (s * s / 1e6),
        }
    )
    if stamp:
        df["evaluation"] = stamp
    buf = io.BytesIO()
    gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(ll, crs=4326)).to_parquet(buf)
    return buf.getvalue()


def write_regions(report, folder, stamp: str | None = None) -> dict:
    """``regions.csv`` and ``regions.gpkg`` of a :class:`engine.regions.regional_table.RegionReport` into ``folder``;
    returns the manifest's entries (name and SHA-256 per file)."""
    from pathlib import Path

    out = Path(folder)
    entries = {}
    for kind, data in (("csv", report.as_csv(stamp).encode()), ("gpkg", report.to_gpkg(stamp))):
        path = out / REGION_FILES[kind]
        path.write_bytes(data)
        entries[f"regions_{kind}"] = {"name": path.name, "sha256": hashlib.sha256(data).hexdigest()}
    return entries
