"""The dashboard in AppTest: open a page with the small test city, click Run and rerun until its jobs are done
(AppTest has no ``run_every`` timer: this is what the browser's poller does), read its texts, maps and tables."""

from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest

from tests.support import ROOT
from tests.support.waiting import HANG_S, wait_until

APP = str(ROOT / "app.py")
SMALL = {"d.n": "3000", "res": "32"}


def open_app(page: str | None = None, **qp) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({**SMALL, **{k: str(v) for k, v in qp.items()}})
    at.run()
    if page:
        at.switch_page(f"pages/{page}.py").run()
        # AppTest sends the previous page's widget protos' *defaults* on the first run after a switch
        # (a browser sends the real values: see test_browser); the next run is the page as users see it.
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def running(at: AppTest) -> bool:
    return any("runs done" in (p.proto.text or "") for p in at.get("progress"))


def rerun_until(at: AppTest, done, what: str, ceiling: float = HANG_S, poll: float = 0.1) -> AppTest:
    """Rerun the page as its poller fragment's timer would, until ``done(at)``."""

    def ready():
        if done(at):
            return True
        at.run()
        return False

    wait_until(ready, what, ceiling, poll)
    return at


def wait_jobs(at: AppTest, ceiling: float = HANG_S) -> AppTest:
    """Rerun as the poller fragment's timer would, until no job of the page is running."""
    rerun_until(at, lambda a: not running(a), "the page's jobs to finish", ceiling)
    assert not at.exception, [e.value for e in at.exception]
    return at


def click_run(at: AppTest, name: str) -> AppTest:
    at.button(key=f"run_{name}").click().run()
    return wait_jobs(at)


def charts(at: AppTest) -> dict[str, str]:
    """Deck JSON of every map, keyed by each of its heat layers' ids (a paired deck holds the true and the
    private map), or by its first layer's id when it has none."""
    out = {}
    for c in at.get("deck_gl_json_chart"):
        spec = json.loads(c.proto.json)
        ids = [layer.get("id", "") for layer in spec.get("layers", [])]
        heats = [i for i in ids if i.endswith("_heat")] or [ids[-1] if ids else ""]
        for name in heats:
            out[name] = c.proto.json
    return out


def frame_with(at: AppTest, column: str):
    """The first dataframe shown that has ``column``."""
    for d in at.dataframe:
        if column in d.value.columns:
            return d.value
    raise AssertionError(f"no table with a {column!r} column")


def unescaped(s: str) -> str:
    """Markdown as read: user strings are backslash-escaped (ui.text.plain)."""
    return re.sub(r"\\(.)", r"\1", s)


def texts(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "error", "warning", "info", "caption", "subheader", "title", "exception"):
        parts += [unescaped(str(e.value)) for e in getattr(at, kind)]
    parts += [h.proto.body for h in at.get("html")]
    return "\n".join(parts)


def upload(at: AppTest, name: str, data: bytes) -> str:
    at.sidebar.selectbox(key="cfg.ds").set_value("__upload__").run()
    at.sidebar.file_uploader(key="upload_file").set_value((name, data, "text/csv")).run()
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    return at.sidebar.selectbox(key="cfg.ds").value
