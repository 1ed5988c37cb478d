"""DPCube (Xiao, Xiong, Fan, Goryczka, Li, Transactions on Data Privacy 2014): a noisy equi-width cell histogram
guides a kd-tree partition whose noisy counts are made consistent with it. :mod:`.kdtree` holds the partition and
the consistency step, :mod:`.mechanism` the registered mechanism ``dpcube``. Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
