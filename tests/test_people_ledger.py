"""One ledger per set of people: the budget binds whatever file, format, session, option or door.

The ledger's key of a file is the fingerprint of the people in it (engine/run/bookkeeping/_people.py): formatting noise
(line ends, row order, trailing zeros, extra columns, the file format, user pseudonyms) and the copies that change
the last digits (a CSV with 6 decimals, a float32 GeoParquet) keep it; a change of who is counted (a person
dropped, a row duplicated, a user split, every location moved tens of metres) does not. Every session and the CLI
share it; another session sees its total only; a link cannot publish a release without a click.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from engine.data.files import load_file
from engine.run.bookkeeping import _ledger as ledger
from engine.run.bookkeeping._people import CELL, TOLERANCE, exact_key, fingerprint_people, ledger_keys
from engine.run.server import UploadStore
from tests.support.app import APP, SMALL, click_run, texts, wait_jobs
from tests.support.budget import ledger_total

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


def shares_ledger(a: str, b: str) -> bool:
    """Whether a release booked under fingerprint ``a`` counts in ``b``'s total, and one booked under ``b`` in
    ``a``'s (in a ledger of their own)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = ledger.BudgetStore(f"{tmp}/l.sqlite3")
        store.record(a, [ledger.Entry("ra", 1.0, "ug")])
        store.record(b, [ledger.Entry("rb", 2.0, "ug")])
        seen = (store.spent(a), store.spent(b))
    assert seen[0] in (1.0, 3.0) and seen[1] in (2.0, 3.0)
    assert (seen[0] == 3.0) == (seen[1] == 3.0), "one ledger seen from one side only"
    return seen == (3.0, 3.0)


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
    "five decimals": csv_of(ROWS, fmt="{:.5f}"),
    "one location moved 0.7 m": csv_of(
        [(u, lo + (1e-5 if i == 0 else 0), la, v) for i, (u, lo, la, v) in enumerate(ROWS)]
    ),
}


@pytest.mark.parametrize("variant", list(SAME_PEOPLE))
def test_formatting_noise_keeps_one_ledger_across_sessions(variant):
    # another session (owner) uploading a variant of the same people lands in the same ledger
    assert shares_ledger(upload_fp(SAME_PEOPLE[variant], owner="bob"), upload_fp(BASE, owner="alice"))


def test_the_same_points_as_csv_and_as_geoparquet_are_one_dataset():
    assert shares_ledger(upload_fp(geoparquet_of(ROWS), "f.parquet", owner="bob"), upload_fp(BASE, owner="alice"))


# ------------------------------------------------------------------ accidental copies
PLACES = {"London": (-0.12, 51.5), "Tokyo": (139.7, 35.7), "the antimeridian": (179.99, -16.5)}


def _people(place: str, seed: int, users: bool) -> pd.DataFrame:
    """2,000 people (or 2,000 locations of 400 people) at full float64 precision around ``place``."""
    rng = np.random.default_rng(seed)
    lon0, lat0 = PLACES[place]
    df = pd.DataFrame({"lon": lon0 + rng.normal(0, 0.03, 2000), "lat": lat0 + rng.normal(0, 0.02, 2000)})
    df["lon"] = (df["lon"] + 180.0) % 360.0 - 180.0
    if users:
        df.insert(0, "user_id", [f"p{i}" for i in rng.integers(0, 400, 2000)])
    return df


def _copies(df: pd.DataFrame, tmp_path) -> dict[str, str]:
    """The original and its copies written by pandas and geopandas, as files: {name: path}."""
    import geopandas as gpd

    out = {"original.csv": df.to_csv(index=False), "six decimals.csv": df.to_csv(index=False, float_format="%.6f")}
    paths = {}
    for name, text in out.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    f32 = df.astype({"lon": np.float32, "lat": np.float32})
    geo = gpd.GeoDataFrame(
        f32.drop(columns=["lon", "lat"]), geometry=gpd.points_from_xy(f32["lon"], f32["lat"]), crs=4326
    )
    paths["float32.geoparquet"] = tmp_path / "float32.parquet"
    geo.to_parquet(paths["float32.geoparquet"])
    paths["float32 columns.parquet"] = tmp_path / "f32cols.parquet"
    f32.to_parquet(paths["float32 columns.parquet"], index=False)
    return paths


@pytest.mark.parametrize("users", [False, True], ids=["one location each", "with user ids"])
@pytest.mark.parametrize("place", list(PLACES))
def test_a_six_decimal_csv_and_a_float32_geoparquet_copy_keep_the_ledger(place, users, tmp_path):
    """The copies are written by pandas and geopandas and read back by the upload and the CLI's readers."""
    df = _people(place, seed=len(place), users=users)
    paths = _copies(df, tmp_path)
    ups = {k: upload_fp(p.read_bytes(), p.name, owner=k) for k, p in paths.items()}
    cli = {k: ledger.fingerprint_source("file", {"path": str(p)}) for k, p in paths.items()}
    assert ups["original.csv"] == cli["original.csv"]
    # the copies really moved locations: the exact key tells them apart
    exact = {k: exact_key(load_file(p.read_bytes(), p.name)) for k, p in paths.items()}
    assert [k for k in paths if exact[k] == exact["original.csv"]] == ["original.csv"]
    for name in paths:
        assert shares_ledger(ups["original.csv"], ups[name]), name
        assert shares_ledger(ups["original.csv"], cli[name]), name


