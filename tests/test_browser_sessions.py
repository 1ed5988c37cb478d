"""In a real browser: concurrent sessions on one server see only their own uploads, and the
memory of closed sessions' uploads goes back.

Each context uploads its own CSV (its own place, size and marker value), runs Identity, and must see
only its own dataset name, map, run, ledger and export. Two contexts upload the *same bytes* under
different names: the reported leak (the second saw the first's file name and run).
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from tests.support.browser import MAPS, READY, Watch, heat_pixels, save, serve

pytestmark = pytest.mark.browser

SMALL = "?res=64&baselines=0&eps=1"


def city_csv(i: int, n: int, marker: int) -> bytes:
    """``n`` locations around a centre of its own, with a ``value`` column holding ``marker``."""
    rng = np.random.default_rng(i)
    lon0, lat0 = -3.0 + 0.7 * i, 40.0 + 0.3 * i
    pts = rng.normal(0, 0.01, (n, 2))
    rows = "\n".join(f"{lon0 + a:.6f},{lat0 + b:.6f},{marker}" for a, b in pts)
    return f"lon,lat,value\n{rows}\n".encode()


def upload(page, url: str, name: str, data: bytes, timeout: int = 150_000) -> None:
    page.goto(url + "/" + SMALL + "&ds=__upload__")
    page.wait_for_selector(READY, timeout=60_000)
    page.set_input_files(
        '[data-testid="stFileUploaderDropzoneInput"]', files=[{"name": name, "mimeType": "text/csv", "buffer": data}]
    )
    page.wait_for_selector(f"text=Real data {name}", timeout=timeout)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=60_000)


def wait_run(page) -> None:
    page.wait_for_selector("text=computed in", timeout=120_000)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    page.wait_for_timeout(600)


def export_json(page) -> dict:
    page.get_by_role("tab", name="Export").click()
    page.wait_for_selector(READY, timeout=60_000)
    for attempt in range(2):  # on a loaded machine a rerun can cancel the first download
        try:
            with page.expect_download(timeout=30_000) as dl:
                page.get_by_role("button", name="Metrics + config (JSON)").click()
            return json.loads(open(dl.value.path()).read())
        except Exception:
            if attempt:
                raise
            page.wait_for_timeout(1000)


def run_id(page) -> str:
    return re.search(r"run ([0-9a-f]{8}) ·", page.inner_text("body")).group(1)


def sessions_see_only_their_own(browser, url: str, specs: list[tuple[str, bytes, int]], tmp_path, shot: str):
    ctxs = [browser.new_context(viewport={"width": 1440, "height": 1000}) for _ in specs]
    pages = [c.new_page() for c in ctxs]
    watches = [Watch(p) for p in pages]
    for p, (name, data, _) in zip(pages, specs):
        upload(p, url, name, data)
    for p in pages:  # every run in flight together
        p.click(".st-key-run_explore button")
    ids = []
    names = [name for name, _, _ in specs]
    for i, (p, (name, _, n)) in enumerate(zip(pages, specs)):
        wait_run(p)
        body = p.inner_text("body")
        assert f"Real data {name} · {n:,} locations" in body
        assert not [o for o in names if o != name and o in body], f"session {i} sees another's file name"
        assert "ε ledger: 0 of" in body  # its own ledger (the header's label), no release
        assert heat_pixels(p, 0, "right") > 2_000  # its private map is drawn
        ids.append(run_id(p))
        rec = export_json(p)
        assert rec["dataset"]["name"] == name and rec["n_points"] == n
        assert not [o for o in names if o != name and o in json.dumps(rec)]
    assert len(set(ids)) == len(specs)  # every session its own run, even for identical bytes
    save(pages[-1], tmp_path, shot)
    for w in watches:
        w.check()
    for c in ctxs:
        c.close()


def test_two_sessions_same_bytes_other_names(browser, app_url, tmp_path):
    data = city_csv(0, 700, 11)
    specs = [("alice_hiv_patients_2024.csv", data, 700), ("probe.csv", data, 700)]
    sessions_see_only_their_own(browser, app_url, specs, tmp_path, "two_sessions_same_bytes")


def test_eight_concurrent_sessions(browser, app_server, tmp_path):
    url, proc = app_server
    specs = [(f"clinic_{i}_marker_{1000 + i}.csv", city_csv(i, 400 + 37 * i, 1000 + i), 400 + 37 * i) for i in range(8)]
    specs[1] = ("copy_of_clinic_0.csv", specs[0][1], specs[0][2])  # identical bytes, another name
    warm = browser.new_context()  # the server's imports and first page, so RSS before counts the sessions only
    upload(warm.new_page(), url, "warm.csv", city_csv(99, 300, 0))
    warm.close()
    rss0 = rss_mb(proc.pid)
    t0 = time.perf_counter()
    sessions_see_only_their_own(browser, url, specs, tmp_path, "eight_sessions")
    print(
        f"eight sessions: {time.perf_counter() - t0:.1f} s; server RSS {rss0:.0f} MB before, "
        f"{rss_mb(proc.pid):.0f} MB after"
    )


def test_a_file_uploaded_in_the_pages_first_seconds_is_read(browser, tmp_path_factory):
    """A file dropped as soon as the upload page is ready, on a fresh server, is read. Were the page to rerun
    then to learn the browser's size, Streamlit would lose the upload's own rerun in the merge of the two: the
    file would stay listed in the uploader, never read (4 of 5 fresh servers)."""
    for attempt in range(2):  # two fresh servers: each had the race once, on its first page
        with serve(tmp_path_factory) as (url, _):
            ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            try:
                name = f"first_seconds_{attempt}.csv"
                upload(ctx.new_page(), url, name, city_csv(attempt, 300, 7), timeout=30_000)
            finally:
                ctx.close()


def test_a_guessed_upload_key_is_an_unknown_dataset(page, app_url):
    watch = Watch(page)
    page.goto(app_url + "/?ds=upload:AAAAAAAAAAAAAAAAAAAAAAAA&run=1&res=32")
    page.wait_for_selector(READY, timeout=60_000)
    # the page may first draw while the browser reports its size, then rerun: wait for the message itself
    page.wait_for_selector("text=unknown dataset", timeout=60_000)
    body = page.inner_text("body")
    assert "unknown dataset" in body and "not run" in body
    assert "computed in" not in body  # nothing ran (a run's caption says how long it took)
    watch.check()


class Listener:
    """An HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self):
        import http.server
        import threading

        got = self.requests = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                got.append(self.path)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_a_markdown_file_name_requests_nothing(page, app_url):
    """A file name with Markdown image and link syntax is shown as typed, and the browser fetches nothing
    from the address it names (a listener on 127.0.0.1 records any request)."""
    lis = Listener()
    watch = Watch(page)
    name = f"![x](http:127.0.0.1:{lis.port}?p.png) [y](http:127.0.0.1:{lis.port}?l) :red[z].csv"
    try:
        upload(page, app_url, name, city_csv(3, 300, 1))
        page.wait_for_timeout(1500)
        assert page.locator("img[src*='p.png']").count() == 0
        assert f"Real data {name}" in page.inner_text("body")  # read as the user named it
        assert lis.requests == []
    finally:
        lis.close()
    watch.check()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) / 1024


@pytest.mark.slow
def test_memory_of_closed_sessions_returns(browser, tmp_path_factory):
    """Uploads of closed sessions are released (grace 1 s here) and the server's memory comes back."""
    env = {"HEATMAP_SESSION_GRACE_S": "1", "HEATMAP_REAPER_S": "1"}
    n = 400_000
    with serve(tmp_path_factory, env) as (url, proc):

        def one(i: int) -> None:
            ctx = browser.new_context()
            p = ctx.new_page()
            upload(p, url, f"big_{i}.csv", city_csv(i, n, i))
            ctx.close()

        one(0)  # imports, parser, first allocations
        time.sleep(6)
        before = rss_mb(proc.pid)
        for i in range(1, 9):
            one(i)
        peak = rss_mb(proc.pid)
        time.sleep(8)  # the reaper notices the closed sessions and releases their uploads
        after = rss_mb(proc.pid)
    print(f"server RSS: before {before:.0f} MB, after 8 uploads {peak:.0f} MB, 8 s after closing {after:.0f} MB")
    assert after - before < 150, (before, peak, after)
