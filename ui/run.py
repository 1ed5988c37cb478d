"""The Run button of a page: booking, submission, re-use of runs already shown."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.run.booking import Booking, Refused
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

    * Every run is booked through the one protocol of :mod:`engine.run.booking`: a release against the
      dataset's limit (the operator's; refused past it), an evaluation in the evaluations listed apart.
    * A URL opened with ``run=1`` runs once on its own, so a shared link shows its view; never when one
      of its parameters was invalid (the run would release the defaults instead), and never in Release
      mode (a release spends ε for good: it takes a click).
    * Going back to evaluations this session already ran shows them again at once (they are cached).
    * ``light``: the page reads only each run's summary (a sweep), so the server keeps no maps for it.
    """
    c = container or st
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
            # a link with invalid parameters would run the defaults in their place: it must not spend ε (the
            # note stays until a click: the page's automatic reruns must not wipe it)
            st.session_state[auto] = "invalid"
        elif any(cfg.mode == "release" for cfg in configs):
            # a release publishes and spends the dataset's ε for good: only a click may do that, never a link
            st.session_state[auto] = "held"
        else:
            clicked = True
    if clicked and st.session_state.get(auto) in ("held", "invalid"):
        st.session_state[auto] = True
    elif st.session_state.get(auto) == "invalid":
        c.warning("This link has invalid parameters (see above), so it was not run: check them and press Run.")
    elif st.session_state.get(auto) == "held" and any(cfg.mode == "release" for cfg in configs):
        c.info(f"This link opens Release mode: press {button} to publish the release and spend its ε.")
    if clicked:
        _go(name, configs, label, light, cluster)
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
        # evaluations this session already ran and the server still holds: show them at once
        sid, bk = session_id(), budget.bookkeeper()
        if all(bk.evaluated(cfg) and jobs.board().cached(cfg.key(), sid) for cfg in configs):
            g = jobs.submit_group(name, configs, label=label, wait=False, light=light)
    return g


def _go(name: str, configs: list[RunConfig], label: str, light: bool = False, cluster=None) -> None:
    """Book each run, then start them. A release the server still shows is shown, not re-drawn (and not booked
    again); a release past the dataset's limit is refused and nothing of the group starts."""
    b, sid, bk = jobs.board(), session_id(), budget.bookkeeper()
    bookings = st.session_state.setdefault(f"_bookings_{name}", {})
    for cfg in configs:
        if cfg.mode == "release" and (b.cached(cfg.key(), sid) or b.status(cfg.key(), sid).state == "running"):
            continue
        try:
            bookings[cfg.key()] = bk.book(cfg, note=name)
            budget.mark_mine(bookings[cfg.key()].key)
        except Refused as exc:
            st.session_state[f"_refused_{name}"] = (
                f"Refused: this release (ε = {exc.epsilon:g}) would bring the dataset's total to "
                f"{exc.spent + exc.epsilon:g}, past its limit of {exc.limit:g}. Release mode never goes past the "
                "limit."
            )
            return
        except EngineError:  # no ledger: a release is refused before any noise is drawn; an evaluation runs
            if cfg.mode == "release":
                st.session_state[f"_refused_{name}"] = "Refused: " + budget.UNAVAILABLE
                return
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


def _settle(name: str, g) -> None:
    """Once a group's runs end: book what each really spent above its plan (the extra ε under client dropout),
    and take a run that failed or was cancelled (it published nothing) off the ledger; each booking once."""
    if g is None:
        return
    bk = budget.bookkeeper()
    bookings: dict[str, Booking] = st.session_state.get(f"_bookings_{name}", {})
    for cfg, s in zip(g.configs, g.statuses):
        booking = bookings.get(cfg.key())
        if booking is None:
            continue
        if s.state in ("error", "cancelled"):
            bk.unbook(bookings.pop(cfg.key()))
        elif s.state == "ok":
            bk.settle(cfg, bookings.pop(cfg.key()), s.result)


def is_current(g: jobs.Group | None, configs: list[RunConfig]) -> bool:
    return g is not None and g.keys == [c.key() for c in configs]
