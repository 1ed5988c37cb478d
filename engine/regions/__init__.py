"""Regions as post-processing over any release: regional estimates and their 95 % margins
(:mod:`.margins`, from the release alone), the regional table and its files (:mod:`.report`), the
true regional counts for evaluation only. The geometry (grid, H3, the analyst's polygons) is
:mod:`engine.data.regions`; the direct mechanism is ``laplace_regions``
(:mod:`engine.mechanisms.central.regions`)."""

from .margins import BASIS, Z95, Margins, cell_margins, region_margins, units_of  # noqa: F401
from .report import RegionReport, regional_report, true_counts  # noqa: F401
