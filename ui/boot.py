"""Make sure ``app.py`` routes every page, even on a deep link to a fresh server.

Streamlit treats an app with a ``pages/`` folder as a folder-based multipage app
until the entrypoint has called ``st.navigation`` once in the process; a first
request for ``/compare?...`` would then run ``pages/compare.py`` alone, without the
router (page config, URL capture, job pool). Each page calls :func:`ensure_router`
first: in that one case it switches Streamlit to the router and reruns, which
lands on the same page (same url path) through ``app.py``, query string intact.
"""

from __future__ import annotations

import streamlit as st

ROUTED = False  # set by app.py once its router has run in this process
_TRIED = False


def mark_routed() -> None:
    global ROUTED
    ROUTED = True


def ensure_router() -> None:
    global _TRIED
    if ROUTED or _TRIED:
        return
    _TRIED = True  # once: never loop if Streamlit ignores the switch
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # pragma: no cover - a Streamlit without the folder-based mode
        return
    PagesManager.uses_pages_directory = False
    st.rerun()
