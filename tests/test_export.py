"""Exports of a run (exports a GIS user can open): the PNG figure, the GeoTIFF,
the GeoJSON of non-empty cells, the stamped JSON record and the self-contained HTML report,
and their download buttons."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from dataclasses import replace
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from engine.core.grid import Domain
from engine.data.projection import local_crs, to_lonlat
from engine.run import RunConfig, run
from ui import explain, export, report
from ui.colors import ColourScale, lut

CRS = local_crs((13.30, 52.45, 13.50, 52.60))  # an aeqd CRS like every dataset's


def _box(im: Image.Image, key: str) -> tuple[int, int, int, int]:
    return tuple(int(v) for v in im.text[key].split(","))


def _png(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    assert im.format == "PNG"
    return im


@pytest.fixture(scope="module")
def synthetic_run():
    return run(RunConfig(dataset="synthetic:polycentric", dataset_options={"n": 5000}, mechanism="identity", depth=6))


@pytest.fixture(scope="module")
def snow_run():
    return run(RunConfig(dataset="snow_cholera", mechanism="ug", epsilon=1.0, depth=6))


def _scale(truth, domain, cmap="viridis") -> ColourScale:
    return ColourScale.shared(truth, domain.cell**2 / 1e6, cmap=cmap)


# --------------------------------------------------------------------------- PNG
@pytest.mark.parametrize("cmap", ["viridis", "magma"])
def test_png_map_places_one_hot_cell_and_draws_the_ramp(cmap):
    dom = Domain(-1000.0, -500.0, 2048.0, 5)  # 32 x 32 cells of 64 m
    grid = np.zeros((32, 32))
    grid[0, 31] = 40.0  # the south-east cell (row 0 is the south edge)
    grid[5, 3] = -7.0  # a negative estimate: drawn as empty
    scale = _scale(grid, dom, cmap)
    im = _png(export.map_png(grid, scale, dom, title="Private map: test · ε = 1", attribution="Data: test."))
    assert im.text["Title"] == "Private map: test · ε = 1" and im.text["Source"] == "Data: test."
    x0, y0, x1, y1 = _box(im, "map_box")
    assert x1 - x0 == y1 - y0 == 512  # 32 cells of 16 pixels
    assert im.size[0] == x1 - x0 + 2 * export.PAD and im.size[1] > y1
    rgb = np.asarray(im.convert("RGB"))
    area = rgb[y0:y1, x0:x1]
    coloured = np.argwhere((area != export.EMPTY).any(axis=2))
    # exactly the bottom-right 16 x 16 block, in the cell's colour from the scale
    assert len(coloured) == 16 * 16
    assert coloured.min(axis=0).tolist() == [512 - 16, 512 - 16] and coloured.max(axis=0).tolist() == [511, 511]
    expected = lut(cmap, 255)[int(scale.index(np.array([40.0]))[0]) - 1]
    assert (area[-1, -1] == expected).all()

    lx0, ly0, lx1, ly1 = _box(im, "legend_box")
    assert ly0 > y1  # below the map
    strip = rgb[(ly0 + ly1) // 2, lx0:lx1]
    ramp = lut(cmap, 255)
    index = {tuple(c): i for i, c in enumerate(ramp.tolist())}
    idx = [index.get(tuple(c)) for c in strip.tolist()]
    assert None not in idx  # every pixel of the strip is a colour of the scale
    assert idx[0] == 0 and idx[-1] == 254 and all(b >= a for a, b in zip(idx, idx[1:]))


def test_png_of_an_empty_or_negative_release_draws_no_colour():
    dom = Domain(0.0, 0.0, 1000.0, 4)
    scale = _scale(np.ones((16, 16)), dom)
    for grid in (np.zeros((16, 16)), -np.ones((16, 16))):
        im = _png(export.map_png(grid, scale, dom))
        x0, y0, x1, y1 = _box(im, "map_box")
        area = np.asarray(im.convert("RGB"))[y0:y1, x0:x1]
        assert (area == export.EMPTY).all()


def test_png_scale_bar_is_a_round_number_of_metres_to_scale():
    assert export.nice_length(512.0) == 500 and export.nice_length(0.3) == 0.2 and export.nice_length(7.5e4) == 5e4
    dom = Domain(0.0, 0.0, 2048.0, 5)
    im = _png(export.map_png(np.ones((32, 32)), _scale(np.ones((32, 32)), dom), dom))
    rgb = np.asarray(im.convert("RGB"))
    _, _, _, y1 = _box(im, "map_box")
    _, ly0, _, _ = _box(im, "legend_box")
    band = (rgb[y1 + 2 : ly0, export.PAD :] == export.INK).all(axis=2)
    runs = [int(np.argmin(np.append(row, False))) for row in band]  # dark pixels from the left edge
    assert max(runs) == round(500 / 2048 * 512) + 1  # a 500 m bar, its end pixels included


def test_release_png_has_title_attribution_and_a_visible_map(synthetic_run):
    r = synthetic_run
    scale = _scale(r.truth, r.release.domain)
    im = _png(export.release_png(r, scale))
    assert "Identity" in im.text["Title"] and f"ε = {r.release.ledger.total():g}" in im.text["Title"]
    assert r.dataset_meta.citation in im.text["Source"] and "Private release by Identity" in im.text["Source"]
    x0, y0, x1, y1 = _box(im, "map_box")
    area = np.asarray(im.convert("RGB"))[y0:y1, x0:x1]
    assert (area != export.EMPTY).any(axis=2).mean() > 0.01


def test_title_states_the_spent_epsilon_in_the_mechanisms_unit():
    r = run(
        RunConfig(dataset="synthetic:polycentric", dataset_options={"n": 300}, mechanism="geoind_kde", depth=4),
        use_cache=False,
    )
    assert export.release_title(r).endswith(f"ε = {r.release.ledger.total():g} per km")  # the default unit
    r = run(RunConfig(dataset="synthetic:polycentric", dataset_options={"n": 300}, mechanism="nonprivate_level"))
    assert "not private" in export.release_title(r) and "Non-private reference" in export.attribution(r)


# ----------------------------------------------------------------------- GeoTIFF
def test_geotiff_has_the_domains_crs_bounds_cell_and_orientation():
    import pyproj
    from rasterio.crs import CRS as RCRS
    from rasterio.io import MemoryFile

    dom = Domain(1234.5, -6789.25, 5000.0, 4)  # 16 x 16 cells of 312.5 m
    rng = np.random.default_rng(7)
    grid = rng.normal(0.0, 1.0, (16, 16))  # negative estimates included
    grid[1, 2] = 1000.0  # one hot cell: second row from the south, third column from the west
    with MemoryFile(export.geotiff_grid(grid, dom, CRS, {"title": "t"})) as mf, mf.open() as src:
        assert src.crs == RCRS.from_proj4(CRS)
        assert pyproj.CRS.from_wkt(src.crs.to_wkt()).equals(pyproj.CRS.from_proj4(CRS))
        assert np.allclose(tuple(src.bounds), dom.bounds, rtol=0, atol=1e-6)
        assert src.transform.a == pytest.approx(dom.cell) and src.transform.e == pytest.approx(-dom.cell)
        assert src.dtypes == ("float32",) and src.nodata is None and src.tags()["title"] == "t"
        band = src.read(1)
        np.testing.assert_array_equal(band, grid[::-1].astype(np.float32))  # north up
        r, c = np.unravel_index(np.argmax(band), band.shape)
        t = src.transform
        hot = (t.c + c * t.a, t.f + (r + 1) * t.e, t.c + (c + 1) * t.a, t.f + r * t.e)  # left, bottom, right, top
        want = (dom.x0 + 2 * dom.cell, dom.y0 + dom.cell, dom.x0 + 3 * dom.cell, dom.y0 + 2 * dom.cell)
        assert np.allclose(hot, want, rtol=0, atol=1e-6)
        # a GIS puts the corners where the workbench does
        ll = pyproj.Transformer.from_crs(src.crs.to_wkt(), 4326, always_xy=True).transform(dom.x0, dom.y0)
        assert np.allclose(ll, to_lonlat(np.array([dom.x0]), np.array([dom.y0]), CRS)[0], atol=1e-9)


def test_geotiff_marks_missing_estimates_as_nodata():
    from rasterio.io import MemoryFile

    dom = Domain(0.0, 0.0, 400.0, 2)
    grid = np.arange(16.0).reshape(4, 4)
    grid[3, 0] = np.nan
    with MemoryFile(export.geotiff_grid(grid, dom, CRS)) as mf, mf.open() as src:
        assert np.isnan(src.nodata)
        masked = src.read(1, masked=True)
        assert masked.mask.sum() == 1 and masked.mask[0, 0]  # north-west corner
    with pytest.raises(ValueError, match="does not fit"):
        export.geotiff_grid(np.zeros((8, 8)), dom, CRS)


def test_release_geotiff_of_a_run_matches_its_domain(synthetic_run):
    from rasterio.io import MemoryFile

    from ui.views import dataset

    r = synthetic_run
    crs = dataset(r.config).crs
    with MemoryFile(export.release_geotiff(r, crs)) as mf, mf.open() as src:
        assert np.allclose(tuple(src.bounds), r.release.domain.bounds, rtol=0, atol=1e-6)
        np.testing.assert_allclose(src.read(1)[::-1], r.release.density.astype(np.float32))
        assert src.tags()["title"] == export.release_title(r)


# ----------------------------------------------------------------------- GeoJSON
def test_geojson_keeps_and_flags_negative_cells_and_drops_zero_ones():
    dom = Domain(-800.0, -800.0, 1600.0, 3)
    grid = np.zeros((8, 8))
    grid[0, 0], grid[2, 5], grid[7, 7], grid[4, 4] = 3.5, -2.25, 1e-3, np.nan
    fc = json.loads(export.geojson_grid(grid, dom, CRS))
    props = {(f["properties"]["iy"], f["properties"]["ix"]): f for f in fc["features"]}
    assert set(props) == {(0, 0), (2, 5), (7, 7)}
    neg = props[(2, 5)]["properties"]
    assert neg["negative"] is True and neg["value"] == -2.25
    assert props[(0, 0)]["properties"]["negative"] is False and props[(0, 0)]["properties"]["value"] == 3.5
    assert neg["per_km2"] == pytest.approx(-2.25 / (dom.cell**2 / 1e6))
    ring = np.array(props[(2, 5)]["geometry"]["coordinates"][0])
    corners = to_lonlat(
        np.array([dom.x0 + 5 * dom.cell, dom.x0 + 6 * dom.cell]), np.array([dom.y0 + 2 * dom.cell] * 2), CRS
    )
    assert np.allclose(ring[0], corners[0], atol=1e-6) and np.allclose(ring[3], corners[1], atol=1e-6)
    assert np.allclose(ring[0], ring[-1])


# --------------------------------------------------------------------- JSON record
def test_json_record_is_stamped_as_evaluation(synthetic_run):
    d = json.loads(export.record_json(synthetic_run, "?x=1"))
    assert d["evaluation"] == "contains non-private information about the data" == export.EVALUATION
    assert d["metrics"] and d["url"] == "?x=1"


# ------------------------------------------------------------------------ report
class _Refs(HTMLParser):
    """Every tag and every attribute that can load something."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []  # (tag, attribute, value)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "srcset", "data", "action", "poster", "background") or k.startswith("on"):
                self.refs.append((tag, k, v or ""))


