"""The typed parts of a release besides its map and noise (:mod:`.noise_model`): what the workbench reads of a
release outside its mechanism. Each is a DP output or a function of DP outputs and public parameters; a mechanism
lists the ones it fills in ``Mechanism.dp_outputs`` (tests/test_release_contents.py checks them like the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .noise_model import part


@part
@dataclass(frozen=True, eq=False)
class Level:
    """One level a refining mechanism measured (Adaptive HH's sub-queries, Sparse EMD's pyramid levels), for
    Explore's level slider: the cells kept (``rects``, metres) with their noisy ``counts``; ``level``: the quadtree
    level measured; ``threshold`` and ``epsilon`` of that level; ``nodes``: the tree's node ids at that level
    (the mechanism paints them: ``Mechanism.level_map``); ``considered``: cells it looked at;
    ``positive``: per node, the noisy count of users with the flag (proportion variant)."""

    rects: np.ndarray
    counts: np.ndarray | None = None
    level: int | None = None
    threshold: float | None = None
    epsilon: float | None = None
    nodes: np.ndarray | None = None
    considered: int | None = None
    positive: np.ndarray | None = None


@part
@dataclass(frozen=True, eq=False)
class Heat:
    """A heat layer the release publishes besides its estimate (the sparse EMD family's ``H^sigma``, Ghazi et al.
    Section 2.3): the normalised ``map`` (``[iy, ix]``) smoothed by a Gaussian of ``sigma_cells`` cells."""

    map: np.ndarray
    sigma_cells: float


@part
@dataclass(frozen=True, eq=False)
class RegionalMeans:
    """An attribute mean per region (the attribute-mean family): the regions' ``rects`` (k, 4) in metres, each
    region's private ``mean`` and its standard error ``stderr`` (NaN where suppressed), the noisy ``count`` of
    clients that answered, and whether it was ``suppressed`` (too few clients to release)."""

    rects: np.ndarray
    mean: np.ndarray
    stderr: np.ndarray
    count: np.ndarray
    suppressed: np.ndarray


@part
@dataclass(frozen=True, eq=False)
class Proportions:
    """The share of users with a binary flag per released node, with a confidence interval at ``level`` that
    accounts for the noise (Adaptive HH's Appendix B): per node ``rate``, ``ci_low``, ``ci_high``, users ``n``
    and flagged users ``positive``; painted per cell: ``rate_grid`` and ``ci_width_grid``."""

    rate: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n: np.ndarray
    positive: np.ndarray
    level: float
    rate_grid: np.ndarray
    ci_width_grid: np.ndarray
