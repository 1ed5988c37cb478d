"""What a release of the attribute-mean family reports, for the benchmarks (typed access to its diagnostics,
which only this package reads)."""

from __future__ import annotations


def population_mean(release) -> float:
    """The private mean over every contacted client (regions weighted by their clients)."""
    return float(release.diagnostics["population_mean_private"])
