"""The engine's core: what every mechanism family and every client of the engine builds on.

* :mod:`.errors`: the engine's exception types.
* :mod:`.params`: typed parameter schemas (the UI builds its widgets from them).
* :mod:`.grid`: the public square domain, binning, quadtree paths, pyramids, range queries.
* :mod:`.noise`: samplers (seeded numpy; secure mode through OpenDP and exact samplers on OS entropy).
* :mod:`.accounting`: the privacy ledger (sequential / parallel composition).
* :mod:`.secagg`: verification-mode secure aggregation (pairwise additive masking).
* :mod:`.cache`: the folder where runs, downloads and compiled code are cached.

Nothing here imports a mechanism, a dataset source, the job layer or the benchmarks.
"""
