"""What a release of the kernel density family reports, for the pages and benchmarks (typed access to its
diagnostics, which only this package reads)."""

from __future__ import annotations


def bandwidth_m(release) -> float | None:
    """The kernel bandwidth the release used, in metres (None: not a kernel density release)."""
    h = release.diagnostics.get("h_m")
    return None if h is None else float(h)
