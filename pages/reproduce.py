"""Reproduce: each paper's headline result beside the engine's, the command that re-runs it, and its quick
version run in the background."""

import streamlit as st

from ui import boot, reproduce, views

boot.ensure_router()  # first: a deep link on a fresh server must go through app.py

views.header(
    "Reproduce the papers",
    "Each paper's headline table or figure as the benchmark suites measure it: the paper's numbers beside the "
    "engine's. The full suite's numbers are those recorded in BENCHMARKS.md; **Run the quick version** re-runs "
    "the suite's smaller smoke version here, in the background (the page stays usable; Cancel stops it).",
)
POLL_S = 1.0
runs: dict = st.session_state.setdefault("repro.runs", {})


def _start(suite: str) -> None:
    if any(r.state == "running" for r in runs.values()):
        return  # one reproduction at a time: the machine's cores are shared
    runs[suite] = reproduce.start(suite)


def _status(suite: str, was_running: bool) -> None:
    r = runs.get(suite)
    if r is None:
        return
    if was_running and r.state != "running":
        st.rerun()  # it finished since the page was drawn: redraw the table with its numbers
    if r.state == "running":
        c1, c2 = st.columns([5, 1], vertical_alignment="center")
        c1.progress(0.5, text=f"Running the quick version · {r.elapsed():.0f} s · {r.last_line() or 'starting'}")
        if c2.button("Cancel", key=f"repro.cancel.{suite}", icon=":material/stop:"):
            r.cancel()
            st.rerun()


for paper in reproduce.PAPERS:
    run = runs.get(paper.suite)
    state = run.state if run is not None else None
    with st.container(border=True, key=f"repro_{paper.suite}"):
        st.subheader(paper.headline)
        st.caption(f"{paper.cite}. Setting: {paper.setting}. Quick version: {paper.quick}.")
        figures = run.figures() if run is not None else None
        df = reproduce.table(paper, figures)
        st.table(df.set_index("Quantity"))  # a few rows: a plain table, every cell in view
        st.markdown("Re-run it in full (then compare with BENCHMARKS.md):")
        st.code(paper.command(), language="bash")
        b1, b2, b3 = st.columns([2, 2, 3], vertical_alignment="center")
        b1.button(
            "Run the quick version",
            key=f"repro.run.{paper.suite}",
            on_click=_start,
            args=(paper.suite,),
            icon=":material/play_arrow:",
            disabled=state == "running" or any(r.state == "running" for r in runs.values()),
            help=paper.command(quick=True),
        )
        b2.download_button(
            "This table (CSV)",
            df.to_csv(index=False),
            file_name=f"reproduce_{paper.suite}.csv",
            mime="text/csv",
            on_click="ignore",
            icon=":material/download:",
            key=f"repro.csv.{paper.suite}",
        )
        if state == "ok":
            b3.caption(f"Quick run finished in {run.elapsed():.0f} s: `{paper.command(quick=True)}`")
        elif state == "error":
            st.error(f"The quick run failed: {run.failure()}", icon=":material/error:")
        elif state == "cancelled":
            b3.caption("Quick run cancelled.")
        st.fragment(_status, run_every=POLL_S if state == "running" else None)(paper.suite, state == "running")
