"""The privacy-budget ledger of each dataset, as the dashboard shows it.

The budget belongs to the data, not to a browser tab (Tumult and OpenDP sessions work the same way): every
release of a dataset, from any session, is booked in :class:`engine.run.bookkeeping.BudgetStore` under the
dataset's fingerprint (catalogue key and the options that select people; for an upload, the people in it,
:mod:`engine.run.bookkeeping._people`, so every session and the CLI share one ledger per set of people), through the one
booking protocol of :mod:`engine.run.bookkeeping._booking`. Of an upload's ledger a session sees its own runs and, of every
other session's and the CLI's, the total ε only: never a file name, a run or a map. Releases compose
sequentially, so the total is their sum (basic composition), whatever the sample of users.
"""

from __future__ import annotations

import logging
import time

import streamlit as st

from engine.core.errors import EngineError
from engine.run import RunConfig
from engine.run.bookkeeping import TOLERANT, Bookkeeper, BudgetStore, default_path, fingerprint_source

from . import uploads
from .text import plain


def store(table: str = "releases") -> BudgetStore:
    """The server's ledger (``HEATMAP_LEDGER_DB``, or ledger.sqlite3 in the cache folder): its releases, or its
    evaluations."""
    return _store(str(default_path()), table)


@st.cache_resource(show_spinner=False)
def _store(path: str, table: str) -> BudgetStore:
    return BudgetStore(path, table=table)


def dataset_ident(cfg: RunConfig) -> str:
    """The dataset's fingerprint: its ledger's key."""
    if cfg.dataset.startswith(uploads.UPLOAD_PREFIX):
        up = uploads.get(cfg.dataset)
        return up.fingerprint if up is not None else "upload:gone"
    return fingerprint_source(cfg.dataset, cfg.dataset_options)


_LOG = logging.getLogger(__name__)
UNAVAILABLE = (
    "The server's privacy ledger cannot be written just now (its disk is full or read-only). Evaluation runs "
    "still work but are not booked; Release is refused until the ledger can be written again."
)


def bookkeeper() -> Bookkeeper:
    """The booking protocol on the server's ledger, with this session's uploads, under the server's policy: when
    the ledger cannot be written (a full or read-only disk) an evaluation goes on unbooked (the meter says so)
    and a release is refused before any noise is drawn (:data:`engine.run.bookkeeping.TOLERANT`)."""
    return Bookkeeper(ident=dataset_ident, policy=TOLERANT, opener=store)


def mark_mine(key: str) -> None:
    """Remember a run this session booked: of an upload's ledger, only these are listed to it."""
    st.session_state.setdefault("_my_bookings", set()).add(key)


def _visible(cfg: RunConfig, entries: list) -> tuple[list, int]:
    """The rows this session may see, and how many it may not: of an upload's ledger (shared with every session
    and the CLI that hold the same people) its own runs only."""
    if not cfg.dataset.startswith(uploads.UPLOAD_PREFIX):
        return entries, 0
    mine = st.session_state.get("_my_bookings", set())
    own = [e for e in entries if e.release_key.removesuffix("/effective") in mine]
    return own, len(entries) - len(own)


def _table(entries, c) -> None:
    c.dataframe(
        [
            {
                "ε": e.epsilon,
                "mechanism": e.mechanism,
                "neighbouring relation": e.neighbouring or "—",
                "page": e.note,
                "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time)),
            }
            for e in entries
        ],
        hide_index=True,
        width="stretch",
    )


_HIDDEN = (
    "{n} {what}{s} of the same people made elsewhere (another session, tab or the command line) count in the "
    "total; which runs they were is not shown."
)


def spent_label(cfg: RunConfig) -> str:
    """The ε released on the dataset so far, or "unavailable" when the ledger cannot be read (a full or
    read-only folder: the page goes on, the meter says why)."""
    from engine.core.errors import EngineError

    try:
        return f"{store().spent(dataset_ident(cfg)):g}"
    except EngineError:
        return "unavailable"


def remaining(cfg: RunConfig, limit: float) -> float | None:
    """ε the dataset can still spend under ``limit``; None when the ledger cannot be read."""
    from engine.core.errors import EngineError

    try:
        return max(0.0, limit - store().spent(dataset_ident(cfg)))
    except EngineError:
        return None


def meter(cfg: RunConfig, limit: float, dataset_label: str, container=None) -> None:
    """The dataset's releases over every session and tab of this server against the operator's limit (read-only
    here), with its releases and, apart, the evaluation runs, which publish nothing and count against nothing."""
    c = container or st
    try:
        bk = bookkeeper()
        entries, evaluations = bk.releases(cfg), bk.evaluation_runs(cfg)
    except EngineError as exc:
        _LOG.warning("privacy ledger unavailable: %s", exc)
        c.warning(UNAVAILABLE, icon=":material/error:")
        return
    total = sum(e.epsilon for e in entries)
    frac = min(total / limit, 1.0) if limit > 0 else 1.0
    c.progress(
        frac,
        text=f"ε spent on {plain(dataset_label)}, all sessions: **{total:g}** of the limit {limit:g} "
        f"({len(entries)} release{'s' if len(entries) != 1 else ''})",
    )
    c.caption(
        "The limit is set by the server's operator for this dataset; no session can raise it. A release past it "
        "is refused."
    )
    shown, hidden = _visible(cfg, entries)
    if entries:
        with c.expander("Releases of this dataset (all sessions)" if not hidden else "Releases of these people"):
            if shown:
                _table(shown, st)
            if hidden:
                st.caption(_HIDDEN.format(n=hidden, what="release", s="s" if hidden != 1 else ""))
            st.caption(
                "The ledger belongs to the dataset and is kept on the server (it survives tabs and restarts). Each "
                "release of the same people adds its ε (sequential composition), up to the limit."
            )
    if evaluations:
        spent = sum(e.epsilon for e in evaluations)
        shown, hidden = _visible(cfg, evaluations)
        with c.expander(f"Evaluation runs of this dataset (all sessions): {len(evaluations)}, ε = {spent:g} in all"):
            if shown:
                _table(shown, st)
            if hidden:
                st.caption(_HIDDEN.format(n=hidden, what="evaluation run", s="s" if hidden != 1 else ""))
            st.caption(
                "Evaluation runs publish nothing: their maps are shown beside the true data to the analyst only "
                "(seeded noise, not a private release), so they never count against the dataset's limit."
            )
