"""Per-session, per-dataset ledger of the ε spent by the releases this session has seen.

Every distinct release (a configuration key: mechanism, parameters, ε, seed, ...)
of a dataset spends its ε again: re-running the *same* configuration returns the
identical release and costs nothing more, while a new seed is a fresh release of
the same people. Releases of one dataset compose sequentially, so the session
total is their sum (basic composition), whatever the sample of users.
"""

from __future__ import annotations

import json
import time

import streamlit as st

from engine.jobs import RunConfig
from engine.mechanisms import registry

from .text import plain


def dataset_ident(cfg: RunConfig) -> str:
    return json.dumps([cfg.dataset, cfg.dataset_options], sort_keys=True, default=str)


def _book() -> dict:
    return st.session_state.setdefault("_budget", {})


def cost(cfg: RunConfig) -> float:
    cls = registry().get(cfg.mechanism)
    return float(cfg.epsilon) if cls is None or cls.uses_epsilon else 0.0


def spent(ident: str) -> float:
    return float(sum(e["eps"] for e in _book().get(ident, {}).values()))


def new_spend(configs: list[RunConfig]) -> dict[str, float]:
    """ε each dataset would additionally spend if ``configs`` were released now."""
    out: dict[str, float] = {}
    seen = set()
    for c in configs:
        ident, key = dataset_ident(c), c.key()
        if key in _book().get(ident, {}) or key in seen:
            continue
        seen.add(key)
        out[ident] = out.get(ident, 0.0) + cost(c)
    return out


def over_limit(configs: list[RunConfig], limit: float) -> tuple[float, float] | None:
    """(total after, ε this would add) when the run would push a dataset past ``limit``."""
    for ident, add in new_spend(configs).items():
        after = spent(ident) + add
        if add > 0 and after > limit + 1e-12:
            return after, add
    return None


def record(configs: list[RunConfig], page: str) -> None:
    book = _book()
    for c in configs:
        entries = book.setdefault(dataset_ident(c), {})
        if c.key() not in entries:
            entries[c.key()] = {
                "eps": cost(c),
                "mechanism": c.mechanism,
                "epsilon": float(c.epsilon),
                "seed": int(c.seed),
                "page": page,
                "time": time.strftime("%H:%M:%S"),
            }


def released(cfg: RunConfig) -> bool:
    return cfg.key() in _book().get(dataset_ident(cfg), {})


def meter(cfg: RunConfig, limit: float, dataset_label: str, container=None) -> None:
    """Session total for the dataset of ``cfg``, with its releases."""
    c = container or st
    ident = dataset_ident(cfg)
    total = spent(ident)
    entries = list(_book().get(ident, {}).values())
    frac = min(total / limit, 1.0) if limit > 0 else 1.0
    c.progress(
        frac,
        text=f"ε spent on {plain(dataset_label)} this session: **{total:g}** of your limit {limit:g} "
        f"({len(entries)} distinct release{'s' if len(entries) != 1 else ''})",
    )
    if total > limit:
        c.warning(
            f"This session has released {len(entries)} heatmaps of this dataset, spending ε = {total:g} in total "
            f"(sequential composition), above your limit of {limit:g}."
        )
    if entries:
        with c.expander("Releases counted in this session's ledger"):
            st.dataframe(entries, hide_index=True, width="stretch")
            st.caption(
                "Each distinct configuration is a new release of the same people: their ε add up. Re-running an "
                "identical configuration returns the identical cached release and costs nothing more."
            )
