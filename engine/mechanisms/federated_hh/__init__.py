"""Location heatmaps under distributed DP with secure aggregation (Bagdasaryan, Kairouz, Mellem, Gascón,
Bonawitz, Estrin, Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
Differential Privacy with Secure Aggregation", PoPETs 2022(4)).

* :mod:`.mechanism`: Algorithm 2, the adaptive hierarchical histogram, and :mod:`.variants`, its
  interactive variants (Table 3), with the paper's threat model, guarantee and departures in the docstrings.
* :mod:`.tree`: the vectorised prefix tree and the epsilon schedule; :mod:`.secure_sum`: the Pólya-share
  secure sum (Algorithm 1).
* :mod:`.param_groups` and :mod:`.protocol`: the parameters and the steps the mechanisms share.
* :mod:`.baselines`: flat and hierarchical one-hot, the count-min sketch (Section 5.1, Table 1) and
  the non-private level of Section 6.2; :mod:`.ag_polya`: AG under distributed DP; :mod:`.local`:
  the local-DP grid of Figure 1.

Importing the package registers the mechanisms.
"""

from . import ag_polya, baselines, local, mechanism, variants  # noqa: F401  (each registers its mechanisms)
