"""Synthetic cities (offline, the embedded default). Labelled "synthetic" everywhere.

Generative model (shown on the Data page)
-----------------------------------------
A square city of side ``side_km`` (20 km, the region size SNH uses per city) on a
``RASTER`` x ``RASTER`` grid (1024, about 20 m cells, the resolution of the
Bagdasaryan et al. heatmaps). Coordinates ``s`` below are in units of the side.

* Intensity: a log-Gaussian Cox process (Moller, Syversveen & Waagepetersen,
  "Log Gaussian Cox processes", Scand. J. Stat. 25(3), 1998),
  ``Lambda(s) = M(s) * exp(Z(s)) * V(s)`` with

  - ``M(s) = floor + sum_c w_c exp(-r_c(s) / b_c)``: centres whose density decays
    exponentially with (anisotropic) distance ``r_c``, Clark's negative-exponential
    urban density law (C. Clark, "Urban population densities", J. R. Stat. Soc. A
    114(4), 1951), summed over centres for polycentric cities;
  - ``Z``: a zero-mean Gaussian random field, the sum of two independent
    fields with Gaussian covariance (neighbourhood scale ~250 m and district
    scale ~1.5 km), standard deviations ``field_sd``;
  - ``V(s)``: sparse areas: a few parks/lakes (discs where density drops to 3%),
    a river (an empty band) and, for the coastal preset, the sea (empty).

  Given the number of points ``n``, the points of a Cox process are i.i.d. with
  density proportional to ``Lambda``: each point picks a cell with probability
  ``Lambda(cell) / sum Lambda`` (drawn exactly as multinomial cell counts, then
  put in a uniformly random order) and a uniform position inside the cell.

* ``value`` = age in whole years: mean ``30 + 22 (1 - c(s)) + 4 Z_age(s)`` with
  ``c(s) = sqrt(M(s) / max M)`` the centrality (young adults near the centres,
  older suburbs) and ``Z_age`` a standard Gaussian field (~1 km), plus individual
  Gaussian noise (sd 14 years), reflected at 0 and capped at 100.
* ``flag`` = tested positive: probability ``base + (peak - base) exp(-d^2 / (2 sigma^2))``
  with ``d`` the distance to the preset's hotspot (a Gaussian 2-D kernel, as in
  Appendix B of Bagdasaryan et al. 2022, where the infected bit follows a
  Gaussian kernel centred on Lower Manhattan). Defaults: base 3%, peak 40%,
  sigma 1 km.
* Several locations per user (``locations_per_user = k > 1``): each user has a
  home drawn from the process above and ``k - 1`` further locations displaced
  from it by isotropic Gaussian steps of standard deviation ``spread_m``
  (redrawn when they land outside the square or where nobody lives, falling back
  to the home after 8 tries). Age and test result are the user's (from the
  home). ``n`` counts locations; users are ``ceil(n / k)``.

Attributes are evaluated per raster cell of the point: the test probability on the
20 m cells, the mean age on 78 m blocks (the Gaussian fields, smooth at >= 250 m,
are built on that 256 x 256 grid and upsampled bilinearly).
The city is placed at a fictional spot in the Gulf of Guinea (lat 0.5 N) so the
lon/lat display works without suggesting a real place. Deterministic given
``(preset, n, seed, locations_per_user, spread_m)``; the same seed gives the same
city (intensity, parks, river) for any ``n``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.ndimage import gaussian_filter, zoom

from ..core.errors import ParamError
from ..core.params import Param
from .dataset import MAX_POINTS, Dataset, DatasetMeta
from .projection import local_crs, to_lonlat

RASTER = 1024  # intensity raster, cells per side
ATTR = 256  # age raster, cells per side (the age field varies over ~1 km; 78 m blocks are plenty)
NODES = 128  # lon/lat interpolation grid, cells per side (bilinear error < 1 mm, see _LonLatGrid)
CHUNK = 1 << 20  # points processed per block (bounds temporaries at 10 M points)


@dataclass(frozen=True)
class Centre:
    x: float  # in units of the side, 0..1 from the west / south edge
    y: float
    weight: float
    scale: float  # e-folding distance of Clark's law, units of the side
    aspect: float = 1.0  # > 1 stretches the centre along ``angle``
    angle: float = 0.0  # degrees, anticlockwise from east


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    description: str
    centres: tuple[Centre, ...]
    hotspot: tuple[float, float]  # centre of the positive-test hotspot, units of the side
    field_sd: tuple[float, float] = (0.55, 0.45)  # sd of the fine / district fields
    floor: float = 2e-3  # background density relative to the main centre
    parks: int = 6
    river: bool = False
    coast: bool = False
    lonlat: tuple[float, float] = (0.0, 0.0)  # fictional placement (lon, lat)
    side_km: float = 20.0


def _sprawl_centres() -> tuple[Centre, ...]:
    rng = np.random.default_rng(7)  # fixed: part of the preset's definition, not of the seed
    pts = rng.uniform(0.1, 0.9, (14, 2))
    return tuple(Centre(float(x), float(y), 0.25, 0.035) for x, y in pts) + (Centre(0.5, 0.5, 0.3, 0.18),)


PRESETS = {
    p.key: p
    for p in (
        Preset(
            "monocentric",
            "Monocentric city",
            "One dense core whose density decays exponentially outwards (Clark's law), two small suburbs, parks.",
            (Centre(0.5, 0.5, 1.0, 0.09), Centre(0.22, 0.72, 0.12, 0.04), Centre(0.78, 0.28, 0.1, 0.04)),
            hotspot=(0.40, 0.36),
            lonlat=(2.0, 0.5),
        ),
        Preset(
            "polycentric",
            "Polycentric city",
            "Several centres of different sizes, like a merged conurbation, crossed by a river.",
            (
                Centre(0.30, 0.30, 1.0, 0.06),
                Centre(0.70, 0.36, 0.7, 0.05, 1.6, 30.0),
                Centre(0.50, 0.76, 0.8, 0.07),
                Centre(0.15, 0.80, 0.3, 0.04),
                Centre(0.86, 0.80, 0.25, 0.04),
            ),
            hotspot=(0.20, 0.12),  # the Bagdasaryan kernel's (200, 900) on a 1024 image, rows from the top
            river=True,
            lonlat=(4.0, 0.5),
        ),
        Preset(
            "coastal",
            "Coastal strip",
            "A long city along a coastline: the sea (where no one lives) covers the north of the square.",
            (
                Centre(0.20, 0.50, 0.6, 0.05, 2.2, 5.0),
                Centre(0.50, 0.44, 1.0, 0.06, 2.5, -3.0),
                Centre(0.80, 0.40, 0.6, 0.05, 2.2, 8.0),
            ),
            hotspot=(0.62, 0.46),
            coast=True,
            parks=4,
            lonlat=(6.0, 0.5),
        ),
        Preset(
            "sprawl",
            "Sprawl",
            "Low-density sprawl: many small clusters, a weak centre and strong local variation.",
            _sprawl_centres(),
            hotspot=(0.70, 0.66),
            field_sd=(0.8, 0.6),
            floor=2e-2,
            parks=8,
            lonlat=(8.0, 0.5),
        ),
    )
}

BASE_RATE, PEAK_RATE, HOTSPOT_SIGMA_M = 0.03, 0.40, 1000.0
AGE_NOISE_SD = 14.0


# ---------------------------------------------------------------- the model
def _grid() -> tuple[np.ndarray, np.ndarray]:
    g = (np.arange(RASTER, dtype=np.float64) + 0.5) / RASTER
    return g[None, :], g[:, None]  # X (1, R), Y (R, 1): broadcast, rows = y from south


@lru_cache(maxsize=8)
def _structure(key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seed-independent parts: log M(s), the permanent mask (sea, river), the centrality
    c(s) on the ATTR grid, and the positive-test probability (the hotspot kernel)."""
    p = PRESETS[key]
    X, Y = _grid()
    m = np.full((RASTER, RASTER), p.floor)
    for c in p.centres:
        a = math.radians(c.angle)
        dx, dy = X - c.x, Y - c.y
        u = dx * math.cos(a) + dy * math.sin(a)
        v = -dx * math.sin(a) + dy * math.cos(a)
        r = np.sqrt((u / c.aspect) ** 2 + v**2)
        m += c.weight * np.exp(-r / c.scale)
    keep = np.ones((RASTER, RASTER), dtype=bool)
    if p.coast:
        coast = 0.64 + 0.05 * np.sin(X * 7.0) + 0.025 * np.sin(X * 23.0 + 1.0)
        keep &= Y < coast
    if p.river:
        centre = 0.55 + 0.08 * np.sin(X * 9.0 + 0.5) + 0.03 * np.sin(X * 31.0)
        keep &= np.abs(Y - centre) > 0.004  # about 160 m wide at 20 km
    b = RASTER // ATTR
    centrality = np.sqrt(m.reshape(ATTR, b, ATTR, b).mean(axis=(1, 3)) / m.max()).astype(np.float32)
    hx, hy = p.hotspot
    d2 = ((X - hx) ** 2 + (Y - hy) ** 2) * (p.side_km * 1000.0) ** 2
    p_flag = (BASE_RATE + (PEAK_RATE - BASE_RATE) * np.exp(-d2 / (2 * HOTSPOT_SIGMA_M**2))).astype(np.float32).ravel()
    log_m = np.log(m)
    for arr in (log_m, keep, centrality, p_flag):
        arr.flags.writeable = False
    return log_m, keep, centrality, p_flag


