"""Federated kernel density estimation with random Fourier features (Zong, Yang, Ley, Butts,
Markopoulou, "Privacy by Projection", PoPETs 2023(1)): the mechanisms (:mod:`.mechanism`) and their
numerics (:mod:`.kde`). Importing the package registers the mechanisms.
"""

from . import mechanism  # noqa: F401  (registers the federated KDE mechanisms)
