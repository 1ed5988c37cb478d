"""A city of a kind the synthetic presets do not cover, built from a stated recipe.

``street_grid_city``: a Manhattan-like street grid with a few very hot venues. Every
user has one location and one age:

* ``hot_share`` of the users are at ``hot_venues`` venues (bars, stations, stadiums):
  a venue is a point on a street crossing, its users within a few metres of it
  (Gaussian, sd ``venue_sd_m``); the venues' shares fall off as 1, 1/2, 1/3, ...
  (Zipf), so the hottest venue holds about 9% of all users for the defaults.
* the others are along the streets: avenues every ``avenue_m`` (running north-south)
  and cross streets every ``street_m``; a user picks avenues and streets in
  proportion to their length (half each), a uniform position along it and a
  Gaussian offset across it (sd ``street_sd_m``, the sidewalk and the buildings).
* ages: ``N(mu(x), 13)`` rounded, clipped to 0..100, with a district mean ``mu``
  rising linearly from ``age_mean[0]`` in the west to ``age_mean[1]`` in the east,
  so the share of ages >= 64 (bit 6 of an 8-bit age) is small but non-zero
  everywhere (about 3% to 12% for the defaults) and no age reaches 128 (bit 7 is
  never set).

The square is ``side_m`` wide, placed at a fictional spot (like the synthetic cities),
and its bounding box is the public region. Deterministic given the arguments.
"""

from __future__ import annotations

import numpy as np

from ..data.dataset import Dataset, DatasetMeta
from ..data.projection import local_crs, to_local, to_lonlat

PLACE = (3.0, 0.5)  # lon, lat of the centre: open sea in the Gulf of Guinea, no real city


def street_grid_city(
    n_users: int = 20_000,
    seed: int = 0,
    *,
    side_m: float = 4000.0,
    avenue_m: float = 250.0,
    street_m: float = 80.0,
    street_sd_m: float = 6.0,
    hot_venues: int = 5,
    hot_share: float = 0.2,
    venue_sd_m: float = 3.0,
    age_mean: tuple[float, float] = (39.0, 48.0),
) -> Dataset:
    rng = np.random.default_rng([int(seed), 22])
    half = side_m / 2
    avenues = np.arange(-half + avenue_m / 2, half, avenue_m)
    streets = np.arange(-half + street_m / 2, half, street_m)

    k = rng.multinomial(n_users, [hot_share, (1 - hot_share) / 2, (1 - hot_share) / 2])
    # venues: Zipf shares at random street crossings
    share = 1.0 / np.arange(1, hot_venues + 1)
    venue = rng.choice(hot_venues, k[0], p=share / share.sum())
    vx = rng.choice(avenues, hot_venues)
    vy = rng.choice(streets, hot_venues)
    hot = np.column_stack([vx[venue], vy[venue]]) + rng.normal(0, venue_sd_m, (k[0], 2))
    # along avenues (x fixed) and along cross streets (y fixed)
    ave = np.column_stack(
        [rng.choice(avenues, k[1]) + rng.normal(0, street_sd_m, k[1]), rng.uniform(-half, half, k[1])]
    )
    st = np.column_stack([rng.uniform(-half, half, k[2]), rng.choice(streets, k[2]) + rng.normal(0, street_sd_m, k[2])])
    xy = np.clip(np.concatenate([hot, ave, st]), -half, half)
    xy = xy[rng.permutation(n_users)]

    mu = age_mean[0] + (age_mean[1] - age_mean[0]) * (xy[:, 0] + half) / side_m
    age = np.clip(np.rint(rng.normal(mu, 13.0)), 0, 100)

    return placed_dataset(
        xy,
        side_m,
        "Street grid with hot venues (synthetic)",
        "bench:street_grid",
        "Manhattan-like street grid, a few very hot venues (engine/bench/unseen.py)",
        value=age,
        value_name="age (years, synthetic)",
    )


def placed_dataset(xy, side_m, name, source, description, value=None, value_name="") -> Dataset:
    """Local coordinates ``xy`` (metres, centred on 0) of a ``side_m`` square placed at ``PLACE``
    as a dataset whose public region is the square (not the data's bounding box)."""
    half = side_m / 2
    crs0 = local_crs((PLACE[0], PLACE[1], PLACE[0], PLACE[1]))
    corners = to_lonlat(np.array([-half, half, half, -half]), np.array([-half, -half, half, half]), crs0)
    bbox = (corners[:, 0].min(), corners[:, 1].min(), corners[:, 0].max(), corners[:, 1].max())
    lonlat = to_lonlat(xy[:, 0], xy[:, 1], crs0)
    crs = local_crs(bbox)  # the public region's own CRS, as every dataset's
    meta = DatasetMeta(
        name=name,
        source=source,
        description=description,
        synthetic=True,
        bbox=bbox,
        value_name=value_name,
        license="CC0 (generated data)",
    )
    return Dataset(xy=to_local(lonlat[:, 0], lonlat[:, 1], crs), lonlat=lonlat, crs=crs, meta=meta, value=value)


def region_errors(release, data: Dataset, rects: np.ndarray) -> tuple[float, float]:
    """(NRMSE over the released regions, error of the population mean) of a regional-mean
    release (engine/mechanisms/bit_pushing/mechanism.py) against ``data.value``, computed here from the
    data (a release carries no truth). One value per row: for datasets without user ids.
    NRMSE = sqrt(mean squared error) / mean |true mean| over the released regions, as the
    mechanism's own evaluation; the population mean weighs regions by their clients."""
    from ..mechanisms.bit_pushing.readings import population_mean
    from ..mechanisms.bit_pushing.rect_regions import assign_regions

    region = assign_regions(data.xy, rects)
    k = len(rects)
    inside = region >= 0
    count = np.bincount(region[inside], minlength=k)
    true = np.bincount(region[inside], weights=data.value[inside], minlength=k) / np.maximum(count, 1)
    private = release.regional.mean
    ok = np.isfinite(private)
    err = private[ok] - true[ok]
    nrmse = float(np.sqrt(np.mean(err**2)) / np.mean(np.abs(true[ok])))
    contacted = inside & ok[np.maximum(region, 0)]
    return nrmse, float(population_mean(release) - data.value[contacted].mean())