def _field(rng: np.random.Generator, scale_cells: float, size: int) -> np.ndarray:
    """Standardised Gaussian random field with a Gaussian covariance of length ``scale_cells``
    (in cells of a ``size`` grid), periodic, on a ``size`` x ``size`` grid.

    Smoothing white noise costs O(scale) per cell, so a large scale is built on a
    coarser grid (at least 3 cells per scale length) and upsampled bilinearly."""
    f = 1
    while scale_cells / (2 * f) >= 3 and size // (2 * f) >= 32:
        f *= 2
    r = size // f
    z = gaussian_filter(rng.standard_normal((r, r)), scale_cells / f, mode="wrap")
    z -= z.mean()
    z /= z.std() + 1e-12
    return _upsample(z, f)


def _upsample(z: np.ndarray, f: int) -> np.ndarray:
    return z if f == 1 else zoom(z, f, order=1, grid_mode=True, mode="grid-wrap")


@dataclass(frozen=True)
class CityModel:
    prob: np.ndarray  # (R*R,) float64 cell probabilities, rows from south
    age_mean: np.ndarray  # (ATTR*ATTR,) float32 mean age per block
    p_flag: np.ndarray  # (R*R,) float32 probability of a positive test
    parks: tuple[tuple[float, float, float], ...]  # (x, y, radius) units of the side


