"""A dataset's public context: the streets, landmarks and boundaries its publisher ships beside it.

Context is drawn under a heatmap so a reader can tell where it is; it is public (it ships with the data's
open source, or the analyst adds it) and is never given to a mechanism. Lon/lat paths and named points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .builtin import _read, example_file


@dataclass(frozen=True)
class Context:
    label: str  # what the layer is, for the legend ("1854 streets and water pumps")
    paths: list[list[list[float]]] = field(default_factory=list)  # lines and polygon rings, [[lon, lat], ...]
    points: list[tuple[str, float, float]] = field(default_factory=list)  # (name, lon, lat)


def _lines(gdf) -> list[list[list[float]]]:
    out = []
    for g in gdf.to_crs(4326).geometry:
        parts = getattr(g, "geoms", [g])
        for part in parts:
            ring = getattr(part, "exterior", part)
            out.append(np.round(np.asarray(ring.coords)[:, :2], 7).tolist())
    return out


@lru_cache(maxsize=4)
def builtin_context(source: str) -> Context | None:
    """The public context bundled with a libpysal dataset (John Snow's 1854 streets and water pumps; the
    Prenzlauer Berg boundary), or None."""
    if source == "snow_cholera":
        streets = _read(example_file("snow_maps", "Soho_Network.shp"))
        pumps = _read(example_file("snow_maps", "SohoWater.shp")).to_crs(4326)
        pts = [("pump", round(float(p.x), 7), round(float(p.y), 7)) for p in pumps.geometry]
        return Context("1854 streets and water pumps (Snow's map, as libpysal ships it)", _lines(streets), pts)
    if source == "berlin_airbnb":
        bound = _read(example_file("berlin", "prenz_bound.zip"), layer_zip=True)
        return Context("Prenzlauer Berg boundary (as libpysal ships it)", _lines(bound))
    return None
