"""This browser session's identity: a random secret that owns the session's uploads and their runs."""

from __future__ import annotations

import secrets

import streamlit as st


def session_id() -> str:
    """A random secret per browser session (it never leaves the server)."""
    if "_sid" not in st.session_state:
        st.session_state["_sid"] = secrets.token_hex(16)
    return st.session_state["_sid"]
