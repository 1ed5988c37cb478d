"""The Study panel of Release mode: a whole study's releases planned under one budget (:mod:`engine.run.planning._study_plan`),
in the background with progress and Cancel, and its ε reserved in the dataset's ledger or the reservation
cancelled (:mod:`engine.run.bookkeeping._reserve`)."""

from __future__ import annotations

import math
import time

import pandas as pd
import streamlit as st

from engine.core.errors import Cancelled, EngineError
from engine.run import planning
from engine.run.bookkeeping import Refused

from . import budget
from .text import plain

EXAMPLE = """[study]
dataset = "synthetic:polycentric"
users = 20000
# budget = 2.0   # a fixed total; without it, the least total meeting every target

[[product]]
name = "city map"
kind = "map"
depth = 6
target = 20
mechanisms = ["identity", "hierarchical", "privtree"]

[[product]]
name = "neighbourhoods, monthly"
kind = "regions"
regions = "h3:7"
depth = 6
target = 10
repeat = 4
mechanisms = ["identity", "laplace_regions"]
"""


def panel(display) -> None:
    """``display``: the page's display settings (colour map, units), for a product released from the panel."""
    with st.expander("Plan a study: several releases under one budget", icon=":material/assignment:"):
        st.caption(
            "A study file (TOML) lists the releases a study needs, each with the 95 % margin it must have. The plan "
            "chooses each one's mechanism and ε from public inputs only (a proxy city, never this dataset's "
            "locations): the least total ε meeting every target, or with a budget, the split whose worst margin / "
            "target is least. Reserving holds its ε in the dataset's ledger for the study's releases "
            "(python -m engine release --study FILE --product NAME)."
        )
        up = st.file_uploader("Study file (TOML)", type=["toml"], key="study.file")
        text = st.text_area("…or paste it here", value=EXAMPLE, key="study.text", height=260)
        source = _read(up) if up is not None else text
        if st.button("Plan the study", key="study.go", icon=":material/query_stats:"):
            try:
                study = planning.parse_study(source or "")
            except EngineError as e:
                st.error(plain(e, 400))
                return
            _forget()
            st.session_state["study.job"] = _start(study)
        job = st.session_state.get("study.job")
        if job is not None:
            _job(job, display)


def _read(up) -> str | None:
    try:
        return up.getvalue().decode("utf-8")
    except UnicodeDecodeError:
        st.error("The study file is not UTF-8 text.")
        return None


def _forget() -> None:
    old = st.session_state.pop("study.job", None)
    if old is not None:
        old["progress"]["cancel"] = True


def _start(study) -> dict:
    """Plan ``study`` on the server's job pool; the page polls ``progress``."""
    from .jobs import board

    prog = {"f": 0.0, "msg": "starting", "cancel": False, "t0": time.monotonic()}

    def cb(f: float, msg: str) -> None:
        prog["f"], prog["msg"] = f, msg

    def work():
        return planning.make_study_plan(study, progress=cb, cancelled=lambda: prog["cancel"])

    return {"future": board().submit_task(work), "progress": prog, "study": study}


def _job(job: dict, display) -> None:
    fut, prog = job["future"], job["progress"]
    if not fut.done():

        @st.fragment(run_every=0.5)
        def _poll():
            if fut.done():
                st.rerun()
            st.progress(min(max(prog["f"], 0.0), 1.0), text=f"Planning the study… {prog['msg']}")
            if st.button("Cancel", key="study.cancel_plan", icon=":material/cancel:"):
                prog["cancel"] = True

        _poll()
        return
    exc = fut.exception()
    if isinstance(exc, Cancelled):
        st.info("The study plan was cancelled; press Plan the study to start it again.", icon=":material/cancel:")
        return
    if exc is not None:
        st.error(plain(exc, 400) if isinstance(exc, EngineError) else "The study plan failed unexpectedly.")
        return
    show(fut.result(), display)


def table(plan) -> pd.DataFrame:
    """The plan's products, one row each, as the panel shows them."""
    rows = []
    for p in plan.to_dict()["products"]:
        rows.append(
            {
                "product": p["name"],
                "kind": p["kind"],
                "mechanism": p["mechanism"] or "—",
                "ε each": p["epsilon"],
                "releases": p["repeat"],
                "ε in all": None if p["epsilon"] is None else p["epsilon"] * p["repeat"],
                "predicted": p["predicted"],
                "interval": None if p["interval"] is None else f"{p['interval'][0]:.3g} – {p['interval'][1]:.3g}",
                "target": p["target"],
                "figure": p["statistic"],
                "bias (bounding)": None if p["error"] is None else p["error"]["bias"],
                "dominates": None if p["error"] is None else p["error"]["dominates"],
                "how": p["method"],
            }
        )
    return pd.DataFrame(rows)


