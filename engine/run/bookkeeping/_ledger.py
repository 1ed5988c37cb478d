"""A per-dataset privacy budget that outlives browser tabs and restarts.

Every release of a dataset spends its ε on the same people, whichever tab, page or process
made it, and releases compose sequentially (basic composition, as in :mod:`engine.core.accounting`):
a dataset's total is the sum of its releases' ε. So the total is kept server-wide, one row per
release in an embedded SQLite database (standard-library :mod:`sqlite3`), as Tumult Analytics'
and OpenDP's sessions keep one budget per dataset rather than per user interface.

* A dataset is named by a fingerprint of its people, shared by every session and door: for a
  file (uploaded, or read by path) the people read from it (:mod:`engine.run.bookkeeping._people`: how many
  locations each person has and their centroid, whatever the format, order, other columns or last
  digits); for a registry source its key and the options that select people (:func:`fingerprint_source`).
  A people fingerprint names several ledger keys (``"A|B|C"``, :func:`engine.run.bookkeeping.ledger_keys`):
  a run is booked under the first, and the dataset's total counts every release the keys hold.
* A run is named by its key (:func:`release_key`): in Evaluate the configuration's key, so
  showing the same run again (cached, or recomputed from the same seed) is booked once; in
  Release a new key per run, as every run draws fresh noise and is a new release.
* Two tables: ``releases``, what a dataset's limit counts, and ``evaluations``: Evaluate runs
  publish nothing (their maps stay with the analyst, beside the truth), so they are listed
  apart and never count against the limit.
* :meth:`BudgetStore.record` books whatever the total; :meth:`BudgetStore.try_spend` checks the
  limit and books in one ``BEGIN IMMEDIATE`` transaction, so concurrent sessions cannot both pass
  it. The booking protocol every door follows is :mod:`engine.run.bookkeeping._booking`.

The database is ``ledger.sqlite3`` in the cache folder (:func:`engine.core.cache.cache_dir`), or the
file named by ``$HEATMAP_LEDGER_DB``. It holds fingerprints, configuration keys, mechanisms
and ε: nothing read from the data.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ...core.epsilon import check_spent
from ...core.errors import EngineError, ParamError
from ..execution import neighbouring_of
from ._people import ledger_keys

ENV = "HEATMAP_LEDGER_DB"
FILE_NAME = "ledger.sqlite3"
TOLERANCE = 1e-9  # relative slack on the limit, for sums of floats like 0.1 + 0.2


class LedgerUnavailable(EngineError):
    """The ledger's file cannot be opened or written (a read-only or full disk, a lock held too long)."""


TABLES = ("releases", "evaluations")  # what counts against a limit; Evaluate runs, listed apart
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    fingerprint TEXT NOT NULL,
    release_key TEXT NOT NULL,
    epsilon REAL NOT NULL,
    mechanism TEXT NOT NULL,
    neighbouring TEXT NOT NULL,
    mode TEXT NOT NULL,
    time REAL NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY (fingerprint, release_key)
)
"""


def default_path() -> Path:
    """``$HEATMAP_LEDGER_DB``, else ``ledger.sqlite3`` in the cache folder."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    from ...core.cache import cache_dir

    return cache_dir() / FILE_NAME


