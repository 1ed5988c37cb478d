"""The Run button of a page: the click, a link's ``run=1`` and the refusals; the engine's
:class:`~engine.run.server.RunSession` books, starts and settles the runs."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.run import RunConfig
from engine.run.bookkeeping import LedgerUnavailable, Refused

from . import budget, jobs, slots, state
from .session import session_id
from .text import plain


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

    * Every run is booked through the one protocol of :mod:`engine.run.bookkeeping._booking`: a release against the
      dataset's limit (the operator's; refused past it), an evaluation in the evaluations listed apart.
    * A URL opened with ``run=1`` runs once on its own, so a shared link shows its view; never when one
      of its parameters was invalid (the run would release the defaults instead), and never in Release
      mode (a release spends ε for good: it takes a click).
    * Going back to evaluations this session already ran shows them again at once (they are cached).
    * ``light``: the page reads only each run's summary (a sweep), so the server keeps no maps for it.
    """
    c = container or st
    _estimate_note(configs, c, light)
    clicked = c.button(
        button,
        type="primary",
        key=f"run_{name}",
        disabled=not (ctl.ready and configs),
        help=help,
        icon=":material/play_arrow:",
    )
    if _from_link(name, configs, ctl, button, autorun, clicked, c):
        _go(name, configs, label, light, cluster, c)
    g = jobs.get_group(name)
    if configs and (g is None or g.keys != [cfg.key() for cfg in configs]):
        # evaluations this session already ran and the server still holds: show them at once
        g = jobs.runs().reshow(name, configs, label=label, light=light) or g
    return g


def _from_link(name: str, configs: list[RunConfig], ctl, button: str, autorun: bool, clicked: bool, c) -> bool:
    """Whether to run now: a click, or a link's ``run=1`` once (not an invalid link's, not a release's: their
    notes stay until a click, the page's automatic reruns must not wipe them)."""
    auto = f"_autorun_{name}"
    if autorun and state.url_value("run") == "1" and not st.session_state.get(auto) and ctl.ready and configs:
        st.session_state[auto] = True
        if state.url_warnings():
            # a link with invalid parameters would run the defaults in their place: it must not spend ε
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
    return clicked


def _go(name: str, configs: list[RunConfig], label: str, light: bool, cluster, c) -> None:
    """Start the group through the engine's session (it books each run and settles it when it ends); a release
    past the dataset's limit, or one the ledger cannot book, is refused with a message and nothing starts."""
    try:
        with slots.given_up():  # a fast run is waited for, off the slots
            started = jobs.runs().start(name, configs, note=name, label=label, light=light, cluster=cluster)
    except Refused as exc:
        c.error(
            f"Refused: this release (ε = {exc.epsilon:g}) would bring the dataset's total to "
            f"{exc.spent + exc.epsilon:g}, past its limit of {exc.limit:g}. Release mode never goes past the limit.",
            icon=":material/block:",
        )
        return
    except LedgerUnavailable:  # a release is refused before any noise is drawn
        c.error("Refused: " + budget.UNAVAILABLE, icon=":material/block:")
        return
    except EngineError as exc:
        c.error(plain(str(exc), 600), icon=":material/block:")
        return
    for booking in started.bookings:
        budget.mark_mine(booking.key)


SLOW_S = 10.0  # above this, the page warns before Run
# CPU seconds the server spends on a sweep beyond its runs (BENCHMARKS.md, speed): per run (its result kept, the
# progress polled; Trade-offs' default sweep took 12 s of server CPU for 80 runs whose engine time is 5 s), and once
# (the page drawn with the sweep's charts and tables)
SWEEP_RUN_S = 0.08
SWEEP_DRAW_S = 2.0


def _estimate_note(configs: list[RunConfig], c, sweep: bool = False) -> None:
    """Before Run: how long the runs should take (the engine's cost model or this server's measured runs),
    with a warning above ``SLOW_S`` seconds; a ``sweep`` (runs kept light, drawn as charts) adds the server's own
    work for it."""
    if not configs:
        return
    b = jobs.board()
    if all(b.cached(cfg.key(), session_id()) for cfg in configs):
        return
    ests = [b.estimate(cfg) for cfg in configs]
    known = [e for e in ests if e is not None]
    if not known:
        return
    # the board runs up to its worker count in parallel, threads of one process: no faster than its cores
    from engine.run.execution import load_factor, usable_cores

    work = sum(known) + (SWEEP_RUN_S * len(known) * load_factor() if sweep else 0.0)
    total = work / max(1, min(len(known), b.workers, usable_cores())) + (SWEEP_DRAW_S * load_factor() if sweep else 0)
    text = f"about {total:.0f} s" if total >= 1.5 else "about a second"
    if total > SLOW_S:
        c.warning(
            f"This run should take {text}: you can keep using the page, and Cancel stops it.",
            icon=":material/schedule:",
        )
    else:
        c.caption(f"Estimated time: {text}.")


def is_current(g: jobs.Group | None, configs: list[RunConfig]) -> bool:
    return g is not None and g.keys == [c.key() for c in configs]
