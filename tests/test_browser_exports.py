"""In a real browser: a run's exports open where a GIS user and a reader would open them.

The PNG carries its legend region, the GeoTIFF lands on the run's domain in its CRS (read back with
rasterio), and the HTML report renders in Chromium without a single request. Screenshots of Compare and
of the report go to /tmp/screens.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.browser import MAPS, READY, SCREENS, Watch, heat_pixels, save

pytestmark = pytest.mark.browser

QUERY = "?ds=snow_cholera&mech=ug&eps=1&baselines=0&seed=3&run=1"


def download(page, label: str):
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name=label).click()
    return dl.value


def test_exports_open_in_gis_and_offline(page, app_url, tmp_path, browser):

    import rasterio
    from PIL import Image
    from pyproj import CRS

    from engine.run import RunConfig, prepare

    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/" + QUERY)
    page.wait_for_selector("text=computed in", timeout=120_000)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    page.wait_for_timeout(800)
    assert heat_pixels(page, 0, "right") > 2_000  # Snow + UG: the private map is drawn, not an empty grid
    save(page, tmp_path, "explore_snow_ug")
    page.get_by_role("tab", name="Export").click()

    record = json.loads(open(download(page, "Metrics + config (JSON)").path()).read())
    assert record["evaluation"] == "contains non-private information about the data"
    cfg = RunConfig.from_dict(record["config"])
    _, domain, _, _ = prepare(cfg)

    png = Image.open(download(page, "Private map (PNG)").path())
    png.load()
    x0, y0, x1, y1 = (int(v) for v in png.text["legend_box"].split(","))
    legend = np.asarray(png.convert("RGB"))[y0:y1, x0:x1]
    sat = legend.max(axis=2).astype(int) - legend.min(axis=2)
    assert (sat > 60).sum() > 500  # the colour ramp is in the legend region

    tif = download(page, "Grid (GeoTIFF)").path()
    with rasterio.open(tif) as src:
        b = src.bounds
        assert np.allclose([b.left, b.bottom, b.right, b.top], domain.bounds, atol=1e-6)
        assert CRS.from_user_input(src.crs.to_wkt()).equals(CRS.from_proj4(cfg_crs(cfg)))
        assert src.width == src.height == 2**domain.depth  # the run's grid (an automatic resolution chooses it)

    html = open(download(page, "Report (HTML)").path(), encoding="utf-8").read()
    reader = browser.new_context(viewport={"width": 1280, "height": 1000})
    rp = reader.new_page()
    requests = []
    rp.on("request", lambda r: requests.append(r.url))
    rp.set_content(html, wait_until="load")
    rp.wait_for_timeout(500)
    assert not [u for u in requests if not u.startswith("data:")], requests  # nothing fetched at all
    assert rp.locator("img").count() >= 2 and "EMD" in rp.inner_text("body")
    rp.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    SCREENS.mkdir(parents=True, exist_ok=True)
    rp.screenshot(path=str(SCREENS / "report.png"), full_page=True)
    reader.close()
    watch.check()


def cfg_crs(cfg) -> str:
    from engine.run import load_dataset

    return load_dataset(cfg.dataset, cfg.dataset_options).crs


def test_compare_screenshot(page, app_url, tmp_path):
    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 1000})
    # 4 mechanisms x 5 seeds = 20 releases at ε 0.4: within the session's ε limit, so the link runs
    page.goto(app_url + "/compare?ds=berlin_airbnb&mechs=identity,ug,privtree,adaptive_hh&eps=0.4&run=1")
    page.wait_for_selector("text=Tied with the best", timeout=180_000)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 5", timeout=180_000)
    page.wait_for_selector(READY, timeout=180_000)
    page.wait_for_timeout(1000)
    for i in range(5):
        assert heat_pixels(page, i) > 1_000  # truth and every release drawn
    save(page, tmp_path, "compare_berlin")
    watch.check()
