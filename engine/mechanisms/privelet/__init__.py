"""Privelet (Xiao, Wang, Gehrke, ICDE 2010): Laplace noise on the map's Haar wavelet coefficients, weighted by
each coefficient's reach, then the inverse transform. :mod:`.haar` is the transform, :mod:`.mechanism` the
registered mechanism ``privelet``. Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
