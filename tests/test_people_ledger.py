"""One ledger per set of people: the budget binds whatever file, format, session, option or door.

The ledger's key of a file is the fingerprint of the people in it (engine/run/people.py): formatting noise
(line ends, row order, trailing zeros, extra columns, the file format, user pseudonyms) keeps it, a change of
who is counted (a point moved, a person dropped, a user split) does not. Every session and the CLI share it;
another session sees its total only; a link cannot publish a release without a click.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ledger_total
from test_app import APP, SMALL, click_run, texts, wait_jobs

from engine.data.files import load_file
from engine.run import ledger
from engine.run.people import PRECISION_DEG, fingerprint_people
from engine.run.uploads import UploadStore

ROWS = [(f"u{i % 7}", 13.4 + 0.001 * i, 52.5 + 0.0007 * i, 10 + i) for i in range(40)]


def csv_of(rows, header="user_id,lon,lat,value", fmt="{:.6f}", eol="\n", extra=False, trailing=True) -> bytes:
    lines = [header + (",note" if extra else "")]
    for u, lon, lat, v in rows:
        lines.append(f"{u},{fmt.format(lon)},{fmt.format(lat)},{v}" + (",x" if extra else ""))
    return (eol.join(lines) + (eol if trailing else "")).encode()


def geoparquet_of(rows) -> bytes:
    import geopandas as gpd
    from shapely.geometry import Point

    gdf = gpd.GeoDataFrame(
        {"user_id": [r[0] for r in rows], "value": [r[3] for r in rows]},
        geometry=[Point(r[1], r[2]) for r in rows],
        crs="EPSG:4326",
    )
    buf = io.BytesIO()
    gdf.to_parquet(buf)
    return buf.getvalue()


def upload_fp(data: bytes, name: str = "f.csv", owner: str = "alice") -> str:
    """The ledger key the dashboard gives an upload of ``data`` by session ``owner``."""
    key, _ = (s := UploadStore()).add(owner, name, load_file(data, name))
    return s.get(owner, key).fingerprint


BASE = csv_of(ROWS)
SAME_PEOPLE = {
    "no trailing newline": csv_of(ROWS, trailing=False),
    "CRLF line ends": csv_of(ROWS, eol="\r\n"),
    "reversed rows": csv_of(ROWS[::-1]),
    "an extra column": csv_of(ROWS, extra=True),
    "trailing zeros": csv_of(ROWS, fmt="{:.10f}"),
    "columns reordered": "\n".join(
        ["lat,value,lon,user_id"] + [f"{la:.6f},{v},{lo:.6f},{u}" for u, lo, la, v in ROWS]
    ).encode(),
    "users renamed": csv_of([(u.replace("u", "person-"), lo, la, v) for u, lo, la, v in ROWS]),
    "another value column": csv_of([(u, lo, la, v * 3) for u, lo, la, v in ROWS]),
}


@pytest.mark.parametrize("variant", list(SAME_PEOPLE))
def test_formatting_noise_keeps_one_ledger_across_sessions(variant):
    # another session (owner) uploading a variant of the same people lands in the same ledger
    assert upload_fp(SAME_PEOPLE[variant], owner="bob") == upload_fp(BASE, owner="alice")


def test_the_same_points_as_csv_and_as_geoparquet_are_one_dataset():
    assert upload_fp(geoparquet_of(ROWS), "f.parquet", owner="bob") == upload_fp(BASE, owner="alice")


def test_other_people_are_another_ledger():
    """A hash, not a similarity: who is counted changes the key (what a determined uploader can still do)."""
    base = upload_fp(BASE)
    moved = [(u, lo + (1e-5 if i == 0 else 0), la, v) for i, (u, lo, la, v) in enumerate(ROWS)]  # ~0.7 m
    dropped = [r for r in ROWS if r[0] != "u3"]  # one person and their locations
    split = [("u99" if i == 3 else u, lo, la, v) for i, (u, lo, la, v) in enumerate(ROWS)]  # one user split
    merged = [("u0" if u == "u1" else u, lo, la, v) for u, lo, la, v in ROWS]  # two users merged
    keys = {base} | {upload_fp(csv_of(r)) for r in (moved, dropped, split, merged)}
    assert len(keys) == 5


def test_rounding_is_the_stated_precision():
    from engine.data.dataset import Dataset

    class Pts:
        user_id = None

        def __init__(self, lonlat):
            self.lonlat = np.asarray(lonlat, dtype=float)

    p = [[13.4, 52.5], [13.41, 52.51]]
    assert Dataset is not None and PRECISION_DEG == 1e-7
    # a wobble far below the precision is the same point; a step of ten times it is not
    assert fingerprint_people(Pts(p)) == fingerprint_people(Pts(np.add(p, [[3e-9, -2e-9], [0, 0]])))
    assert fingerprint_people(Pts(p)) != fingerprint_people(Pts(np.add(p, [[1e-6, 0], [0, 0]])))
    # a duplicate location without user ids is another person
    assert fingerprint_people(Pts(p)) != fingerprint_people(Pts(p + [p[0]]))
    # one location per user is the same people as a file without ids
    ids = type("WithIds", (Pts,), {})(p)
    ids.user_id = np.array([5, 9])
    assert fingerprint_people(ids) == fingerprint_people(Pts(p[::-1]))


def test_the_cli_by_path_and_an_upload_share_one_ledger(tmp_path):
    path = tmp_path / "people.csv"
    path.write_bytes(SAME_PEOPLE["CRLF line ends"])
    assert ledger.fingerprint_source("file", {"path": str(path)}) == upload_fp(BASE)
    # the attribute read does not change the people; the user id column does
    assert ledger.fingerprint_source("file", {"path": str(path), "value": "value"}) == upload_fp(BASE)
    assert ledger.fingerprint_source("file", {"path": str(path), "user_id": "value"}) != upload_fp(BASE)


def test_dataset_options_that_do_not_select_people_share_one_ledger():
    fs = ledger.fingerprint_source
    assert fs("snow_cholera", {"unit": "address"}) == fs("snow_cholera", {"unit": "death"}) == fs("snow_cholera", {})
    assert fs("berlin_airbnb", {"value": "accommodates"}) == fs("berlin_airbnb", {})
    assert fs("gowalla:san_francisco", {"url": "http://127.0.0.1:1/mirror.gz", "path": "/x.gz"}) == fs(
        "gowalla:san_francisco", {}
    )
    assert fs("gowalla:san_francisco", {"start": "2010-01-01"}) != fs(
        "gowalla:san_francisco", {}
    )  # a time window selects people
    assert fs("sf_cabs", {"path": "/x.npy"}) == fs("sf_cabs", {})
    hdx = next(k for k in _sources() if k.startswith("hdx:"))
    assert fs(hdx, {"url": "http://127.0.0.1:1/r.tif"}) == fs(hdx, {}) != fs(hdx, {"seed": 3})
    s = "synthetic:monocentric"
    assert fs(s, {"n": 1000}) != fs(s, {"n": 1001}) and fs(s, {"seed": 1}) != fs(s, {})


def _sources():
    from engine.data.registry import sources
    from engine.mechanisms import load_all

    load_all()
    return sources()


def test_every_option_not_selecting_people_is_one_of_the_sources_own():
    """A declaration naming an option a source does not have would silently declare nothing."""
    for key, src in _sources().items():
        names = {p.name for p in src.params}
        assert set(src.extra.get("not_people", ())) <= names, key


# ------------------------------------------------------------------ the dashboard
def _session(**qp):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({**SMALL, **qp})
    at.run()
    return at


def _upload(at, name: str, data: bytes) -> str:
    at.sidebar.selectbox(key="cfg.ds").set_value("__upload__").run()
    at.sidebar.file_uploader(key="upload_file").set_value((name, data, "text/csv")).run()
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    return at.sidebar.selectbox(key="cfg.ds").value


def _meter(at) -> str:
    return " ".join(p.proto.text for p in at.get("progress"))


def _rows(at) -> int:
    return sum(len(df.value) for df in at.dataframe)


def test_two_sessions_uploading_the_same_people_see_one_ledger(monkeypatch):
    monkeypatch.setenv("HEATMAP_RELEASE_LIMIT", "1.0")
    a = _session(mode="release", eps="0.6", res="32")
    _upload(a, "clinic_patients.csv", BASE)
    click_run(a, "explore")
    b = _session(mode="release", eps="0.6", res="32")
    _upload(b, "probe.csv", SAME_PEOPLE["reversed rows"])  # another session, another file, the same people
    assert "all sessions: **0.6** of the limit 1" in _meter(b)
    # of another session's runs, B sees the total only: no file name, no run
    body = texts(b)
    assert "clinic_patients" not in body and "1 release of the same people made elsewhere" in body
    assert _rows(b) == 0
    b.button(key="run_explore").click().run()
    assert any("Refused" in e.value for e in b.error)  # 0.6 + 0.6 > 1: the limit binds across sessions
    # a reload (a new session) of A's own file is the same ledger too
    c = _session(mode="release", eps="0.3", res="32")
    _upload(c, "clinic_patients.csv", BASE)
    click_run(c, "explore")
    fp = upload_fp(BASE)
    assert ledger.BudgetStore().spent(fp) == pytest.approx(0.9)
    assert _rows(c) >= 1  # its own release is listed to it


def test_a_cli_release_and_a_dashboard_upload_share_one_ledger(tmp_path):
    path = tmp_path / "people.csv"
    path.write_bytes(BASE)
    args = ["release", "--dataset", "file", "--data-opt", f"path={path}", "--depth", "4", "--epsilon", "0.4"]
    p = subprocess.run(
        [sys.executable, "-m", "engine", *args, "--out", str(tmp_path / "out")], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["dataset_fingerprint"] == upload_fp(BASE)
    a = _session(mode="release", eps="0.5", res="32")
    _upload(a, "mine.geo.parquet", geoparquet_of(ROWS))
    assert "all sessions: **0.4**" in _meter(a)


def test_a_release_link_with_run_1_does_not_publish_without_a_click():
    # a configuration no other test releases: the board shows a release already drawn again, unbooked
    at = _session(mode="release", eps="0.7", res="32", run="1", **{"d.n": "2900"})
    wait_jobs(at)
    assert ledger_total("synthetic:polycentric", {"n": 2900}) == 0.0
    assert "press Run to publish the release" in texts(at)
    assert not [c for c in at.get("deck_gl_json_chart") if "release_private_heat" in c.proto.json]
    click_run(at, "explore")  # the click does
    assert ledger_total("synthetic:polycentric", {"n": 2900}) == pytest.approx(0.7)
