"""Like-for-like heatmap scores for a comparison of releases.

Ghazi et al. 2023 (Section 4, Figure 1) score SIM, CC and KL on Gaussian-smoothed heatmaps
``H^sigma`` (Section 2.3). :func:`engine.metrics.evaluate` follows that protocol for a release
that publishes such a heatmap (the sparse EMD family and its Laplace baselines) and scores every
other release on its unsmoothed map. Side by side those numbers do not compare: smoothing alone
raises SIM and CC and lowers KL, whatever the mechanism. A comparison therefore rescores every map
the same way, all smoothed by ONE filter (the paper's protocol) or none (:func:`rescore`).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from . import cc, gaussian_heatmap, kl, normalise, sim

SMOOTHED = ("sim", "cc", "kl")  # the scores the paper takes on smoothed maps


def release_sigma(release) -> float:
    """The filter width (cells) of the heatmap a release publishes, 0 when it publishes none."""
    layer = getattr(release, "heat", None)
    if layer is None:
        return 0.0
    s = float(layer.sigma_cells)
    return s if math.isfinite(s) and s > 0 else 0.0


def common_sigma(releases) -> float:
    """The one filter a comparison smooths every map with: the width the smoothing releases use
    (the most common one; on a tie the narrowest, which blurs least), 0 when none smooths."""
    widths = Counter(round(s, 9) for s in (release_sigma(r) for r in releases) if s > 0)
    if not widths:
        return 0.0
    top = max(widths.values())
    return min(s for s, n in widths.items() if n == top)


def scored_map(release, sigma: float) -> np.ndarray:
    """The normalised map a release is scored on at filter width ``sigma`` (cells; 0: unsmoothed).
    A release's own heatmap at that width is ``H^sigma`` of its estimate already, so it is used as is
    (the same numbers :func:`engine.metrics.evaluate` gives it); any other map is smoothed here."""
    dens = np.asarray(release.density, dtype=np.float64)
    if sigma <= 0:
        return normalise(dens)
    if math.isclose(release_sigma(release), sigma, rel_tol=1e-9):
        heat = np.asarray(release.heat.map, dtype=np.float64)
        if heat.shape == dens.shape:
            return normalise(heat)
    return normalise(gaussian_heatmap(normalise(dens), sigma))


def smoothed_truth(truth, sigma: float) -> np.ndarray:
    t = normalise(np.asarray(truth, dtype=np.float64))
    return t if sigma <= 0 else normalise(gaussian_heatmap(t, sigma))


def rescore(truth_scored: np.ndarray, release, sigma: float) -> dict:
    """SIM, CC and KL of ``release`` against ``truth_scored`` (:func:`smoothed_truth` at the same
    ``sigma``), both maps smoothed by the same filter; ``heatmap_sigma_cells`` records it."""
    p = scored_map(release, sigma)
    if p.shape != truth_scored.shape:
        raise ValueError(f"the private map has shape {p.shape} but the true map has shape {truth_scored.shape}")
    return {
        "sim": sim(truth_scored, p),
        "cc": cc(truth_scored, p),
        "kl": kl(truth_scored, p),
        "heatmap_sigma_cells": sigma,
    }
