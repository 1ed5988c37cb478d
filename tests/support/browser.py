"""Helpers of the browser tests: a real server, console/network watch, screenshots, drawn pixels.

The fixtures that use them (``app_url``, Chromium's path) are in ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.support import ROOT
from tests.support.waiting import wait_until

CHROMIUM = "/usr/bin/chromium"
READY = '[data-testid="stApp"][data-test-script-state="notRunning"]'
MAPS = '[data-testid="stDeckGlJsonChart"] canvas'
SCREENS = Path("/tmp/screens")
QUERY = "?d.n=20000&res=128&eps=0.5"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(tmp_path_factory, extra_env: dict | None = None):
    """``streamlit run app.py`` on a free port of 127.0.0.1 with its own cache folder; yields (url, process)."""
    port = free_port()
    cache = tmp_path_factory.mktemp("browser-cache")
    log = open(tmp_path_factory.mktemp("browser-log") / "streamlit.log", "w")  # noqa: SIM115
    env = {**os.environ, "HEATMAP_CACHE_DIR": str(cache), **(extra_env or {})}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    cmd += ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"streamlit did not start (exit {proc.poll()}); see {log.name}")
        try:
            return urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok"
        except OSError:
            return False

    try:
        wait_until(healthy, f"streamlit to start (see {log.name})", poll=0.2)
    except BaseException:
        proc.kill()
        raise
    try:
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


class Watch:
    """Collect console errors, page errors and requests that leave the machine."""

    def __init__(self, page):
        self.problems: list[str] = []
        self.failed: list[str] = []  # URLs answered with an HTTP error
        page.on("console", lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on(
            "request",
            lambda r: (
                self.problems.append(f"network: {r.url}")
                if not r.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:"))
                else None
            ),
        )

    def check(self):
        problems = list(self.problems)
        # Streamlit's own requests, not the app's: opened at a page's path (a shared link to /compare) its frontend
        # first tries /compare/_stcore/... before the server root; and it replaces its media files (the favicon)
        # at every rerun. A 404 on those only is tolerated, never any other failure.
        harmless = ("/_stcore/health", "/_stcore/host-config", "/media/")
        if self.failed and all(f.startswith("404 ") and any(h in f for h in harmless) for f in self.failed):
            # (a download clicked while its page reran: the retry in the test fetches the new file)
            problems = [p for p in problems if "Failed to load resource" not in p and "source error - 404" not in p]
        assert not problems, "\n".join(problems + self.failed)


def open_explore(page, url: str, query: str = QUERY):
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(url + "/" + query)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=60_000)


def run_and_wait_maps(page, timeout=90_000):
    page.click(".st-key-run_explore button")
    page.mouse.move(700, 5)  # off the button: its tooltip would cover the screenshots
    page.wait_for_selector("text=computed in", timeout=timeout)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=timeout)
    page.wait_for_selector(READY, timeout=timeout)
    page.wait_for_timeout(800)  # let deck.gl draw its first frames


def save(page, tmp_path, name: str) -> Path:
    out = tmp_path / f"{name}.png"
    page.screenshot(path=str(out), full_page=True)
    SCREENS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out, SCREENS / out.name)
    return out


def heat_pixels(page, index: int, half: str | None = None) -> int:
    """Pixels of a map chart that carry heatmap colours (not white/grey background); ``half`` "left" or
    "right" counts one square of Explore's paired deck (true map left, private map right)."""
    import io

    import numpy as np
    from PIL import Image

    png = page.locator('[data-testid="stDeckGlJsonChart"]').nth(index).screenshot()
    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    if half is not None:
        w = a.shape[1] // 2
        a = a[:, :w] if half == "left" else a[:, w:]
    sat = a.max(axis=2) - a.min(axis=2)
    return int((sat > 40).sum())


def drawn_extents(page, index: int) -> dict[str, tuple[int, int, int, int]]:
    """Pixel extent (x0, x1, y0, y1) of what is drawn (anything not white) in each half of a paired deck,
    in the half's own coordinates, x1/y1 exclusive."""
    import io

    import numpy as np
    from PIL import Image

    png = page.locator('[data-testid="stDeckGlJsonChart"]').nth(index).screenshot()
    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    w = a.shape[1] // 2
    out = {}
    for half, h in (("left", a[:, :w]), ("right", a[:, w:])):
        drawn = h.min(axis=2) < 235
        cols, rows = np.flatnonzero(drawn.any(axis=0)), np.flatnonzero(drawn.any(axis=1))
        out[half] = (int(cols[0]), int(cols[-1]) + 1, int(rows[0]), int(rows[-1]) + 1) if cols.size else (0, 0, 0, 0)
    return out


DECK = '[data-testid="stDeckGlJsonChart"]'


def square_box(a: np.ndarray) -> tuple[int, int, int, int]:
    """Pixel box (x0, x1, y0, y1) of the left square of a paired deck: where anything is drawn."""
    h = a[:, : a.shape[1] // 2]
    drawn = h.min(axis=2) < 245
    cols, rows = np.flatnonzero(drawn.mean(axis=0) > 0.5), np.flatnonzero(drawn.mean(axis=1) > 0.5)
    return int(cols[0]), int(cols[-1]) + 1, int(rows[0]), int(rows[-1]) + 1


def place_fraction(ds, name: str) -> tuple[float, float]:
    """Where the gazetteer's place ``name`` sits in a dataset's public square, as fractions (east, north)."""
    from engine.data import geography
    from engine.data.projection import to_local

    dom = ds.public_domain(4)
    _, lon, lat = next(p for p in geography.places_within(*ds.meta.bbox) if p[0] == name)
    x, y = to_local(np.array([lon]), np.array([lat]), ds.crs)[0]
    return (x - dom.x0) / dom.side, (y - dom.y0) / dom.side
