"""What a release of the central baselines reports, for the scripts and benchmarks (typed access to its
diagnostics, which only this package reads)."""

from __future__ import annotations


def grid_size(release) -> int | None:
    """The cells per side of a grid baseline's grid: UG's m, AG's first level m1 (None for the others)."""
    d = release.diagnostics
    m = d.get("m", d.get("m1"))
    return None if m is None else int(m)


def tree_height(release) -> int:
    """The hierarchical histogram's leaves are a ``2^height`` grid: the height it chose (its rule's, or given)."""
    return int(release.diagnostics["height"])


def topt_fill(release) -> tuple[int, str]:
    """The top-t release's cells kept above the threshold, and how the rest were filled (``ebfill``'s model)."""
    d = release.diagnostics
    return int(d["cells_kept"]), str(d["fill_model"])
