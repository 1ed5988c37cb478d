"""Spatial Neural Histograms and ParamSelect (Zeighami et al., PVLDB 15(5), 2022): the mechanisms
(:mod:`.mechanism`), the JAX networks (:mod:`.networks`) and ParamSelect (:mod:`.paramselect`).
Importing the package registers the mechanisms.
"""

from . import mechanism  # noqa: F401  (registers snh and identity_paramselect)