LINK = "http://127.0.0.1:8501/explore?dataset=x&mechanism=ug&run=1"


def _check_offline(doc: str, link: str, allowed_text_urls=()) -> _Refs:
    p = _Refs()
    p.feed(doc)
    assert "script" not in p.tags and "link" not in p.tags and "iframe" not in p.tags and "object" not in p.tags
    assert not re.search(r"url\(|@import", doc, re.I)  # nothing loaded from CSS either
    for tag, attr, value in p.refs:
        if tag == "img" and attr == "src":
            assert value.startswith("data:image/png;base64,")
        else:
            assert (tag, attr, value) == ("a", "href", link)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html.unescape(doc)))
    assert urls <= {link, *allowed_text_urls}
    return p


def _images(doc: str) -> list[Image.Image]:
    return [_png(base64.b64decode(m)) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', doc)]


def test_report_is_self_contained_with_maps_metrics_ledger_and_stamp(snow_run):
    r = snow_run
    scale = _scale(r.truth, r.release.domain)
    doc = report.html_report(r, scale, LINK)
    # the dataset's citation names its web page as text (not a link): the only http(s) text allowed
    cited = re.findall(r"https?://[^\s\"'<>)]+", r.dataset_meta.citation)
    _check_offline(doc, LINK, cited)
    assert doc.count(f'href="{html.escape(LINK)}"') == 1
    imgs = _images(doc)
    assert len(imgs) == 3  # true map, private map, legend
    titles = [im.text.get("Title", "") for im in imgs]
    assert "True map (the sensitive input)" in titles and export.release_title(r) in titles
    assert "Evaluation: contains non-private information about the data" in doc
    text = html.unescape(doc)
    for k in r.metrics:
        label, expl, _, _ = explain.info(k)
        assert f"<b>{label}</b>" in text and expl in text
    for e in r.release.ledger.entries:
        assert e.step in doc
    assert "Total ε = 1" in doc and r.dataset_meta.license in doc
    assert r.config.key() in doc and "python -m engine run --dataset snow_cholera --mechanism ug" in doc
    # UG's release states its noise in closed form: the report gives each cell's margin, and only that
    assert "Margins of error" in doc and [m["name"] for m in report.margin_rows(r.release)] == ["each cell's estimate"]


def test_report_of_synthetic_data_has_no_url_but_the_link(synthetic_run):
    doc = report.html_report(synthetic_run, _scale(synthetic_run.truth, synthetic_run.release.domain), LINK)
    _check_offline(doc, LINK)
    assert "synthetic" in doc


def test_report_escapes_the_data_and_shows_the_margins_the_files_carry(synthetic_run):
    from engine.regions.margins import LAPLACE95, grid_margin

    r = synthetic_run
    meta = replace(r.dataset_meta, name='<script src="http://evil.example/x.js"></script>', description="<b>x</b>")
    doc = report.html_report(replace(r, dataset_meta=meta), _scale(r.truth, r.release.domain), "")
    p = _Refs()
    p.feed(doc)
    assert "script" not in p.tags and not any(t == "a" for t, _, _ in p.refs)  # no link without a link given
    assert "&lt;script" in doc and "&lt;b&gt;x&lt;/b&gt;" in doc
    # identity: every cell one Laplace(1/eps) draw, so every margin is 2.118 x sqrt(2) / eps, the GeoTIFF's too
    m = grid_margin(r.release)
    assert np.allclose(m, LAPLACE95 * np.sqrt(2.0) / r.config.epsilon)
    assert "Margins of error" in doc and "each cell&#39;s estimate" in doc
    assert doc.count(f"± {float(m[0, 0]):.4g}<") == 3  # median, worst tenth and largest


def test_the_release_report_is_a_page_of_the_run_reports_templates_and_escapes_what_users_name(synthetic_run):
    """One template set, one look: the release report has the run report's head (its stylesheet inline), opens
    offline like it, and writes the names a user gives (the dataset's, a region's) as text, never as markup."""
    from engine.data.region_geometry import build
    from engine.regions import regional_report
    from ui.release import release_report

    bad = '<script src="http://evil.example/x.js"></script>'
    r = replace(synthetic_run, dataset_meta=replace(synthetic_run.dataset_meta, name=bad))
    regions = build("grid", r.release.domain, r.crs)
    regions = replace(regions, names=(bad, *regions.names[1:]))
    scale = _scale(r.truth, r.release.domain)
    page = release_report(r, scale, regional_report(r, regions))

    def head(doc: str) -> str:  # the head but its title
        before, after = doc.split("<title>", 1)
        return before + after.split("</title>", 1)[1].split("<body>", 1)[0]

    assert head(page) == head(report.html_report(r, scale, ""))
    _check_offline(page, "", ["http://evil.example/x.js"])
    for section in ("<h2>Dataset</h2>", "<h2>Regions</h2>"):
        table = page.split(section, 1)[1].split("</table>", 1)[0]
        assert "<script" not in table and bad in html.unescape(table), section


def test_report_of_an_uploaded_file_has_no_command_line(synthetic_run):
    cfg = replace(synthetic_run.config, dataset="upload:abc")
    assert report.cli_command(cfg) is None
    assert report.cli_command(synthetic_run.config).startswith("python -m engine run --dataset synthetic:polycentric")


# --------------------------------------------------------------------- buttons
def _export_page():
    import streamlit as st

    from engine.run import RunConfig, run
    from ui import maps, views
    from ui.colors import ColourScale

    cfg = RunConfig(dataset="synthetic:polycentric", dataset_options={"n": 2000}, mechanism="identity", depth=5)
    res = run(cfg)
    fr = maps.Frame(res.release.domain, views.dataset(cfg).crs)
    scale = ColourScale.shared(res.truth, res.release.domain.cell**2 / 1e6)
    views.export_block(res, scale, fr, "?mechanism=identity", views.stem(cfg))
    st.write("done")


def test_export_block_offers_every_export_lazily():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_export_page, default_timeout=60).run()
    assert not at.exception
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == [
        "Private map (PNG)",
        "Grid (GeoTIFF)",
        "Grid (GeoParquet)",
        "Grid (CSV)",
        "Metrics + config (JSON)",
        "Report (HTML)",
    ]
    assert "non-private information" in " ".join(c.value for c in at.caption)