# ------------------------------------------------------------------ fingerprints
def _file_digest(path: str) -> str:
    """The content hash of a file, or of a folder (a partitioned Parquet dataset): every file's path inside it
    and bytes, in sorted order."""
    h = hashlib.sha256()
    root = Path(path)
    try:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for p in files:
            if p != root:
                h.update(p.relative_to(root).as_posix().encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(functools.partial(f.read, 1 << 20), b""):
                    h.update(block)
    except OSError as exc:
        raise ParamError(f"cannot read {path} to fingerprint it ({exc.strerror or exc})") from None
    return "sha256:" + h.hexdigest()


def fingerprint_source(key: str, options: dict) -> str:
    """A registry dataset's ledger key, the same for every session and door.

    * The user's own file read by path (source ``file``): the people read from it
      (:func:`engine.run.bookkeeping.fingerprint_people`), so the CLI's file and the dashboard's upload
      of the same people share one ledger, whatever the format or the attribute columns chosen.
    * A Parquet folder read out of core (option ``path`` of the other file sources): its files'
      content hash (reading every row to fingerprint them would defeat reading out of core).
    * Any other source: its key and the options that select people (``"source:<hex>"``),
      resolved with the source's defaults. Options a source lists in ``extra["not_people"]``
      (e.g. John Snow's unit, a download mirror) say how to read or show the same people and
      do not open another ledger."""
    from ...data.registry import source
    from ...mechanisms import load_all

    load_all()
    src = source(key)
    resolved = src.schema().resolve(options) if src is not None else dict(options)
    if src is not None and src.kind == "file":
        if key == "file" and resolved.get("path"):
            return _file_people(src, {k: v for k, v in resolved.items() if k not in _FILE_ATTRIBUTES})
        if resolved.get("path"):
            return _file_digest(str(resolved["path"]))
    drop = set(src.extra.get("not_people", ())) if src is not None else set()
    chosen = {k: v for k, v in resolved.items() if k not in drop}
    payload = json.dumps([key, chosen], sort_keys=True, default=str)
    return "source:" + hashlib.sha256(payload.encode()).hexdigest()


_FILE_ATTRIBUTES = ("value", "flag", "weight")  # a file's attribute columns: the same people whichever is read
_PEOPLE_LOCK = threading.Lock()
_PEOPLE: dict[tuple, str] = {}  # (options, size, mtime) -> fingerprint: a meter redrawn does not re-read the file


def _file_people(src, options: dict) -> str:
    """The people in the file ``options["path"]`` read with ``options`` (memoised while the file is unchanged)."""
    from ._people import fingerprint_people

    try:
        st = os.stat(options["path"])
    except OSError:
        st = None
    memo = (json.dumps(options, sort_keys=True, default=str), st and st.st_size, st and st.st_mtime_ns)
    with _PEOPLE_LOCK:
        if st is not None and memo in _PEOPLE:
            return _PEOPLE[memo]
    fp = fingerprint_people(src.load(**options))
    with _PEOPLE_LOCK:
        if len(_PEOPLE) > 64:
            _PEOPLE.pop(next(iter(_PEOPLE)))
        _PEOPLE[memo] = fp
    return fp


def ledgers_read(fp: str) -> tuple[str, list[str]]:
    """The SQL condition selecting the rows of every ledger ``fp`` reads, and its parameters."""
    keys = ledger_keys(fp)
    return f"fingerprint IN ({', '.join('?' * len(keys))})", keys


def fingerprint_config(config) -> str:
    """:func:`fingerprint_source` of a configuration's dataset."""
    return fingerprint_source(config.dataset, config.dataset_options)


# ------------------------------------------------------------------ entries
@dataclass(frozen=True)
class Entry:
    """One release of a dataset: its key, the ε it spent, and what made it."""

    release_key: str
    epsilon: float
    mechanism: str
    neighbouring: str = ""  # the relation the ε is stated for (Mechanism.neighbouring)
    mode: str = "evaluate"
    time: float = field(default_factory=time.time)  # seconds since the epoch
    note: str = ""  # e.g. the page that made it

    def __post_init__(self):
        if not isinstance(self.epsilon, (int, float)):
            raise ParamError(f"a release's epsilon must be a finite number >= 0 (got {self.epsilon!r})")
        check_spent(self.epsilon, "a release's epsilon")
        if not (isinstance(self.release_key, str) and self.release_key):
            raise ParamError("a release needs a non-empty key")


def release_key(config) -> str:
    """The budget's key of a release of ``config``: ``config.key()`` in evaluate mode (the same
    configuration, seed included, is the same release); in release mode a new random key at every
    call (``release/<random>``), since each run is a fresh release of the same people. A release's
    manifest prints its key, so it is not derived from the configuration, which holds the path of
    the analyst's file: a hash of it would confirm a guessed path."""
    if config.mode == "release":
        return f"release/{secrets.token_hex(16)}"
    return config.key()


def entry_for(config, key: str | None = None, note: str = "") -> Entry:
    """The entry a run of ``config`` books: its ε (for a mechanism that spends none, only what its frame and
    grid spend, :mod:`engine.run.execution._frame`), its mechanism and neighbouring relation, its mode; ``key`` defaults
    to :func:`release_key`."""
    from ...mechanisms import get

    cls = get(config.mechanism)
    eps = float(config.epsilon)
    return Entry(
        release_key=key or release_key(config),
        epsilon=eps if cls.uses_epsilon else eps * config.budgeted_share,
        mechanism=config.mechanism,
        neighbouring=neighbouring_of(config),
        mode=config.mode,
        note=note,
    )


class Spend(NamedTuple):
    """What :meth:`BudgetStore.try_spend` did: ``ok`` (booked, or nothing new to book),
    ``spent`` (the dataset's total afterwards), ``added`` (the ε newly booked; 0 if refused)."""

    ok: bool
    spent: float
    added: float


# ------------------------------------------------------------------ the store
class BudgetStore:
    """The per-dataset ledger in one SQLite file (``path``, default :func:`default_path`).

    Every call opens its own connection, so a store object may be shared by threads, and
    several objects, processes or restarts see one ledger. ``timeout``: seconds a writer waits
    for another's transaction before giving up with an :class:`LedgerUnavailable`.
    ``table``: ``"releases"`` (what a dataset's limit counts) or ``"evaluations"`` (Evaluate runs, which
    publish nothing: kept in the same file, listed apart)."""

    def __init__(self, path: str | os.PathLike | None = None, timeout: float = 30.0, table: str = "releases"):
        if table not in TABLES:
            raise ParamError(f"unknown ledger table {table!r}; choose from {', '.join(TABLES)}")
        from ...core.cache import CacheUnavailable

        try:
            self.path = Path(path) if path is not None else default_path()
        except CacheUnavailable as exc:
            raise LedgerUnavailable(f"the privacy ledger's folder is unavailable: {exc}") from None
        self.timeout = float(timeout)
        self.table = table
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerUnavailable(f"cannot create the folder of the privacy ledger {self.path} ({exc})") from None
        with self._tx() as con:
            con.execute(_SCHEMA.format(table=table))

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (``BEGIN IMMEDIATE``): the reads inside it see
        what no other writer can change before it commits."""
        try:
            con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"cannot open the privacy ledger {self.path} ({exc})") from None
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise LedgerUnavailable(f"the privacy ledger {self.path} is busy or unwritable ({exc})") from None
        except sqlite3.DatabaseError as exc:
            raise LedgerUnavailable(f"the privacy ledger {self.path} is not a readable ledger ({exc})") from None
        finally:
            con.close()

    def _spent(self, con, fp: str) -> float:
        where, keys = ledgers_read(fp)
        # a release is counted once, should two of the keys hold it
        sql = f"SELECT COALESCE(SUM(e), 0.0) FROM (SELECT MAX(epsilon) AS e FROM {self.table} WHERE {where} "
        return float(con.execute(sql + "GROUP BY release_key)", keys).fetchone()[0])

    def _new(self, con, fp: str, entries: Iterable[Entry]) -> list[Entry]:
        """The entries not booked yet (each key once)."""
        out: dict[str, Entry] = {}
        for e in entries:
            if not isinstance(e, Entry):
                raise ParamError(f"expected budget entries, got {type(e).__name__}")
            if e.release_key in out:
                continue
            where, keys = ledgers_read(fp)
            booked = con.execute(
                f"SELECT 1 FROM {self.table} WHERE {where} AND release_key = ?", (*keys, e.release_key)
            ).fetchone()
            if booked is None:
                out[e.release_key] = e
        return list(out.values())

    def _insert(self, con, fp: str, entries: list[Entry]) -> None:
        fp = ledger_keys(fp)[0]  # booked under the first key
        con.executemany(
            f"INSERT OR IGNORE INTO {self.table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (fp, e.release_key, float(e.epsilon), e.mechanism, e.neighbouring, e.mode, e.time, e.note)
                for e in entries
            ],
        )

    def spent(self, fp: str) -> float:
        """The ε spent on dataset ``fp`` so far (the sum over its releases)."""
        with self._tx() as con:
            return self._spent(con, fp)

    def entries(self, fp: str) -> list[Entry]:
        """Dataset ``fp``'s releases, oldest first."""
        where, keys = ledgers_read(fp)
        with self._tx() as con:
            rows = con.execute(
                f"SELECT release_key, epsilon, mechanism, neighbouring, mode, time, note FROM {self.table} "
                f"WHERE {where} ORDER BY time, release_key",
                keys,
            ).fetchall()
        first: dict[str, Entry] = {}  # a release once, should two of the keys hold it
        for row in rows:
            first.setdefault(row[0], Entry(*row))
        return list(first.values())

    def cost(self, fp: str, entries: Iterable[Entry]) -> float:
        """The ε booking ``entries`` would add (releases already booked cost nothing)."""
        with self._tx() as con:
            return sum(e.epsilon for e in self._new(con, fp, entries))

    def record(self, fp: str, entries: Iterable[Entry]) -> float:
        """Book ``entries`` whatever the total; a release already booked (same key) is not booked
        again. Returns the ε newly added."""
        with self._tx() as con:
            new = self._new(con, fp, entries)
            self._insert(con, fp, new)
        return sum(e.epsilon for e in new)

    def try_spend(self, fp: str, entries: Iterable[Entry], limit: float) -> Spend:
        """Book ``entries`` only if the total stays within ``limit``, checked and booked in one
        transaction. Releases already booked cost nothing, so showing one again always passes."""
        with self._tx() as con:
            before = self._spent(con, fp)
            new = self._new(con, fp, entries)
            add = sum(e.epsilon for e in new)
            if add > 0 and before + add > limit * (1 + TOLERANCE):
                return Spend(False, before, 0.0)
            self._insert(con, fp, new)
        return Spend(True, before + add, add)

    def remove(self, fp: str, key: str) -> bool:
        """Unbook a release that never left the engine (its run failed or was cancelled after
        :meth:`try_spend`). Returns whether it was booked."""
        with self._tx() as con:
            cur = con.execute(
                f"DELETE FROM {self.table} WHERE fingerprint = ? AND release_key = ?", (ledger_keys(fp)[0], key)
            )
            return cur.rowcount > 0
