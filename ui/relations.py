"""The neighbouring relation a run's ε is stated for, and the notice when a comparison mixes relations."""

from __future__ import annotations

import streamlit as st

from engine.mechanisms import registry
from engine.mechanisms.base import epsilon_under
from engine.run import RunConfig


def mech_label(key: str) -> str:
    cls = registry().get(key)
    return (cls.label or key) if cls else key


def relation_text(cfg: RunConfig, eps: float) -> str:
    """The neighbouring relation the ε is stated for, and what it means under add/remove user."""
    cls = registry().get(cfg.mechanism)
    if cls is None or not cls.neighbouring or cls.neighbouring == "none":
        return ""
    rel = cls.neighbouring_for(cfg.params)
    text = f"**Neighbouring relation:** {rel} (the guarantee compares datasets that differ by this)."
    if rel != "add/remove user":
        conv, why = cls.epsilon_add_remove(eps, cfg.params)
        text += (
            f" Under add/remove user: ε = {conv:g} ({why})." if conv is not None else f" Under add/remove user: {why}."
        )
    return text


def relations_notice(configs: list[RunConfig], container=None) -> None:
    """Compare and Trade-offs: say when mechanisms side by side are private under different relations, so
    "the same ε" is not the same guarantee, with each one's ε under add/remove user where it follows."""
    rels = {}
    for cfg in configs:
        cls = registry().get(cfg.mechanism)
        if cls is not None and cls.neighbouring and cls.neighbouring != "none":
            rels.setdefault(cls.neighbouring_for(cfg.params), []).append(cfg)
    if len(rels) < 2:
        return
    lines = []
    for rel, cfgs in rels.items():
        names = ", ".join(sorted({mech_label(c.mechanism) for c in cfgs}))
        conv, common = [], []
        for c in {c.mechanism: c for c in cfgs}.values():
            e, why = registry()[c.mechanism].epsilon_add_remove(c.epsilon, c.params)
            conv.append(f"ε = {e:g}" if e is not None else why)
            r, why_r = epsilon_under(c.epsilon, rel, "replace user")
            common.append(f"ε = {r:g}" if r is not None else why_r)
        lines.append(
            f"- **{rel}**: {names} — under add/remove user: {'; '.join(sorted(set(conv)))}; under replace user "
            f"(the relation every private mechanism converts to): {'; '.join(sorted(set(common)))}"
        )
    (container or st).warning(
        "These mechanisms are private under different neighbouring relations, so the same ε is not the same "
        "guarantee:\n" + "\n".join(lines),
        icon=":material/compare_arrows:",
    )
