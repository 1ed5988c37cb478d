"""The Plan panel of Release mode: the accuracy a release will have, predicted before any ε is spent and
from public inputs only (:mod:`engine.run.planning._forecast`), beside the dataset's remaining budget."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

from engine.core.epsilon import EPS_MAX
from engine.core.errors import EngineError
from engine.run import planning
from engine.run.execution import RunConfig, auto_depth

from . import state
from .text import plain

CURVE = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
RUNS = 3  # proxy cities per simulated figure: a few seconds on the page


plannable = planning.plannable  # the mechanisms the planner gives a margin for (the page lists them)


def _fmt(v) -> str:
    return "—" if v is None or not math.isfinite(v) else f"±{v:,.3g}"


def panel(
    cfg: RunConfig, dataset, others: list[str], remaining: float | None, unit: str = "people", regions=None
) -> None:
    """``dataset``: the loaded dataset, of which only the public frame is used; ``others``: mechanism keys
    the analyst may compare; ``remaining``: ε left in the dataset's ledger (drawn on the curve); ``regions``: the
    analysis's regions (ui/region_panel.py Choice; None: the plan is per cell)."""
    with st.expander("Plan this release: predicted accuracy before spending", expanded=True, icon=":material/tune:"):
        st.caption(
            "Predicted from public inputs only: the mechanism, ε, the grid or regions, the dataset's public frame, "
            "and a user count you state (declared as side information). The mechanism runs on a synthetic city of "
            "that size, never on this dataset's locations; where its margins depend on where people are, the "
            "prediction is as good as the proxy city is like this dataset (BENCHMARKS.md, plan)."
        )
        c = st.columns([1, 1, 1, 1, 2])
        state.seed("plan.users", None)
        users = c[0].number_input(
            "Users (a public bound you state)",
            min_value=1,
            max_value=planning.MAX_USERS,
            step=1000,
            **state.bind("plan.users"),
        )
        places = {"cells": "each cell of the map"}
        if regions is not None:
            places["regions"] = f"each {regions.noun} of the analysis's regions (sidebar, Regions)"
        state.seed("plan.where", "regions" if regions is not None else "cells")
        if state.get("plan.where") not in places:
            state.put("plan.where", next(iter(places)))
        where = c[1].selectbox(
            "Margins of",
            list(places),
            format_func=lambda k: f"{regions.noun}s" if k == "regions" else k,
            **state.bind("plan.where"),
            help="; ".join(f"{k}: {v}" for k, v in places.items()),
        )
        noun = regions.noun if where == "regions" else "cell"
        state.seed("plan.target", None)
        target = c[2].number_input(
            f"Target ± per {noun} ({unit})",
            min_value=0.0,
            value=None,
            **state.bind("plan.target"),
            help=f"find the smallest ε whose 95 % margin per {noun} (median over them) is at most this",
        )
        from engine.data.synthetic import PRESETS

        state.seed("plan.proxy", planning.PROXY_PRESET)
        proxy = c[3].selectbox(
            "Proxy city",
            list(PRESETS),
            **state.bind("plan.proxy"),
            help="the synthetic city whose layout the proxy follows: pick the one most like this dataset",
        )
        state.seed("plan.with", [])
        also = c[4].multiselect("Compare with", [m for m in others if m != cfg.mechanism], **state.bind("plan.with"))
        if cfg.budgeted_share:
            st.caption(
                f"The frame and the count of people take {100 * cfg.budgeted_share:g} % of ε (steps of the ledger): "
                "the mechanism gets the rest, so its margins are wider than planned here at the same ε, and a DP frame "
                "is planned as the dataset's region."
            )
        if not users:
            st.info("State the number of users (a public bound) to plan.", icon=":material/info:")
            return
        if st.button("Plan", key="plan.go", icon=":material/query_stats:"):
            try:
                with st.spinner("Planning on a synthetic city…"):
                    st.session_state["plan.result"] = _plan(
                        cfg, dataset, int(users), regions if where == "regions" else None, target,
                        [cfg.mechanism, *also], proxy,
                    )  # fmt: skip
            except EngineError as e:
                st.error(plain(e, 400))
                return
        res = st.session_state.get("plan.result")
        if res is not None:
            _show(res, cfg, remaining, unit, target)


