"""One booking protocol for every door (the dashboard, ``python -m engine release``, sweeps).

A release spends its ε on the people in the dataset whichever door made it, so every door books
it the same way, in the dataset's ledger (:mod:`engine.run.ledger`):

1. **book** the planned ε before the run starts (:meth:`Bookkeeper.book`: in Release mode checked
   against the dataset's limit in the same transaction, refused past it);
2. **run**;
3. **book what was really spent** (:meth:`Bookkeeper.settle`): a distributed mechanism under
   excess client dropout spends more than planned, and its release's ledger says how much; the
   difference is booked once, under the release's own key;
4. **unbook what published nothing** (:meth:`Bookkeeper.unbook`): a run that failed or was
   cancelled before any output released nothing.

:meth:`Bookkeeper.release` does the four steps for a caller that runs in its own thread (the CLI);
the dashboard, whose runs finish in the background, calls the steps itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..core.errors import EngineError
from .config import RunConfig
from .ledger import BudgetStore, Entry, entry_for, fingerprint_config, release_key

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
    """A release booked in the ledger: the dataset's fingerprint, the release's key, the ε planned."""

    fingerprint: str
    key: str
    epsilon: float


def cost(cfg: RunConfig) -> float:
    """The ε a run of ``cfg`` plans to spend (0 for a mechanism that spends none)."""
    return entry_for(cfg, key="-").epsilon


class Bookkeeper:
    """The ledger ``store`` (default: the server's, :func:`engine.run.ledger.default_path`) and how a
    configuration names its dataset there (``ident``; the dashboard scopes an upload to its session)."""

    def __init__(self, store: BudgetStore | None = None, ident: Callable[[RunConfig], str] = fingerprint_config):
        self.store = store if store is not None else BudgetStore()
        self.ident = ident

    # ------------------------------------------------------------ reading
    def entries_by_dataset(self, configs: list[RunConfig], note: str = "") -> dict[str, list[Entry]]:
        out: dict[str, list[Entry]] = {}
        for c in configs:
            out.setdefault(self.ident(c), []).append(entry_for(c, release_key(c), note=note))
        return out

    def new_spend(self, configs: list[RunConfig]) -> dict[str, float]:
        """ε each dataset would additionally spend if ``configs`` (Evaluate) were booked now."""
        return {fp: self.store.cost(fp, es) for fp, es in self.entries_by_dataset(configs).items()}

    def over_limit(self, configs: list[RunConfig], limit: float) -> tuple[float, float] | None:
        """(total after, ε this would add) when booking ``configs`` would push a dataset past ``limit``."""
        for fp, add in self.new_spend(configs).items():
            after = self.store.spent(fp) + add
            if add > 0 and after > limit + 1e-12:
                return after, add
        return None

    def released(self, cfg: RunConfig) -> bool:
        """Whether this configuration's Evaluate release is booked already."""
        return any(e.release_key == cfg.key() for e in self.store.entries(self.ident(cfg)))

    # ------------------------------------------------------------ the protocol
    def book(self, cfg: RunConfig, limit: float | None = None, note: str = "") -> Booking:
        """Step 1: book one run of ``cfg``. Evaluate: its configuration's key (the same configuration,
        seed included, is the same release: booked once). Release: a new key, checked against ``limit``
        in the same transaction (:class:`Refused` past it); no limit books whatever the total."""
        fp = self.ident(cfg)
        entry = entry_for(cfg, release_key(cfg), note=note)
        if limit is None:
            self.store.record(fp, [entry])
        else:
            res = self.store.try_spend(fp, [entry], limit)
            if not res.ok:
                raise Refused(entry.epsilon, res.spent, limit)
        return Booking(fp, entry.release_key, entry.epsilon)

    def record(self, configs: list[RunConfig], note: str = "") -> list[Booking]:
        """Step 1 for Evaluate runs, several at once (idempotent: a configuration booked costs nothing)."""
        return [self.book(c, note=note) for c in configs]

    def settle(self, cfg: RunConfig, booking: Booking, result) -> float:
        """Step 3: book what the run really spent above its plan (once per release); returns that excess."""
        rel = getattr(result, "release", None)
        if rel is None:
            return 0.0
        extra = float(rel.ledger.total()) - booking.epsilon
        if extra <= 1e-12:
            return 0.0
        e = entry_for(cfg, booking.key + "/effective", note=EXCESS_NOTE)
        self.store.record(booking.fingerprint, [replace(e, epsilon=extra)])
        return extra

    def unbook(self, booking: Booking) -> None:
        """Step 4: a release that published nothing (failed or cancelled) is taken off the ledger."""
        self.store.remove(booking.fingerprint, booking.key)
        self.store.remove(booking.fingerprint, booking.key + "/effective")

    def release(self, cfg: RunConfig, run: Callable, limit: float | None = None, note: str = ""):
        """Book, ``run(cfg)``, settle; unbook if the run raised. Returns (result, booking)."""
        booking = self.book(cfg, limit, note)
        try:
            res = run(cfg)
        except BaseException:
            self.unbook(booking)  # nothing was released
            raise
        self.settle(cfg, booking, res)
        return res, booking
