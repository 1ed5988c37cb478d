"""The privacy-budget ledger of each dataset, as the dashboard shows it.

The budget belongs to the data, not to a browser tab (Tumult and OpenDP sessions work the same way): every
release of a dataset, from any session, is booked in :class:`engine.run.ledger.BudgetStore` under the
dataset's fingerprint (catalogue key and options; for an upload, its content hash scoped to the uploading
session, so another session's copy has its own ledger and learns nothing of this one's), through the one
booking protocol of :mod:`engine.run.booking`. Releases compose sequentially, so the total is their sum
(basic composition), whatever the sample of users.
"""

from __future__ import annotations

import time

import streamlit as st

from engine.run.booking import Bookkeeper
from engine.run.config import RunConfig
from engine.run.ledger import BudgetStore, default_path, fingerprint_source

from . import uploads
from .text import plain


def store() -> BudgetStore:
    """The server's ledger (``HEATMAP_LEDGER_DB``, or ledger.sqlite3 in the cache folder)."""
    return _store(str(default_path()))


@st.cache_resource(show_spinner=False)
def _store(path: str) -> BudgetStore:
    return BudgetStore(path)


def dataset_ident(cfg: RunConfig) -> str:
    """The dataset's fingerprint: its ledger's key."""
    if cfg.dataset.startswith(uploads.PREFIX):
        up = uploads.get(cfg.dataset)
        return up.fingerprint if up is not None else "upload:gone"
    return fingerprint_source(cfg.dataset, cfg.dataset_options)


def bookkeeper() -> Bookkeeper:
    """The booking protocol on the server's ledger, with this session's uploads."""
    return Bookkeeper(store(), dataset_ident)


def synthetic(cfg: RunConfig) -> bool:
    return cfg.dataset.startswith("synthetic:")


def remaining(cfg: RunConfig, limit: float) -> float:
    """ε the dataset can still spend under ``limit``."""
    return max(0.0, limit - store().spent(dataset_ident(cfg)))


def meter(cfg: RunConfig, limit: float, dataset_label: str, container=None) -> None:
    """The dataset's total over every session and tab of this server, with its releases."""
    c = container or st
    ident = dataset_ident(cfg)
    entries = store().entries(ident)
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
