"""The real app in headless Chromium (pytest-playwright, Debian's /usr/bin/chromium).

A session fixture (``conftest.app_url``) starts ``streamlit run app.py`` on a free port with its own
cache folder; each test drives it like a user. Any browser console error (pydeck
errors only show there) or request leaving 127.0.0.1 fails the test.
Screenshots go to pytest's tmp folder and /tmp/screens/.
"""

from __future__ import annotations

import pytest

from tests.support.browser import (
    MAPS,
    QUERY,
    READY,
    Watch,
    drawn_extents,
    heat_pixels,
    open_explore,
    run_and_wait_maps,
    save,
)

pytestmark = pytest.mark.browser


def test_explore_run_draws_both_maps(page, app_url, tmp_path):
    watch = Watch(page)
    open_explore(page, app_url)
    assert page.locator("h3", has_text="Explore a private heatmap").is_visible()
    assert page.get_by_text("SYNTHETIC DATA").first.is_visible()
    run_and_wait_maps(page)
    assert page.locator(MAPS).count() >= 1  # one deck holds both maps (linked views)
    for half in ("left", "right"):  # both maps really drew a heatmap (not a blank canvas)
        assert heat_pixels(page, 0, half) > 5_000
    # the maps take the page's width: each square (cells and the grey empty region) is drawn at
    # >= 500 px on a 1440 px screen with the sidebar open, whole (not cut at the deck's edges)
    for half, (x0, x1, y0, y1) in drawn_extents(page, 0).items():
        assert x1 - x0 >= 500 and y1 - y0 >= 500, (half, x0, x1, y0, y1)
        assert x0 > 0 and y0 > 0, (half, x0, y0)  # whole, with a margin
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
        p.wait_for_selector("text=computed in", timeout=90_000)
        p.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=90_000)
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
    """SNH in the browser: the networks train in the background, the density grid is
    drawn next to the truth, and the page says the auxiliary data is treated as public."""
    watch = Watch(page)
    open_explore(page, app_url, f"{QUERY}&mech=snh&p.snh.k=4&baselines=0")
    run_and_wait_maps(page, timeout=180_000)
    for half in ("left", "right"):
        assert heat_pixels(page, 0, half) > 5_000
    assert page.locator("text=/treated as public/i").count() >= 1
    save(page, tmp_path, "snh_explore")
    watch.check()


def test_explore_maps_are_linked_and_tell_values_on_hover(page, app_url, tmp_path):
    """One view drives both maps (a drag on the true map moves the private one too), and hovering
    a cell shows its true and private value (the scale bar is checked in test_maps)."""
    import io

    import numpy as np
    from PIL import Image

    watch = Watch(page)
    open_explore(page, app_url, "?ds=snow_cholera&mech=identity&eps=1&baselines=0")
    run_and_wait_maps(page)
    deck = page.locator('[data-testid="stDeckGlJsonChart"]').first
    box = deck.bounding_box()

    def halves():
        a = np.asarray(Image.open(io.BytesIO(deck.screenshot())).convert("RGB")).astype(int)
        w = a.shape[1] // 2
        return a[:, :w], a[:, w:]

    page.mouse.move(box["x"] + box["width"] * 0.25, box["y"] + box["height"] * 0.5)
    tooltip = deck.locator(".deck-tooltip")  # the margin-of-error map below has a deck (and a tooltip) too
    tooltip.wait_for(timeout=10_000)
    page.wait_for_timeout(400)
    tip = tooltip.inner_text()
    assert "true:" in tip and "private:" in tip, tip
    assert "±" in tip, tip  # Identity's noise has a closed form: the private value's 95 % margin
    save(page, tmp_path, "explore_hover")
    page.mouse.move(box["x"] + 5, box["y"] + 5)  # off the cells: no tooltip in the screenshots below
    page.wait_for_timeout(300)
    left0, right0 = halves()
    page.mouse.move(box["x"] + box["width"] * 0.25, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.25 + 120, box["y"] + box["height"] * 0.5 + 60, steps=8)
    page.mouse.up()
    page.wait_for_timeout(800)
    left1, right1 = halves()
    moved = lambda a, b: float(np.abs(a - b).mean())  # noqa: E731
    assert moved(left0, left1) > 1 and moved(right0, right1) > 1  # the drag moved both maps
    watch.check()
