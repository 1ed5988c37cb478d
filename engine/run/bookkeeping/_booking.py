"""One booking protocol for every door (the dashboard, ``python -m engine release``, sweeps).

A release spends its ε on the people in the dataset whichever door made it, so every door books
it the same way, in the dataset's ledger (:mod:`engine.run.bookkeeping._ledger`):

1. **book** the planned ε before the run starts (:meth:`Bookkeeper.book`): a Release run in the
   dataset's releases, checked against the operator's limit (:mod:`engine.run.bookkeeping._limits`) in the same
   transaction and refused past it; an Evaluate run, which publishes nothing, in the evaluations
   listed apart, never counted against the limit;
2. **run**;
3. **book what was really spent** (:meth:`Bookkeeper.settle`): a distributed mechanism under
   excess client dropout spends more than planned, and its release's ledger says how much; the
   difference is booked once, under the release's own key;
4. **unbook what published nothing** (:meth:`Bookkeeper.unbook`): a run that failed or was
   cancelled before any output released nothing.

:meth:`Bookkeeper.run` does the four steps for a caller that runs in its own thread (the CLI);
:class:`engine.run.server.RunSession` does them for runs on the server's board, settling each run
when it ends (:meth:`Bookkeeper.finish`).

What a door does when the ledger itself cannot be opened or written (a full or read-only disk) is
its :class:`LedgerPolicy`: :data:`STRICT` (``python -m engine release``) stops with the ledger's
message; a tolerant one (the server's :data:`TOLERANT`, the CLI's Evaluate commands with a note on
stderr) lets an evaluation go on unbooked. A release is refused before any noise under every policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...core.errors import EngineError
from ..execution import RunConfig
from ._ledger import BudgetStore, Entry, LedgerUnavailable, entry_for, fingerprint_config, release_key
from ._limits import lowered

EXCESS_NOTE = "effective ε above the plan (dropout)"


class Refused(EngineError):
    """The release would take the dataset past its limit; nothing was booked."""

    def __init__(self, epsilon: float, spent: float, limit: float):
        self.epsilon, self.spent, self.limit = epsilon, spent, limit
        super().__init__(
            f"refused: this release would spend epsilon {epsilon:g} on a dataset that has spent {spent:g} "
            f"of its limit {limit:g}"
        )


_LOG = logging.getLogger(__name__)


def _log(exc: LedgerUnavailable) -> None:
    _LOG.warning("privacy ledger unavailable: %s", exc)  # the operator's log names the file


@dataclass(frozen=True)
class LedgerPolicy:
    """What a door does when the ledger cannot be written (:class:`~engine.run.bookkeeping.LedgerUnavailable`).
    ``evaluate_unbooked``: an evaluation, which publishes nothing, goes on unbooked and a settlement that cannot be
    written is skipped, ``tell`` being told why; otherwise the failure stops the caller. A release is refused
    before any noise under every policy: its ε must be booked."""

    name: str
    evaluate_unbooked: bool
    tell: Callable[[LedgerUnavailable], None] = _log

    def unavailable(self, exc: LedgerUnavailable, fallback):
        """``fallback`` in place of what the ledger could not do, or ``exc`` raised."""
        if not self.evaluate_unbooked:
            raise exc
        self.tell(exc)
        return fallback


STRICT = LedgerPolicy("strict", evaluate_unbooked=False)  # a release's door: any ledger failure stops it
TOLERANT = LedgerPolicy("tolerant", evaluate_unbooked=True)  # the server: evaluations go on without a ledger


@dataclass(frozen=True)
class Booking:
    """A run booked in the ledger: the dataset's fingerprint, the run's key, the ε planned, and whether it
    is a release (counted against the limit) or an evaluation (listed apart)."""

    fingerprint: str
    key: str
    epsilon: float
    release: bool = True
    study: tuple[str, str] | None = None  # (study, product): booked against the study's reservation


def cost(cfg: RunConfig) -> float:
    """The ε a run of ``cfg`` plans to spend (0 for a mechanism that spends none)."""
    return entry_for(cfg, key="-").epsilon


class Bookkeeper:
    """The ledger ``store`` (default: the server's, :func:`engine.run.bookkeeping.default_path`) with its releases and
    its evaluations, how a configuration names its dataset there (``ident``; the dashboard scopes an upload
    to its session) and what to do when the ledger cannot be written (``policy``). ``opener(table)``, instead
    of the stores, opens a table at its first use, so a ledger that cannot be opened is the policy's to handle."""

    def __init__(
        self,
        store: BudgetStore | None = None,
        ident: Callable[[RunConfig], str] = fingerprint_config,
        evaluations: BudgetStore | None = None,
        policy: LedgerPolicy = STRICT,
        opener: Callable[[str], BudgetStore] | None = None,
        reserved: tuple[str, str] | None = None,
    ):
        self._tables = {"releases": store, "evaluations": evaluations}
        self._opener = opener
        self.ident, self.policy = ident, policy
        self.reserved = (
            reserved  # (study, product): releases booked against that reservation (engine/run/bookkeeping/_reserve.py)
        )

    def _open(self, table: str) -> BudgetStore:
        """The table, opened at its first use (kept: a run's settlement then touches nothing but the store)."""
        store = self._tables[table]
        if store is None:
            if self._opener is not None:
                store = self._opener(table)
            else:
                base = self._tables["releases"]
                path, timeout = (base.path, base.timeout) if base is not None else (None, 30.0)
                store = BudgetStore(path, timeout, table=table)
            self._tables[table] = store
        return store

    @property
    def store(self) -> BudgetStore:
        """The releases: what the dataset's limit counts."""
        return self._open("releases")

    @property
    def evaluations(self) -> BudgetStore:
        """The evaluation runs, listed apart."""
        return self._open("evaluations")

    def _table(self, booking: Booking) -> BudgetStore:
        return self.store if booking.release else self.evaluations

    def _ledger(self, write: Callable, fallback=None, release: bool = False):
        """``write()``; when the ledger cannot do it, the policy's ``fallback`` (never for a release's booking)."""
        try:
            return write()
        except LedgerUnavailable as exc:
            if release:
                raise
            return self.policy.unavailable(exc, fallback)

    # ------------------------------------------------------------ reading
    def spent(self, cfg: RunConfig) -> float:
        """The ε the releases of ``cfg``'s dataset have spent (what its limit counts)."""
        return self.store.spent(self.ident(cfg))

    def releases(self, cfg: RunConfig) -> list[Entry]:
        return self.store.entries(self.ident(cfg))

    def evaluation_runs(self, cfg: RunConfig) -> list[Entry]:
        return self.evaluations.entries(self.ident(cfg))

    def evaluated(self, cfg: RunConfig) -> bool:
        """Whether this Evaluate configuration was run already (it is then shown again, not booked again)."""
        return self._ledger(lambda: any(e.release_key == cfg.key() for e in self.evaluation_runs(cfg)), False)

    # ------------------------------------------------------------ the protocol
    def book(self, cfg: RunConfig, limit: float | None = None, note: str = "") -> Booking | None:
        """Step 1: book one run of ``cfg``. Evaluate: in the evaluations, under its configuration's key (the
        same configuration, seed included, is the same run: booked once), whatever the total; None when the
        ledger cannot be written and the policy lets the run go on unbooked. Release: a new key in the
        releases, checked against the operator's limit for the dataset (``limit`` may only lower it) in the
        same transaction; :class:`Refused` past it, :class:`LedgerUnavailable` when it cannot be booked."""
        cfg.validate()  # a non-private mechanism cannot be released (it would publish the truth)
        fp = self.ident(cfg)
        entry = entry_for(cfg, release_key(cfg), note=note)
        if cfg.mode != "release":

            def record() -> Booking:
                self.evaluations.record(fp, [entry])
                return Booking(fp, entry.release_key, entry.epsilon, release=False)

            return self._ledger(record)
        if self.reserved is not None:
            from ._reserve import Reservations

            study, product = self.reserved
            self._ledger(lambda: Reservations(self.store).book(fp, study, product, entry), release=True)
            return Booking(fp, entry.release_key, entry.epsilon, study=self.reserved)
        bound = lowered(limit, cfg.dataset)
        res = self._ledger(lambda: self.store.try_spend(fp, [entry], bound), release=True)
        if not res.ok:
            raise Refused(entry.epsilon, res.spent, bound)
        return Booking(fp, entry.release_key, entry.epsilon)

    def record(self, configs: list[RunConfig], note: str = "") -> list[Booking | None]:
        """Step 1 for Evaluate runs, several at once."""
        return [self.book(c, note=note) for c in configs]

    def settle(self, cfg: RunConfig, booking: Booking, result) -> float:
        """Step 3: book what the run really spent above its plan (once per run, beside its booking; a release's
        excess is booked past the limit: it was spent); returns that excess."""
        spent = getattr(result, "epsilon_spent", None)  # a run's result, its summary, or a sweep's row
        if spent is None and isinstance(result, dict):
            spent = result.get("epsilon_spent")
        if spent is None:
            return 0.0
        extra = float(spent) - booking.epsilon
        if extra <= 1e-12:
            return 0.0
        e = entry_for(cfg, booking.key + "/effective", note=EXCESS_NOTE)
        self._ledger(lambda: self._table(booking).record(booking.fingerprint, [replace(e, epsilon=extra)]))
        return extra

    def unbook(self, booking: Booking) -> None:
        """Step 4: a run that published nothing (failed or cancelled) is taken off the ledger."""

        def remove():
            table = self._table(booking)
            if booking.study is not None:  # its ε is held for the study again
                from ._reserve import Reservations

                Reservations(table).unbook(booking.fingerprint, *booking.study, booking.key)
            table.remove(booking.fingerprint, booking.key)
            table.remove(booking.fingerprint, booking.key + "/effective")

        self._ledger(remove)

    def finish(self, cfg: RunConfig, booking: Booking, state: str, result=None) -> None:
        """Step 3 or 4 for a run that ended in ``state``: "ok" (with its ``result``) is settled; "error",
        "cancelled" or "missing" (the run never started) published nothing and is unbooked."""
        if state == "running":
            raise ValueError("a run is settled once it has ended")
        if state == "ok":
            self.settle(cfg, booking, result)
        else:
            self.unbook(booking)

    def run(self, cfg: RunConfig, run: Callable, limit: float | None = None, note: str = ""):
        """Book, ``run(cfg)``, settle; unbook if the run raised. Returns (result, booking; None for an evaluation
        the policy let go on unbooked)."""
        booking = self.book(cfg, limit, note)
        try:
            res = run(cfg)
        except BaseException:
            if booking is not None:
                self.unbook(booking)  # nothing was released
            raise
        if booking is not None:
            self.settle(cfg, booking, res)
        return res, booking
