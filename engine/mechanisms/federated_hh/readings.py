"""What a release of the federated heavy-hitters family reports, for the benchmarks (typed access to its
diagnostics and extras, which only this package reads)."""

from __future__ import annotations

import numpy as np


def subqueries(release) -> int:
    """Sub-queries the interactive tree ran."""
    return int(release.diagnostics["subqueries"])


def final_cells(release) -> int:
    """Cells of the final tree that report."""
    return int(release.diagnostics["final_cells"])


def effective_epsilon(release) -> float:
    """The epsilon the release really spent (above the plan when more clients dropped than planned)."""
    return float(release.diagnostics["effective_epsilon"])


def last_subquery(release) -> dict:
    """The last sub-query's facts: its noise's standard deviation (``noise_std``), the shards' total share of
    the planned noise (``noise_alpha_total``)..."""
    return dict(release.diagnostics["levels"][-1])


def level_counts(release) -> dict[int, np.ndarray]:
    """Hierarchical one-hot: the noisy counts of every level, by level (Morton order)."""
    return release.extras["level_counts"]
