"""MWEM (Hardt, Ligett, McSherry, NIPS 2012): multiplicative weights over the map, driven by range queries chosen
with the exponential mechanism. :mod:`.mw` holds the selection and the update, :mod:`.mechanism` the registered
mechanism ``mwem``. Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
