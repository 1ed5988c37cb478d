"""Bit-pushing (Cormode, Markov & Srinivas, "Private and Efficient Federated Numerical Aggregation",
EDBT 2024): the mechanisms (:mod:`.mechanism`) and the numerics of bit-pushing (:mod:`.bitpush`).
Importing the package registers the mechanisms.
"""

from . import mechanism  # noqa: F401  (registers the bit-pushing mechanisms)
