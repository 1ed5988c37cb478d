"""Regions in a real browser: after a run on Explore, H3 hexagons and an uploaded polygon file (with its id
and name column pickers) are drawn as coloured, outlined polygons on the shared scale, checked in the
pixels of the drawn decks. Screenshots go to /tmp/screens/."""

from __future__ import annotations

import json

import pytest
from browser_support import MAPS, READY, Watch, heat_pixels, open_explore, run_and_wait_maps, save

pytestmark = pytest.mark.browser

QUERY = "?d.n=20000&res=64&eps=1&mech=privtree&baselines=0&seed=3"


def districts_geojson() -> bytes:
    """Four districts (quarters of the synthetic city's public region) with a code and a name."""
    import shapely

    from engine.run import load_dataset

    x0, y0, x1, y1 = load_dataset("synthetic:polycentric", {"n": 20000}).meta.bbox
    xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
    boxes = [(x0, y0, xm, ym), (xm, y0, x1, ym), (x0, ym, xm, y1), (xm, ym, x1, y1)]
    feats = [
        {
            "type": "Feature",
            "properties": {"code": f"Q{i + 1}", "quarter": f"Quarter {i + 1}", "area_rank": 4 - i},
            "geometry": shapely.geometry.mapping(shapely.box(*b)),
        }
        for i, b in enumerate(boxes)
    ]
    return json.dumps({"type": "FeatureCollection", "features": feats}).encode()


def region_decks(page) -> int:
    return page.locator('[data-testid="stDeckGlJsonChart"]').count()


def test_regions_are_drawn_coloured_with_outlines(page, app_url, tmp_path):
    watch = Watch(page)
    open_explore(page, app_url, QUERY)
    run_and_wait_maps(page)
    before = region_decks(page)
    page.get_by_text("Regions", exact=True).first.click()
    page.get_by_text("H3 hexagons", exact=True).click()
    page.wait_for_function(
        f"document.querySelectorAll('{MAPS}').length >= {before + 2}", timeout=90_000
    )  # the true and the private regional maps
    page.wait_for_selector(READY, timeout=90_000)
    page.wait_for_timeout(1500)
    deck = page.locator('[data-testid="stDeckGlJsonChart"]').nth(before + 1)
    deck.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    true_px, private_px = heat_pixels(page, before), heat_pixels(page, before + 1)
    assert true_px > 5_000 and private_px > 5_000, (true_px, private_px)  # hexagons coloured on the scale
    save(page, tmp_path, "explore_regions_h3")

    page.get_by_text("Your polygons", exact=True).click()
    page.wait_for_selector("text=Upload a file of polygons", timeout=60_000)
    uploaders = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    uploaders.last.set_input_files(
        files=[{"name": "quarters.geojson", "mimeType": "application/geo+json", "buffer": districts_geojson()}]
    )
    page.wait_for_selector("text=Id column", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    # the name picker offers the file's columns: choose "quarter"
    page.locator('[data-testid="stSelectbox"]', has_text="Name column").click()
    page.get_by_role("option", name="quarter").click()
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_selector("text=Quarter 1", state="attached", timeout=60_000)  # in the table (a canvas grid)
    page.wait_for_timeout(1500)
    n = region_decks(page)
    deck = page.locator('[data-testid="stDeckGlJsonChart"]').nth(n - 1)
    deck.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    assert heat_pixels(page, n - 1) > 5_000, heat_pixels(page, n - 1)  # four quarters, coloured
    save(page, tmp_path, "explore_regions_upload")
    watch.check()
