"""The dashboard's side of the upload store (:mod:`engine.run.server._session_files`): the server's one store, this
session's uploads, and Streamlit's copies of the raw files, dropped once parsed or when the session goes."""

from __future__ import annotations

import streamlit as st

from engine.run.execution import UPLOAD_PREFIX
from engine.run.server import Upload, UploadStore, env_float

from .session import session_id


def _st_alive(st_session: str) -> bool:
    from streamlit import runtime

    return not runtime.exists() or runtime.get_instance().is_active_session(st_session)


@st.cache_resource(show_spinner=False)
def store() -> UploadStore:
    """The server's one store (the job board subscribes to its releases: :func:`ui.jobs.board`)."""
    s = UploadStore(is_alive=_st_alive)
    s.on_release_session(_drop_raw_files)
    s.start_reaper(env_float("HEATMAP_REAPER_S", 5))
    return s


def _drop_raw_files(st_session: str) -> None:
    """Streamlit keeps a closed tab's uploaded bytes until its session object is shut down, which a
    disconnected session may never be: drop them with the session's datasets."""
    from streamlit import runtime

    if runtime.exists():
        runtime.get_instance().uploaded_file_mgr.remove_session_files(st_session)


def forget_raw(uploaded_file) -> None:
    """Free the raw bytes of a file once parsed (the dataset is what the session keeps); up to the
    upload limit per file otherwise stays in Streamlit's memory for the session's life."""
    from streamlit import runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if runtime.exists() and ctx is not None:
        runtime.get_instance().uploaded_file_mgr.remove_file(ctx.session_id, uploaded_file.file_id)


def owner() -> str:
    """This browser session's owner id (a secret that never leaves the server), marked as seen now."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    sid = session_id()
    ctx = get_script_run_ctx()
    store().touch(sid, getattr(ctx, "session_id", None))
    return sid


def get(key: str) -> Upload | None:
    """This session's upload ``key``, or None (another session's key is simply unknown)."""
    return store().get(owner(), key) if key.startswith(UPLOAD_PREFIX) else None


def mine() -> list[Upload]:
    return store().uploads(owner())
