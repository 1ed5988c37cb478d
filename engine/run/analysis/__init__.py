"""Runs in bulk: trade-off sweeps, and empirical audits of privacy and of the noise samplers.

* ``_sweeps.py``: sweep configurations, the table of trials, confidence bands, the frontier, ranks over seeds,
  and the repeated releases behind an empirical margin (:func:`repeat_configs`; the margins themselves:
  :mod:`engine.regions.margins`);
* ``_audit.py``: an empirical lower bound on a mechanism's ε (:func:`audit`);
* ``noise_audit.py``: raw-output distinguishers of the noise samplers (a module of its own, run as
  ``python -m engine.run.analysis.noise_audit``).
"""

from __future__ import annotations

from ._audit import MAX_AUDIT_RUNS, MIN_AUDIT_RUNS, audit, has_dp_claim
from ._sweeps import MAX_SWEEP_RUNS, configs, frontier, rank_over_seeds, repeat_configs, summarise, trials_frame

__all__ = [
    "audit",
    "configs",
    "frontier",
    "has_dp_claim",
    "MAX_AUDIT_RUNS",
    "MAX_SWEEP_RUNS",
    "MIN_AUDIT_RUNS",
    "rank_over_seeds",
    "repeat_configs",
    "summarise",
    "trials_frame",
]
