"""Synthetic cities (offline, the embedded default). Labelled "synthetic" everywhere.

Generative model (documented in the Data page): a log-Gaussian Cox process.
The intensity is ``lambda(s) = exp(m(s) + Z(s))`` over a square region where
``m`` is a mixture of centres with density decaying exponentially from each
(one for monocentric, several for polycentric, ...), and ``Z`` is a Gaussian
random field (white noise smoothed by a Gaussian kernel) that adds
neighbourhood-scale texture and sparse areas. Points are drawn by sampling
cells of a 512 x 512 intensity raster and then uniformly within the cell.

Attributes: ``value`` = age, a spatially varying mean (younger near centres)
plus noise, clipped to 0..100; ``flag`` = tested positive, with a base rate
and a hotspot (as in Appendix B of Bagdasaryan et al.).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.ndimage import gaussian_filter

from ..params import Param
from .dataset import Dataset, DatasetMeta
from .projection import local_crs, to_lonlat

RASTER = 512


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    description: str
    centres: tuple[tuple[float, float, float, float], ...]  # (x, y, weight, decay) in [0,1] units
    field_sd: float = 0.8
    field_scale: float = 6.0  # raster cells
    mask: str = ""  # "" or "coast"
    lonlat: tuple[float, float] = (0.0, 0.0)  # fictional placement, for display only
    side_km: float = 20.0


PRESETS = {
    p.key: p
    for p in (
        Preset(
            "monocentric",
            "Monocentric city",
            "One dense core with density decaying outwards and a few suburbs.",
            ((0.5, 0.5, 1.0, 0.08), (0.25, 0.7, 0.15, 0.05), (0.75, 0.3, 0.1, 0.05)),
            lonlat=(2.0, 0.5),
        ),
        Preset(
            "polycentric",
            "Polycentric city",
            "Several centres of different sizes, like a merged conurbation.",
            (
                (0.3, 0.3, 1.0, 0.06),
                (0.7, 0.35, 0.7, 0.05),
                (0.5, 0.75, 0.8, 0.07),
                (0.15, 0.8, 0.3, 0.04),
                (0.85, 0.8, 0.25, 0.04),
            ),
            lonlat=(4.0, 0.5),
        ),
        Preset(
            "coastal",
            "Coastal strip",
            "A long city along a coastline: the sea (no one lives there) covers part of the square.",
            ((0.2, 0.45, 0.6, 0.05), (0.5, 0.4, 1.0, 0.06), (0.8, 0.35, 0.6, 0.05)),
            mask="coast",
            lonlat=(6.0, 0.5),
        ),
        Preset(
            "sprawl",
            "Sprawl",
            "Low-density sprawl with many small clusters and a weak centre.",
            tuple((float(x), float(y), 0.2, 0.03) for x, y in np.random.default_rng(7).uniform(0.1, 0.9, (12, 2)))
            + ((0.5, 0.5, 0.3, 0.2),),
            field_sd=1.1,
            lonlat=(8.0, 0.5),
        ),
    )
}


def intensity(preset: Preset, seed: int, raster: int = RASTER) -> np.ndarray:
    """The LGCP intensity raster (rows = y from south to north), normalised to sum 1."""
    rng = np.random.default_rng([seed, 1])
    g = (np.arange(raster) + 0.5) / raster
    X, Y = np.meshgrid(g, g)
    m = np.full((raster, raster), 1e-3)
    for cx, cy, w, decay in preset.centres:
        d = np.hypot(X - cx, Y - cy)
        m += w * np.exp(-d / decay)
    z = gaussian_filter(rng.standard_normal((raster, raster)), preset.field_scale)
    z *= preset.field_sd / (z.std() + 1e-12)
    lam = np.exp(np.log(m) + z)
    if preset.mask == "coast":
        coast = 0.62 + 0.06 * np.sin(X * 7.0) + 0.03 * np.sin(X * 23.0 + 1.0)
        lam[Y > coast] = 0.0
    return lam / lam.sum()


def generate(preset: str = "polycentric", n: int = 100_000, seed: int = 0, users_per_person: float = 1.0) -> Dataset:
    """Draw ``n`` locations of a synthetic city. Deterministic given (preset, n, seed)."""
    p = PRESETS[preset]
    rng = np.random.default_rng([seed, 2])
    lam = intensity(p, seed)
    cells = rng.choice(lam.size, size=n, p=lam.ravel())
    iy, ix = np.divmod(cells, RASTER)
    u = rng.random((n, 2))
    side = p.side_km * 1000.0
    x = ((ix + u[:, 0]) / RASTER - 0.5) * side
    y = ((iy + u[:, 1]) / RASTER - 0.5) * side
    # fictional placement on the equator-ish so lon/lat display works
    lon0, lat0 = p.lonlat
    dlat = side / 111_320.0 / 2
    dlon = dlat / np.cos(np.radians(lat0))
    bbox = (lon0 - dlon, lat0 - dlat, lon0 + dlon, lat0 + dlat)
    crs = local_crs(bbox)
    lonlat = to_lonlat(x, y, crs)
    # attributes
    dist_c = np.min([np.hypot(x / side + 0.5 - cx, y / side + 0.5 - cy) for cx, cy, _, _ in p.centres], axis=0)
    age = np.clip(30 + 60 * dist_c + rng.normal(0, 12, n), 0, 100)
    hx, hy = p.centres[0][0] + 0.1, p.centres[0][1] - 0.1
    hot = np.exp(-(np.hypot(x / side + 0.5 - hx, y / side + 0.5 - hy) ** 2) / (2 * 0.05**2))
    flag = rng.random(n) < 0.05 + 0.4 * hot
    meta = DatasetMeta(
        name=f"{p.label} (synthetic)",
        source=f"synthetic:{preset}",
        citation="Synthetic log-Gaussian Cox process city generated by this workbench.",
        license="CC0 (generated)",
        description=p.description,
        synthetic=True,
        bbox=bbox,
        value_name="age (years, synthetic)",
        flag_name="tested positive (synthetic)",
        extra={"preset": preset, "seed": seed},
    )
    return Dataset(xy=np.column_stack([x, y]), lonlat=lonlat, crs=crs, meta=meta, value=age, flag=flag)


def _register():
    from .registry import Source, add

    for key, p in PRESETS.items():
        add(
            Source(
                key=f"synthetic:{key}",
                label=f"{p.label} (synthetic)",
                kind="synthetic",
                description=p.description,
                loader=(lambda preset: lambda n, seed: generate(preset, n, seed))(key),
                params=(
                    Param("n", "int", 100_000, "number of locations", min=1, max=10_000_000, log=True),
                    Param("seed", "int", 0, "seed of the generator", min=0, max=2**31 - 1),
                ),
                citation="synthetic",
                license="CC0 (generated)",
            )
        )


_register()
