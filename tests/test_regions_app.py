"""Regions on Explore and Compare (AppTest): the control, the regional maps (a polygon layer per map on the
shared colour scale, coloured, outlined, hovering estimate ± 95 % margin and the true count in Evaluate),
the table and the downloads; an uploaded polygon file read and weighed once, not again on a rerun. The upload
with its column pickers, drawn, is in tests/test_browser_regions.py."""

from __future__ import annotations

import json
import re

from tests.support.app import click_run, open_app, texts


def region_decks(at, prefix: str) -> list[dict]:
    out = []
    for c in at.get("deck_gl_json_chart"):
        spec = json.loads(c.proto.json)
        out += [la for la in spec.get("layers", []) if re.fullmatch(rf"{prefix}_\d+", la.get("id", ""))]
    return out


def test_explore_draws_h3_regions_with_margins_and_truth():
    at = open_app(mech="privtree", baselines="0", eps="1", seed="0")
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("H3 hexagons").run()
    assert not at.exception, [e.value for e in at.exception]
    layers = region_decks(at, "explore")
    assert len(layers) == 2  # the true and the private regional map
    true_rows, private_rows = layers[0]["data"], layers[1]["data"]
    assert len(private_rows) > 10
    tips = [r["tip"] for r in private_rows]
    assert all("private:" in t and "true:" in t for t in tips)
    assert sum("(95 % margin)" in t for t in tips) == len(tips)  # PrivTree has a margin in every region
    # coloured on the shared scale: some regions take a colour, the outline is drawn
    assert any(r["fill"][3] > 0 for r in private_rows) and any(r["fill"][3] > 0 for r in true_rows)
    assert layers[1]["stroked"] and layers[1]["pickable"]
    body = texts(at)
    assert "regions. Margins: 95 % margin" in body
    labels = [b.label for b in at.get("download_button")]
    assert "Regions (CSV)" in labels and "Regions (GeoPackage)" in labels


def test_explore_grid_regions_of_a_mechanism_without_margin_say_so():
    at = open_app(mech="ag", baselines="0", eps="1", seed="0")
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("Grid cells").run()
    tips = [r["tip"] for r in region_decks(at, "explore")[1]["data"]]
    assert tips and all("no margin" in t for t in tips)
    assert "no closed form" in texts(at)


def test_compare_draws_each_mechanism_over_the_same_regions():
    at = open_app("compare", mechs="identity,ug", eps="1", seed="2")
    click_run(at, "compare")
    at.segmented_control(key="regions.kind").set_value("H3 hexagons").run()
    assert not at.exception, [e.value for e in at.exception]
    layers = region_decks(at, "compare")
    assert len(layers) == 3  # the truth, Identity and UG
    polygons = [[r["polygon"] for r in la["data"]] for la in layers]
    assert polygons[0] == polygons[1] == polygons[2]  # the same hexagons on every map
    fills = [[tuple(r["fill"]) for r in la["data"]] for la in layers]
    assert fills[1] != fills[2]  # two mechanisms, two estimates
    assert all("(95 % margin)" in r["tip"] for la in layers[1:] for r in la["data"])


def test_release_mode_lists_regions_without_truth():
    at = open_app(mode="release", eps="0.5", res="32", ds="snow_cholera", mech="ug")
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("H3 hexagons").run()
    assert not at.exception, [e.value for e in at.exception]
    layers = region_decks(at, "release")
    assert len(layers) == 1  # the private regional map only
    assert all("true:" not in r["tip"] and "(95 % margin)" in r["tip"] for r in layers[0]["data"])


def test_an_uploaded_polygon_file_is_not_read_or_weighed_again_on_a_rerun():
    """The file is read in the bounded child and its regions built there once for the map; a rerun of the page
    (any widget, the poller) reads the cached file and finds its regions kept, starting no child."""
    import shapely

    from engine.data.files import isolate
    from engine.run import load_dataset

    x0, y0, x1, y1 = load_dataset("synthetic:polycentric", {"n": 2000}).meta.bbox
    xm = (x0 + x1) / 2
    halves = [shapely.box(x0, y0, xm, y1), shapely.box(xm, y0, x1, y1)]
    feats = [
        {"type": "Feature", "properties": {"code": f"H{i}"}, "geometry": shapely.geometry.mapping(g)}
        for i, g in enumerate(halves)
    ]
    data = json.dumps({"type": "FeatureCollection", "features": feats}).encode()
    at = open_app(ds="synthetic:polycentric", **{"d.n": "2000"}, mech="identity", baselines="0", eps="1", seed="0")
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("Your polygons").run()
    runs = isolate.TALLY["runs"]
    at.file_uploader(key="regions.file").upload("halves.geojson", data, "application/geo+json").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [r["tip"].count("true:") for r in region_decks(at, "explore")[1]["data"]] == [1, 1]  # two halves drawn
    first = isolate.TALLY["runs"] - runs
    assert first >= 2  # read (for the column pickers, then with the columns chosen) and weighed, in children
    at.run()
    at.run()
    assert isolate.TALLY["runs"] - runs == first and len(region_decks(at, "explore")[1]["data"]) == 2


def test_an_upload_of_polygons_and_of_a_context_layer_shows_a_spinner(monkeypatch):
    """Reading the polygons, counting over them and building their maps, and reading a context layer, each
    run under a spinner (Streamlit shows it once the step has taken half a second)."""
    import streamlit

    from engine.bench.geofiles import neighbourhoods_geojson, streets_geojson
    from engine.run import load_dataset

    seen = []
    real = streamlit.spinner

    def spy(text="", *args, **kwargs):
        seen.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(streamlit, "spinner", spy)
    box = tuple(load_dataset("synthetic:polycentric", {"n": 2000}).meta.bbox)
    at = open_app(ds="synthetic:polycentric", **{"d.n": "2000"}, mech="identity", baselines="0", eps="1", seed="0")
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("Your polygons").run()
    seen.clear()
    data = neighbourhoods_geojson(n=12, box=box)
    at.file_uploader(key="regions.file").upload("areas.geojson", data, "application/geo+json").run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(region_decks(at, "explore")[1]["data"]) == 12
    assert {"Reading the polygons…", "Counting over the regions…", "Drawing the regions…"} <= set(seen), seen
    seen.clear()
    streets = streets_geojson(box=box, streets=3, avenues=1)
    at.file_uploader(key="context_file").upload("streets.geojson", streets, "application/geo+json").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Reading the context layer…" in seen, seen
