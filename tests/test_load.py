"""Concurrent sessions on one server, at a small size (the full figures, 16 sessions, are in BENCHMARKS.md
and come from ``python scripts/load_sessions.py --sessions 16``).

Every session opens Explore with its own seed, all click Run at once, and each must get its maps and have
both its Run and its New seed clicks taken up by the server. One session is a Chromium page, the others speak
Streamlit's websocket protocol without a browser (as the benchmark's do beside a browser). Times are recorded, not asserted (a test
machine's load decides them); the benchmark compares them with the targets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from scripts.load_sessions import measure  # it reports the browsers' CPU; main() adds the server's

pytestmark = pytest.mark.browser


def test_concurrent_sessions_all_get_their_maps(app_url):
    # its own thread: a browser test before it in this process may have left an event loop running here
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        res = pool.submit(asyncio.run, measure(app_url, 3, browsers=1)).result()
    print(res)
    assert res["errors"] == [] and res["completed"] == 3 and res["browsers"] == 1, res
    for key in ("maps_sent_s", "run_answer_s", "seed_answer_s"):
        assert res[key]["n"] == 3, res
    assert res["run_to_maps_s"]["n"] == 1 and res["run_to_idle_s"]["n"] == 2, res  # drawn in the browser only
    assert res["run_answer_s"]["max"] <= res["maps_sent_s"]["max"]  # a click is taken up before its maps are sent
    assert res["maps_sent_s"]["max"] <= max(res["run_to_maps_s"]["max"], res["run_to_idle_s"]["max"])
    assert res["cpu_s"]["browsers"] > 0 and "server" not in res["cpu_s"]  # in --url mode the server is not ours


def test_a_protocol_session_runs_what_a_browser_runs(app_url):
    """The protocol client's Run is a real run: its maps come back, the Run button is there and enabled when
    idle, and its first page shows no exception."""
    from scripts.load_sessions import QUERY, SENT
    from scripts.streamlit_client import StreamlitSession

    async def go():
        s = StreamlitSession(app_url, QUERY.format(seed=4242), marker=SENT)
        try:
            await s.open()
            assert s.page_hash and s.errors == [], (s.page_hash, s.errors)
            assert s.buttons["run_explore"][1] is False, s.buttons
            t = await s.click("run_explore")
            await s.marked_frame_after(t)
            await s.idle_after(t)
            return s.runs_finished, s.errors
        finally:
            await s.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        runs, errors = pool.submit(asyncio.run, go()).result()
    assert errors == [] and runs >= 2, (runs, errors)  # the first run and at least the one with the maps
