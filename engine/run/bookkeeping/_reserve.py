"""A study's ε held in the dataset's ledger until its releases are made (dpcreator's "reserve ε for later").

Accepting a study plan (:mod:`engine.run.planning._study_plan`) reserves its total in the dataset's ledger
(:mod:`engine.run.bookkeeping._ledger`): one entry in the releases, under the study's key and in mode ``reserved``, counts
against the operator's limit like a release, so later releases outside the study cannot crowd it out; and
one row per product in the ``reservations`` table says what it may release (mechanism, ε each, how many
times, the grid or regions). A product's release is booked against its row (:meth:`Reservations.book`): the
release's own entry is added and the reservation entry lowered by the ε reserved for it, in one
transaction, so the dataset's total never passes what was reserved and the release is never refused by
releases made since. Cancelling (:meth:`Reservations.cancel`) takes the reservation entry off the ledger:
what was not spent returns; the releases made stay booked. Reserving checks the limit and books in one
``BEGIN IMMEDIATE`` transaction (:meth:`~engine.run.bookkeeping.BudgetStore.try_spend`'s way), so concurrent
sessions cannot reserve past it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from ...core.errors import ParamError
from ._ledger import TOLERANCE, BudgetStore, Entry, Spend, ledgers_read

MODE = "reserved"  # the mode of a study's reservation entry among the releases
RESERVED = "reserved for a study"  # its mechanism column: what the ledger's table shows
_SCHEMA = """
CREATE TABLE IF NOT EXISTS reservations (
    fingerprint TEXT NOT NULL,
    study TEXT NOT NULL,
    product TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    epsilon REAL NOT NULL,
    repeat INTEGER NOT NULL,
    used INTEGER NOT NULL,
    config TEXT NOT NULL,
    time REAL NOT NULL,
    PRIMARY KEY (fingerprint, study, product)
)
"""


@dataclass(frozen=True)
class Held:
    """A product's reservation: its mechanism, ε per release, releases allowed and made, and how to run it
    (``config``: depth, regions, parameters)."""

    study: str
    product: str
    mechanism: str
    epsilon: float
    repeat: int
    used: int
    config: dict

    @property
    def left(self) -> float:
        return (self.repeat - self.used) * self.epsilon


class Reservations:
    """The reservations of the ledger ``store`` (its releases table; default: the server's)."""

    def __init__(self, store: BudgetStore | None = None):
        self.store = store or BudgetStore()
        with self.store._tx() as con:
            con.execute(_SCHEMA)

    def _rows(self, con, fp: str, study: str) -> list[Held]:
        where, keys = ledgers_read(fp)
        rows = con.execute(
            f"SELECT study, product, mechanism, epsilon, repeat, used, config FROM reservations WHERE {where} "
            "AND study = ? ORDER BY time, product",
            (*keys, study),
        ).fetchall()
        return [Held(r[0], r[1], r[2], float(r[3]), int(r[4]), int(r[5]), json.loads(r[6])) for r in rows]

    def _entry(self, con, fp: str, study: str, eps: float) -> None:
        """Set the reservation entry's ε (the entry is deleted at 0: nothing is held)."""
        where, keys = ledgers_read(fp)
        if eps <= 1e-12:
            con.execute(f"DELETE FROM releases WHERE {where} AND release_key = ?", (*keys, study))
            return
        cur = con.execute(f"UPDATE releases SET epsilon = ? WHERE {where} AND release_key = ?", (eps, *keys, study))
        if cur.rowcount == 0:  # held again after all of it was spent (a release that published nothing)
            self.store._insert(con, fp, [Entry(study, eps, RESERVED, mode=MODE, note="reserved")])

    def held(self, fp: str, study: str) -> list[Held]:
        """The study's reservation, one row per product (empty when nothing is reserved)."""
        with self.store._tx() as con:
            return self._rows(con, fp, study)

    def reserve(self, fp: str, study: str, products: list[dict], limit: float, note: str = "") -> Spend:
        """Reserve ``products`` (each: ``product``, ``mechanism``, ``epsilon``, ``repeat``, ``config``) under the
        study's key, checked against ``limit`` and booked in one transaction; refused (``ok`` False, nothing
        booked) past it. A study reserved already is refused with a ParamError: cancel it first."""
        if not products:
            raise ParamError("the plan has no product to reserve (no target could be met)")
        total = sum(float(p["epsilon"]) * int(p["repeat"]) for p in products)
        with self.store._tx() as con:
            if self._rows(con, fp, study):
                raise ParamError("this study is reserved already: release its products, or cancel it first")
            before = self.store._spent(con, fp)
            if before + total > limit * (1 + TOLERANCE):
                return Spend(False, before, 0.0)
            now = time.time()
            con.executemany(
                "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
                [
                    (
                        _first(fp),
                        study,
                        p["product"],
                        p["mechanism"],
                        float(p["epsilon"]),
                        int(p["repeat"]),
                        json.dumps(p.get("config", {}), sort_keys=True),
                        now,
                    )
                    for p in products
                ],
            )
            self.store._insert(con, fp, [Entry(study, total, RESERVED, mode=MODE, time=now, note=note or "reserved")])
        return Spend(True, before + total, total)

    def book(self, fp: str, study: str, product: str, entry: Entry) -> None:
        """Book ``entry``, a release of ``product``, against its reservation: the release is added and the
        reservation lowered by the ε it held for it, in one transaction (never refused by the limit: the ε was
        reserved). A ParamError when the product is not reserved, all its releases are made, or the release
        spends more than was reserved for it."""
        with self.store._tx() as con:
            rows = {h.product: h for h in self._rows(con, fp, study)}
            h = rows.get(product)
            if h is None:
                raise ParamError(f"nothing is reserved for {product!r} in this study: reserve its plan first")
            if h.used >= h.repeat:
                raise ParamError(f"all {h.repeat} release(s) reserved for {product!r} have been made")
            if entry.epsilon > h.epsilon * (1 + TOLERANCE):
                raise ParamError(f"the release spends ε {entry.epsilon:g}; {h.epsilon:g} was reserved for {product!r}")
            self.store._insert(con, fp, [entry])
            self._move(con, fp, study, product, +1)

    def _move(self, con, fp: str, study: str, product: str, step: int) -> None:
        where, keys = ledgers_read(fp)
        con.execute(
            f"UPDATE reservations SET used = used + ? WHERE {where} AND study = ? AND product = ?",
            (step, *keys, study, product),
        )
        left = sum(h.left for h in self._rows(con, fp, study))
        self._entry(con, fp, study, left)

    def unbook(self, fp: str, study: str, product: str, key: str) -> bool:
        """A release booked against the reservation that published nothing: taken off, its ε held again."""
        with self.store._tx() as con:
            where, keys = ledgers_read(fp)
            cur = con.execute(f"DELETE FROM releases WHERE {where} AND release_key = ?", (*keys, key))
            if cur.rowcount == 0:
                return False
            if any(h.product == product for h in self._rows(con, fp, study)):
                self._move(con, fp, study, product, -1)
            return True

    def cancel(self, fp: str, study: str) -> float:
        """Take the study's reservation off the ledger; returns the ε it still held (now free). Releases made
        against it stay booked."""
        with self.store._tx() as con:
            left = sum(h.left for h in self._rows(con, fp, study))
            where, keys = ledgers_read(fp)
            con.execute(f"DELETE FROM reservations WHERE {where} AND study = ?", (*keys, study))
            self._entry(con, fp, study, 0.0)
        return left


def _first(fp: str) -> str:
    from ._people import ledger_keys

    return ledger_keys(fp)[0]
