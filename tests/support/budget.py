"""The ε a dataset's runs have booked in the test's own ledger (conftest.py gives every test one)."""

from __future__ import annotations


def ledger_total(dataset: str, options: dict) -> float:
    """The ε the dataset's releases spent (what its limit counts)."""
    from engine.run.bookkeeping import BudgetStore, fingerprint_source

    return BudgetStore().spent(fingerprint_source(dataset, options))


def evaluated_total(dataset: str, options: dict) -> float:
    """The ε of the dataset's Evaluate runs (listed apart, never counted against the limit)."""
    from engine.run.bookkeeping import BudgetStore, fingerprint_source

    return BudgetStore(table="evaluations").spent(fingerprint_source(dataset, options))
