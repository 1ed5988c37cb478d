"""The Reproduce page in a real browser: it opens, runs one quick reproduction in the background while the
page stays live, and shows the suite's numbers beside the paper's. A screenshot goes to /tmp/screens."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import READY, Watch, save

pytestmark = pytest.mark.browser


def test_reproduce_runs_a_quick_reproduction(page, app_url, tmp_path):
    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/reproduce")
    page.wait_for_selector(READY, timeout=60_000)
    box = page.locator(".st-key-repro_bit_pushing")
    box.get_by_text("Figure 1a and 1c").wait_for(timeout=30_000)
    box.get_by_text("python -m engine bench bit_pushing --json").wait_for(timeout=30_000)  # the command
    box.get_by_role("button", name="Run the quick version").click()
    # the page answers while the suite runs: the progress line and its Cancel button appear
    box.get_by_role("button", name="Cancel").wait_for(timeout=30_000)
    box.get_by_text("Running the quick version").wait_for(timeout=30_000)
    box.get_by_text("Quick run finished").wait_for(timeout=600_000)
    page.wait_for_selector(READY, timeout=60_000)
    table = box.locator("table")
    table.get_by_text("Engine, this quick run").wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    save(page, tmp_path, "reproduce_bit_pushing")
    rows = table.locator("tbody tr").all()
    assert len(rows) == 4
    quick = [r.locator("td").last.inner_text().strip() for r in rows]
    assert all(re.fullmatch(r"[0-9.]+ ?(%|×)", q) for q in quick), quick  # each in the paper's unit
    pct = [float(q.split()[0]) for q in quick if q.endswith("%")]
    assert len(pct) == 2 and all(0 < v < 20 for v in pct)  # NRMSEs of a few per cent (the paper: ~3 % and ~1 %)
    assert "~3 % (Fig. 1a)" in table.inner_text()  # the paper's number beside them
    watch.check()


def test_compare_scores_alike_and_names_swamped_maps(page, app_url, tmp_path):
    """Compare in a browser: the local-DP grid's and the uniform map's notes are drawn on the maps, the caption
    names the one filter every map was smoothed with, and the ranking's verdict sits above its table."""
    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/compare?d.n=20000&res=128&eps=1&mechs=sparse_emd,identity,ldp_grid,uniform&run=1")
    page.get_by_text("Tied with the best").first.wait_for(timeout=300_000)
    page.wait_for_selector(READY, timeout=120_000)
    page.wait_for_timeout(1500)  # deck.gl's first frames
    body = page.inner_text("body")
    assert "Noise swamps this map's colour scale" in body and "This map is flat" in body
    assert "smoothed by the same Gaussian filter" in body
    assert "Best: " in body
    save(page, tmp_path, "compare_like_for_like")
    watch.check()
