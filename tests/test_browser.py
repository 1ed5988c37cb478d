"""The real app in headless Chromium (pytest-playwright, Debian's /usr/bin/chromium).

A session fixture starts ``streamlit run app.py`` on a free port with its own
cache folder; each test drives it like a user. Any browser console error (pydeck
errors only show there) or request leaving 127.0.0.1 fails the test.
Screenshots go to pytest's tmp folder and /tmp/screens/.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
READY = '[data-testid="stApp"][data-test-script-state="notRunning"]'
MAPS = '[data-testid="stDeckGlJsonChart"] canvas'
SCREENS = Path("/tmp/screens")
QUERY = "?d.n=20000&res=128&eps=0.5"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    port = free_port()
    cache = tmp_path_factory.mktemp("browser-cache")
    log = open(tmp_path_factory.mktemp("browser-log") / "streamlit.log", "w")  # noqa: SIM115
    env = {**os.environ, "HEATMAP_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    cmd += ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start (exit {proc.poll()}); see {log.name}")
        time.sleep(0.2)
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM}


class Watch:
    """Collect console errors, page errors and requests that leave the machine."""

    def __init__(self, page):
        self.problems: list[str] = []
        page.on("console", lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None)
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
        assert not self.problems, "\n".join(self.problems)


def open_explore(page, url: str, query: str = QUERY):
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(url + "/" + query)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=60_000)


def run_and_wait_maps(page, timeout=90_000):
    page.click(".st-key-run_explore button")
    page.wait_for_selector("text=How good is it?", timeout=timeout)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 2", timeout=timeout)
    page.wait_for_selector(READY, timeout=timeout)
    page.wait_for_timeout(800)  # let deck.gl draw its first frames


def save(page, tmp_path, name: str) -> Path:
    out = tmp_path / f"{name}.png"
    page.screenshot(path=str(out), full_page=True)
    SCREENS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out, SCREENS / out.name)
    return out


def heat_pixels(page, index: int) -> int:
    """Pixels of a map chart that carry heatmap colours (not white/grey background)."""
    import io

    import numpy as np
    from PIL import Image

    png = page.locator('[data-testid="stDeckGlJsonChart"]').nth(index).screenshot()
    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    sat = a.max(axis=2) - a.min(axis=2)
    return int((sat > 40).sum())


def test_explore_run_draws_both_maps(page, app_url, tmp_path):
    watch = Watch(page)
    open_explore(page, app_url)
    assert page.locator("h1", has_text="Explore a private heatmap").is_visible()
    assert page.get_by_text("SYNTHETIC DATA").first.is_visible()
    run_and_wait_maps(page)
    assert page.locator(MAPS).count() >= 2
    for i in (0, 1):  # both maps really drew a heatmap (not a blank canvas)
        assert heat_pixels(page, i) > 5_000
    assert "run=1" in page.url and "eps=0.5" in page.url
    assert "locations per km²" in page.locator(".heat-legend").first.inner_text()  # the shared legend
    save(page, tmp_path, "explore")
    # switching pages keeps the configuration (sidebar widgets persist)
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Compare").click()
    page.wait_for_selector("h1:has-text('Compare mechanisms')", timeout=30_000)
    page.wait_for_selector(READY, timeout=30_000)
    page.wait_for_timeout(300)
    assert "eps=0.5" in page.url and "d.n=20000" in page.url and "res=128" in page.url
    watch.check()


def test_two_sessions_run_at_once(browser, app_url, tmp_path):
    pages, watches = [], []
    for seed in (101, 202):
        ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
        p = ctx.new_page()
        watches.append(Watch(p))
        open_explore(p, app_url, f"{QUERY}&seed={seed}&baselines=0")
        pages.append(p)
    for p in pages:  # both jobs are in flight together
        p.click(".st-key-run_explore button")
    for p, seed in zip(pages, (101, 202)):
        p.wait_for_selector("text=How good is it?", timeout=90_000)
        p.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 2", timeout=90_000)
        p.wait_for_selector(READY, timeout=90_000)
        assert p.get_by_text(f"seed {seed} ·").first.is_visible()  # each session shows its own run
        assert f"seed={seed}" in p.url
    pages[1].wait_for_timeout(800)
    save(pages[1], tmp_path, "two_sessions")
    for w in watches:
        w.check()
    for p in pages:
        p.context.close()


def test_snh_density_map_and_public_data_notice(page, app_url, tmp_path):
    """SNH (issue 7) in the browser: the networks train in the background, the density grid is
    drawn next to the truth, and the page says the auxiliary data is treated as public."""
    watch = Watch(page)
    open_explore(page, app_url, f"{QUERY}&mech=snh&p.snh.k=4&baselines=0")
    run_and_wait_maps(page, timeout=180_000)
    for i in (0, 1):
        assert heat_pixels(page, i) > 5_000
    assert page.locator("text=/treated as public/i").count() >= 1
    save(page, tmp_path, "snh_explore")
    watch.check()
