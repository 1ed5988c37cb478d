"""Federated kernel density estimation with random Fourier features (Zong, Yang, Ley, Butts,
Markopoulou, "Privacy by Projection", PoPETs 2023(1)).

* :mod:`.mechanism`: the registered mechanisms (Federated KDE, Federated RFF KDE, geo-indistinguishable
  KDE), with the paper's threat model, guarantee and departures in its docstring.
* :mod:`.kde`: grids, the bandwidth rules (Lemmas 3 and 4) and the server's sums (Algorithms 1 and 2).
* :mod:`.localisation`: per-user surfaces and the localisation attack of Section 4.2.2 (Eq. 16); :mod:`.view`: the
  server's per-user view of the users.
* :mod:`.curve`: the privacy-utility curve of Figures 10-13.
* :mod:`.datasets`: the synthetic mixtures (a) and (b) of Section 4.1.1.

Importing the package registers the mechanisms, and the mixtures as dataset sources
``synthetic:zong_a`` / ``synthetic:zong_b`` through the data registry's hook.
"""

from . import mechanism  # noqa: F401  (registers the federated KDE mechanisms)
from .datasets import register_mixture_sources

register_mixture_sources()
