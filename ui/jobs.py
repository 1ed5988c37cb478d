"""The dashboard's side of the job board: the server's one :class:`~engine.run.server.Board`, this
session's groups of runs (kept in ``st.session_state``), and the progress panel that polls them.

A fragment polls the running groups (``run_every`` only while something runs) and reruns the page
when they finish. Engine work never calls ``st.*``.
"""

from __future__ import annotations

import time

import streamlit as st

from engine.run import RunConfig
from engine.run.server import Board, Group, RunSession, Session

from . import budget, uploads
from .session import session_id

POLL_S = 0.3  # fragment refresh while something runs, on a quiet server
POLL_MAX_S = 2.0  # on a busy one: every poll is a script run holding the GIL the runs and pages need


def poll_interval() -> float:
    """Seconds between a running page's polls: 0.1 s per run in flight on the server, within
    [POLL_S, POLL_MAX_S] (16 sessions polling every 0.3 s make 50 script runs a second)."""
    return min(POLL_MAX_S, max(POLL_S, 0.1 * board().running()))


@st.cache_resource(show_spinner=False)
def board() -> Board:
    """The server's board; a session's uploads released by the store take their runs with them."""
    b = Board()
    uploads.store().on_release(b.drop_owner)
    return b


def _dataset_for(config: RunConfig):
    """The upload a private run reads (this session's only), or None."""
    up = uploads.get(config.dataset)
    return None if up is None else up.dataset


def session() -> Session:
    """This browser session's groups on the server's board."""
    return Session(board(), session_id(), st.session_state, _dataset_for)


def runs() -> RunSession:
    """This session's runs, booked in the server's ledger and settled by the engine when each ends."""
    return RunSession(session(), budget.bookkeeper())


def get_group(name: str) -> Group | None:
    return session().get_group(name)


def shown(name: str, g: Group | None, whole: bool = False) -> Group | None:
    return session().shown(name, g, whole)


def progress_panel(names: list[str], title: str = "Running", whole: bool = False) -> None:
    """Progress bar, elapsed time and a Cancel button for the session's running groups.

    Polls with ``st.fragment(run_every=poll_interval())`` while something runs and reruns the
    whole page as runs finish (``whole``, a page that draws a group only once all of it has finished:
    when the last one does); when idle the fragment is static (``run_every=None``).
    The rest of the page stays usable meanwhile.
    """
    seen = session().seen_states()
    groups = [g for g in (get_group(n) for n in names) if g is not None]
    active = any(g.running for g in groups)
    if not active and any("running" in seen.get(g.name, []) for g in groups):
        # a run ended between the page reading its state and this panel: the page above drew it as still
        # running (no result, no cancelled/failed message) and no poller would come back; redraw now
        st.rerun()
    done_at_render = sum(s.state != "running" for g in groups for s in g.statuses)

    @st.fragment(run_every=poll_interval() if active else None)
    def _panel():
        gs = [g for g in (get_group(n) for n in names) if g is not None]
        running = [g for g in gs if g.running]
        n_done = sum(s.state != "running" for g in gs for s in g.statuses)
        if active and n_done > done_at_render and not (whole and running):
            # a run finished since the page was drawn: redraw it (results appear as they come). A page drawn
            # whole shows nothing new before the end, and a rerun of it per run cost a sweep's server more CPU
            # than its runs
            st.rerun()
        for g in running:
            k_done = sum(s.state != "running" for s in g.statuses)
            notes = [s.note for s in g.statuses if s.state == "running" and s.note]
            elapsed = time.time() - g.started
            c1, c2 = st.columns([5, 1], vertical_alignment="center")
            with c1:
                text = f"{g.label or title}: {k_done}/{len(g.statuses)} runs done · {elapsed:.1f} s"
                if notes:
                    text += f" · {notes[0]}"
                st.progress(min(max(g.progress, 0.0), 1.0), text=text)
            with c2:
                if st.button("Cancel", key=f"cancel_{g.name}", help="Stop these runs (other sessions are unaffected)"):
                    session().cancel_group(g.name)
                    st.rerun()

    _panel()
