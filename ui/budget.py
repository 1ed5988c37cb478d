"""The privacy-budget ledger of each dataset: server-wide, in SQLite, so it survives tabs and restarts.

The budget belongs to the data, not to a browser tab (Tumult and OpenDP sessions work the same way): every
release of a dataset, from any session, is booked in :class:`engine.budget_store.BudgetStore` under the
dataset's fingerprint (catalogue key and options; for an upload, its content hash scoped to the uploading
session, so another session's copy has its own ledger and learns nothing of this one's). Releases compose
sequentially, so the total is their sum (basic composition), whatever the sample of users.

Evaluate mode: a release is the configuration (seed included): showing it again costs nothing. Past the
limit it asks for confirmation on real data and only informs on synthetic data. Release mode: every run
is a new release, booked and checked against the limit in one transaction before it starts; past the limit
it is refused.
"""

from __future__ import annotations

import functools
import logging
import time

import streamlit as st

from engine.budget_store import BudgetStore, Entry, entry_for, fingerprint_source
from engine.core.errors import EngineError
from engine.jobs import RunConfig
from engine.mechanisms import registry

from . import uploads
from .text import plain


def store() -> BudgetStore:
    """The server's ledger (``HEATMAP_LEDGER_DB``, or ledger.sqlite3 in the cache folder)."""
    from engine.budget_store import default_path

    return _store(str(default_path()))


@st.cache_resource(show_spinner=False)
def _store(path: str) -> BudgetStore:
    return BudgetStore(path)


_LOG = logging.getLogger(__name__)
UNAVAILABLE = (
    "The server's privacy ledger cannot be written just now (its disk is full or read-only). Evaluation runs "
    "still work but are not booked; Release is refused until the ledger can be written again."
)


def _tolerant(default):
    """A ledger read or evaluation booking that goes on without the ledger when it cannot be opened or
    written (the meter says so on the page): a full or read-only disk is not an outage."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except EngineError as exc:
                _LOG.warning("privacy ledger unavailable: %s", exc)  # the operator's log names the file
                return default() if callable(default) else default

        return inner

    return wrap


def dataset_ident(cfg: RunConfig) -> str:
    """The dataset's fingerprint: its ledger's key."""
    if cfg.dataset.startswith(uploads.PREFIX):
        up = uploads.get(cfg.dataset)
        return up.fingerprint if up is not None else "upload:gone"
    return fingerprint_source(cfg.dataset, cfg.dataset_options)


def synthetic(cfg: RunConfig) -> bool:
    return cfg.dataset.startswith("synthetic:")


def cost(cfg: RunConfig) -> float:
    cls = registry().get(cfg.mechanism)
    return float(cfg.epsilon) if cls is None or cls.uses_epsilon else 0.0


@_tolerant(0.0)
def spent(ident: str) -> float:
    return store().spent(ident)


def _entries(configs: list[RunConfig], page: str = "") -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for c in configs:
        out.setdefault(dataset_ident(c), []).append(entry_for(c, c.key(), note=page))
    return out


@_tolerant(dict)
def new_spend(configs: list[RunConfig]) -> dict[str, float]:
    """ε each dataset would additionally spend if ``configs`` were released now (evaluate mode)."""
    return {fp: store().cost(fp, es) for fp, es in _entries(configs).items()}


@_tolerant(None)
def over_limit(configs: list[RunConfig], limit: float) -> tuple[float, float] | None:
    """(total after, ε this would add) when the run would push a dataset past ``limit``."""
    for ident, add in new_spend(configs).items():
        after = spent(ident) + add
        if add > 0 and after > limit + 1e-12:
            return after, add
    return None


@_tolerant(None)
def record(configs: list[RunConfig], page: str) -> None:
    """Book evaluation releases (idempotent: a configuration already booked costs nothing)."""
    for fp, es in _entries(configs, page).items():
        store().record(fp, es)


def book_release(cfg: RunConfig, limit: float, page: str) -> tuple[bool, str, str]:
    """Release mode: book one new release of ``cfg`` and check the limit in one transaction.
    Returns (ok, the booking's key, a message when refused)."""
    from engine.budget_store import release_key

    fp = dataset_ident(cfg)
    key = release_key(cfg)
    try:
        res = store().try_spend(fp, [entry_for(cfg, key, note=page)], limit)
    except EngineError as exc:  # booked before any noise is drawn: no ledger, no release
        _LOG.warning("privacy ledger unavailable: %s", exc)
        return False, key, "Refused: " + UNAVAILABLE
    if res.ok:
        return True, key, ""
    return (
        False,
        key,
        f"Refused: this release (ε = {cost(cfg):g}) would bring the dataset's total to "
        f"{res.spent + cost(cfg):g}, past its limit of {limit:g}. Release mode never goes past the limit.",
    )


@_tolerant(None)
def book_excess(configs: list[RunConfig], statuses) -> None:
    """A run may spend more than planned (distributed mechanisms under excess dropout book their effective ε):
    the ledger gets the difference, once per release."""
    for cfg, s in zip(configs, statuses):
        rel = getattr(getattr(s, "result", None), "release", None)
        if s.state != "ok" or rel is None:
            continue
        extra = float(rel.ledger.total()) - cost(cfg)
        if extra > 1e-12:
            e = entry_for(cfg, cfg.key() + "/effective", note="effective ε above the plan (dropout)")
            store().record(dataset_ident(cfg), [Entry(**{**e.__dict__, "epsilon": extra})])


@_tolerant(None)
def unbook(cfg: RunConfig, key: str) -> None:
    """A release that did not happen (failed or cancelled before any output) is taken off the ledger."""
    store().remove(dataset_ident(cfg), key)


@_tolerant(False)
def released(cfg: RunConfig) -> bool:
    fp = dataset_ident(cfg)
    return any(e.release_key == cfg.key() for e in store().entries(fp))


def meter(cfg: RunConfig, limit: float, dataset_label: str, container=None) -> None:
    """The dataset's total over every session and tab of this server, with its releases."""
    c = container or st
    ident = dataset_ident(cfg)
    try:
        entries = store().entries(ident)
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
    if total > limit:
        if synthetic(cfg):
            c.info(
                f"Synthetic data: ε = {total:g} has been spent in evaluation, past {limit:g}; no real person is involved."
            )
        else:
            c.warning(
                f"{len(entries)} releases of this dataset have spent ε = {total:g} in total (sequential composition), "
                f"above the limit of {limit:g}."
            )
    if entries:
        with c.expander("Releases of this dataset (all sessions)"):
            st.dataframe(
                [
                    {
                        "ε": e.epsilon,
                        "mechanism": e.mechanism,
                        "neighbouring relation": e.neighbouring or "—",
                        "mode": e.mode,
                        "page": e.note,
                        "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time)),
                    }
                    for e in entries
                ],
                hide_index=True,
                width="stretch",
            )
            st.caption(
                "The ledger belongs to the dataset and is kept on the server (it survives tabs and restarts). Each "
                "distinct release of the same people adds its ε; showing an identical evaluation release again costs "
                "nothing."
            )
