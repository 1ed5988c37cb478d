"""What the mechanism families share, one private module per role: contribution bounding and the unit of
privacy (``_bounding``), the trusted curator's communication, view and diagnostics (``_curator``), counting
and spreading on the map (``_geometry``), Laplace noise on counts (``_laplace``) and the division of epsilon
(``_spending``). A family imports these names from this package, never from its modules."""

from ._bounding import PRIVACY_UNIT, PRIVACY_UNIT_USER, UNIT_PARAM, UNITS, Bounded, bound_contributions
from ._curator import curator_communication, curator_diagnostics, curator_view
from ._geometry import (
    ag_subcell_rects,
    bin_square,
    cells_to_metres,
    points_in_domain,
    spread_rects,
    uniform_grid_rects,
)
from ._laplace import LAPLACE_SD, blank_postprocessed, laplace_counts, noise_source
from ._spending import TOTAL_PARAMS, split_epsilon, total_count

__all__ = [
    "LAPLACE_SD",
    "PRIVACY_UNIT",
    "PRIVACY_UNIT_USER",
    "TOTAL_PARAMS",
    "UNITS",
    "UNIT_PARAM",
    "Bounded",
    "ag_subcell_rects",
    "bin_square",
    "blank_postprocessed",
    "bound_contributions",
    "cells_to_metres",
    "curator_communication",
    "curator_diagnostics",
    "curator_view",
    "laplace_counts",
    "noise_source",
    "points_in_domain",
    "split_epsilon",
    "spread_rects",
    "total_count",
    "uniform_grid_rects",
]
