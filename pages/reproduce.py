"""Reproduce: each paper's headline result beside the engine's, the command that re-runs it, and its quick
version run in the background."""

import streamlit as st

from engine.core.csvtext import csv_text
from ui import reproduce, uploads
from ui.page import page

POLL_S = 1.0


def _start(suite: str) -> None:
    queue.submit(owner, suite, reproduce.BY_SUITE[suite].quick_s)


def _status(suite: str, was_active: bool) -> None:
    uploads.owner()  # a session watching its run is not idle
    r = queue.runs(owner).get(suite)
    if r is None:
        return
    if was_active and not r.active:
        st.rerun()  # it ended since the page was drawn: redraw the table with its numbers
    if not r.active:
        return
    c1, c2 = st.columns([5, 1], vertical_alignment="center")
    if r.state == "queued":
        pos, running = queue.place(r)
        c1.progress(
            0.0,
            text=f"Queued: {reproduce.ordinal(pos)} in line · {running} quick run{'s' * (running != 1)} running "
            f"on this server (at most {queue.slots} at a time)",
        )
    elif r.cancel_at is not None:
        c1.progress(r.progress(), text="Cancelling the quick version…")
        return
    else:
        left = max(0.0, r.expected_s - r.elapsed())
        when = f"about {left:.0f} s left" if left >= 1 else "taking longer than usual"
        c1.progress(
            r.progress(),
            text=f"Running the quick version · {r.elapsed():.0f} s, {when} · {r.last_line() or 'starting'}",
        )
    if c2.button("Cancel", key=f"repro.cancel.{suite}", icon=":material/stop:"):
        queue.cancel(r)
        st.rerun()


with page(
    "Reproduce the papers",
    "Each paper's headline table or figure as the benchmark suites measure it: the paper's numbers beside the "
    "engine's. The full suite's numbers are those recorded in BENCHMARKS.md; **Run the quick version** re-runs "
    "the suite's smaller smoke version here, in the background (the page stays usable; Cancel stops it). The "
    "server runs a few quick versions at a time for everyone; the others wait in a queue.",
    keep_url=False,
):
    queue = reproduce.queue()
    owner = uploads.owner()  # this session: its runs end when it goes
    runs = queue.runs(owner)
    busy = any(r.active for r in runs.values())  # one at a time per session
    for paper in reproduce.PAPERS:
        run = runs.get(paper.suite)
        state = run.state if run is not None else None
        with st.container(border=True, key=f"repro_{paper.suite}"):
            st.subheader(paper.headline)
            st.caption(f"{paper.cite}. Setting: {paper.setting}. Quick version: {paper.quick}.")
            figures = run.figures if state == "ok" else None
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
                disabled=busy,
                help=paper.command(quick=True),
            )
            b2.download_button(
                "This table (CSV)",
                csv_text(df),
                file_name=f"reproduce_{paper.suite}.csv",
                mime="text/csv",
                on_click="ignore",
                icon=":material/download:",
                key=f"repro.csv.{paper.suite}",
            )
            if state == "ok":
                b3.caption(f"Quick run finished in {run.elapsed():.0f} s: `{paper.command(quick=True)}`")
            elif state == "error":
                st.error(f"The quick run failed: {run.message}", icon=":material/error:")
            elif state == "cancelled":
                b3.caption("Quick run cancelled.")
            active = run is not None and run.active
            st.fragment(_status, run_every=POLL_S if active else None)(paper.suite, active)
