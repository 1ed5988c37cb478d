"""Speed, with feedback: the dashboard's and the command line's slow paths (``python -m ui.benchmarks.speed
[--json] [--quick]``), driving the real app with Playwright on Debian's Chromium as :mod:`.app` does.

Figures (medians over repetitions; each repetition a fresh browser session and a file of its own, so no cache
of an earlier one serves it; the server's CPU is its process tree's, the upload readers' children included):

* ``regions_upload_s``: on Explore after a PrivTree run (Evaluate, 20,000 synthetic locations, 256 x 256),
  from giving the file input a city's 77 neighbourhoods (:func:`engine.bench.geofiles.neighbourhoods_geojson`,
  a dense centre, 12,000-odd vertices) to both regional maps (true and private) drawn: their decks issued a
  WebGL draw call as large as the polygons after the upload. Target <= 3 s. The note gives when the decks were
  on the page (the server's part and the transfer), the server's CPU, the websocket bytes, and when the page
  first showed a spinner or a progress bar;
* ``regions_profile_cpu_s``: the same path in this process, step by step (CPU seconds: reading, weighing,
  the regional table and margins, the outlines in longitude and latitude), informative;
* ``context_upload_s``: a context layer of a city's streets (:func:`engine.bench.geofiles.streets_geojson`,
  7,000 ways, 100,000 vertices) from the file input to the paired map redrawn with it (its deck drew a call as
  large as the streets, or drew after uploading an image of 1,000 pixels or more: the streets as one image).
  Target <= 3 s;
* ``plan_first_output_cpu_s`` and ``plan_total_s``: ``python -m engine plan`` for two mechanisms (one simulated),
  three epsilons, a target margin and the neighbourhoods as regions, its stderr a pseudo-terminal of 100 columns:
  the command's CPU up to the first byte of progress (target <= 2 s; the wall time in the note) and the whole
  command (informative; CPU in the note);
* ``tradeoffs_estimate_ratio``: Trade-offs on a fresh server at three settings (:data:`SWEEPS`; ``--quick``: one):
  the measured time from the Sweep click to the charts over the page's "Estimated time", the one farthest from 1.
  Target 0.5-2. The note gives each setting's server CPU and load.

The machine is shared: the note of each figure gives the load average when it was measured.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.bench import Figure

from .app import CHARTS, CHROMIUM, READY, ROOT, Server

# Injected before the app loads: per canvas, the time and size (vertices x instances) of every large WebGL
# draw call, and when the app's spinner or progress bar first appeared after ``window.__since``.
PROBE = r"""
(() => {
  const now = () => performance.now();
  for (const C of [window.WebGL2RenderingContext, window.WebGLRenderingContext]) {
    if (!C) continue;
    const P = C.prototype;
    const wrap = (name, size) => {
      const orig = P[name];
      if (!orig) return;
      P[name] = function (...a) {
        const w = size(a);
        this.canvas.__draw = now();
        if (w >= 1000) {
          const c = this.canvas;
          (c.__calls = c.__calls || []).push([now(), w]);
          if (c.__calls.length > 4000) c.__calls.splice(0, 2000);
        }
        return orig.apply(this, a);
      };
    };
    for (const name of ['texImage2D', 'texSubImage2D']) {
      const orig = P[name];
      P[name] = function (...a) {
        const src = a[a.length - 1];
        if (src && (src instanceof ImageBitmap || src instanceof HTMLImageElement) && src.width >= 1000) {
          (this.canvas.__tex = this.canvas.__tex || []).push(now());
        }
        return orig.apply(this, a);
      };
    }
    wrap('drawArrays', a => a[2]);
    wrap('drawElements', a => a[1]);
    wrap('drawArraysInstanced', a => a[2] * a[3]);
    wrap('drawElementsInstanced', a => a[1] * a[4]);
  }
  window.__since = 0;
  window.__feedback = null;
  const seen = () => {
    if (window.__feedback === null && window.__since > 0 &&
        document.querySelector('[data-testid="stSpinner"], [data-testid="stProgress"]')) window.__feedback = now();
  };
  new MutationObserver(seen).observe(document, {subtree: true, childList: true});
})();
"""
# the k charts from index i on each drew a call of at least w after time t (page clock), or drew
# after uploading an image of 1,000 pixels or more taken after t (a layer drawn as an image)
DRAWN_JS = """([i, k, t, w]) => { const all = [...document.querySelectorAll('[data-testid="stDeckGlJsonChart"]')];
  const mine = all.slice(i, i + k);
  return mine.length >= k && mine.every(ch => [...ch.querySelectorAll('canvas')].some(
    c => (c.__calls || []).some(([at, size]) => at > t && size >= w)
      || (c.__tex || []).some(at => at > t && c.__draw > at))); }"""
UPLOADS = '[data-testid="stFileUploaderDropzoneInput"]'
QUERY = "?d.n=20000&res=256&mech=privtree&eps=1&baselines=0"
TARGET_S = 3.0
FIRST_OUTPUT_S = 2.0


def _load() -> str:
    return "load average {:.1f}, {:.1f}, {:.1f} on {} cores".format(*os.getloadavg(), os.cpu_count())


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its descendants, the children they reaped included."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def _browser_cpu(srv) -> float:
    """CPU seconds of this process's descendants but the app's server: the browser and its driver."""
    import psutil

    total = 0.0
    for child in psutil.Process().children():
        if child.pid != srv.proc.pid:
            total += _tree_cpu(child.pid)
    return total


def _city_box() -> tuple[float, float, float, float]:
    from engine.run import load_dataset

    return tuple(load_dataset("synthetic:polycentric", {"n": 20000}).meta.bbox)


def _vertices(data: bytes) -> int:
    import json

    import shapely

    geoms = [shapely.geometry.shape(f["geometry"]) for f in json.loads(data)["features"]]
    return int(shapely.get_num_coordinates(geoms).sum())


def _explore_after_run(browser, url: str, seed: int):
    """A fresh session on Explore with a finished run; returns (context, page, websocket byte counter)."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    ctx.add_init_script(PROBE)
    page = ctx.new_page()
    got = {"bytes": 0}
    page.on("websocket", lambda ws: ws.on("framereceived", lambda p: got.__setitem__("bytes", got["bytes"] + len(p))))
    page.goto(f"{url}/{QUERY}&seed={seed}")
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=120_000)
    page.click(".st-key-run_explore button")
    page.wait_for_selector(f"text=seed {seed} · computed in", timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    page.wait_for_timeout(500)
    return ctx, page, got


def _timed_upload(page, srv, uploader, name: str, data: bytes, first_chart: int, charts: int, size: int, got) -> dict:
    """Give ``uploader`` the file and wait for ``charts`` decks from index ``first_chart`` to draw ``size``."""
    cpu0, bytes0, browser0 = _tree_cpu(srv.proc.pid), got["bytes"], _browser_cpu(srv)
    t0_page = page.evaluate("window.__since = performance.now(); window.__feedback = null; window.__since")
    t0 = time.perf_counter()
    uploader.set_input_files(files=[{"name": name, "mimeType": "application/geo+json", "buffer": data}])
    page.wait_for_function(
        f"document.querySelectorAll('{CHARTS}').length >= {first_chart + charts}", timeout=120_000, polling=20
    )
    on_page = time.perf_counter() - t0
    page.wait_for_function(DRAWN_JS, arg=[first_chart, charts, t0_page, size], timeout=120_000, polling=20)
    drawn = time.perf_counter() - t0
    feedback = page.evaluate("window.__feedback === null ? null : (window.__feedback - window.__since) / 1000")
    page.wait_for_selector(READY, timeout=120_000)
    return {
        "s": drawn,
        "on_page_s": on_page,
        "server_cpu_s": _tree_cpu(srv.proc.pid) - cpu0,
        "browser_cpu_s": _browser_cpu(srv) - browser0,
        "websocket_mb": (got["bytes"] - bytes0) / 1e6,
        "feedback_s": feedback,
    }


def regions_upload(browser, srv, reps: int, progress) -> list[dict]:
    from engine.bench.geofiles import neighbourhoods_geojson

    box, out = _city_box(), []
    for r in range(reps + 1):  # the first warms the server (its readers' forkserver, imports): not counted
        data = neighbourhoods_geojson(box=box, seed=100 + r, centre=0.5)
        ctx, page, got = _explore_after_run(browser, srv.url, seed=500 + r)
        page.get_by_text("Regions", exact=True).first.click()
        page.get_by_text("Your polygons", exact=True).click()
        page.wait_for_selector("text=Upload a file of polygons", timeout=60_000)
        page.wait_for_selector(READY, timeout=60_000)
        before = page.locator(CHARTS).count()
        got_r = _timed_upload(
            page,
            srv,
            page.locator(UPLOADS).last,
            f"neighbourhoods{r}.geojson",
            data,
            before,
            2,
            _vertices(data) // 2,
            got,
        )
        ctx.close()
        if r:
            out.append(got_r)
        progress(f"regions upload {r}{' (warm-up)' if not r else ''}: {_fmt(got_r)}")
    return out


def context_upload(browser, srv, reps: int, progress) -> list[dict]:
    from engine.bench.geofiles import streets_geojson

    box, out = _city_box(), []
    for r in range(reps + 1):
        data = streets_geojson(box=box, seed=200 + r)
        ctx, page, got = _explore_after_run(browser, srv.url, seed=600 + r)
        page.get_by_text("Zoom, context, baselines").click()
        uploader = page.locator(f".st-key-context_file {UPLOADS}")
        uploader.wait_for(state="attached", timeout=60_000)
        # both squares of the paired deck draw the streets: twice their segments
        got_r = _timed_upload(page, srv, uploader, f"streets{r}.geojson", data, 0, 1, _vertices(data), got)
        ctx.close()
        if r:
            out.append(got_r)
        progress(f"context upload {r}{' (warm-up)' if not r else ''}: {_fmt(got_r)}")
    return out


def _fmt(d: dict) -> str:
    fb = "none" if d["feedback_s"] is None else f"{d['feedback_s']:.2f} s"
    return (
        f"drawn {d['s']:.2f} s (decks on the page {d['on_page_s']:.2f} s), server CPU {d['server_cpu_s']:.2f} s, "
        f"browser CPU {d['browser_cpu_s']:.2f} s, "
        f"websocket {d['websocket_mb']:.2f} MB, first spinner {fb}"
    )


def _upload_figure(name: str, what: str, runs: list[dict]) -> Figure:
    med = {
        k: statistics.median(r[k] for r in runs)
        for k in ("s", "on_page_s", "server_cpu_s", "browser_cpu_s", "websocket_mb")
    }
    fb = [r["feedback_s"] for r in runs]
    shown = [f for f in fb if f is not None]
    return Figure(
        name,
        med["s"],
        "s",
        f"<= {TARGET_S:g} s",
        med["s"] <= TARGET_S,
        f"{what}; median of {len(runs)}: decks on the page at {med['on_page_s']:.2f} s, server CPU "
        f"{med['server_cpu_s']:.2f} s, browser CPU {med['browser_cpu_s']:.2f} s, websocket {med['websocket_mb']:.2f} MB; a spinner shown in {len(shown)} of "
        f"{len(fb)}" + (f" (at {statistics.median(shown):.2f} s)" if shown else "") + f"; {_load()}",
        {"runs": runs},
    )


def regions_profile(reps: int) -> Figure:
    """The regions' path in this process, step by step (CPU seconds, median of ``reps``)."""
    from engine.bench.geofiles import neighbourhoods_geojson
    from engine.data.files import isolate
    from engine.data.files.polygons import load_polygons_isolated
    from engine.data.region_geometry import build
    from engine.regions import regional_report
    from engine.run import RunConfig, prepare, run

    isolate.warm()
    cfg = RunConfig(dataset_options={"n": 20000}, mechanism="privtree", seed=1)
    res = run(cfg, use_cache=False)
    ds = prepare(cfg)[0]
    steps: dict[str, list[float]] = {}

    def step(name, fn, *args, **kwargs):
        t, child = time.process_time(), isolate.TALLY["cpu_s"]
        out = fn(*args, **kwargs)
        steps.setdefault(name, []).append(time.process_time() - t + isolate.TALLY["cpu_s"] - child)
        return out

    box = _city_box()
    for r in range(reps):
        data = neighbourhoods_geojson(box=box, seed=300 + r, centre=0.5)
        pf = step("read", load_polygons_isolated, data, "n.geojson", name_column="community")
        regions = step("weigh", build, "n.geojson", res.release.domain, res.crs, polygons=pf)
        rep = step("table", regional_report, res, regions, ds)
        step("outlines", rep.regions.lonlat_geoms)
    med = {k: statistics.median(v) for k, v in steps.items()}
    return Figure(
        "regions_profile_cpu_s",
        sum(med.values()),
        "s",
        "",
        None,
        "77 neighbourhoods, 256 x 256, PrivTree: "
        + ", ".join(f"{k} {v:.3f}" for k, v in med.items())
        + f" (CPU, median of {reps}; the drawing's deck is timed in the browser); {_load()}",
        {"steps": med},
    )


def cli_plan(reps: int, progress) -> list[Figure]:
    """``python -m engine plan`` with its stderr a pseudo-terminal: first byte on it, and the whole command."""
    import fcntl
    import pty
    import resource
    import select
    import struct
    import termios

    from engine.bench.geofiles import neighbourhoods_geojson

    firsts, totals, cpus, first_cpus = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        path = Path(tmp) / "neighbourhoods.geojson"
        path.write_bytes(neighbourhoods_geojson(box=_city_box(), centre=0.5))
        cmd = [sys.executable, "-m", "engine", "plan", "--mechanism", "identity,privtree", "--epsilon", "0.5,1,2"]
        cmd += ["--regions", f"{path}:area_num", "--users", "20000", "--dataset", "synthetic:polycentric"]
        cmd += ["--target-margin", "10"]
        for r in range(reps):
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # a terminal has a width
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=slave)
            os.close(slave)
            first = None
            while True:
                ready, _, _ = select.select([master], [], [], 0.05)
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        chunk = b""
                    if chunk and first is None:
                        first = time.perf_counter() - t0
                        first_cpus.append(_tree_cpu(p.pid))
                    if not chunk:
                        break
                elif p.poll() is not None:
                    break
            out = p.communicate()[0]
            total = time.perf_counter() - t0
            os.close(master)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode != 0 or b"smallest epsilon" not in out:
                raise RuntimeError(f"plan failed ({p.returncode})")
            firsts.append(first if first is not None else total)
            totals.append(total)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            progress(f"plan {r + 1}: first output {firsts[-1]:.2f} s, total {total:.2f} s, CPU {cpus[-1]:.2f} s")
    first, first_cpu = statistics.median(firsts), statistics.median(first_cpus)
    what = "identity and PrivTree at epsilon 0.5, 1, 2, a target of 10 over 77 neighbourhoods, 20,000 users"
    return [
        Figure(
            "plan_first_output_cpu_s",
            first_cpu,
            "s",
            f"<= {FIRST_OUTPUT_S:g} s",
            first_cpu <= FIRST_OUTPUT_S,
            f"the command's CPU seconds up to its first byte on stderr (a terminal), {first:.2f} s of wall time; {what}; "
            f"median of {reps}; {_load()}",
            {"runs_cpu_s": first_cpus, "runs_wall_s": firsts},
        ),
        Figure(
            "plan_total_s",
            statistics.median(totals),
            "s",
            "",
            None,
            f"the whole command; CPU {statistics.median(cpus):.2f} s; median of {reps}",
            {"runs": totals, "cpu_s": cpus},
        ),
    ]


