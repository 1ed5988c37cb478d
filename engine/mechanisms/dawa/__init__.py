"""DAWA (Li, Hay, Miklau, Wang, PVLDB 2014): a private partition into near-uniform buckets, then GreedyH's
workload-weighted tree of measurements. :mod:`.hilbert` orders the 2-D cells, :mod:`.partition` is the
first stage, :mod:`.greedyh` the second, :mod:`.mechanism` the registered mechanism ``dawa``.
Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
