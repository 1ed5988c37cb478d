"""Concurrent dashboard sessions against one server: how long Run takes to give maps, and how long buttons
take to answer, with N sessions at once.

    python scripts/load_sessions.py --sessions 16 [--browsers K] [--warm] [--url http://127.0.0.1:8501] [--pin] [--json]

Without ``--url`` a server is started on a free port (its own cache folder). Each session opens Explore on a
built-in city with its own seed (so no run is served from another's cache), waits for the page, then every
session clicks Run at once. K of the N sessions (all by default) are Chromium pages; the others speak
Streamlit's websocket protocol without a browser (``streamlit_client.py``): the server does the same work for
them, and they cost the machine almost nothing, so the server is measured alone while K browsers show what a
person sees beside them. Measured per session: *button answer* (click on an idle page to the server's first
message back, i.e. the server taking the click up; for Run, then for "New seed" once the maps are there),
*maps sent* (click to the message carrying the maps) and, in a browser, *Run -> maps* (click to the private map
drawn and the page idle). Prints medians and maxima, and the CPU the server, the browsers and the protocol
clients used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.streamlit_client import StreamlitSession, first_after  # noqa: E402
from tests.support.browser import CHROMIUM, MAPS, READY  # noqa: E402

SEED0 = int(time.time()) % 1_000_000 * 100  # seeds of their own: no session is served from an earlier cache
SHOTS = os.environ.get("HEATMAP_LOAD_SHOTS", "")  # a folder for a screenshot of each session that fails
SENT = b"computed in"  # the caption under a result's maps: the message after the maps' own
SERVER = b"streamlit\x00run"  # the server's command line
QUERY = "?ds=snow_cholera&mech=identity&res=128&eps=1&baselines=0&seed={seed}"


def _watch_frames(page) -> list:
    """Arrival of the server's websocket messages to this page (any kind), as (time, whether the message carries
    the caption written under a result's maps, i.e. the server has sent them). Times are taken when the browser
    receives a message, before its page renders it."""
    frames: list[tuple[float, bool]] = []

    def got(payload) -> None:
        body = payload if isinstance(payload, bytes) else str(payload).encode()
        frames.append((time.perf_counter(), SENT in body))

    page.on("websocket", lambda ws: ws.on("framereceived", got))
    return frames


async def _answer(page, frames: list, click) -> tuple[float, float]:
    """Seconds from a click on an idle page to the server's first message back (the script it started). An
    idle page gets no messages, so the first one after the click answers it; the script's state attribute
    would miss a run quicker than the page's rendering."""
    await page.wait_for_selector(READY, timeout=300_000)  # a click during a run would start no new one
    await asyncio.sleep(0.3)  # let a rerun that ended just now deliver its last messages
    t = time.perf_counter()
    await click()
    return t, await first_after(frames, t, 120, "no message from the server") - t


class _Barrier:
    """Every session clicks Run at once, when all have loaded (or failed to)."""

    def __init__(self, n: int):
        self.n, self.arrived, self.go = n, 0, asyncio.Event()

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived >= self.n:
            self.go.set()


async def session(browser, url: str, i: int, barrier: _Barrier, out: list) -> None:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await ctx.new_page()
    frames = _watch_frames(page)
    rec = {"session": i, "client": "browser"}
    arrived, stage = False, "open"
    try:
        await page.goto(url + "/" + QUERY.format(seed=SEED0 + i), timeout=180_000)
        await page.wait_for_selector(READY, timeout=180_000)
        await page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=180_000)
        barrier.arrive()
        arrived = True
        await barrier.go.wait()
        stage = "Run"
        t0, rec["run_answer_s"] = await _answer(page, frames, lambda: page.click(".st-key-run_explore button"))
        await page.wait_for_selector("text=computed in", timeout=300_000)
        rec["maps_sent_s"] = min(x for x, sent in frames if sent and x > t0) - t0
        await page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=300_000)
        await page.wait_for_selector(READY, timeout=300_000)
        rec["run_to_maps_s"], stage = time.perf_counter() - t0, "New seed"
        _, rec["seed_answer_s"] = await _answer(page, frames, lambda: page.click(".st-key-new_seed button"))
        await page.wait_for_selector(READY, timeout=300_000)
    except Exception as exc:  # a session that fails is reported, not fatal for the others
        rec["error"] = f"{stage}: {type(exc).__name__}: {str(exc)[:200]}"
        if SHOTS:
            await page.screenshot(path=f"{SHOTS}/load_session_{i}.png")
    finally:
        if not arrived:
            barrier.arrive()
        out.append(rec)
        await ctx.close()


async def protocol_session(url: str, i: int, barrier: _Barrier, out: list) -> None:
    """The same session as ``session`` spoken over the websocket protocol: no page is drawn."""
    s = StreamlitSession(url, QUERY.format(seed=SEED0 + i), marker=SENT)
    rec = {"session": i, "client": "protocol"}
    arrived, stage = False, "open"
    try:
        await s.open(timeout=180)
        if s.buttons.get("run_explore", ("", True))[1]:
            raise RuntimeError(f"no enabled Run button after the first run (buttons: {sorted(s.buttons)})")
        barrier.arrive()
        arrived = True
        await barrier.go.wait()
        stage = "Run"
        t0, rec["run_answer_s"] = await _protocol_answer(s, "run_explore")
        maps = await s.marked_frame_after(t0)
        rec["maps_sent_s"] = maps - t0
        rec["run_to_idle_s"] = await s.idle_after(maps) - t0
        stage = "New seed"
        t1, rec["seed_answer_s"] = await _protocol_answer(s, "new_seed")
        await s.idle_after(t1)
        if s.errors:
            raise RuntimeError(f"the page showed an exception: {s.errors[0][:200]}")
    except Exception as exc:
        rec["error"] = f"{stage}: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        if not arrived:
            barrier.arrive()
        out.append(rec)
        await s.close()


