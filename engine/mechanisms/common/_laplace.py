"""Laplace noise on counts: the noise source a helper accepts, the counts of a partition noised and
booked in one step, and what the noise's standard deviation says of a released value."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.noise import NoiseSource
from ._bounding import Bounded

# What a release knows of its noise is its noise model (``Release.noise``, engine.mechanisms.noise_model)
LAPLACE_SD = math.sqrt(2.0)  # a Laplace(b) draw has standard deviation sqrt(2) b


def blank_postprocessed(stderr: np.ndarray, released: np.ndarray, noisy: np.ndarray) -> np.ndarray:
    """NaN where post-processing (clipping, top-t) replaced the noisy value: such a cell holds 0 by a
    choice made on its noisy value, biased towards 0 rather than noisy around the truth, so the noise's
    standard deviation is no margin for it."""
    out = np.array(stderr, dtype=np.float64)
    out[np.asarray(released) != np.asarray(noisy)] = np.nan
    return out


def noise_source(rng) -> NoiseSource:
    """Accept a numpy Generator or a NoiseSource (so callers outside a RunContext can reuse helpers).
    A Generator gives the seeded (non-secure) source: the same numbers as ``x + rng.laplace(...)``."""
    if isinstance(rng, np.random.Generator):
        return NoiseSource(rng)
    if callable(getattr(rng, "add_laplace", None)):  # a NoiseSource (seeded or secure)
        return rng
    raise TypeError("rng must be a numpy Generator or an engine.core.noise.NoiseSource")


def laplace_counts(
    counts: np.ndarray,
    eps: float,
    noise: NoiseSource,
    ledger: Ledger,
    step: str,
    group: str,
    note: str,
    bounded: Bounded,
) -> np.ndarray:
    """The counts of a partition of the domain plus Laplace(1/eps) each, booked as one parallel step: after
    :func:`bound_contributions` one user moves such a count vector by at most 1 in L1. ``note`` says what was
    noised; the bounding's phrase is added to it."""
    noisy = noise.add_laplace(counts, 1.0 / eps)
    ledger.spend(step, eps, composition="parallel", group=group, note=f"{note}; {bounded.short}")
    return noisy
