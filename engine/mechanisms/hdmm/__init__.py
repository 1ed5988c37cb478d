"""HDMM (McKenna, Miklau, Hay, Machanavajjhala, PVLDB 2018): a workload-optimised matrix mechanism for the map's
range queries. :mod:`.strategy` holds the strategy optimisation (p-Identity per axis, their Kronecker product),
the closed-form expected error and the Kronecker least squares; :mod:`.mechanism` the registered mechanism
``hdmm``. Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
