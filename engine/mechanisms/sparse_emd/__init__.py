"""DP sparse EMD aggregation for heatmaps (Ghazi, He, Kohlhoff, Kumar, Manurangsi, Navalpakkam,
Valliappan, "Differentially Private Heatmaps", AAAI 2023).

* :mod:`.mechanism`: the central mechanism (Sparse EMD), with the paper's threat model, guarantee and
  departures in its docstring.
* :mod:`.algorithm`: Algorithm 1 and its parameters (start level, per-level epsilons, ``w``).
* :mod:`.reconstruct`: the reconstruction (top-``w`` cells and the linear program).
* :mod:`.distributed`: the distributed variant (secure aggregation, Appendix F).
* :mod:`.baselines`: the Laplace baselines of Section 4.

Importing the package registers the mechanisms.
"""

from . import baselines, distributed, mechanism  # noqa: F401  (each registers its mechanisms)
