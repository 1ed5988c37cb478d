"""Exports of a release: the private heatmap as PNG, GeoJSON or CSV grid, and a JSON
record of the configuration and metrics. Only the *private* release is exported:
the true map is the sensitive input."""

from __future__ import annotations

import json
import math

import numpy as np

from engine.data.projection import to_lonlat


def _cell_corners(domain, crs):
    n = domain.n
    xs = domain.x0 + np.arange(n + 1) * domain.cell
    ys = domain.y0 + np.arange(n + 1) * domain.cell
    X, Y = np.meshgrid(xs, ys)  # [iy, ix]
    ll = to_lonlat(X.ravel(), Y.ravel(), crs).reshape(n + 1, n + 1, 2)
    return ll


def geojson_grid(density: np.ndarray, domain, crs: str, skip_zero: bool = True) -> str:
    """A FeatureCollection of the grid cells (lon/lat polygons) with the private estimate."""
    ll = np.round(_cell_corners(domain, crs), 6)
    area_km2 = domain.cell**2 / 1e6
    feats = []
    iy, ix = np.nonzero(density != 0) if skip_zero else np.indices(density.shape).reshape(2, -1)
    for j, i in zip(iy.tolist(), ix.tolist()):
        ring = [ll[j, i], ll[j + 1, i], ll[j + 1, i + 1], ll[j, i + 1], ll[j, i]]
        v = float(density[j, i])
        feats.append(
            {
                "type": "Feature",
                "geometry": {"type": "Polygon", "coordinates": [[[float(a), float(b)] for a, b in ring]]},
                "properties": {"ix": i, "iy": j, "estimate": v, "per_km2": v / area_km2},
            }
        )
    return json.dumps({"type": "FeatureCollection", "features": feats}, separators=(",", ":"))


def csv_grid(density: np.ndarray, domain, crs: str) -> str:
    """One row per cell: indices, centre in metres and lon/lat, estimate (counts) and per km²."""
    import pandas as pd

    n = domain.n
    cx, cy = domain.cell_centers()
    X, Y = np.meshgrid(cx, cy)
    ll = to_lonlat(X.ravel(), Y.ravel(), crs)
    d = np.asarray(density, dtype=np.float64).ravel()
    iy, ix = np.divmod(np.arange(n * n), n)
    df = pd.DataFrame(
        {
            "ix": ix,
            "iy": iy,
            "x_m": X.ravel().round(2),
            "y_m": Y.ravel().round(2),
            "lon": ll[:, 0].round(6),
            "lat": ll[:, 1].round(6),
            "estimate": d,
            "per_km2": d / (domain.cell**2 / 1e6),
        }
    )
    return df.to_csv(index=False)


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def record_json(result, url: str = "", extra: dict | None = None) -> str:
    """Configuration, metrics, ledger, communication and provenance of a run."""
    d = result.summary()
    meta = result.dataset_meta
    d["dataset"] = {
        "name": getattr(meta, "name", ""),
        "source": getattr(meta, "source", ""),
        "citation": getattr(meta, "citation", ""),
        "license": getattr(meta, "license", ""),
        "synthetic": bool(getattr(meta, "synthetic", False)),
        "bbox": list(getattr(meta, "bbox", ())),
        "bbox_from_data": bool(getattr(meta, "bbox_from_data", False)),
    }
    d["url"] = url
    if extra:
        d.update(extra)
    return json.dumps(_clean(json.loads(json.dumps(d, default=float))), indent=2)