async def _protocol_answer(s: StreamlitSession, key: str) -> tuple[float, float]:
    await s.wait_idle(300)
    await asyncio.sleep(0.3)  # as in the browser: a rerun that ended just now delivers its last messages
    t = await s.click(key)
    return t, await s.first_frame_after(t) - t


async def warm_up(url: str, server_pid: int | None) -> float:
    """A first visitor: one session opens the page and runs once, then the server's background warm-up (the
    kernels, the gazetteer, the land mask, the upload parser) is let finish: until the server uses under a tenth
    of a core over a second (or 5 s pass when its process is not ours). Returns the seconds it took."""
    t = time.perf_counter()
    s = StreamlitSession(url, QUERY.format(seed=SEED0 - 1), marker=SENT)
    try:
        await s.open(timeout=180)
        await s.idle_after(await s.marked_frame_after(await s.click("run_explore")))
    finally:
        await s.close()
    if server_pid is None:
        await asyncio.sleep(5)
    else:
        while time.perf_counter() - t < 120:
            before = _cpu_seconds(SERVER)
            await asyncio.sleep(1)
            if _cpu_seconds(SERVER) - before < 0.1:
                break
    return time.perf_counter() - t


async def measure(url: str, n: int, browsers: int | None = None, warm: bool = False, server_pid=None) -> dict:
    """``n`` sessions, ``browsers`` of them (all by default) Chromium pages, the rest protocol clients; ``warm``:
    after a first visitor (``warm_up``), else on the server as it is."""
    from playwright.async_api import async_playwright

    browsers = n if browsers is None else browsers
    warmed = await warm_up(url, server_pid) if warm else None
    barrier, out = _Barrier(n), []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"]) if browsers else None
        chromium0, own0, server0 = _cpu_seconds(b"chromium"), time.process_time(), _cpu_seconds(SERVER)
        await asyncio.gather(
            *(session(browser, url, i, barrier, out) for i in range(browsers)),
            *(protocol_session(url, i, barrier, out) for i in range(browsers, n)),
        )
        chromium, own = _cpu_seconds(b"chromium") - chromium0, time.process_time() - own0  # before they exit
        server = _cpu_seconds(SERVER) - server0
        if browser is not None:
            await browser.close()
    res = summarise(out, n)
    res["browsers"] = browsers
    res["warm_up_s"] = None if warmed is None else round(warmed, 1)
    res["cpu_s"] = {"browsers": round(chromium, 1), "this_script": round(own, 1)}
    if server_pid is not None:  # a server this script started: no other streamlit counts
        res["cpu_s"]["server"] = round(server, 1)
    return res


def summarise(out: list, n: int) -> dict:
    ok = [r for r in out if "error" not in r]

    def stat(key):
        v = sorted(r[key] for r in ok if key in r)
        return {"median": statistics.median(v), "max": v[-1], "n": len(v)} if v else None

    return {
        "sessions": n,
        "completed": len(ok),
        "maps_sent_s": stat("maps_sent_s"),
        "run_to_maps_s": stat("run_to_maps_s"),  # browsers: the maps drawn
        "run_to_idle_s": stat("run_to_idle_s"),  # protocol clients: the maps sent and the script over
        "run_answer_s": stat("run_answer_s"),
        "seed_answer_s": stat("seed_answer_s"),
        "errors": [r["error"] for r in out if "error" in r],
    }


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` on ``cpus`` (threads started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def _cpu_seconds(match: bytes) -> float:
    """CPU time used so far by the processes whose command line holds ``match`` (Linux /proc)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if match in Path(f"/proc/{pid}/cmdline").read_bytes():
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def run_measure(
    url: str, n: int, server_pid: int | None, pin: bool, browsers: int | None = None, warm: bool = False
) -> dict:
    if pin:  # the server on the first core, this script and its browsers on the others
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2 or server_pid is None:
            raise SystemExit("--pin needs two cores and a server this script starts")
        _pin(server_pid, {cpus[0]})
        os.sched_setaffinity(0, set(cpus[1:]))
    res = asyncio.run(measure(url, n, browsers, warm, server_pid))
    res["pinned"] = pin
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--url", default="")
    ap.add_argument("--browsers", type=int, default=None, help="how many sessions are Chromium pages (default all)")
    ap.add_argument("--warm", action="store_true", help="after a first visitor and the server's warm-up")
    ap.add_argument("--pin", action="store_true", help="the server alone on one core, the clients on the others")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.url:
        res = run_measure(args.url, args.sessions, None, False, args.browsers, args.warm)
    else:
        import contextlib
        import tempfile

        from tests.support.browser import serve

        class _Factory:  # serve() wants pytest's tmp_path_factory
            def mktemp(self, name):
                return Path(tempfile.mkdtemp(prefix=name))

        with contextlib.ExitStack() as stack:
            url, proc = stack.enter_context(serve(_Factory()))
            res = run_measure(url, args.sessions, proc.pid, args.pin, args.browsers, args.warm)
    print(json.dumps(res, indent=2) if args.json else res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
