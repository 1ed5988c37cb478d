"""Explore's blocks: its runs (the mechanism and, for context, two baselines), the popovers of its top row, the
note before a release, what the maps show (the run's, or the prepared data before a run) and the details under
the maps."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from engine.mechanisms import registry
from engine.run import RunConfig

from . import budget, export, jobs, plan, region_panel, state, study, views

BASELINES = ("identity", "uniform")


def configs(ctl) -> tuple[RunConfig | None, list[RunConfig]]:
    """The chosen run and the group Run starts: it, and the baselines for context when asked (Evaluate only)."""
    state.seed("explore.baselines", True, "baselines", state.parse_bool)
    cfg = ctl.config() if ctl.ready else None
    if cfg is None:
        return None, []
    runs = [cfg]
    if state.get("explore.baselines") and ctl.mode == "evaluate":  # context runs are evaluation only
        runs += [ctl.config(b, params={}) for b in BASELINES if b in registry() and b != cfg.mechanism]
    return cfg, runs


def options(container, mode: str):
    """The popover of the view's secondary options (zoom, context, baselines); returned for the view controls."""
    pop = container.popover("Zoom, context, baselines", icon=":material/tune:", width="stretch")
    pop.toggle(
        "Identity and Uniform on the same data, for context",
        **state.bind("explore.baselines"),
        disabled=mode == "release",
        help="Two classic baselines run on the same data, ε and seed. Like every evaluation, they are listed in the "
        "ledger apart from releases and never count against the dataset's limit."
        if mode == "evaluate"
        else "Evaluate mode only: in Release mode a run publishes one map, booked against the dataset's limit, and no "
        "baseline runs beside it.",
    )
    return pop


def ledger(container, cfg: RunConfig, ctl) -> None:
    """The dataset's ledger behind a button that shows what it has spent."""
    with container.popover(
        f"ε ledger: {budget.spent_label(cfg)} of {ctl.release_limit:g}",
        icon=":material/account_balance:",
        width="stretch",
    ):
        budget.meter(cfg, ctl.release_limit, views.dataset(cfg).meta.name)


def before_release(cfg: RunConfig | None, ctl) -> None:
    """Release mode before a run: what Run does, and the plan from public inputs (no true map, ever)."""
    st.info(
        "Release mode: press **Run** to publish a private map of this dataset (its ε is booked against the "
        "dataset's limit first). The true map is not shown in this mode.",
        icon=":material/lock:",
    )
    if cfg is not None:
        plan.panel(
            cfg, views.dataset(cfg), plan.plannable(), budget.remaining(cfg, ctl.release_limit), regions=ctl.regions
        )
    study.panel(ctl.display)


@dataclass
class Seen:
    """What the maps show: the run's data (``res``, ``cfg``) or, before a run, the prepared data of ``cfg``."""

    meta: object
    n_points: int
    n_users: int
    truth: object
    domain: object
    cfg: RunConfig
    res: object = None


def seen(show, cfg: RunConfig | None) -> Seen | None:
    if show is not None:
        res = show.results[0]
        return Seen(res.dataset_meta, res.n_points, res.n_users, res.truth, res.release.domain, show.configs[0], res)
    if cfg is not None:
        ds, domain, truth = views.prepared(cfg)
        return Seen(ds.meta, len(ds), ds.n_users, truth, domain, cfg)
    return None


def stale_note(g, notices) -> None:
    """The result shown is not the one the settings ask for."""
    if g is not None and g.running:
        notices.caption("Showing the previous result while the new run is in progress.")
    else:
        notices.info(
            "Settings changed since this run: showing the previous result. Press **Run** to update.",
            icon=":material/info:",
        )


def private_layer(res, url: dict, container):
    """The private map to draw (its density, or a level's), its partition, a caption, and its title."""
    lvl = views.levels_control(res, container)
    if lvl is not None:
        url["level"] = state.get("explore.level")
        return (*lvl, export.release_title(res), True)
    return res.release.density, res.release.partition, None, export.release_title(res), False


def metrics(show) -> None:
    """How good the run is, beside its baselines'."""
    st.subheader("How good is it?")
    if show is None:
        st.caption("Metrics compare the private map with the true one after a run.")
        return
    others = {}
    for c, s in zip(show.configs[1:], show.statuses[1:]):
        others[c.mechanism] = s.result if s.state == "ok" else ("…" if s.state == "running" else "failed")
    views.release_warnings(show.results[0])
    views.metrics_block(show.results[0], others)


def details(res, rcfg: RunConfig, ctl, scale, fr, view, title: str, noun: str, url: dict) -> None:
    """Under the maps: the margin of error, regions, proportions, and the ledger, communication, who sees what
    and the exports."""
    with st.expander("Margin of error", expanded=bool(jobs.get_group("explore_se"))):
        views.margin_block(res, rcfg, ctl, scale, fr, view, ctl.display)
    with st.expander("Regions", expanded=ctl.regions is not None):
        ds = views.prepared(rcfg)[0] if rcfg.mode == "evaluate" else None
        region_panel.block([(title, res)], ctl.regions, scale, fr, "explore", noun, ds)
    views.proportion_block(res, fr, view, ctl.display)
    t1, t2, t3, t4 = st.tabs(["Privacy ledger", "Communication", "Who sees what", "Export"])
    views.ledger_block(res, t1)
    views.communication_block(res, t2)
    views.server_block(res, t3)
    views.export_block(res, scale, fr, views.share_url(url), views.stem(rcfg), t4)
