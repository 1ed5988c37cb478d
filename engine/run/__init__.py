"""The run layer: a run's whole life, above the mechanisms and below every door (the CLI, the
dashboard, the benchmarks). It never imports Streamlit.

* ``config.py``: a run's configuration (Evaluate or Release) and its result;
* ``runner.py``: ``run(config)``, the one entry point, the in-process dataset memo, and ``prepared(config)``:
  the sample and true map a run sees, for a page drawn before it;
* ``result_cache.py``: the data-only disk cache of Evaluate runs;
* ``jobs.py``: background runs in a thread pool, cancellable;
* ``board.py``: the results and jobs every session of a server shares (ownership, memory bound);
* ``groups.py``: a session's named groups of runs on the board;
* ``session.py``: a session's runs from booking to settlement, each settled when it ends;
* ``uploads.py``: each session's uploaded files, private to it;
* ``ledger.py``: the per-dataset privacy ledger (SQLite: releases, and evaluations listed apart);
  ``booking.py``: the one booking protocol every door follows; ``limits.py``: the operator's limit;
  ``reserve.py``: a study's ε held in the ledger for its releases;
* ``plan.py``: one release's accuracy predicted before spending; ``study.py``: a study's releases planned under
  one budget (``study_file.py``: its TOML; ``study_bias.py``: bias and noise apart);
* ``sweeps.py``: sweep configurations and their statistics, and the repeated releases behind a margin
  (the margins themselves: :mod:`engine.regions.margins`);
* ``estimates.py``: run-time estimates; ``cluster.py``: runs on a Dask cluster;
* ``export.py``: release files and manifest; ``audit.py``, ``noise_audit.py``: empirical privacy audits.
"""