def plan_depth(cfg: RunConfig, users: int) -> int:
    """The grid the plan assumes: the configuration's, or with automatic resolution the one the stated number
    of users (or the run's own public number) gives."""
    if cfg.resolution != "auto":
        return cfg.depth
    return auto_depth(cfg.people or users)


def _plan(cfg, dataset, users, regions, target, mechanisms, proxy):
    frame = planning.frame_from(dataset)
    depth = plan_depth(cfg, users)
    eps = sorted(set(CURVE) | {float(cfg.epsilon)})
    plan = planning.make_plan(
        mechanisms,
        eps,
        planning.stated_users(users),
        frame=frame,
        depth=depth,
        regions_spec=None if regions is None else regions.spec,
        polygons=None if regions is None else regions.polygons,
        params={cfg.mechanism: dict(cfg.params)},
        target=target or None,
        runs=RUNS,
        proxy=planning.synthetic_proxy(proxy),
    )
    noun = "cell" if regions is None else regions.noun
    return {"plan": plan, "epsilon": float(cfg.epsilon), "mechanism": cfg.mechanism, "noun": noun}


def _show(res: dict, cfg: RunConfig, remaining: float | None, unit: str, target) -> None:
    plan = res["plan"]
    what = res.get("noun", "cell")
    now = [p for p in plan.predictions if p.mechanism == res["mechanism"] and p.epsilon == res["epsilon"]]
    if now:
        p = now[0]
        v = planning.target_value(p)
        st.metric(
            f"Predicted 95 % margin per {what} at ε {p.epsilon:g} (median)",
            _fmt(v) + f" {unit}",
            help=f"worst tenth: {_fmt(p.region_p90 if plan.regions else p.cell_p90)}; {p.method}",
            border=True,
        )
        if not math.isfinite(v):
            st.caption(f"{cfg.mechanism} has no closed-form margin; the plan shows its simulated range-query error.")
    for m, e in plan.suggested.items():
        if e is None:
            st.warning(f"{m}: no ε up to {EPS_MAX:g} meets ±{target:g} {unit}.")
        else:
            st.write(f"**{m}**: the smallest ε giving ±{target:g} {unit} per {what} is **{e:g}**.")
            if m == cfg.mechanism:
                st.button(f"Use ε = {e:g}", key="plan.use", on_click=state.put, args=("cfg.eps", float(e)))
    rows = [
        {
            "mechanism": p.mechanism,
            "ε": p.epsilon,
            f"±95 % per {what} (median)": planning.target_value(p),
            "worst tenth": p.region_p90 if plan.regions else p.cell_p90,
            "range-query error": p.range_rel_error,
            "how": p.method,
        }
        for p in plan.predictions
    ]
    df = pd.DataFrame(rows)
    st.altair_chart(_curve(df, f"±95 % per {what} (median)", target, remaining, unit), use_container_width=True)
    st.dataframe(df, hide_index=True, column_config={"ε": st.column_config.NumberColumn(format="%g")})
    for s in plan.side_information:
        st.caption(f"Side information: {s}")


def _curve(df: pd.DataFrame, y: str, target, remaining: float | None, unit: str) -> alt.Chart:
    d = df[df[y].notna()]
    base = alt.Chart(d).encode(
        x=alt.X("ε:Q", scale=alt.Scale(type="log"), title="privacy budget ε"),
        y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), title=f"predicted {y} ({unit})"),
        color=alt.Color("mechanism:N", title="mechanism"),
    )
    layers = [base.mark_line(point=True)]
    if target:
        layers.append(alt.Chart(pd.DataFrame({"t": [target]})).mark_rule(strokeDash=[4, 4]).encode(y="t:Q"))
    if remaining is not None and remaining > 0:
        layers.append(
            alt.Chart(pd.DataFrame({"r": [remaining], "label": [f"ε left in the ledger: {remaining:g}"]}))
            .mark_rule(color="#b22222")
            .encode(x="r:Q", tooltip="label:N")
        )
    return alt.layer(*layers).properties(height=260)
