"""Test cities of shapes the tuned defaults were not chosen on: hot spots, sparse islands and
streets. Each is built from a stated recipe, deterministic given (users, seed), on a public
square of ``side_m`` metres placed at a fictional spot (:func:`engine.bench.unseen.placed_dataset`).

* ``hot_spots``: 30% of the users at 6 single addresses (a stadium, stations: Gaussian of sd
  4 m, Zipf shares), the rest spread thinly over the whole square (uniform);
* ``islands``: an archipelago: 12 small islands (discs of radius 60-250 m, users uniform on
  each, island sizes log-normal) in an empty sea;
* ``streets``: :func:`engine.bench.unseen.street_grid_city` (a street grid with 5 hot venues);
* :func:`checkin_city`: check-ins, several locations per user at shared venues, on a 20 km city.

Used by the defaults' tests and ``python -m engine bench central`` to check that a default holds
on data nobody tuned it on.
"""

from __future__ import annotations

import numpy as np

from ..data.dataset import Dataset
from .unseen import placed_dataset, street_grid_city

SIDE_M = 4000.0


def hot_spot_city(n_users: int = 20_000, seed: int = 0, side_m: float = SIDE_M) -> Dataset:
    rng = np.random.default_rng([int(seed), 32, 1])
    half = side_m / 2
    spots = rng.uniform(-0.8 * half, 0.8 * half, (6, 2))
    share = 1.0 / np.arange(1, 7)
    k_hot = rng.binomial(n_users, 0.3)
    which = rng.choice(6, k_hot, p=share / share.sum())
    hot = spots[which] + rng.normal(0, 4.0, (k_hot, 2))
    rest = rng.uniform(-half, half, (n_users - k_hot, 2))
    xy = np.clip(np.concatenate([hot, rest]), -half, half)[rng.permutation(n_users)]
    return placed_dataset(xy, side_m, "Hot spots (synthetic)", "bench:hot_spots", "6 single hot addresses, thin rest")


def islands_city(n_users: int = 20_000, seed: int = 0, side_m: float = SIDE_M) -> Dataset:
    rng = np.random.default_rng([int(seed), 32, 2])
    half = side_m / 2
    centres = rng.uniform(-0.85 * half, 0.85 * half, (12, 2))
    radius = rng.uniform(60.0, 250.0, 12)
    w = rng.lognormal(0.0, 1.0, 12)
    which = rng.choice(12, n_users, p=w / w.sum())
    r = radius[which] * np.sqrt(rng.uniform(0, 1, n_users))
    a = rng.uniform(0, 2 * np.pi, n_users)
    xy = centres[which] + np.column_stack([r * np.cos(a), r * np.sin(a)])
    xy = np.clip(xy, -half, half)
    return placed_dataset(xy, side_m, "Sparse islands (synthetic)", "bench:islands", "12 small islands, empty sea")


# the bundled datasets the defaults are checked on beside the shapes (nobody tuned the defaults on them)
BUILTIN_CITIES = (
    "berlin_airbnb",
    "snow_cholera",
    "synthetic:monocentric",
    "synthetic:polycentric",
    "synthetic:coastal",
    "synthetic:sprawl",
)


def shape_cities(n_users: int = 20_000, seed: int = 0) -> dict[str, Dataset]:
    """The three shapes, keyed ``hot_spots``, ``islands``, ``streets``."""
    return {
        "hot_spots": hot_spot_city(n_users, seed),
        "islands": islands_city(n_users, seed),
        "streets": street_grid_city(n_users, seed),
    }


def checkin_city(n_users: int = 3_000, seed: int = 0) -> Dataset:
    """Check-ins (:func:`engine.bench.sparse_emd.checkin_region` on the monocentric city): 2,000 venues,
    each user about 8 check-ins at 1 + Poisson(2) favourite venues, each user's check-ins weighing 1 in all.
    Sparse: 3,000 users fill 1,334 of the 65,536 cells of a 256 x 256 map."""
    from .sparse_emd import checkin_region

    return checkin_region("monocentric", seed, n_users=n_users)
