"""In a real browser: the zip of a Release of an uploaded file passes the release scan (``release_scan.py``),
and two tabs on one dataset share one ledger."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest

from tests.support import release_scan as R
from tests.support.browser import MAPS, READY, Watch, heat_pixels, save

pytestmark = pytest.mark.browser


def test_release_zip_downloaded_in_a_browser_holds_nothing_that_identifies_the_input(
    page, app_url, tmp_path, tmp_path_factory
):
    """The release scan (``release_scan.py``) on the zip a browser downloads: a Release of an uploaded file with
    the user's polygons holds no statistic, path, name or hash of the file, and no metric."""
    watch = Watch(page)
    csv = R.private_city(tmp_path / "srv-private-qzx7", "clinic_visits_qzx.csv")
    polygons = R.region_file(tmp_path / "srv-public-qzx7", "barrios_qzx.geojson")
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/?ds=__upload__&mode=release&eps=1&res=32")
    page.wait_for_selector(READY, timeout=60_000)
    page.set_input_files(
        '[data-testid="stFileUploaderDropzoneInput"]',
        files=[{"name": csv.name, "mimeType": "text/csv", "buffer": csv.read_bytes()}],
    )
    page.wait_for_selector("text=The true map is not shown in this mode", timeout=60_000)
    page.wait_for_selector(".st-key-run_explore button:not([disabled])", timeout=150_000)
    assert page.locator(MAPS).count() == 0  # no true map in Release mode
    page.click(".st-key-run_explore button")
    page.wait_for_selector("text=Release mode: this map was drawn", timeout=120_000)
    page.wait_for_function(f"document.querySelectorAll('{MAPS}').length >= 1", timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    page.wait_for_timeout(800)
    assert heat_pixels(page, 0) > 1_000
    body = page.inner_text("body")
    assert "How good is it?" not in body and "True locations" not in body
    page.get_by_text("Regions", exact=True).first.click()
    page.get_by_text("Your polygons", exact=True).click()
    page.wait_for_selector("text=Upload a file of polygons", timeout=60_000)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').last.set_input_files(
        files=[{"name": polygons.name, "mimeType": "application/geo+json", "buffer": polygons.read_bytes()}]
    )
    page.wait_for_selector("text=Id column", timeout=60_000)
    page.wait_for_selector(READY, timeout=60_000)
    save(page, tmp_path, "release_upload")
    page.get_by_role("tab", name="Download the release").click()
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name=re.compile("Release files")).click()
    data = open(dl.value.path(), "rb").read()
    z = zipfile.ZipFile(io.BytesIO(data))
    manifest = json.loads(z.read("manifest.json"))
    assert manifest["ledger"]["total_epsilon"] == pytest.approx(1.0)
    text = "".join(z.read(name).decode("utf-8", "replace") for name in z.namelist() if name.endswith((".json", ".csv")))
    for banned in ('"seed"', "n_users", "n_points", '"metrics"', "emd_m", "truth", r"\bmse\b"):
        assert not re.search(banned, text), banned  # whole words: "themselves" holds no metric
    secrets = R.secrets_of(
        csv,
        manifest["grid"]["crs"],
        folders=[tmp_path_factory.getbasetemp(), csv.parent, polygons.parent],
        texts=R.ledger_fingerprint(csv),
    )
    found = R.scan({dl.value.suggested_filename: data}, secrets)
    assert not found, "\n".join(map(str, found))
    assert {"manifest.json", "heatmap.tif", "regions.csv", "regions.gpkg"} <= set(z.namelist())
    watch.check()


def test_two_tabs_share_one_ledger(browser, app_url):
    """A dataset (options included) no other browser test uses: the server's ledger is shared by all of them."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    a, b = ctx.new_page(), ctx.new_page()
    watches = [Watch(a), Watch(b)]
    a.goto(app_url + "/?ds=synthetic:sprawl&d.n=5000&eps=0.7&mode=release&run=1")
    a.wait_for_selector(READY, timeout=120_000)
    a.wait_for_selector("text=press Run to publish the release", timeout=60_000)  # a link publishes nothing
    a.wait_for_selector(READY, timeout=60_000)
    a.wait_for_timeout(500)
    a.click(".st-key-run_explore button")  # the click does
    a.wait_for_selector("text=ε ledger: 0.7 of", timeout=120_000)  # the release exists
    a.wait_for_selector(READY, timeout=120_000)
    b.goto(app_url + "/?ds=synthetic:sprawl&d.n=5000&eps=0.3&mode=release")
    b.wait_for_selector(READY, timeout=60_000)
    b.wait_for_timeout(500)
    b.wait_for_selector("text=ε ledger: 0.7 of", timeout=30_000)  # the second tab sees the first's
    b.click(".st-key-run_explore button")
    b.wait_for_selector("text=ε ledger: 1 of", timeout=120_000)
    b.wait_for_selector(READY, timeout=120_000)
    for w in watches:
        w.check()
    ctx.close()