@lru_cache(maxsize=4)
def city_model(key: str, seed: int) -> CityModel:
    """The LGCP intensity and attribute surfaces of one (preset, seed), cached."""
    p = PRESETS[key]
    log_m, keep, centrality, p_flag = _structure(key)
    rng = np.random.default_rng([seed, 1])
    per_m = ATTR / (p.side_km * 1000.0)  # fields are built on the ATTR grid, then upsampled once
    z = p.field_sd[0] * _field(rng, 250.0 * per_m, ATTR) + p.field_sd[1] * _field(rng, 1500.0 * per_m, ATTR)
    lam = np.exp(log_m + _upsample(z, RASTER // ATTR))
    lam *= keep
    # parks and lakes: sparse, not empty (a few people live or check in there)
    parks = []
    for _ in range(p.parks):
        cx, cy = rng.uniform(0.08, 0.92, 2)
        rad = rng.uniform(0.01, 0.035)
        parks.append((float(cx), float(cy), float(rad)))
        i0, i1 = int(max(0, (cy - 2 * rad) * RASTER)), int(min(RASTER, (cy + 2 * rad) * RASTER + 1))
        j0, j1 = int(max(0, (cx - 2 * rad) * RASTER)), int(min(RASTER, (cx + 2 * rad) * RASTER + 1))
        gy = (np.arange(i0, i1) + 0.5)[:, None] / RASTER
        gx = (np.arange(j0, j1) + 0.5)[None, :] / RASTER
        d2 = ((gx - cx) ** 2 + (gy - cy) ** 2) / rad**2
        lam[i0:i1, j0:j1] *= 1.0 - 0.97 * np.exp(-(d2**3))
    prob = lam.ravel()
    prob /= prob.sum()
    z_age = _field(rng, 1000.0 * per_m, ATTR)
    age_mean = (30.0 + 22.0 * (1.0 - centrality) + 4.0 * z_age).astype(np.float32).ravel()
    for arr in (prob, age_mean):
        arr.flags.writeable = False
    return CityModel(prob, age_mean, p_flag, tuple(parks))


def intensity(preset: Preset | str, seed: int) -> np.ndarray:
    """The normalised intensity raster (R, R), rows = y from south to north (sums to 1)."""
    key = preset if isinstance(preset, str) else preset.key
    return city_model(key, seed).prob.reshape(RASTER, RASTER)


# ---------------------------------------------------------- placement on Earth
@dataclass(frozen=True)
class _LonLatGrid:
    """WGS84 coordinates of the square from a (NODES+1)^2 grid of nodes computed with
    pyproj, interpolated bilinearly. Over 156 m node spacing the local aeqd projection's
    second derivatives (~1/R_earth) give an error of about h^2 / (8 R) < 1 mm, so this
    agrees with pyproj to sub-millimetre while being several times faster on 1 M points."""

    crs: str
    bbox: tuple[float, float, float, float]
    half: float  # half side in metres
    lon: tuple[np.ndarray, ...]  # bilinear coefficients per node cell (c0, cx, cy, cxy), flat
    lat: tuple[np.ndarray, ...]

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        scale = NODES / (2 * self.half)
        fx = (x + self.half) * scale
        fy = (y + self.half) * scale
        ix = np.clip(fx.astype(np.int32), 0, NODES - 1)
        iy = np.clip(fy.astype(np.int32), 0, NODES - 1)
        tx = fx - ix
        ty = fy - iy
        idx = iy * NODES + ix
        out = np.empty((x.size, 2))
        for k, (c0, cx, cy, cxy) in enumerate((self.lon, self.lat)):
            out[:, k] = np.take(c0, idx) + tx * np.take(cx, idx) + ty * (np.take(cy, idx) + tx * np.take(cxy, idx))
        return out


def _bilinear(g: np.ndarray) -> tuple[np.ndarray, ...]:
    g00, g10, g01, g11 = g[:-1, :-1], g[:-1, 1:], g[1:, :-1], g[1:, 1:]
    return tuple(np.ascontiguousarray(a).ravel() for a in (g00, g10 - g00, g01 - g00, g11 - g10 - g01 + g00))


@lru_cache(maxsize=8)
def placement(key: str) -> _LonLatGrid:
    p = PRESETS[key]
    half = p.side_km * 500.0
    lon0, lat0 = p.lonlat
    crs = local_crs((lon0 - 0.1, lat0 - 0.1, lon0 + 0.1, lat0 + 0.1))  # aeqd centred on (lon0, lat0)
    t = np.linspace(-half, half, NODES + 1)
    gx, gy = np.meshgrid(t, t)
    ll = to_lonlat(gx.ravel(), gy.ravel(), crs)
    lon = ll[:, 0].reshape(gx.shape)
    lat = ll[:, 1].reshape(gx.shape)
    # public region = lon/lat extent of the square (plain floats)
    bbox = (float(lon[:, 0].min()), float(lat[0, :].min()), float(lon[:, -1].max()), float(lat[-1, :].max()))
    return _LonLatGrid(crs, bbox, half, _bilinear(lon), _bilinear(lat))


# ------------------------------------------------------------------ sampling
def generate(
    preset: str = "polycentric",
    n: int = 100_000,
    seed: int = 0,
    locations_per_user: int = 1,
    spread_m: float = 500.0,
) -> Dataset:
    """Draw ``n`` locations of a synthetic city (see the module docstring for the model).

    Deterministic given the arguments. ``locations_per_user > 1`` adds ``user_id``
    (each user a home plus ``k - 1`` locations around it)."""
    if preset not in PRESETS:
        raise ParamError(f"unknown synthetic preset {preset!r}; known: {', '.join(PRESETS)}")
    n = int(n)
    if not 1 <= n <= MAX_POINTS:
        raise ParamError(f"number of locations must be 1..{MAX_POINTS:,} (got {n:,})")
    k = int(locations_per_user)
    if not 1 <= k <= 1000:
        raise ParamError(f"locations per user must be 1..1000 (got {k})")
    if not (isinstance(spread_m, (int, float)) and 0 < spread_m <= 20_000):
        raise ParamError(f"spread around the home must be in (0, 20000] metres (got {spread_m})")
    p = PRESETS[preset]
    model = city_model(preset, int(seed))
    place = placement(preset)
    rng = np.random.default_rng([int(seed), 2, k])
    side = p.side_km * 1000.0
    cell = side / RASTER
    n_users = -(-n // k)

    # home cells: exact i.i.d. categorical draws = multinomial counts in random order
    counts = rng.multinomial(n_users, model.prob)
    cells = np.repeat(np.arange(RASTER * RASTER, dtype=np.int32), counts)
    del counts
    rng.shuffle(cells)

    xy = np.empty((n, 2))
    lonlat = np.empty((n, 2))
    age = np.empty(n)
    flag = np.empty(n, dtype=bool)
    # rows of user u are u*k .. u*k+k-1 (the last user may have fewer)
    shift = RASTER.bit_length() - 1  # RASTER is a power of two: cell -> (iy, ix) by shifts
    ashift, down = ATTR.bit_length() - 1, shift - (ATTR.bit_length() - 1)
    step = max(1, CHUNK // k)
    for s in range(0, n_users, step):
        c = cells[s : s + step]
        m = c.size
        iy = c >> shift
        ix = c & (RASTER - 1)
        hx = (ix + rng.random(m)) * cell - side / 2
        hy = (iy + rng.random(m)) * cell - side / 2
        a = np.take(model.age_mean, ((iy >> down) << ashift) | (ix >> down))
        a += AGE_NOISE_SD * rng.standard_normal(m, dtype=np.float32)
        a = np.minimum(np.floor(np.abs(a)), 100.0)
        f = rng.random(m, dtype=np.float32) < np.take(model.p_flag, c)
        del iy, ix
        r0, r1 = s * k, min(n, (s + m) * k)
        if k == 1:
            xy[r0:r1, 0], xy[r0:r1, 1] = hx, hy
            age[r0:r1], flag[r0:r1] = a, f
        else:
            px, py = _around_home(rng, model, hx, hy, k, spread_m, side, cell)
            rows = slice(r0, r1)
            xy[rows, 0] = px.ravel()[: r1 - r0]
            xy[rows, 1] = py.ravel()[: r1 - r0]
            age[rows] = np.repeat(a, k)[: r1 - r0]
            flag[rows] = np.repeat(f, k)[: r1 - r0]
        lonlat[r0:r1] = place(xy[r0:r1, 0], xy[r0:r1, 1])
    del cells

    meta = DatasetMeta(
        name=f"{p.label} (synthetic)",
        source=f"synthetic:{preset}",
        citation=(
            "Synthetic city generated by this workbench: log-Gaussian Cox process (Moller, Syversveen & "
            "Waagepetersen 1998) around centres following Clark's (1951) negative-exponential density law."
        ),
        license="CC0 (generated data)",
        description=p.description + " Synthetic data: no real person is represented.",
        synthetic=True,
        bbox=place.bbox,
        value_name="age (years, synthetic)",
        flag_name="tested positive (synthetic)",
        extra={
            "preset": preset,
            "seed": int(seed),
            "locations_per_user": k,
            "spread_m": float(spread_m) if k > 1 else None,
            "side_m": side,
            "raster": RASTER,
            "hotspot_xy_m": ((p.hotspot[0] - 0.5) * side, (p.hotspot[1] - 0.5) * side),
            "hotspot_sigma_m": HOTSPOT_SIGMA_M,
            "flag_rates": {"base": BASE_RATE, "peak": PEAK_RATE},
            "parks": len(model.parks),
            "model": "log-Gaussian Cox process; see engine/data/synthetic.py",
        },
    )
    user_id = None if k == 1 else (np.arange(n, dtype=np.int64) // k)
    return Dataset(xy=xy, lonlat=lonlat, crs=place.crs, meta=meta, user_id=user_id, value=age, flag=flag)


def _around_home(rng, model: CityModel, hx, hy, k: int, spread: float, side: float, cell: float):
    """k locations per home: the home, then Gaussian steps around it that land where people live."""
    m = hx.size
    px = np.repeat(hx[:, None], k, axis=1)
    py = np.repeat(hy[:, None], k, axis=1)
    todo = np.zeros((m, k), dtype=bool)
    todo[:, 1:] = True
    prob = model.prob
    for _ in range(8):
        idx = np.flatnonzero(todo)
        if idx.size == 0:
            break
        h = idx // k
        cx = hx[h] + spread * rng.standard_normal(idx.size)
        cy = hy[h] + spread * rng.standard_normal(idx.size)
        inside = (np.abs(cx) < side / 2) & (np.abs(cy) < side / 2)
        ci = np.clip(((cx + side / 2) / cell).astype(np.int64), 0, RASTER - 1)
        cj = np.clip(((cy + side / 2) / cell).astype(np.int64), 0, RASTER - 1)
        ok = inside & (prob[cj * RASTER + ci] > 0)
        px.ravel()[idx[ok]] = cx[ok]
        py.ravel()[idx[ok]] = cy[ok]
        todo.ravel()[idx[ok]] = False
    return px, py  # leftovers stay at the home


def _register():
    from .registry import Source, add

    for key, p in PRESETS.items():
        add(
            Source(
                key=f"synthetic:{key}",
                label=f"{p.label} (synthetic)",
                kind="synthetic",
                description=p.description,
                loader=(
                    lambda preset: (
                        lambda n, seed, locations_per_user, spread_m: generate(
                            preset, n, seed, locations_per_user, spread_m
                        )
                    )
                )(key),
                params=(
                    Param("n", "int", 100_000, "number of locations", min=1, max=10_000_000, log=True),
                    Param(
                        "seed",
                        "int",
                        0,
                        "seed of the city's generator: the same seed, the same city (not the noise's seed)",
                        min=0,
                        max=2**31 - 1,
                        label="city seed",
                    ),
                    Param(
                        "locations_per_user",
                        "int",
                        1,
                        "locations per user: 1 = one location each (no user id); k > 1 = a home and k-1 "
                        "locations around it",
                        min=1,
                        max=1000,
                        log=True,
                    ),
                    Param(
                        "spread_m",
                        "float",
                        500.0,
                        "standard deviation (metres) of a user's locations around the home",
                        min=1.0,
                        max=20_000.0,
                        log=True,
                    ),
                ),
                citation="synthetic (log-Gaussian Cox process; Moller et al. 1998, Clark 1951)",
                license="CC0 (generated data)",
            )
        )


_register()
