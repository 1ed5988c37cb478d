"""One 95 % margin at every door (engine.regions.margins): for one release, the screen's stated margin and regional
table (AppTest), the release report's margin column, and the release files read back (the GeoTIFF's margin band,
the GeoParquet's cells, regions.csv) carry the same numbers."""

from __future__ import annotations

import html
import io
import math
import re
import zipfile

import numpy as np
import pandas as pd
import pytest

from tests.support import release_scan as R
from tests.support.app import click_run, frame_with, open_app

MECH = "ug"  # released units of several cells: a cell's margin is a share of its UG cell's, spreading included


@pytest.fixture
def downloads(monkeypatch):
    return R.record_downloads(monkeypatch)


def _3sf(x: float) -> float:
    return float(f"{x:.3g}")


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("±", "").strip())


def _report_rows(page: str) -> dict[str, tuple[float, float, float]]:
    """The release report's margins table: quantity -> (median, worst tenth, largest)."""
    table = page.split("<h2>Margins of error</h2>", 1)[1].split("</table>", 1)[0]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
        if cells:
            rows[cells[0]] = tuple(_number(c) for c in cells[1:4])
    return rows


def _summary(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)), float(np.quantile(v, 0.9))


def test_the_screen_the_report_and_the_files_state_the_same_margins(downloads, tmp_path):
    import geopandas as gpd
    import rasterio

    at = open_app(mode="release", eps="0.7", res="32", mech=MECH, baselines="0")
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("H3 hexagons").run()  # the sidebar's Regions
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]

    # the screen: the stated margin per cell and the regional table
    stated = next(m.value for m in at.markdown if "Stated 95 % margin per cell" in m.value)
    med_screen, worst_screen = (_number(v) for v in re.findall(r"±([\d.,e+-]+)", stated))
    table = frame_with(at, "95 % margin")
    screen_regions = table["95 % margin"].to_numpy(dtype=float)

    files = R.page_downloads(at, downloads)
    with zipfile.ZipFile(io.BytesIO(files[f"{MECH}_release.zip"])) as z:
        tif, parquet, csv = (z.read(n) for n in ("heatmap.tif", "heatmap.parquet", "regions.csv"))
    report = _report_rows(files[f"{MECH}_release_report.html"].decode())

    # the GeoTIFF's second band: every cell's margin (row 0 the north edge)
    with rasterio.open(io.BytesIO(tif)) as src:
        band = src.read(2).astype(np.float64)
        band[band == src.nodata] = np.nan
    band = band[::-1]  # back to [iy, ix], south first
    med_cells, worst_cells = _summary(band)
    assert (_3sf(med_cells), _3sf(worst_cells)) == (med_screen, worst_screen)
    cells_row = report["each cell's estimate"]
    assert cells_row[:2] == pytest.approx((med_cells, worst_cells), rel=5e-4)  # 4 significant digits
    assert cells_row[2] == pytest.approx(np.nanmax(band), rel=5e-4)

    # the GeoParquet: each of its cells' margins, the band's at that cell
    gp = gpd.read_parquet(io.BytesIO(parquet))
    got = gp["margin95"].astype("float64").to_numpy()
    want = band[gp["iy"].to_numpy(), gp["ix"].to_numpy()]
    assert len(gp) > 0 and np.allclose(got, want, rtol=1e-6, equal_nan=True)

    # regions.csv: the screen's regional margins, region by region, and the report's regional row
    regions = pd.read_csv(io.BytesIO(csv), comment="#")
    assert len(regions) == len(screen_regions) > 10
    assert np.allclose(regions["margin95"].to_numpy(dtype=float), screen_regions, equal_nan=True)
    region_row = next(v for k, v in report.items() if k.startswith("each region's estimate"))
    assert region_row[:2] == pytest.approx(_summary(screen_regions), rel=5e-4)
    assert all(math.isfinite(v) for v in (*cells_row, *region_row))
