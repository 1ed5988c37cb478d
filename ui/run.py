"""The Run button of a page: budget check, confirmation, submission, re-use of cached releases."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.run.booking import Booking, Refused, cost
from engine.run.config import RunConfig

from . import budget, jobs, state
from .session import session_id


def launch(
    name: str,
    configs: list[RunConfig],
    ctl,
    label: str,
    button: str = "Run",
    help: str = "Run in the background; the page stays usable.",
    container=None,
    light: bool = False,
    autorun: bool = True,
    cluster=None,
) -> jobs.Group | None:
    """Render the Run button and handle a click; return the session's group ``name``.

    * A click on a configuration whose releases would push the dataset's session
      total past the limit asks for confirmation first.
    * A URL opened with ``run=1`` runs once on its own, so a shared link shows its view; never when one
      of its parameters was invalid (the run would release the defaults instead).
    * Going back to configurations this session already released shows them again at once
      (they are cached and cost nothing more).
    * ``light``: the page reads only each run's summary (a sweep), so the server keeps no maps for it.
    """
    c = container or st
    pending_key = f"_pending_{name}"
    _estimate_note(configs, c)
    clicked = c.button(
        button,
        type="primary",
        key=f"run_{name}",
        disabled=not (ctl.ready and configs),
        help=help,
        icon=":material/play_arrow:",
    )
    auto = f"_autorun_{name}"
    if autorun and state.url_value("run") == "1" and not st.session_state.get(auto) and ctl.ready and configs:
        st.session_state[auto] = True
        if state.url_warnings():
            # a link with invalid parameters would run the defaults in their place: it must not spend ε
            c.warning("This link has invalid parameters (see above), so it was not run: check them and press Run.")
        else:
            clicked = True
    if clicked:
        st.session_state.pop(pending_key, None)
        if any(cfg.mode == "release" for cfg in configs):
            _go_release(name, configs, label, ctl.budget_limit, c)
        else:
            over = budget.bookkeeper().over_limit(configs, ctl.budget_limit)
            if over is None or all(budget.synthetic(cfg) for cfg in configs):  # synthetic data: inform only
                _go(name, configs, label, light, cluster)
            else:
                st.session_state[pending_key] = [cfg.to_dict() for cfg in configs]
    pending = st.session_state.get(pending_key)
    if pending:
        pcfgs = [RunConfig.from_dict(d) for d in pending]
        over = budget.bookkeeper().over_limit(pcfgs, ctl.budget_limit)
        if over is None:  # the limit was raised meanwhile
            st.session_state.pop(pending_key, None)
            _go(name, pcfgs, label, light, cluster)
        else:
            after, add = over
            st.warning(
                f"This would release {len(pcfgs)} new heatmap{'s' if len(pcfgs) != 1 else ''} of this dataset "
                f"(ε = {add:g}), bringing its total (all sessions) to ε = {after:g}, above the limit of "
                f"{ctl.budget_limit:g}. Releases of the same people add up.",
                icon=":material/warning:",
            )
            b1, b2, _ = st.columns([1, 1, 4])
            if b1.button("Run anyway", key=f"confirm_{name}", type="primary"):
                st.session_state.pop(pending_key, None)
                _go(name, pcfgs, label, light, cluster)
            if b2.button("Don't run", key=f"drop_{name}"):
                st.session_state.pop(pending_key, None)
                st.rerun()
    refused = st.session_state.pop(f"_refused_{name}", None)
    if refused:
        c.error(refused, icon=":material/block:")
    g = jobs.get_group(name)
    _settle(name, g)
    if (
        configs
        and all(cfg.mode != "release" for cfg in configs)
        and (g is None or g.keys != [cfg.key() for cfg in configs])
    ):
        # configurations this session already released and the server still holds: show them at once
        sid, bk = session_id(), budget.bookkeeper()
        if all(bk.released(cfg) and jobs.board().cached(cfg.key(), sid) for cfg in configs):
            g = jobs.submit_group(name, configs, label=label, wait=False, light=light)
    return g


def _go(name: str, configs: list[RunConfig], label: str, light: bool = False, cluster=None) -> None:
    budget.bookkeeper().record(configs, name)
    jobs.submit_group(name, configs, label=label, light=light, cluster=cluster)


SLOW_S = 10.0  # above this, the page warns before Run


def _estimate_note(configs: list[RunConfig], c) -> None:
    """Before Run: how long the runs should take (the engine's cost model or this server's measured runs),
    with a warning above ``SLOW_S`` seconds."""
    if not configs:
        return
    b = jobs.board()
    if all(b.cached(cfg.key(), session_id()) for cfg in configs):
        return
    ests = [b.estimate(cfg) for cfg in configs]
    known = [e for e in ests if e is not None]
    if not known:
        return
    # the board runs up to its worker count in parallel
    total = sum(known) / max(1, min(len(known), b.jm._pool._max_workers))
    text = f"about {total:.0f} s" if total >= 1.5 else "about a second"
    if total > SLOW_S:
        c.warning(
            f"This run should take {text}: you can keep using the page, and Cancel stops it.",
            icon=":material/schedule:",
        )
    else:
        c.caption(f"Estimated time: {text}.")


def _go_release(name: str, configs: list[RunConfig], label: str, limit: float, c) -> None:
    """Release mode: each run is a new release, booked against the dataset's limit in one transaction
    before it starts and refused past it. A release the server still shows is shown, not re-drawn."""
    b, sid, bk = jobs.board(), session_id(), budget.bookkeeper()
    bookings = st.session_state.setdefault(f"_bookings_{name}", {})
    for cfg in configs:
        if b.cached(cfg.key(), sid) or b.status(cfg.key(), sid).state == "running":
            continue
        try:
            bookings[cfg.key()] = bk.book(cfg, limit, name)
        except Refused as exc:
            st.session_state[f"_refused_{name}"] = (
                f"Refused: this release (ε = {exc.epsilon:g}) would bring the dataset's total to "
                f"{exc.spent + exc.epsilon:g}, past its limit of {limit:g}. Release mode never goes past the limit."
            )
            return
        except EngineError:  # no ledger, no release: booked before any noise is drawn
            st.session_state[f"_refused_{name}"] = "Refused: " + budget.UNAVAILABLE
            return
    jobs.submit_group(name, configs, label=label)


def _settle(name: str, g) -> None:
    """Once a group's runs end: book what each really spent above its plan, and take a release that failed or
    was cancelled (it published nothing) off the ledger. Evaluate bookings are keyed by their configuration,
    so settling them again on every rerun books nothing new."""
    if g is None:
        return
    bk = budget.bookkeeper()
    bookings: dict[str, Booking] = st.session_state.get(f"_bookings_{name}", {})
    for cfg, s in zip(g.configs, g.statuses):
        booking = bookings.get(cfg.key())
        if s.state in ("error", "cancelled") and booking is not None:
            bk.unbook(bookings.pop(cfg.key()))
        elif s.state == "ok":
            if booking is None and cfg.mode == "evaluate":
                booking = Booking(budget.dataset_ident(cfg), cfg.key(), cost(cfg))
            if booking is not None:
                bk.settle(cfg, booking, s.result)
            bookings.pop(cfg.key(), None)


def is_current(g: jobs.Group | None, configs: list[RunConfig]) -> bool:
    return g is not None and g.keys == [c.key() for c in configs]
