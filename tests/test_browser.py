"""The real app in headless Chromium (pytest-playwright, Debian's /usr/bin/chromium).

A session fixture (``conftest.app_url``) starts ``streamlit run app.py`` on a free port with its own
cache folder; each test drives it like a user. Any browser console error (pydeck
errors only show there) or request leaving 127.0.0.1 fails the test.
Screenshots go to pytest's tmp folder and /tmp/screens/.
"""

from __future__ import annotations

import pytest
from browser_support import MAPS, QUERY, READY, Watch, heat_pixels, open_explore, run_and_wait_maps, save

pytestmark = pytest.mark.browser


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
