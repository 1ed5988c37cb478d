"""The run layer: a run's whole life, above the mechanisms and below every door (the CLI, the
dashboard, the benchmarks). It never imports Streamlit.

Its rooms, each a package whose ``__init__`` names what it offers (the modules behind it are private, but for
``analysis/noise_audit.py``, which also runs as a script):

* :mod:`engine.run.execution`: a run's configuration and result, the runner, the frame bought with ε,
  run-time estimates, the disk cache, the thread pool and the Dask cluster, the release files written and
  read back;
* :mod:`engine.run.bookkeeping`: the privacy budget: the per-dataset ledger, the one booking protocol, the
  operator's limit, a study's reservation, the people's ledgers;
* :mod:`engine.run.server`: what a server's sessions share: the job board, a session's groups, runs and
  uploaded files, the quick reproductions;
* :mod:`engine.run.planning`: before spending: one release's accuracy predicted, a study's releases planned
  under one budget;
* :mod:`engine.run.analysis`: runs in bulk: trade-off sweeps, empirical privacy and noise audits.

Each room imports only the rooms below it: execution <- bookkeeping <- server <- planning, and analysis
reads execution and server. What the doors use most is here: :class:`RunConfig`, :class:`RunResult`,
:func:`run`, :func:`load_dataset`, :func:`prepare`, :func:`prepared`.
"""

from __future__ import annotations

from .execution import RunConfig, RunResult, load_dataset, prepare, prepared, run

__all__ = ["load_dataset", "prepare", "prepared", "run", "RunConfig", "RunResult"]
