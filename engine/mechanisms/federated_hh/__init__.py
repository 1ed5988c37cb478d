"""Location heatmaps under distributed DP with secure aggregation (Bagdasaryan et al., PoPETs 2022(4)):
the mechanisms and baselines (:mod:`.mechanism`) and the vectorised prefix tree, Pólya-share secure
sum and schedule (:mod:`.tree`). Importing the package registers the mechanisms.
"""

from . import mechanism  # noqa: F401  (registers the federated heavy-hitter mechanisms and baselines)
