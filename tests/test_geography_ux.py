"""Geography offline and what a new user tripped over, in AppTest and on the functions behind them: the
location check of an upload (at sea, swapped), the column picker, a dataset switch, hover units, range
clicks, the release's figure and report, plain words in exports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.data import geography
from tests.support.app import charts, click_run, open_app, texts, unescaped
from tests.support.files import PARIS, cloud, csv


# ------------------------------------------------------------------ the gazetteer and the land mask
def test_location_check_tells_a_city_from_its_swapped_and_sea_copies():
    ok = geography.location_check(cloud(PARIS))
    assert not ok.suspicious and ok.message() is None and ok.far_km < 20
    swapped = geography.location_check(cloud(PARIS)[:, ::-1])  # lon 48.9, lat 2.4: the Indian Ocean
    assert swapped.suspicious and swapped.looks_swapped and "swapped" in swapped.message()
    sea = geography.location_check(cloud((-30.0, 40.0)))  # mid-Atlantic; swapped, still at sea
    assert sea.suspicious and not sea.looks_swapped and "at sea" in sea.message()


def test_places_within_john_snows_square_name_soho_offline():
    from engine.data.builtin import load_snow

    names = [p[0] for p in geography.places_within(*load_snow().meta.bbox)]
    assert "Soho" in names
    # the most populous first, none on top of another
    berlin = geography.places_within(13.0, 52.3, 13.8, 52.7, limit=5)
    assert berlin[0][0] == "Berlin" and len(berlin) == 5


# ------------------------------------------------------------------ uploads
def test_an_upload_without_coordinate_columns_gets_a_column_picker():
    at = open_app()
    at.sidebar.selectbox(key="cfg.ds").set_value("__upload__").run()
    at.sidebar.file_uploader(key="upload_file").upload("mine.csv", csv(cloud(PARIS), ("east", "north")), "text/csv")
    at.run()
    msg = " ".join(unescaped(e.value) for e in at.sidebar.error)
    assert "Pick them below" in msg and "columns={" not in msg  # words, not a Python expression
    at.sidebar.selectbox(key="upload_pick_lon").set_value("east")
    at.sidebar.selectbox(key="upload_pick_lat").set_value("north")
    at.sidebar.button(key="upload_pick_go").click().run()
    assert at.sidebar.selectbox(key="cfg.ds").value.startswith("upload:")
    assert not at.sidebar.error
    click_run(at, "explore")
    assert "explore_private_heat" in charts(at)


def test_a_swapped_upload_is_warned_before_any_run_and_one_click_swaps_it():
    at = open_app()
    at.sidebar.selectbox(key="cfg.ds").set_value("__upload__").run()
    at.sidebar.file_uploader(key="upload_file").upload("swapped.csv", csv(cloud(PARIS)[:, ::-1]), "text/csv")
    at.run()
    warned = [unescaped(w.value) for w in at.warning if "look swapped" in unescaped(w.value)]
    assert warned and "computed in" not in texts(at)
    first = at.sidebar.selectbox(key="cfg.ds").value
    swap = next(b for b in at.sidebar.button if b.key and b.key.startswith("geoswap_"))
    swap.click().run()
    now = at.sidebar.selectbox(key="cfg.ds").value
    assert now.startswith("upload:") and now != first
    assert not any("look swapped" in unescaped(w.value) for w in at.warning)


# ------------------------------------------------------------------ Explore
def test_switching_dataset_clears_the_previous_maps_and_banner():
    at = open_app(ds="snow_cholera", mech="identity", baselines="0", eps="1")
    click_run(at, "explore")
    assert "explore_private_heat" in charts(at) and "computed in" in texts(at)
    at.sidebar.selectbox(key="cfg.ds").set_value("berlin_airbnb").run()
    assert "explore_private_heat" not in charts(at)
    assert "computed in" not in texts(at) and "showing the previous result" not in texts(at)


def test_hover_and_legend_use_the_datasets_unit_and_say_95_percent():
    at = open_app(ds="snow_cholera", mech="identity", baselines="0", eps="1")
    click_run(at, "explore")
    spec = json.loads(charts(at)["explore_private_heat"])
    tip = json.loads(at.get("deck_gl_json_chart")[0].proto.tooltip)["html"]
    assert "deaths" in tip and "95 %" in tip and "locations" not in tip
    assert "deaths per km²" in texts(at)
    ids = [layer["id"] for layer in spec["layers"]]
    # geography on both squares: coordinates, place names, scale bars, Snow's streets and pumps
    for want in ("explore_coords", "explore_places", "explore_private_places", "explore_private_scalelabel"):
        assert want in ids, (want, ids)
    assert "explore_true_ctxlines" in ids and "explore_true_ctxpoints" in ids
    assert ids.index("explore_true_ctxlines") < ids.index("explore_true_heat")  # the context under the heatmap
    places = next(layer for layer in spec["layers"] if layer["id"] == "explore_places")
    assert "Soho" in [d["t"] for d in places["data"]]


def test_the_map_views_swipe_and_difference_render():
    at = open_app(ds="snow_cholera", mech="privtree", baselines="0", eps="1")
    click_run(at, "explore")
    at.segmented_control(key="explore.mapview").set_value("diff").run()
    assert not at.exception
    assert "explore_diff" in "".join(charts(at))
    assert any("private − true" in (h.proto.body or "") for h in at.get("html"))


# ------------------------------------------------------------------ range queries
def test_each_click_on_the_range_map_adds_its_cell():
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st

        from ui import ranges, state

        cells = {"a": [0.0, 0.0, 0.1, 0.1], "b": [0.3, 0.2, 0.4, 0.3]}
        for name in st.session_state.get("clicks", []):
            st.session_state["ranges_map"] = {"selection": {"objects": {"pick": [{"km": cells[name]}]}}}
            ranges.on_pick("ranges_map")
        st.session_state["clicks"] = []
        st.write(repr((state.get("rq.x"), state.get("rq.y"))))

    at = AppTest.from_function(script)
    at.session_state["clicks"] = ["a"]
    at.run()
    assert at.markdown[-1].value == repr(((0.0, 0.1), (0.0, 0.1)))
    at.session_state["clicks"] = ["b"]  # a second click (the chart's selection now holds only b)
    at.run()
    assert at.markdown[-1].value == repr(((0.0, 0.4), (0.0, 0.3)))


# ------------------------------------------------------------------ release
def test_release_offers_the_png_and_a_report_of_dp_outputs_only():
    at = open_app(mode="release", eps="0.7", res="16")  # a release of its own (another test books eps 0.5)
    click_run(at, "explore")
    labels = [str(b.proto.label) for b in at.get("download_button")]
    assert any("Publication figure (PNG)" in s for s in labels) and any("Release report" in s for s in labels)

    from engine.run import RunConfig, run
    from ui.colors import ColourScale
    from ui.release import release_report

    res = run(RunConfig(dataset_options={"n": 3000}, depth=5, epsilon=0.5, mode="release"))
    dens = np.clip(res.release.density, 0, None)
    page = release_report(res, ColourScale.shared(dens, res.release.domain.cell**2 / 1e6))
    assert "Privacy ledger" in page and "The private map" in page
    for leak in ("True map", "true map", "Users / locations", "How good is it", "seed"):
        assert leak not in page, leak


def test_exports_and_tables_speak_plain_language():
    from engine.run import RunConfig, run
    from engine.run.execution._release_files import manifest
    from ui.report import margin_rows

    res = run(RunConfig(dataset_options={"n": 3000}, depth=5, epsilon=0.5, mode="release"))
    doc = manifest(res)
    assert doc["dataset"]["coordinates"].startswith("fictitious")
    assert [m["name"] for m in margin_rows(res.release)] == ["each cell's estimate"]


@pytest.mark.parametrize("f,spent,want", [(0.0, 5.0, "estimating"), (0.5, 10.0, "about 10 s left")])
def test_the_audit_states_the_time_left(f, spent, want, monkeypatch):
    from ui import methods

    monkeypatch.setattr(methods.time, "monotonic", lambda: 100.0 + spent)
    assert want in methods._time_left({"f": f, "t0": 100.0})


def test_maps_fit_the_window_with_the_sidebar_open_and_grow_without_it():
    from ui.mapviews import OVERHEAD, square_px
    from ui.viewport import Room

    open_1440 = square_px(Room(1076, 900, True))
    assert open_1440 + OVERHEAD <= 900  # the maps, the rows above them and the legend fit 900 px
    assert 2.06 * open_1440 <= 1076  # two squares and their gap fit the column
    assert square_px(Room(1376, 900, False)) > open_1440 + 100  # the sidebar's width goes to the maps


def test_a_context_layer_from_a_file_is_drawn_under_the_maps_and_changes_no_run():
    gj = {
        "type": "FeatureCollection",
        "features": [
            {"type": "Feature", "properties": {}, "geometry": {"type": "LineString", "coordinates": line}}
            for line in ([[-0.140, 51.511], [-0.132, 51.516]], [[-0.138, 51.510], [-0.136, 51.517]])
        ],
    }
    at = open_app(ds="snow_cholera", mech="identity", baselines="0", eps="1")
    click_run(at, "explore")
    before = [c for c in at.caption if "computed in" in c.value][0].value
    at.file_uploader(key="context_file").upload("roads.geojson", json.dumps(gj).encode(), "application/json").run()
    spec = json.loads(charts(at)["explore_true_heat"])
    lines = next(layer for layer in spec["layers"] if layer["id"] == "explore_true_ctxlines")
    assert len(lines["data"]) == 2  # the user's two roads in place of Snow's streets
    assert [c for c in at.caption if "computed in" in c.value][0].value == before  # the same run, not re-run
    assert "Settings changed" not in texts(at)
    at.file_uploader(key="context_file").upload("bad.geojson", b'{"type": "Feature"}', "application/json").run()
    assert any("bad.geojson" in unescaped(e.value) for e in at.error)


def test_a_large_context_layer_is_drawn_as_an_image_of_the_square_with_its_lines_in_place():
    """Beyond MAX_CONTEXT_VERTICES a context's lines go to the browser as one image (a browser drawing WebGL in
    software spends seconds on a path layer of 100,000 vertices): the image has the lines where they are, in
    the context's grey, on the same square as the heatmap, and a small context stays a path layer."""
    import base64
    import io

    from PIL import Image

    from engine.core.grid import Domain
    from engine.data.context import Context
    from engine.data.projection import to_lonlat
    from ui import geo, maps

    fr = maps.Frame(
        Domain(-5_000.0, -5_000.0, 10_000.0, 8), "+proj=aeqd +lat_0=51.5 +lon_0=-0.13 +datum=WGS84 +units=m"
    )
    x0, y0, x1, y1 = fr.domain.bounds
    # a straight line across the square a quarter of the way down, of more vertices than a path layer takes
    ys = y1 - 0.25 * (y1 - y0)
    xs = np.linspace(x0, x1, geo.MAX_CONTEXT_VERTICES + 1)
    line = to_lonlat(xs, np.full_like(xs, ys), fr.crs).tolist()
    big = Context("test", paths=[line])
    (layer,) = geo.context_layers(fr, big, "k")
    spec = json.loads(maps.deck([layer], fr.view()).to_json())["layers"][0]
    assert spec["@@type"] == "BitmapLayer" and spec["bounds"] == fr.corners()
    png = base64.b64decode(spec["image"].split(",", 1)[1])
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))
    side = img.shape[0]
    drawn_rows = np.flatnonzero(img[:, :, 3].max(axis=1) > 128)
    assert drawn_rows.size and abs(np.median(drawn_rows) - side / 4) <= 2  # the line a quarter down, 1-3 px thick
    assert drawn_rows.size <= 3 and (img[drawn_rows[0], side // 2, :3] == geo.CONTEXT_GREY[:3]).all()
    small = Context("test", paths=[line[:100]])
    assert [la.type for la in geo.context_layers(fr, small, "k")] == ["PathLayer"]


def test_load_context_refuses_what_is_not_geojson():
    from engine.core.errors import DataError
    from engine.data.context import load_context

    with pytest.raises(DataError, match="GeoJSON"):
        load_context(b"lon,lat\n1,2\n", "roads.csv")
    with pytest.raises(DataError, match="invalid geometry"):
        load_context(b'{"type":"Feature","geometry":{"type":"LineString","coordinates":[[1,"x"]]}}', "r.geojson")
