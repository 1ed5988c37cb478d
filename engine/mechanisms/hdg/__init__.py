"""HDG (Yang, Wang, Li, Cheng, Su, PVLDB 2020): hybrid-dimensional grids for range queries under local DP.
:mod:`.oracle` is the frequency oracle the users report through (OLH; OUE), :mod:`.server` the server's
guideline, post-processing and response matrix, :mod:`.mechanism` the registered mechanism ``hdg``.
Importing the package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
