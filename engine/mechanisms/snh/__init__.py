"""Spatial Neural Histograms and ParamSelect (Zeighami, Ahuja, Ghinita, Shahabi, "A Neural Database
for Differentially Private Spatial Range Queries", PVLDB 15(5), 2022).

* :mod:`.mechanism`: the registered mechanisms, SNH and the IDENTITY@ParamSelect ablation (Section
  6.3.1), with the paper's pipeline, threat model, guarantee and departures in its docstring.
* :mod:`.collection`: data collection (Section 4.1), the public auxiliary data and the cell width.
* :mod:`.training`: augmentation (Algorithm 1), workload weights (Eq. 6), training presets, ``fit_snh``.
* :mod:`.answers`: model utilisation (Section 4.3) and the noisy grid's range answers.
* :mod:`.networks`: the JAX networks (CPU) and their training loop.
* :mod:`.paramselect`: ParamSelect (Section 5.1, Algorithm 3), the cell width from public features.

Importing the package registers the mechanisms.
"""

from . import mechanism  # noqa: F401  (registers snh and identity_paramselect)
