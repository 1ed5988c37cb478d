"""The warning an upload gets before any run when its points fall mostly at sea or far from any town, or its
longitude and latitude look exchanged (:func:`engine.data.geography.file_warning`, which the command line prints too).

The check reads the user's own points in the user's own session, to tell that user; nothing of it is released
or logged. A suspicious file's bytes are kept with the warning (this session only) so one click can read it
again with the two columns exchanged.
"""

from __future__ import annotations

import streamlit as st

from .text import plain

_KEY = "_geocheck"


def remember(key: str, ds, filename: str, data: bytes) -> None:
    """Check an upload's points once, when it is read."""
    from engine.data.geography import file_warning

    checks = st.session_state.setdefault(_KEY, {})
    got = file_warning(ds)
    if got is None:
        checks.pop(key, None)
        return
    msg, columns = got
    swap = None if columns is None else {"name": filename, "data": data, "columns": columns}
    checks[key] = {"message": msg, "swap": swap}


def found(key: str) -> dict | None:
    return st.session_state.get(_KEY, {}).get(key)


def warning(key: str, container=None, on_swap=None, where: str = "sidebar") -> bool:
    """Show the upload's location warning (with a button that exchanges the columns when they look swapped);
    True when there is one. ``where`` names the place on the page (one button per place)."""
    got = found(key)
    if got is None:
        return False
    c = container or st
    c.warning(plain(got["message"], 600), icon=":material/public_off:")
    if got["swap"] is not None and on_swap is not None:
        c.button(
            "Exchange longitude and latitude",
            key=f"geoswap_{where}_{key}",
            on_click=on_swap,
            args=(key,),
            icon=":material/swap_horiz:",
        )
    return True
