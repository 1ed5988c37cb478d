"""Concurrent dashboard sessions against one server: how long Run takes to give maps, and how long buttons
take to answer, with N browser sessions at once.

    python scripts/load_sessions.py --sessions 16 [--url http://127.0.0.1:8501] [--json]

Without ``--url`` a server is started on a free port (its own cache folder). Each session opens Explore on a
built-in city with its own seed (so no run is served from another's cache), waits for the page, then every
session clicks Run at once. Measured per session: *Run -> maps* (click to the private map drawn and the
script idle) and *button answer* (click to the app's script starting, i.e. the server taking the click up;
then a second click, on "New seed", once the maps are there). Prints medians and maxima.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser_support import CHROMIUM, MAPS, READY  # noqa: E402

SEED0 = int(time.time()) % 1_000_000 * 100  # seeds of their own: no session is served from an earlier cache
RUNNING = '[data-testid="stApp"][data-test-script-state="running"]'
QUERY = "?ds=snow_cholera&mech=identity&res=128&eps=1&baselines=0&seed={seed}"


async def _answer(page, click) -> float:
    """Seconds from a click to the script starting (the server took the click up)."""
    t = time.perf_counter()
    await click()
    await page.wait_for_selector(RUNNING, timeout=120_000, state="attached")
    return time.perf_counter() - t


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
    rec = {"session": i}
    arrived = False
    try:
        await page.goto(url + "/" + QUERY.format(seed=SEED0 + i), timeout=180_000)
        await page.wait_for_selector(READY, timeout=180_000)
        await page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=180_000)
        barrier.arrive()
        arrived = True
        await barrier.go.wait()
        t0 = time.perf_counter()
        rec["run_answer_s"] = await _answer(page, lambda: page.click(".st-key-run_explore button"))
        await page.wait_for_selector("text=computed in", timeout=300_000)
        await page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=300_000)
        await page.wait_for_selector(READY, timeout=300_000)
        rec["run_to_maps_s"] = time.perf_counter() - t0
        rec["seed_answer_s"] = await _answer(page, lambda: page.click(".st-key-new_seed button"))
        await page.wait_for_selector(READY, timeout=300_000)
    except Exception as exc:  # a session that fails is reported, not fatal for the others
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        if not arrived:
            barrier.arrive()
        out.append(rec)
        await ctx.close()


async def measure(url: str, n: int) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        barrier, out = _Barrier(n), []
        await asyncio.gather(*(session(browser, url, i, barrier, out) for i in range(n)))
        await browser.close()
    return summarise(out, n)


def summarise(out: list, n: int) -> dict:
    ok = [r for r in out if "error" not in r]

    def stat(key):
        v = sorted(r[key] for r in ok if key in r)
        return {"median": statistics.median(v), "max": v[-1], "n": len(v)} if v else None

    return {
        "sessions": n,
        "completed": len(ok),
        "run_to_maps_s": stat("run_to_maps_s"),
        "run_answer_s": stat("run_answer_s"),
        "seed_answer_s": stat("seed_answer_s"),
        "errors": [r["error"] for r in out if "error" in r],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--url", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.url:
        res = asyncio.run(measure(args.url, args.sessions))
    else:
        import contextlib
        import tempfile

        from tests.browser_support import serve

        class _Factory:  # serve() wants pytest's tmp_path_factory
            def mktemp(self, name):
                return Path(tempfile.mkdtemp(prefix=name))

        with contextlib.ExitStack() as stack:
            url, _ = stack.enter_context(serve(_Factory()))
            res = asyncio.run(measure(url, args.sessions))
    print(json.dumps(res, indent=2) if args.json else res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