# Trade-offs settings: what each sweeps, and its query (mechanisms, epsilons, trials, users)
SWEEPS = (
    ("its defaults (identity, uniform, AG, HDG; 4 epsilons x 5 trials: 80 runs)", ""),
    (
        "identity and PrivTree at epsilon 0.3 and 1, 3 trials (12 runs)",
        "&mechs=identity,privtree&eps_list=0.3,1&trials=3",
    ),
    (
        "identity and UG at 20,000 and 200,000 users, 4 epsilons, 2 trials (32 runs)",
        "&mechs=identity,ug&trials=2&users_list=20000,200000",
    ),
)


def tradeoffs(browser, cache: str, settings, progress) -> Figure:
    """Trade-offs on a fresh server for each of ``settings`` (label, query): measured over estimated time."""
    ratios, rows = [], []
    for r, (label, query) in enumerate(settings):
        srv = Server(cache)
        try:
            srv.wait_health()
            ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            page = ctx.new_page()
            page.goto(f"{srv.url}/tradeoffs?seed={7000 + 100 * r}{query}")
            page.wait_for_selector(".st-key-run_sweep button:not([disabled])", timeout=120_000)
            page.wait_for_selector(READY, timeout=120_000)
            text = page.inner_text("body")
            found = re.search(r"(?:take|Estimated time:) about (\d+) s", text)
            est = float(found.group(1)) if found else 1.0  # "about a second"
            t0, cpu0, load0 = time.perf_counter(), _tree_cpu(srv.proc.pid), os.getloadavg()[0]
            page.evaluate("document.querySelector('.st-key-run_sweep button').click()")
            page.wait_for_selector("text=Frontier: the best mechanism at each point", timeout=600_000)
            took, cpu = time.perf_counter() - t0, _tree_cpu(srv.proc.pid) - cpu0
            ctx.close()
        finally:
            srv.stop()
        ratios.append(took / est)
        rows.append({"setting": label, "estimated_s": est, "measured_s": took, "server_cpu_s": cpu, "load": load0})
        progress(
            f"trade-offs, {label}: estimated {est:g} s at load {load0:.1f}, took {took:.1f} s, server CPU {cpu:.1f} s"
        )
    worst = max(ratios, key=lambda x: max(x, 1 / x))
    return Figure(
        "tradeoffs_estimate_ratio",
        worst,
        "x",
        "0.5-2",
        0.5 <= worst <= 2,
        "measured / estimated time, the farthest from 1 of "
        + "; ".join(
            f"{w['setting']}: {w['measured_s']:.1f} s / {w['estimated_s']:g} s = {w['measured_s'] / w['estimated_s']:.2f} "
            f"(server CPU {w['server_cpu_s']:.1f} s, load {w['load']:.1f})"
            for w in rows
        )
        + f"; each on a fresh server; {_load()}",
        {"settings": rows},
    )


def run(quick: bool = False, progress=print) -> list[Figure]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return [Figure("speed", None, "", "", None, "playwright is not installed")]
    if not Path(CHROMIUM).exists():
        return [Figure("speed", None, "", "", None, f"no Chromium at {CHROMIUM}")]
    reps = 1 if quick else 5
    figs = [regions_profile(1 if quick else 3)]
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as cache, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM)
        srv = Server(cache)
        try:
            srv.wait_health()
            figs.append(
                _upload_figure(
                    "regions_upload_s",
                    "77 neighbourhoods, upload to both maps drawn",
                    regions_upload(browser, srv, reps, progress),
                )
            )
            figs.append(
                _upload_figure(
                    "context_upload_s",
                    "streets, upload to the paired map drawn",
                    context_upload(browser, srv, reps, progress),
                )
            )
        finally:
            srv.stop()
        figs.append(tradeoffs(browser, cache, SWEEPS[1:2] if quick else SWEEPS, progress))
        browser.close()
    figs += cli_plan(1 if quick else 3, progress)
    return figs


if __name__ == "__main__":
    from . import main

    sys.exit(main(run, "speed"))
