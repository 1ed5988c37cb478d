"""DP sparse EMD aggregation for heatmaps (Ghazi et al., "Differentially Private Heatmaps", AAAI 2023):
the mechanisms, the algorithm and its baselines (:mod:`.mechanism`). Importing the package registers
the mechanisms.
"""

from . import mechanism  # noqa: F401  (registers the sparse EMD mechanisms and their baselines)
