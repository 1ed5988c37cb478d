"""The privacy budget: what every door books before it spends, and the operator's limit.

* ``_ledger.py``: the per-dataset privacy ledger (:class:`BudgetStore`, SQLite: releases, and evaluations
  listed apart), and the fingerprints that name a dataset's ledger;
* ``_booking.py``: the one booking protocol every door follows (:class:`Bookkeeper`: book, run, settle), under
  a ledger policy (:data:`STRICT`, :data:`TOLERANT`);
* ``_limits.py``: the operator's limit on a dataset's releases (:func:`release_limit`);
* ``_reserve.py``: a study's ε held in the ledger for its releases (:class:`Reservations`);
* ``_people.py``: the ledgers of the people in a dataset, which every dataset holding them shares.
"""

from __future__ import annotations

from ._booking import STRICT, TOLERANT, Booking, Bookkeeper, LedgerPolicy, Refused
from ._ledger import BudgetStore, LedgerUnavailable, default_path, fingerprint_source
from ._limits import release_limit
from ._people import exact_key, fingerprint_people, ledger_keys
from ._reserve import Reservations

__all__ = [
    "Booking",
    "Bookkeeper",
    "BudgetStore",
    "default_path",
    "exact_key",
    "fingerprint_people",
    "fingerprint_source",
    "ledger_keys",
    "LedgerPolicy",
    "LedgerUnavailable",
    "Refused",
    "release_limit",
    "Reservations",
    "STRICT",
    "TOLERANT",
]
