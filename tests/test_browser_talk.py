"""Explore shown in a talk, in a real browser (drawn pixels, no network): at 1440 x 900 and at a projector's
1024 x 768, in Evaluate and in Release mode, the maps and their legend are inside the window after Run and no
control's label is cut; the mouse wheel over the maps scrolls the page without zooming them (Ctrl + wheel
zooms); the text drawn inside the maps is large enough to read from the back of a room.

Screenshots go to /tmp/screens/.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.support.browser import DECK, READY, Watch, place_fraction, save, square_box

pytestmark = pytest.mark.browser

SNOW = "?ds=snow_cholera&mech=privtree&eps=1&baselines=0&seed=5"
SIZES = ((1440, 900), (1024, 768))
# Streamlit scrolls its main area, not the window
SCROLLED = "window.scrollY + document.querySelector('[data-testid=\"stMain\"]').scrollTop"
TO_TOP = "document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)"


def open_and_run(page, url: str, query: str, width: int, height: int, done: str) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.goto(url + "/" + query)
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=60_000)
    page.click(".st-key-run_explore button")
    page.mouse.move(width // 2, 5)  # off the button: its tooltip would cover the page
    page.wait_for_selector(done, timeout=120_000)
    page.wait_for_selector(f"{DECK} canvas", timeout=60_000)
    page.wait_for_timeout(1500)  # the room component's report may rerun the page once
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_timeout(800)  # let deck.gl draw


def assert_in_window(page, height: int) -> None:
    """The maps (Explore's first deck: both squares, or Release's one) and the legend lie inside the window with the
    page at its top; the map views' control is whole."""
    assert page.evaluate(SCROLLED) == 0
    box = page.locator(DECK).first.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, box
    legend = page.locator(".heat-legend").first.bounding_box()
    assert legend["y"] >= 0 and legend["y"] + legend["height"] <= height, legend  # its ticks included
    # "Private − true" is drawn whole in its column: what the browser shows at its centre is that button
    whole = page.evaluate(
        """() => {
          const b = [...document.querySelectorAll('button')].find((e) => e.innerText.trim() === 'Private − true');
          const r = b.getBoundingClientRect(), col = b.closest('[data-testid="stColumn"]').getBoundingClientRect();
          const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
          return {inside: r.right <= col.right + 0.5 && r.left >= col.left - 0.5, hit: b.contains(hit)};
        }"""
    )
    assert whole == {"inside": True, "hit": True}, whole


def deck_png(page) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(page.locator(DECK).first.screenshot())).convert("RGB")).astype(int)


def changed(a: np.ndarray, b: np.ndarray) -> float:
    """Share of pixels that differ visibly between two pictures of the same deck."""
    return float((np.abs(a - b).max(axis=2) > 40).mean()) if a.shape == b.shape else 1.0


def ink_height(a: np.ndarray, fx: float, fy: float) -> int:
    """Rows of dark, unsaturated ink in the label just right of a place's dot in the left square: the drawn
    height of its letters (a capital and an ascender: about 0.72 of the font size)."""
    x0, x1, y0, y1 = square_box(a)
    side = min(x1 - x0, y1 - y0)
    px, py = int(x0 + fx * side), int(y1 - fy * side)
    win = a[py - 25 : py + 25, px + 6 : px + 70]
    ink = (win.max(axis=2) < 120) & (win.max(axis=2) - win.min(axis=2) < 30)
    rows = np.flatnonzero(ink.sum(axis=1) >= 2)
    return int(rows[-1] - rows[0] + 1) if rows.size else 0


def test_evaluate_fits_both_windows_the_wheel_scrolls_and_labels_are_large(page, app_url, tmp_path):
    from engine.data.builtin import load_snow

    watch = Watch(page)
    open_and_run(page, app_url, SNOW, 1440, 900, "text=computed in")
    assert_in_window(page, 900)
    save(page, tmp_path, "talk_evaluate_1440x900")

    # the place name "Soho" is drawn 18 px high: its letters span at least 12 rows (10-11 px text spans 8)
    assert ink_height(deck_png(page), *place_fraction(load_snow(), "Soho")) >= 12

    # the wheel over the maps scrolls the page and leaves their zoom alone
    before = deck_png(page)
    box = page.locator(DECK).first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, 400)
    page.wait_for_timeout(800)
    assert page.evaluate(SCROLLED) > 100
    page.mouse.move(5, 5)
    page.evaluate(TO_TOP)
    page.wait_for_timeout(800)
    assert changed(before, deck_png(page)) < 0.01
    # with Ctrl held (as a trackpad's pinch sends) the wheel zooms the maps, and the page stays put
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + box["height"] / 2)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -400)
    page.keyboard.up("Control")
    page.wait_for_timeout(800)
    assert page.evaluate(SCROLLED) == 0
    page.mouse.move(5, 5)
    page.wait_for_timeout(500)
    assert changed(before, deck_png(page)) > 0.05

    # the swipe view's labels, written in HTML over the map, are as large
    page.get_by_text("Swipe", exact=True).click()
    page.wait_for_selector(".swipe .tag", timeout=60_000)
    sizes = page.locator(".swipe .tag").evaluate_all("(els) => els.map((e) => getComputedStyle(e).fontSize)")
    assert sizes and all(float(s.removesuffix("px")) >= 18 for s in sizes), sizes

    page2 = page.context.new_page()
    open_and_run(page2, app_url, SNOW, 1024, 768, "text=computed in")
    assert_in_window(page2, 768)
    save(page2, tmp_path, "talk_evaluate_1024x768")
    watch.check()


@pytest.mark.parametrize("width,height", SIZES)
def test_release_map_and_legend_fit_the_window(page, app_url, tmp_path, width, height):
    watch = Watch(page)
    open_and_run(page, app_url, SNOW + "&mode=release", width, height, "text=this map was drawn with OpenDP")
    assert_in_window(page, height)
    assert page.locator(".heat-legend").first.inner_text().count("\n") >= 2  # its ticks are drawn
    save(page, tmp_path, f"talk_release_{width}x{height}")
    watch.check()
