"""What a release of the SNH family reports, for the benchmarks (typed access to its diagnostics, which only this
package reads)."""

from __future__ import annotations


def cell_width_m(release) -> float:
    """The data-collection grid's cell width rho, in metres (ParamSelect's choice or the analyst's)."""
    return float(release.diagnostics["rho_m"])
