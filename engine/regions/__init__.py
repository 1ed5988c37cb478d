"""Regions as post-processing over any release: regional estimates and their 95 % margins
(:mod:`.margins`, from the release alone), the regional table (:mod:`.regional_table`) and the files that
carry the margins (:mod:`.margin_files`), the true regional counts for evaluation only. The geometry (grid, H3,
the analyst's polygons) is :mod:`engine.data.region_geometry`; the direct mechanism is ``laplace_regions``
(:mod:`engine.mechanisms.central.laplace_regions`)."""

from .margins import BASIS, Margins, block_margins, cell_margins, grid_margin, region_margins  # noqa: F401
from .regional_table import RegionReport, regional_report, true_counts  # noqa: F401
