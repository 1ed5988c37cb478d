"""A session's runs from booking to settlement: the life of a run on the server's board.

:class:`RunSession` books every run of a group through the one booking protocol
(:class:`~engine.run.bookkeeping.Bookkeeper`, whose ledger policy its caller chooses), starts the group on
the board (:class:`~engine.run.server.Session`) and settles each booking when its run ends, in the
run's own completion callback: the excess ε a run under client dropout spent is booked, and a run that
failed or was cancelled (it published nothing) is unbooked. A run that ends while no page looks at it
(a closed tab) is settled all the same. The dashboard only draws the button and the messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ...core.errors import EngineError
from ..bookkeeping import Booking, Bookkeeper
from ..execution import RunConfig
from ._groups import Group, Session

_LOG = logging.getLogger(__name__)


@dataclass
class Started:
    """A group just started, and what this start booked (nothing for a run the board already held)."""

    group: Group
    bookings: list[Booking] = field(default_factory=list)


class RunSession:
    """The runs of one session (``session``: its groups on the board) booked through ``bookkeeper``."""

    def __init__(self, session: Session, bookkeeper: Bookkeeper):
        self.session, self.bookkeeper = session, bookkeeper

    def start(
        self,
        name: str,
        configs: list[RunConfig],
        note: str = "",
        label: str = "",
        light: bool = False,
        cluster=None,
        wait: bool = True,
    ) -> Started:
        """Book each run of ``configs``, start them as the group ``name`` and settle each booking when its run
        ends. The group starts whole or not at all: a release past the dataset's limit
        (:class:`~engine.run.bookkeeping.Refused`) or one the ledger cannot book
        (:class:`~engine.run.bookkeeping.LedgerUnavailable`) raises, with what this start had booked taken back.
        A release the board still holds or is drawing is shown, not drawn nor booked again. ``wait``: a fast
        group is returned finished (see :meth:`Session.submit_group`)."""
        board, sid = self.session.board, self.session.sid
        booked: list[tuple[RunConfig, Booking]] = []
        # releases first: a refused release leaves no evaluation of the group booked
        try:
            for cfg in sorted(configs, key=lambda c: c.mode != "release"):
                key = cfg.key()
                if cfg.mode == "release" and (board.cached(key, sid) or board.status(key, sid).state == "running"):
                    continue
                booking = self.bookkeeper.book(cfg, note=note)
                if booking is not None:  # None: an evaluation the ledger could not book goes on unbooked
                    booked.append((cfg, booking))
        except BaseException:
            for _, booking in booked:
                self.bookkeeper.unbook(booking)
            raise
        group = self.session.submit_group(name, configs, label=label, wait=False, light=light, cluster=cluster)
        for cfg, booking in booked:
            self.session.when_done(name, cfg.key(), _Settle(self.bookkeeper, cfg, booking))
        if wait:
            board.wait(group.keys, self.session.sync_wait_s)
            group = self.session.group(name)
        return Started(group, [b for _, b in booked])

    def reshow(self, name: str, configs: list[RunConfig], label: str = "", light: bool = False) -> Group | None:
        """Evaluations this session's ledger lists and the board still holds, shown again as the group ``name``
        at once (nothing is run nor booked); None when any of them is not."""
        board, sid = self.session.board, self.session.sid
        if not configs or any(c.mode == "release" for c in configs):
            return None
        if all(self.bookkeeper.evaluated(c) and board.cached(c.key(), sid) for c in configs):
            return self.session.submit_group(name, configs, label=label, wait=False, light=light)
        return None


@dataclass
class _Settle:
    """The callback that settles one booking when its run ends (in the thread that ends it)."""

    bookkeeper: Bookkeeper
    config: RunConfig
    booking: Booking

    def __call__(self, state: str, value) -> None:
        try:
            self.bookkeeper.finish(self.config, self.booking, state, value)
        except EngineError as exc:  # a strict ledger's failure, in a thread nobody waits on: the operator's log
            _LOG.error("a run ended (%s) but its booking could not be settled: %s", state, exc)
