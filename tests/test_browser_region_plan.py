"""The analyst's own regions in a real browser: upload case locations and a file of neighbourhoods, plan ±10 per
region for Laplace over regions, take the ε the plan suggests, release, and find every neighbourhood's margin in
the release's regions.csv at most 10; the regional map draws its legend and its unreliable class (checked in the
drawn pixels). Screenshots go to /tmp/screens/."""

from __future__ import annotations

import io
import re
import zipfile

import numpy as np
import pandas as pd
import pytest

from engine.bench.city_regions import city_geojson, city_people
from engine.bench.regions import CRS
from tests.support.browser import MAPS, READY, Watch, save
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser

TARGET = 10


def cases_csv() -> bytes:
    """2,000 people with 10 case records each around their homes, in London (on land: no warning)."""
    from engine.data.projection import to_lonlat

    rng = np.random.default_rng(3)
    homes = np.repeat(city_people(2000, seed=17), 10, axis=0)
    ll = to_lonlat(*(homes + rng.normal(0, 300.0, homes.shape)).T, CRS)
    who = np.repeat(np.arange(2000), 10)
    rows = [f"p{u:04d},{a:.6f},{b:.6f}" for u, (a, b) in zip(who, ll)]
    return ("user_id,lon,lat\n" + "\n".join(rows) + "\n").encode()


def pixels_near(png: bytes, rgb, tol: int = 6) -> int:
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((np.abs(a - np.array(rgb)).max(axis=2) <= tol).sum())


def light_grey(png: bytes) -> int:
    """Pixels of the unreliable class's fill as deck.gl draws it (a layer's opacity blends it with the map's square
    behind: a neutral grey between 190 and 215, which neither the square, the page, nor any palette here has)."""
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    grey = a.max(axis=2) - a.min(axis=2) <= 6
    return int((grey & (a.mean(axis=2) >= 190) & (a.mean(axis=2) <= 215)).sum())


def coloured(png: bytes) -> int:
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((a.max(axis=2) - a.min(axis=2) > 40).sum())


def test_plan_per_region_use_its_epsilon_release_and_every_region_keeps_the_margin(page, app_url, tmp_path):
    from ui.region_panel import HATCH, UNRELIABLE_FILL

    watch = Watch(page)
    polygons = city_geojson(tmp_path / "neighbourhoods.geojson").read_bytes()
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/?ds=__upload__&mode=release&eps=1&res=32&mech=laplace_regions")
    page.wait_for_selector(READY, timeout=60_000)
    page.set_input_files(
        '[data-testid="stFileUploaderDropzoneInput"]',
        files=[{"name": "cases.csv", "mimeType": "text/csv", "buffer": cases_csv()}],
    )
    page.wait_for_selector("text=The true map is not shown in this mode", timeout=90_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=150_000)
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Your polygons", exact=True).click()
    page.wait_for_selector("text=Upload a file of polygons", timeout=60_000)
    sidebar.locator('[data-testid="stFileUploaderDropzoneInput"]').last.set_input_files(
        files=[{"name": "neighbourhoods.geojson", "mimeType": "application/geo+json", "buffer": polygons}]
    )
    page.wait_for_selector("text=Id column", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    sidebar.locator('[data-testid="stSelectbox"]', has_text="Id column").click()
    page.get_by_role("option", name="area_id").click()
    page.wait_for_selector(READY, timeout=60_000)
    save(page, tmp_path, "region_sidebar")
    page.wait_for_selector("text=State the number of users", timeout=90_000)
    page.get_by_role("spinbutton", name="Users (a public bound you state)").fill("2000")
    page.keyboard.press("Enter")
    page.wait_for_selector(READY, timeout=60_000)
    page.get_by_role("spinbutton", name="Target ± per region (people)").fill(str(TARGET))
    page.keyboard.press("Enter")
    page.wait_for_selector(READY, timeout=60_000)
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_selector("text=Predicted 95 % margin per region", timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    assert re.search(rf"smallest ε giving ±{TARGET} people per region is", page.inner_text("body"))
    save(page, tmp_path, "region_plan_panel")
    suggestion = page.get_by_role("button", name=re.compile(r"Use ε = "))
    eps = float(re.search(r"Use ε = ([0-9.]+)", suggestion.inner_text()).group(1))
    suggestion.click()
    page.wait_for_selector(READY, timeout=60_000)

    page.click(".st-key-run_explore button")
    page.wait_for_selector("text=Release mode: this map was drawn", timeout=120_000)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 2", timeout=120_000)
    page.wait_for_selector(".region-legend", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    deck = page.locator('[data-testid="stDeckGlJsonChart"]').nth(1)  # the regional map, under the release's
    deck.scroll_into_view_if_needed()

    def regions_drawn() -> bytes | None:
        """The regional map once its regions are on the scale's colours with the unreliable class among them:
        software WebGL on a loaded machine draws it seconds after the page is ready, so a fixed pause is a race."""
        png = deck.screenshot()
        return png if coloured(png) > 5_000 and light_grey(png) > 300 else None

    drawn = wait_until(regions_drawn, "the regional map to be drawn", poll=0.5)
    legend = page.locator(".region-legend").screenshot()
    save(page, tmp_path, "region_release")
    # the regional map: regions on the scale's colours, and the unreliable class (its fill and its hatching)
    assert coloured(drawn) > 5_000 and light_grey(drawn) > 300, (coloured(drawn), light_grey(drawn))
    # its legend: the colour bar and the hatched swatch of the unreliable class
    assert coloured(legend) > 500 and pixels_near(legend, UNRELIABLE_FILL[:3]) > 40
    assert pixels_near(legend, HATCH[:3], tol=25) > 20, pixels_near(legend, HATCH[:3], tol=25)

    page.get_by_role("tab", name="Download the release").click()
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name=re.compile("Release files")).click()
    z = zipfile.ZipFile(io.BytesIO(open(dl.value.path(), "rb").read()))
    assert {"regions.csv", "regions.gpkg", "manifest.json"} <= set(z.namelist())
    table = pd.read_csv(io.BytesIO(z.read("regions.csv")))
    assert len(table) == 77 and (table["margin95"] <= TARGET).all(), table["margin95"].max()
    assert np.allclose(table["epsilon"], eps) and (table["mechanism"] == "laplace_regions").all()
    assert (table["unit"] == "people").all()
    watch.check()
