"""The 95 % margin, defined once for every door: the screen (the margin map, the hover, the stated margin and
the regional table), the release report, the GeoTIFF's second band, the GeoParquet, regions.csv and the
planner all take their margins from here.

**Closed form**, from a release's DP outputs and public parameters only. The mechanism states its noise
(``Release.noise``, :class:`engine.mechanisms.noise_model.NoiseModel`): released units (a cell, a UG cell,
a PrivTree leaf, an Adaptive HH node, a region of Laplace over regions), unit k released ``c_k + eta_k`` with
noise of standard deviation sigma_k and spread it over its cells (``S[cell, k]``, each column summing to 1).
A region with area weights ``A`` (:mod:`engine.data.region_geometry`) takes the share ``f = (A S)[r, k]`` of unit k,
so its estimate is ``sum_k f_rk (c_k + eta_k)`` and its error has two parts:

* **noise**, exact: variance ``sum_k f_rk^2 sigma_k^2``: cells that share one draw move together, so their
  covariance is counted (units that share draws through the model's covariance: the hierarchical tree's and
  the quadtree's constrained inference, HDMM's Kronecker product of its two axes' least-squares covariances);
* **spreading**: where the region takes only part of a unit (0 < f < 1), the even spread says f c_k of the
  unit's people are in the region, while the truth lies anywhere in [0, c_k] (people may be bunched in one
  corner of a leaf), and the release cannot tell where. At worst they all sit together, inside the region's
  part with chance f (bunched at a place that could be anywhere in the unit): a 95 % interval must then
  reach c_k ((1 - f) c_k above the estimate) unless that chance is under 5 %, and 0 (f c_k below) unless its
  chance, 1 - f, is (:func:`spread_share`). A region that cuts many units adds many such placements; their
  sum has variance at most ``sum f (1 - f) c_k^2`` (the Bhatia-Davis inequality, per unit), so 1.96 times
  its root covers it. The term is the larger of the two, with c_k the released count (at least 0). A region
  made of whole units has no such term: its margin is the exact noise margin. The term assumes nothing about
  where people sit, so on smooth data it covers more than 95 %; on bunched data a bunch inside a large unit
  can still fall outside a small region's margin (the benchmark reports coverage where people are, too:
  ``python -m engine bench regions``).

The margin is ``sqrt((2.118 noise sd)^2 + spreading^2)``: 2.118 standard deviations is a Laplace draw's exact
95 % quantile (1.96 would cover 93.7 %), and more than a sum of draws needs; :data:`BASIS` says so in the
release. Where the noise has no closed form (AG, Sparse EMD, SNH, the kernel density estimates...) or a cell
was set to 0 after the noise (clipping, top-t: biased towards 0, not noisy around the truth), there is no
margin (NaN, ``null`` in files), and the reason is given.

**From seeded repeats** (Evaluate only, for a release without a closed form): the same factor on the noise,
2.118 times each cell's standard deviation over releases with the next seeds (:func:`empirical`,
:data:`EMPIRICAL_BASIS`). Repeats show the noise only: the spreading term's error (where people sit inside
a unit) is the same in every repeat, so it is not in this margin.

**Attribute means** (the attribute-mean family): a region's mean averages many clients' randomised reports,
close to normal by the central limit theorem, so its margin is 1.96 of its standard errors
(:func:`mean_margins`, :data:`MEAN_BASIS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  # the normal law's 97.5 % quantile: sums of many draws
# A single Laplace draw's 95 % quantile is ln(20) b = 2.118 standard deviations (1.96 covers 93.7 %); a
# weighted sum of independent draws is less heavy-tailed and tends to 1.96, so 2.118 covers at least 95 %
LAPLACE95 = math.log(20.0) / math.sqrt(2.0)
BASIS = (
    "95 % margin = sqrt((2.118 x noise sd)^2 + spreading^2). Noise: the mechanism's closed form (cells that share a "
    "noise draw counted together; 2.118 sd is a Laplace draw's 95 % quantile). Spreading: where a region takes only a "
    "share f of a released unit (cell, block, leaf, region), where the unit's people sit inside it is not in the "
    "release; the term is the larger of one unit's worst case ((1 - f) x its released count if all of its people "
    "could be in the region's part, f at least 5 %, else f x that count) and 1.96 x sqrt(sum of f (1 - f) x count^2) "
    "over the units cut (many placements adding up). A region made of whole units has the exact noise margin"
)
EMPIRICAL_BASIS = (
    "95 % margin = 2.118 x the standard deviation of each cell over repeated releases with the next seeds (the closed "
    "form's factor on the noise; repeats show the noise only, not where people sit inside a released unit)"
)
MEAN_RULE = "1.96 standard errors (a regional mean of many clients' reports is close to normal)"
MEAN_BASIS = f"95 % margin = {MEAN_RULE}"
REPEATS = 10  # releases behind a margin from seeded repeats


@dataclass(frozen=True)
class Margins:
    """Per region: the estimate, its 95 % margin (NaN: none), and what it rests on."""

    estimate: np.ndarray
    margin95: np.ndarray
    noise_sd: np.ndarray
    spread_sd: np.ndarray  # the spreading term's 95 % half-width
    basis: str


def no_margin_reason(release) -> str | None:
    """Why the release states no margin (a sentence), or None when it does."""
    return release.noise if isinstance(release.noise, str) else None


def basis_of(release) -> str:
    """What the release's margins rest on: :data:`BASIS` and its noise's law, or why there is none."""
    reason = no_margin_reason(release)
    if reason is not None:
        return reason
    return f"{BASIS}. Noise: {release.noise.basis}" if release.noise.basis else BASIS


def region_margins(release, regions) -> Margins:
    """Estimates and 95 % margins of ``regions`` (:class:`engine.data.region_geometry.Regions` over the release's
    domain) from the release alone (see the module docstring)."""
    est = regions.aggregate(release.summed_map())  # the hierarchical tree's least-squares leaves, not its map
    R = len(regions)
    model = release.noise
    if isinstance(model, str):
        nan = np.full(R, np.nan)
        return Margins(est, nan, nan, nan, model)
    n2 = release.domain.n**2
    own = model.own_weights(n2)
    blanked = _over_blank(model, regions)
    if own is not None and own.shape == regions.weights.shape and (own != regions.weights).nnz == 0:
        margin = np.where(blanked, np.nan, LAPLACE95 * model.sd)
        return Margins(model.count.copy(), margin, model.sd.copy(), np.zeros(R), basis_of(release))
    F = (regions.weights @ model.spread(n2)).tocsr()  # share of each unit in each region
    noise = _noise_variance(model, regions, F)
    c = np.clip(model.count, 0.0, None)
    Fc = F.copy()
    Fc.data = np.clip(Fc.data, 0.0, 1.0)
    Fc.data = Fc.data * (1.0 - Fc.data)
    clt = Z95 * np.sqrt(np.asarray(Fc @ c**2).ravel())  # many cut units: their placements add up
    Fw = F.copy()
    Fw.data = spread_share(Fw.data)
    worst = np.asarray(Fw.multiply(c[None, :]).max(axis=1).todense()).ravel()  # one unit's worst placement
    spread = np.maximum(clt, worst)
    margin = np.sqrt(LAPLACE95**2 * noise + spread**2)
    touched_nan = np.asarray((F != 0).astype(np.float64) @ np.isnan(model.sd).astype(np.float64)).ravel() > 0
    margin[touched_nan | blanked] = np.nan
    return Margins(est, margin, np.sqrt(noise), spread, basis_of(release))


def _noise_variance(model, regions, F) -> np.ndarray:
    """Each region's noise variance: independent units add their shares' variances; a region inside one unit has
    its share of that unit's whatever the covariance; the others ask the model's covariance (per block in one
    pass where it can, else per region)."""
    independent = np.asarray(F.multiply(F) @ np.nan_to_num(model.sd**2, nan=0.0)).ravel()
    if model.covariance is None:
        return independent
    several = np.flatnonzero(np.diff(F.indptr) > 1)
    if several.size == 0:
        return independent
    out = independent.copy()
    per_block = model.covariance.block_variance(_block_side(regions)) if regions.kind == "blocks" else None
    if per_block is not None:
        out[several] = per_block[several]
        return out
    for r in several:
        dense = np.zeros(regions.weights.shape[1])
        a = regions.weights.getrow(r)
        dense[a.indices] = a.data
        out[r] = model.covariance.variance(dense)
    return out


def _block_side(regions) -> int:
    return int(regions.spec.split(":")[1])


def _over_blank(model, regions) -> np.ndarray:
    """Regions that hold a cell the mechanism changed after the noise."""
    if model.blank is None:
        return np.zeros(len(regions), dtype=bool)
    return np.asarray(regions.weights @ model.blank.astype(np.float64)).ravel() > 0


def spread_share(f: np.ndarray) -> np.ndarray:
    """The 95 % half-width of a share f of a unit's count, in units of the count, when where the unit's people
    sit inside it is unknown: at worst all of them sit together, inside the share with probability f, so
    the interval must reach the far end (1 - f above, f below) unless that end has chance under 5 %."""
    f = np.clip(np.asarray(f, dtype=np.float64), 0.0, 1.0)
    up = np.where(f >= 0.05, 1.0 - f, 0.0)  # all of them inside the share: truth c, estimate f c
    down = np.where(f <= 0.95, f, 0.0)  # none inside: truth 0
    out = np.maximum(up, down)
    return np.where((f == 0.0) | (f == 1.0), 0.0, out)


def block_margins(release, crs: str, k: int) -> Margins:
    """The 95 % margin of every square of ``k`` x ``k`` cells (row-major blocks), as a map's hover sums them."""
    from ..data.region_geometry import block_regions

    return region_margins(release, block_regions(release.domain, crs, k))


