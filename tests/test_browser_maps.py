"""In a real browser: what Explore draws on real data and on an uploaded user-id file.

The private map of a good release must not vanish under the shared colour scale (checks on the arrays alone
pass while such maps render blank): its coloured area is compared with the true map's, in pixels of
the drawn deck, and the legend's numbers are read. Screenshots go to /tmp/screens/.
"""

from __future__ import annotations

import re

import pytest

from tests.support.browser import MAPS, READY, Watch, heat_pixels, open_explore, run_and_wait_maps, save
from tests.support.files import user_id_csv

pytestmark = pytest.mark.browser


def legend_numbers(page) -> list[float]:
    text = page.locator(".heat-legend").first.inner_text()
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


def test_berlin_privtree_private_map_is_drawn(page, app_url, tmp_path):
    watch = Watch(page)
    open_explore(page, app_url, "?ds=berlin_airbnb&mech=privtree&eps=1&baselines=0&seed=5")
    run_and_wait_maps(page)
    true_px, private_px = heat_pixels(page, 0, "left"), heat_pixels(page, 0, "right")
    assert true_px > 2_000, true_px
    # PrivTree's leaves spread the mass over large cells: it covers at least half the true map's coloured area
    assert private_px >= 0.5 * true_px, (true_px, private_px)
    assert "locations per km²" in page.locator(".heat-legend").first.inner_text()
    assert legend_numbers(page), "the legend shows no numbers"
    save(page, tmp_path, "explore_berlin_privtree")
    watch.check()


def test_uploaded_user_id_file_maps_people_on_both_sides(page, app_url, tmp_path):
    """20,000 locations of 2,000 users: both maps count people (each user weighs 1 in total), say so, and the
    true map is not nearly blank nor the private map saturated."""
    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/?ds=__upload__&mech=identity&eps=1&baselines=0&seed=2")
    page.wait_for_selector(READY, timeout=60_000)
    page.set_input_files(
        '[data-testid="stFileUploaderDropzoneInput"]',
        files=[{"name": "people.csv", "mimeType": "text/csv", "buffer": user_id_csv()}],
    )
    page.wait_for_selector("text=Real data people.csv", timeout=150_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=60_000)
    run_and_wait_maps(page)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=60_000)
    legend = page.locator(".heat-legend").first.inner_text()
    assert "people per km²" in legend, legend  # one unit on both maps, named
    true_px, private_px = heat_pixels(page, 0, "left"), heat_pixels(page, 0, "right")
    assert true_px > 2_000, true_px  # the truth is drawn, not nearly blank
    assert private_px >= 0.5 * true_px, (true_px, private_px)
    save(page, tmp_path, "explore_upload_user_id")
    watch.check()
