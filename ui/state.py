"""Shareable state: the configuration lives in the URL (``st.query_params``).

On a session's first run the query string is captured once; each widget seeds
its value from it (validated: a bad value is reported and replaced by the
default). Every page then writes its current configuration back to the URL, so
copying the address bar reproduces the view.

Widget values survive page switches through a store of their own
(``session_state["_keep"]``): :func:`bind` puts the kept value into the widget's
key just before the widget is created, and the widget's ``on_change`` callback
saves what the user picks. (Streamlit drops the state of widgets a page does not
draw, and ``persist_state`` reset some widgets to their first option in our
tests on a page switch.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import streamlit as st

_local = threading.local()  # per script run: where the page shows URL warnings

_URL = "_url0"  # the query string the session was opened with
_WARN = "_url_warnings"


def init_url() -> None:
    """Capture the opening URL once per session (called by the router)."""
    if _URL not in st.session_state:
        st.session_state[_URL] = {k: st.query_params.get_all(k)[-1] for k in st.query_params.keys()}
        st.session_state[_WARN] = []


def url_value(name: str) -> str | None:
    return st.session_state.get(_URL, {}).get(name)


_KEEP = "_keep"


def _keep() -> dict:
    return st.session_state.setdefault(_KEEP, {})


def get(key: str, default: Any = None) -> Any:
    """The kept value of widget ``key``."""
    return _keep().get(key, default)


def put(key: str, value: Any) -> None:
    """Set a widget's value from code (in a callback, or before the widget is drawn in this run)."""
    _keep()[key] = value
    st.session_state[key] = value


def bind(key: str) -> dict:
    """Keyword arguments that make a widget keep its value across reruns and pages."""
    st.session_state[key] = _keep()[key]
    return {"key": key, "on_change": _save, "args": (key,)}


def _save(key: str) -> None:
    _keep()[key] = st.session_state[key]


def seed(key: str, default: Any, url_name: str | None = None, coerce: Callable[[str], Any] | None = None) -> None:
    """Give widget ``key`` its first value: from the opening URL if valid, else ``default``."""
    if key in _keep():
        return
    value = default
    raw = url_value(url_name) if url_name else None
    if raw is not None:
        try:
            value = coerce(raw) if coerce else raw
        except Exception as exc:  # a bad URL value is reported, never fatal
            msg = getattr(exc, "args", [str(exc)])[0] if str(exc) else "invalid value"
            warn(f"URL parameter '{url_name}={raw}' was ignored: {msg}")
            value = default
    _keep()[key] = value


def warn(text: str) -> None:
    ws = st.session_state.setdefault(_WARN, [])
    if text not in ws:
        ws.append(text)


def url_warnings() -> list[str]:
    """What was wrong with the opening URL (its invalid parameters were replaced by defaults)."""
    return list(st.session_state.get(_WARN, []))


def warnings_box() -> None:
    """Reserve the place (under the page title) where URL warnings appear; filled by :func:`sync_url`."""
    _local.box = st.container()


def show_warnings() -> None:
    box = getattr(_local, "box", None) or st
    for w in st.session_state.get(_WARN, []):
        box.warning(w, icon=":material/link:")
    _local.box = None


def sync_url(params: dict[str, Any]) -> None:
    """Make the URL hold exactly ``params`` (values stringified; ``None`` dropped)."""
    show_warnings()  # every widget has been seeded by now
    want = {k: _str(v) for k, v in params.items() if v is not None}
    have = {k: st.query_params.get_all(k)[-1] for k in st.query_params.keys()}
    if want != have:
        st.query_params.from_dict(want)


def _str(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return ",".join(_str(x) for x in v)
    return str(v)


def parse_bool(s: str) -> bool:
    low = str(s).strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0 or true/false")


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """A URL coercer for a whole number in [lo, hi]: anything else is refused with the range, never clamped."""

    def f(v: str) -> int:
        text = str(v).strip()
        if not text.lstrip("-").isdigit():
            raise ValueError("expected a whole number")
        n = int(text)
        if not lo <= n <= hi:
            raise ValueError(f"expected a whole number from {lo:,} to {hi:,}")
        return n

    return f


def parse_list(s: str) -> list[str]:
    return [x for x in (p.strip() for p in str(s).split(",")) if x]


def one_of(mapping: dict) -> Callable[[str], Any]:
    """A URL coercer accepting only the keys of ``mapping``."""

    def f(v: str):
        if v not in mapping:
            raise ValueError("expected one of " + ", ".join(map(str, mapping)))
        return mapping[v]

    return f
