"""Error metrics on normalised densities over the same grid."""

from __future__ import annotations

import numpy as np


def normalise(grid: np.ndarray) -> np.ndarray:
    g = np.clip(np.asarray(grid, dtype=np.float64), 0, None)
    s = g.sum()
    return g / s if s > 0 else np.full(g.shape, 1.0 / g.size)


def mse(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.mean((normalise(p) - normalise(q)) ** 2))


def l1(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.abs(normalise(p) - normalise(q)).sum())


def evaluate(truth, release, data, domain, rng, emd_max_cells=64, extra=()) -> dict:
    return {"mse": mse(truth, release.density), "l1": l1(truth, release.density)}
