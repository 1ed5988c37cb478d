"""AHP (Zhang, Chen, Xu, Meng, Xie, SDM 2014): noisy cell counts, thresholded, sorted and clustered greedily, then
one noisy mean per cluster. :mod:`.clustering` holds the thresholding and the greedy clustering, :mod:`.mechanism`
the registered mechanism ``ahp``. Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
