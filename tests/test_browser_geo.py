"""Geography on screen and maps that are the page, in a real browser (drawn pixels, no network).

* place names from the offline gazetteer are drawn on the maps (a white label box with dark text where the
  gazetteer puts Soho), John Snow's pumps and streets under the heatmaps;
* at 1440 x 900 with the sidebar open both maps and their legend are inside the window after Run, without
  scrolling; collapsing the sidebar makes the maps grow;
* an upload whose longitude and latitude are exchanged gets a warning before any run, and one click reads it
  again the right way round;
* the swipe view slides between the true and the private map; the difference map is red and blue with its
  own legend.

Screenshots go to /tmp/screens/.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.support.browser import DECK, MAPS, READY, Watch, place_fraction, run_and_wait_maps, save, square_box

pytestmark = pytest.mark.browser

SNOW = "?ds=snow_cholera&mech=privtree&eps=1&baselines=0&seed=5"


def open_at(page, url: str, query: str, width: int = 1440, height: int = 900):
    page.set_viewport_size({"width": width, "height": height})
    page.goto(url + "/" + query)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=60_000)


def deck_pixels(page, index: int = 0) -> np.ndarray:
    from PIL import Image

    png = page.locator(DECK).nth(index).screenshot()
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def label_at(a: np.ndarray, fx: float, fy: float) -> tuple[int, int]:
    """(white, dark) pixels just right of a place's dot in the left square of a paired deck: a label box with
    letters in it. Nothing else white is drawn there (the scale bar and the coordinates sit at the edges)."""
    x0, x1, y0, y1 = square_box(a)
    side = min(x1 - x0, y1 - y0)
    px, py = x0 + fx * side, y1 - fy * side
    win = a[int(py) - 10 : int(py) + 10, int(px) + 2 : int(px) + 45]
    white = int((win.min(axis=2) >= 248).sum())
    # the letters are thin and anti-aliased: grey to dark, unsaturated
    ink = int(((win.max(axis=2) < 170) & (win.max(axis=2) - win.min(axis=2) < 30)).sum())
    return white, ink


def test_snow_maps_fit_the_window_with_place_names_and_grow_without_the_sidebar(page, app_url, tmp_path):
    watch = Watch(page)
    open_at(page, app_url, SNOW)
    run_and_wait_maps(page)
    page.wait_for_timeout(1500)  # the room component's report may rerun the page once
    page.wait_for_selector(READY, timeout=60_000)
    assert page.evaluate("window.scrollY") == 0
    deck = page.locator(DECK).first.bounding_box()
    legend = page.locator(".heat-legend").first.bounding_box()
    assert deck["y"] >= 0 and deck["y"] + deck["height"] <= 900, deck
    assert legend["y"] + legend["height"] <= 900, legend  # the legend too, without scrolling
    save(page, tmp_path, "geo_snow_1440x900")

    a = deck_pixels(page)
    x0, x1, y0, y1 = square_box(a)
    assert min(x1 - x0, y1 - y0) > 380, (x0, x1, y0, y1)
    # the label "Soho" starts just right of its dot: a white box (brighter than the empty cells' grey) with dark
    # letters in it
    from engine.data.builtin import load_snow

    white, ink = label_at(a, *place_fraction(load_snow(), "Soho"))
    assert white > 150 and ink > 20, (white, ink)
    # the streets (grey lines, unsaturated, darker than the empty cells) show through the empty cells
    sq = a[y0:y1, x0:x1]
    grey = ((sq.max(axis=2) - sq.min(axis=2) < 15) & (sq.max(axis=2) > 100) & (sq.max(axis=2) < 210)).sum()
    assert grey > 500, grey

    h_open = deck["height"]
    page.hover('[data-testid="stSidebar"]')  # the collapse button shows on hover
    page.get_by_role("button", name="Collapse sidebar").click()
    page.wait_for_timeout(1500)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_function(
        f"document.querySelector('{DECK}').getBoundingClientRect().height > {h_open + 40}", timeout=30_000
    )
    save(page, tmp_path, "geo_snow_sidebar_collapsed")
    watch.check()


def swapped_berlin_csv() -> bytes:
    rng = np.random.default_rng(4)
    pts = rng.normal(0, 0.01, (400, 2)) + (13.41, 52.53)
    rows = [f"{lat:.6f},{lon:.6f}" for lon, lat in pts]  # latitude written in the lon column
    return ("lon,lat\n" + "\n".join(rows) + "\n").encode()


def test_a_swapped_file_gets_a_warning_before_any_run(page, app_url, tmp_path):
    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(app_url + "/?ds=__upload__&mech=identity&eps=1&baselines=0&seed=2")
    page.wait_for_selector(READY, timeout=60_000)
    page.set_input_files(
        '[data-testid="stFileUploaderDropzoneInput"]',
        files=[{"name": "swapped.csv", "mimeType": "text/csv", "buffer": swapped_berlin_csv()}],
    )
    page.wait_for_selector("text=the two columns look swapped", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    assert page.locator("text=computed in").count() == 0  # before any run
    save(page, tmp_path, "geo_swapped_warning")
    page.get_by_role("button", name="Exchange longitude and latitude").first.click()
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_function("!document.body.innerText.includes('the two columns look swapped')", timeout=60_000)
    page.wait_for_selector(MAPS, timeout=60_000)
    page.wait_for_timeout(800)
    a = deck_pixels(page)
    # the true map of the file read the right way round sits in Berlin: the gazetteer labels it
    from engine.data.files import load_file

    fixed = load_file(swapped_berlin_csv(), "swapped.csv", columns={"lon": "lat", "lat": "lon"})
    white, ink = label_at(a, *place_fraction(fixed, "Berlin"))
    assert white > 150 and ink > 20, (white, ink)
    save(page, tmp_path, "geo_swapped_fixed")
    watch.check()


def test_swipe_and_difference_views(page, app_url, tmp_path):
    watch = Watch(page)
    open_at(page, app_url, SNOW)
    run_and_wait_maps(page)
    page.get_by_text("Swipe", exact=True).click()
    page.wait_for_selector(".swipe img.over", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_timeout(500)
    box = page.locator(".swipe").first
    bb = box.bounding_box()
    assert bb["y"] + bb["height"] <= 900 and bb["width"] > 380, bb

    def column(frac: float) -> np.ndarray:
        from PIL import Image

        a = np.asarray(Image.open(io.BytesIO(box.screenshot())).convert("RGB")).astype(int)
        return a[:, int(frac * a.shape[1])]

    before = column(0.35)  # left of the handle: the true map
    page.mouse.click(bb["x"] + bb["width"] * 0.15, bb["y"] + bb["height"] / 2)  # the handle jumps where pressed
    assert abs(float(box.get_attribute("data-at")) - 0.15) < 0.03
    after = column(0.35)  # now right of the handle: the private map, which differs from the truth
    assert (np.abs(before - after).max(axis=1) > 30).sum() > 20
    save(page, tmp_path, "geo_swipe")

    page.get_by_text("Private − true", exact=True).click()
    page.wait_for_selector(".diff-legend", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=60_000)
    page.wait_for_timeout(800)
    a = deck_pixels(page)
    red = ((a[:, :, 0] - a[:, :, 2]) > 60).sum()
    blue = ((a[:, :, 2] - a[:, :, 0]) > 60).sum()
    assert red > 300 and blue > 300, (red, blue)  # PrivTree counts too many in some cells, too few in others
    assert "private − true" in page.locator(".diff-legend").inner_text()
    save(page, tmp_path, "geo_difference")
    watch.check()


def test_typing_privtree_then_arrow_down_and_enter_picks_privtree(page, app_url):
    watch = Watch(page)
    open_at(page, app_url, "?ds=snow_cholera&mech=identity&eps=1&baselines=0")
    box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text="Mechanism").first
    box.locator("input").click()
    page.keyboard.type("PrivTree")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_timeout(500)
    assert "mech=privtree" in page.url, page.url  # the URL holds the chosen mechanism
    watch.check()


def test_a_basemap_that_cannot_load_says_so_on_the_map(page, app_url, tmp_path):
    # every request off this machine fails, as it does offline (and nothing leaves the test machine)
    page.route(lambda u: not u.startswith(("http://127.0.0.1", "ws://127.0.0.1")), lambda r: r.abort())
    open_at(page, app_url, "?ds=snow_cholera&mech=identity&eps=1&baselines=0&basemap=1")
    run_and_wait_maps(page)
    page.wait_for_selector(".basemap-missing", timeout=30_000)
    assert "could not load" in page.locator(".basemap-missing").first.inner_text()
    save(page, tmp_path, "geo_basemap_missing")