class Points:
    """What the fingerprint reads of a dataset: its locations and user ids."""

    def __init__(self, lonlat, user_id=None):
        self.lonlat, self.user_id = np.asarray(lonlat, dtype=float), user_id


def test_every_copy_within_the_tolerance_shares_the_ledger():
    """The guarantee, at its edge: every location moved by 0.99 of the tolerance in one direction (the worst a
    copy can do to the centroid), on datasets of every size and place; and the keys read stay few. (Each
    fingerprint books under its first key and reads them all: BudgetStore, shares_ledger above.)"""
    rng = np.random.default_rng(7)
    reads = []
    for _ in range(2000):
        n = int(rng.integers(1, 3000))
        lon0, lat0 = rng.uniform(-180, 180), rng.uniform(-85, 85)
        lon, lat = lon0 + rng.normal(0, 0.05, n), np.clip(lat0 + rng.normal(0, 0.05, n), -89.9, 89.9)
        step = np.degrees(0.99 * TOLERANCE)  # a move of one great-circle step along a random bearing
        bearing = rng.uniform(0, 2 * np.pi)
        lat2 = lat + step * np.cos(bearing)
        lon2 = lon + step * np.sin(bearing) / np.cos(np.radians(lat))
        a = ledger_keys(fingerprint_people(Points(np.column_stack([(lon + 180) % 360 - 180, lat]))))
        b = ledger_keys(fingerprint_people(Points(np.column_stack([(lon2 + 180) % 360 - 180, lat2]))))
        assert a[0] in b and b[0] in a
        reads.append(len(a) - 1)  # without the exact key
    assert 1.5 <= np.mean(reads) <= 2.5 and max(reads) <= 8


def test_other_people_are_another_ledger():
    """Coarse, not blind: who is counted still changes the key (what a determined uploader can still do)."""
    base = upload_fp(BASE)
    dropped = [r for r in ROWS if r[0] != "u3"]  # one person and their locations
    split = [("u99" if i == 3 else u, lo, la, v) for i, (u, lo, la, v) in enumerate(ROWS)]  # one user split
    merged = [("u0" if u == "u1" else u, lo, la, v) for u, lo, la, v in ROWS]  # two users merged
    doubled = ROWS + ROWS[:1]  # a row duplicated
    shifted = [(u, lo, la + 3 * CELL * 180 / np.pi, v) for u, lo, la, v in ROWS]  # every location ~60 m north
    for rows in (dropped, split, merged, doubled, shifted):
        assert not shares_ledger(base, upload_fp(csv_of(rows, fmt="{:.8f}")))


def test_a_ledger_booked_under_the_exact_key_keeps_counting():
    """A ledger without centroid keys holds bookings under a hash of the exact locations: the same people
    read that key too, so the ε spent there counts, once, and new releases go under the centroid key."""
    ds = load_file(BASE, "f.csv")
    fp = upload_fp(BASE)
    exact = exact_key(ds)
    assert ledger_keys(fp)[-1] == exact and ledger_keys(fp)[0] != exact
    store = ledger.BudgetStore()
    store.record(exact, [ledger.Entry("before", 2.5, "ug", mode="release")])
    assert store.spent(fp) == 2.5
    assert store.try_spend(fp, [ledger.Entry("after", 1.0, "ug", mode="release")], limit=3.0).ok is False
    assert store.try_spend(fp, [ledger.Entry("after", 0.5, "ug", mode="release")], limit=3.0).ok
    assert store.spent(fp) == 3.0 and [e.release_key for e in store.entries(fp)] == ["before", "after"]
    assert store.spent(exact) == 2.5  # booked under the centroid key, not the exact one
    assert store.remove(fp, "after") and store.spent(fp) == 2.5


def test_one_location_per_user_is_the_same_people_as_a_file_without_ids():
    p = [[13.4, 52.5], [13.41, 52.51]]
    assert fingerprint_people(Points(p, np.array([5, 9]))) == fingerprint_people(Points(p[::-1]))
    # a duplicate location without user ids is another person
    assert not shares_ledger(fingerprint_people(Points(p)), fingerprint_people(Points(p + [p[0]])))


def test_the_cli_by_path_and_an_upload_share_one_ledger(tmp_path):
    path = tmp_path / "people.csv"
    path.write_bytes(SAME_PEOPLE["CRLF line ends"])
    assert ledger.fingerprint_source("file", {"path": str(path)}) == upload_fp(BASE)
    # the attribute read does not change the people; the user id column does
    assert ledger.fingerprint_source("file", {"path": str(path), "value": "value"}) == upload_fp(BASE)
    assert not shares_ledger(
        ledger.fingerprint_source("file", {"path": str(path), "user_id": "value"}), upload_fp(BASE)
    )


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
