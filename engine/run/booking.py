"""One booking protocol for every door (the dashboard, ``python -m engine release``, sweeps).

A release spends its ε on the people in the dataset whichever door made it, so every door books
it the same way, in the dataset's ledger (:mod:`engine.run.ledger`):

1. **book** the planned ε before the run starts (:meth:`Bookkeeper.book`): a Release run in the
   dataset's releases, checked against the operator's limit (:mod:`engine.run.limits`) in the same
   transaction and refused past it; an Evaluate run, which publishes nothing, in the evaluations
   listed apart, never counted against the limit;
2. **run**;
3. **book what was really spent** (:meth:`Bookkeeper.settle`): a distributed mechanism under
   excess client dropout spends more than planned, and its release's ledger says how much; the
   difference is booked once, under the release's own key;
4. **unbook what published nothing** (:meth:`Bookkeeper.unbook`): a run that failed or was
   cancelled before any output released nothing.

:meth:`Bookkeeper.run` does the four steps for a caller that runs in its own thread (the CLI);
the dashboard, whose runs finish in the background, calls the steps itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..core.errors import EngineError
from .config import RunConfig
from .ledger import BudgetStore, Entry, LedgerUnavailable, entry_for, fingerprint_config, release_key
from .limits import lowered

EXCESS_NOTE = "effective ε above the plan (dropout)"


class Refused(EngineError):
    """The release would take the dataset past its limit; nothing was booked."""

    def __init__(self, epsilon: float, spent: float, limit: float):
        self.epsilon, self.spent, self.limit = epsilon, spent, limit
        super().__init__(
            f"refused: this release would spend epsilon {epsilon:g} on a dataset that has spent {spent:g} "
            f"of its limit {limit:g}"
        )


@dataclass(frozen=True)
class Booking:
    """A run booked in the ledger: the dataset's fingerprint, the run's key, the ε planned, and whether it
    is a release (counted against the limit) or an evaluation (listed apart)."""

    fingerprint: str
    key: str
    epsilon: float
    release: bool = True


def cost(cfg: RunConfig) -> float:
    """The ε a run of ``cfg`` plans to spend (0 for a mechanism that spends none)."""
    return entry_for(cfg, key="-").epsilon


class Bookkeeper:
    """The ledger ``store`` (default: the server's, :func:`engine.run.ledger.default_path`) with its releases and
    its evaluations, and how a configuration names its dataset there (``ident``; the dashboard scopes an upload
    to its session)."""

    def __init__(
        self,
        store: BudgetStore | None = None,
        ident: Callable[[RunConfig], str] = fingerprint_config,
        evaluations: BudgetStore | None = None,
    ):
        self.store = store if store is not None else BudgetStore()
        self.evaluations = evaluations or BudgetStore(self.store.path, self.store.timeout, table="evaluations")
        self.ident = ident

    def _table(self, booking: Booking) -> BudgetStore:
        return self.store if booking.release else self.evaluations

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
        return any(e.release_key == cfg.key() for e in self.evaluation_runs(cfg))

    # ------------------------------------------------------------ the protocol
    def book(self, cfg: RunConfig, limit: float | None = None, note: str = "") -> Booking:
        """Step 1: book one run of ``cfg``. Evaluate: in the evaluations, under its configuration's key (the
        same configuration, seed included, is the same run: booked once), whatever the total. Release: a new
        key in the releases, checked against the operator's limit for the dataset (``limit`` may only lower
        it) in the same transaction; :class:`Refused` past it."""
        cfg.validate()  # a non-private mechanism cannot be released (it would publish the truth)
        fp = self.ident(cfg)
        entry = entry_for(cfg, release_key(cfg), note=note)
        if cfg.mode != "release":
            self.evaluations.record(fp, [entry])
            return Booking(fp, entry.release_key, entry.epsilon, release=False)
        bound = lowered(limit, cfg.dataset)
        res = self.store.try_spend(fp, [entry], bound)
        if not res.ok:
            raise Refused(entry.epsilon, res.spent, bound)
        return Booking(fp, entry.release_key, entry.epsilon)

    def record(self, configs: list[RunConfig], note: str = "") -> list[Booking]:
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
        self._table(booking).record(booking.fingerprint, [replace(e, epsilon=extra)])
        return extra

    def unbook(self, booking: Booking) -> None:
        """Step 4: a run that published nothing (failed or cancelled) is taken off the ledger."""
        table = self._table(booking)
        table.remove(booking.fingerprint, booking.key)
        table.remove(booking.fingerprint, booking.key + "/effective")

    def run(self, cfg: RunConfig, run: Callable, limit: float | None = None, note: str = ""):
        """Book, ``run(cfg)``, settle; unbook if the run raised. Returns (result, booking)."""
        return _booked_run(self, cfg, run, self.book(cfg, limit, note))


def _booked_run(bk, cfg: RunConfig, run: Callable, booking: Booking | None):
    """Steps 2 to 4 of a run booked as ``booking`` (None: not booked)."""
    try:
        res = run(cfg)
    except BaseException:
        if booking is not None:
            bk.unbook(booking)  # nothing was released
        raise
    if booking is not None:
        bk.settle(cfg, booking, res)
    return res, booking


class Tolerant:
    """The booking protocol on a ledger that may be unavailable (a full or read-only disk,
    :class:`~engine.run.ledger.LedgerUnavailable`): evaluation goes on unbooked, and ``unavailable(exc)`` is told
    why, instead of failing; booking a release still raises, so Release refuses before any noise is drawn. The
    dashboard and the CLI's Evaluate commands (``run``, ``sweep``) book through it. ``make``: the bookkeeper,
    made at each call (the ledger may be writable again by the next)."""

    WITHOUT_LEDGER = {"evaluated": False, "record": [], "settle": 0.0, "unbook": None}

    def __init__(self, make: Callable[[], Bookkeeper], unavailable: Callable[[EngineError], None]):
        self._make, self._unavailable = make, unavailable

    def __getattr__(self, name):
        def call(*args, **kwargs):
            try:
                return getattr(self._make(), name)(*args, **kwargs)
            except LedgerUnavailable as exc:
                if name not in self.WITHOUT_LEDGER:
                    raise
                self._unavailable(exc)
                return self.WITHOUT_LEDGER[name]

        return call

    def run(self, cfg: RunConfig, run: Callable, note: str = ""):
        """An Evaluate run booked, run and settled (:meth:`Bookkeeper.run`), unbooked when there is no ledger.
        Returns (result, booking or None)."""
        if cfg.mode == "release":
            raise EngineError("a release is booked with Bookkeeper.run, which refuses it without a ledger")
        return _booked_run(self, cfg, run, next(iter(self.record([cfg], note=note)), None))
