"""Noise sources a mechanism can be run with instead of its own: none at all, to check its steps; or plain numpy
Laplace draws, to compare a seeded run with the secure samplers' law."""

from __future__ import annotations

import numpy as np

from engine.mechanisms import RunContext


class ZeroNoise:
    """Adds nothing and records the scales asked for: a mechanism's steps with the noise switched off."""

    secure = False

    def __init__(self):
        self.scales = []

    def add_laplace(self, x, scale):
        self.scales.append(scale)
        return np.asarray(x, dtype=np.float64).copy()


class NumpyLaplace:
    """Plain numpy Laplace noise, ``x + rng.laplace(0, scale, x.shape)``: what a seeded run draws."""

    def __init__(self, rng):
        self.rng = rng

    def add_laplace(self, x, scale):
        x = np.asarray(x, dtype=np.float64)
        return x + self.rng.laplace(0.0, scale, x.shape if x.ndim else None)


class NumpyLaplaceContext(RunContext):
    """A run context whose noise is :class:`NumpyLaplace` on the context's own generator."""

    @property
    def noise(self):
        return self.__dict__.setdefault("_numpy", NumpyLaplace(self.rng))
