"""What a talk's audience reads on the pages, in AppTest: the Attributes page says before Run when a dataset has no
attribute for its mechanisms (and Run stays off); the Data page states an upload's region in the words of the
release manifest; the two seeds are named for what they seed; the baselines toggle says what is true of the
ledger in each mode; an upload on a local grid is read once its CRS is typed in the sidebar."""

from __future__ import annotations

from tests.support.app import open_app, texts, unescaped
from tests.support.files import PARIS, UTM36_KM, burkitt_csv, cloud, csv


def upload(at, name: str, data: bytes):
    at.sidebar.selectbox(key="cfg.ds").set_value("__upload__").run()
    at.sidebar.file_uploader(key="upload_file").upload(name, data, "text/csv")
    return at.run()


def test_attributes_says_before_run_that_a_file_without_a_value_column_has_nothing_to_run():
    at = upload(open_app("attributes"), "cases.csv", csv(cloud(PARIS)))
    assert at.sidebar.selectbox(key="cfg.ds").value.startswith("upload:")
    said = " ".join(unescaped(i.value) for i in at.info)
    assert "cases.csv has no numeric attribute" in said and "column named value" in said
    assert at.button(key="run_attributes").disabled  # nothing that would fail after Run


def test_attributes_runs_on_a_dataset_that_has_the_attribute():
    at = open_app("attributes")  # the synthetic city carries an age
    assert not any("no numeric attribute" in unescaped(i.value) for i in at.info)
    assert not at.button(key="run_attributes").disabled


def test_the_data_page_states_an_uploads_region_as_the_manifest_does():
    from engine.run.execution import REGION_FROM_DATA

    at = upload(open_app("data"), "cases.csv", csv(cloud(PARIS)))
    table = at.table[0].value
    frame = table.loc["Frame of the maps"].iloc[0]
    assert frame.startswith("the locations' bounding box rounded outward to a ") and frame.endswith("° grid")
    warned = " ".join(unescaped(w.value) for w in at.warning)
    assert f"the region: {frame}, {REGION_FROM_DATA}" in warned
    assert "own bounding box" not in texts(at)  # the exact box is never the region


def test_the_two_seeds_are_named_for_what_they_seed():
    at = open_app()
    labels = [w.label for w in at.sidebar.number_input]
    assert "City seed" in labels and "Noise seed" in labels and "Seed" not in labels
    city = next(w for w in at.sidebar.number_input if w.label == "City seed")
    assert "city" in city.help and "not the noise" in city.help


def test_the_baselines_toggle_says_what_the_ledger_does_in_each_mode():
    at = open_app()
    toggle = next(t for t in at.toggle if t.key == "explore.baselines")
    assert "never count against the dataset's limit" in toggle.help and not toggle.disabled
    assert "counted in the ledger" not in toggle.help
    release = open_app(mode="release")
    toggle = next(t for t in release.toggle if t.key == "explore.baselines")
    assert toggle.disabled and toggle.help.startswith("Evaluate mode only")


def test_an_upload_on_a_local_grid_is_read_once_its_crs_is_typed():
    at = upload(open_app(), "burkitt.csv", burkitt_csv())
    said = " ".join(unescaped(e.value) for e in at.sidebar.error)
    assert "not longitude and latitude in degrees" in said and "mix units" not in said
    at.sidebar.text_input(key="upload_crs").input(UTM36_KM).run()
    assert at.sidebar.selectbox(key="cfg.ds").value.startswith("upload:")
    assert not at.sidebar.error and not any("look wrong" in unescaped(w.value) for w in at.warning)


def test_a_shapefile_of_regions_without_its_prj_is_read_once_its_crs_is_typed(tmp_path):
    from tests.support.app import click_run
    from tests.support.files import km_squares_shapefile

    at = upload(open_app(mech="identity", baselines="0", eps="1", seed="0"), "burkitt.csv", burkitt_csv())
    at.sidebar.text_input(key="upload_crs").input(UTM36_KM).run()
    click_run(at, "explore")
    at.segmented_control(key="regions.kind").set_value("Your polygons").run()
    at.file_uploader(key="regions.file").set_value(
        ("districts.zip", km_squares_shapefile(tmp_path), "application/zip")
    ).run()
    said = " ".join(unescaped(e.value) for e in at.error)
    assert "no .prj" in said and "regions' CRS field" in said
    at.text_input(key="regions.crs").input(UTM36_KM).run()
    assert not at.error, [e.value for e in at.error]
    table = next(d.value for d in at.dataframe if "estimate" in d.value.columns)
    assert sorted(table["id"]) == ["NE", "NW", "SE", "SW"] and table["true"].sum() == 300