def show(plan, display=None) -> None:
    d = plan.to_dict()
    st.dataframe(table(plan), hide_index=True, column_config={"ε each": st.column_config.NumberColumn(format="%g")})
    c = st.columns(4)
    c[0].metric("Total ε", f"{d['total_epsilon']:g}", border=True)
    if d["limit"] is not None:
        c[1].metric("ε left before", f"{d['remaining_before']:g}", help=f"the operator's limit: {d['limit']:g}")
        after = d["remaining_after"]
        c[2].metric("ε left after", f"{after:g}" if after >= 0 else f"{after:g} (over the limit)")
        c[3].metric("Studies like it that fit", d["studies_that_fit"])
    if d["unmet"]:
        st.warning(f"Targets the budget cannot meet: {', '.join(d['unmet'])}.", icon=":material/warning:")
    elif d["budget"] is not None and d["ratio"] is not None and math.isfinite(d["ratio"]):
        st.caption(f"Every product reaches {100 * d['ratio']:.0f} % of its target (the worst margin / target).")
    for s in plan.side_information:
        st.caption(f"Side information: {s}")
    _ledger(plan, display)


def _ledger(plan, display) -> None:
    """Reserve the plan's ε, or show and cancel the study's reservation."""
    study, store = plan.study, budget.store()
    freed = st.session_state.pop("study.freed", None)
    if freed is not None:
        st.info(f"The reservation was cancelled: ε {freed:g} returned to the dataset.", icon=":material/lock_open:")
    try:
        held = planning.held(study, store)
    except EngineError as e:
        st.error(plain(e, 300))
        return
    if not held:
        if st.button("Reserve this plan's ε", key="study.reserve", icon=":material/lock:", type="primary"):
            try:
                res = planning.reserve(plan, store, note="the dashboard's Study panel")
            except (Refused, EngineError) as e:
                st.error(plain(e, 300))
                return
            st.success(f"Reserved ε {res.added:g} for this study in the dataset's ledger.", icon=":material/lock:")
            st.rerun()
        return
    left = sum(h.left for h in held)
    st.success(
        f"Reserved in the dataset's ledger: ε {left:g} still held for "
        + "; ".join(f"{h.product} ({h.used} of {h.repeat} made, {h.mechanism} at ε {h.epsilon:g})" for h in held),
        icon=":material/lock:",
    )
    _release_buttons(study, held, display)
    if st.button("Cancel the reservation", key="study.unreserve", icon=":material/lock_open:"):
        freed = planning.cancel(study, store)
        st.session_state["study.freed"] = freed
        st.rerun()


def release_config(study, h):
    """The release of a reserved product: its mechanism, ε, grid and parameters as reserved, OpenDP noise."""
    from engine.mechanisms import get
    from engine.run import RunConfig

    return RunConfig(
        dataset=study.dataset,
        dataset_options=planning.dataset_options(study),
        mechanism=h.mechanism,
        params=get(h.mechanism).schema().resolve(dict(h.config["params"])),
        epsilon=h.epsilon,
        depth=int(h.config["depth"]),
        seed=0,
        secure=True,
        mode="release",
    )


def _release_buttons(study, held, display) -> None:
    """A button per product with releases left: its next release, booked against the reservation, on the board."""
    from engine.run.bookkeeping import TOLERANT, Bookkeeper
    from engine.run.server import RunSession

    from . import jobs

    left = [h for h in held if h.used < h.repeat]
    if not left:
        return
    cols = st.columns(min(len(left), 4))
    for i, h in enumerate(left):
        if cols[i % len(cols)].button(
            f"Release {h.product} ({h.used + 1} of {h.repeat})",
            key=f"study.release.{h.product}",
            icon=":material/publish:",
        ):
            bk = Bookkeeper(
                ident=budget.dataset_ident, policy=TOLERANT, opener=budget.store, reserved=(study.key, h.product)
            )
            try:
                RunSession(jobs.session(), bk).start(
                    "study", [release_config(study, h)], note="the dashboard's Study panel"
                )
            except EngineError as e:
                st.error(plain(e, 300))
                return
            st.rerun()
    g = jobs.get_group("study")
    if g is not None:
        if g.running:
            jobs.progress_panel(["study"], "Releasing")
        elif g.done and g.results:
            res = g.results[0]
            st.success(
                f"Released {res.config.mechanism} at ε {res.config.epsilon:g}, booked against the study's reservation.",
                icon=":material/publish:",
            )
            if display is not None:
                from . import release

                release.release_view(res, g.configs[0], display, 420)
        elif g.errors:
            st.error(plain(g.errors[0], 300))