def cell_margins(release, crs: str = "") -> Margins:
    """The 95 % margin of every cell of the release's grid (row-major), spreading bound included: a cell
    inside a larger unit (a UG cell, a leaf) carries the bound of its share of that unit's count."""
    from ..data.region_geometry import grid_regions

    return region_margins(release, grid_regions(release.domain, crs))


def grid_margin(release) -> np.ndarray | None:
    """Every cell's 95 % margin as a grid (``[iy, ix]``, NaN: none), or None when the release has none at all."""
    m = cell_margins(release).margin95
    return None if np.isnan(m).all() else m.reshape(release.domain.n, release.domain.n)


def empirical(densities, first_seed: int) -> tuple[np.ndarray, str] | None:
    """The 95 % margin per cell from repeated releases (at least 2 that succeeded, seeds from ``first_seed``):
    :data:`LAPLACE95` x each cell's standard deviation over them, and what it rests on."""
    grids = [np.asarray(d, dtype=np.float64) for d in densities]
    if len(grids) < 2:
        return None
    sd = np.std(np.stack(grids), axis=0, ddof=1)
    seeds = f"{len(grids)} releases with seeds {first_seed}–{first_seed + len(grids) - 1}"
    return LAPLACE95 * sd, f"estimated from {seeds} ({EMPIRICAL_BASIS})"


def mean_margins(stderr) -> np.ndarray:
    """The 95 % margin of attribute means with standard errors ``stderr`` (:data:`MEAN_BASIS`)."""
    return Z95 * np.asarray(stderr, dtype=np.float64)


def summary(margins) -> tuple[float, float]:
    """Median and 90th percentile (the worst tenth) of the finite margins; NaN when none."""
    m = np.asarray(margins, dtype=np.float64).ravel()
    m = m[np.isfinite(m)]
    if m.size == 0:
        return math.nan, math.nan
    return float(np.median(m)), float(np.quantile(m, 0.9))


def cells_below(margins, floor: float) -> int:
    """Cells whose margin is under ``floor`` (a colour scale's floor: drawn empty)."""
    m = np.asarray(margins, dtype=np.float64)
    return int(np.count_nonzero(np.isfinite(m) & (m < floor)))
