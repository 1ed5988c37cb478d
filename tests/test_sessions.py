"""One analyst's upload never reaches another session; memory held for uploads is bounded.

Unit tests of the upload store and the job board, and AppTest sessions sharing one server process
(``st.cache_resource`` is process-wide, as in a real server). The browser tests with two and eight
concurrent contexts are in ``test_browser_sessions.py``.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from engine.data.files import load_file
from engine.run import RunConfig
from engine.run.server._board import Board, deep_nbytes
from engine.run.server._session_files import Limits, UploadStore
from tests.support.app import APP, SMALL, charts, click_run, rerun_until, texts, unescaped, upload
from tests.support.files import csv_bytes


def ds_of(data: bytes, name: str = "f.csv"):
    return load_file(data, name)


# ------------------------------------------------------------------ the store
def test_store_keys_are_unguessable_and_per_owner():
    s = UploadStore(Limits(max_files=5))
    ds = ds_of(csv_bytes())
    k1, _ = s.add("alice", "a.csv", ds)
    k2, _ = s.add("bob", "a.csv", ds)  # the same content under another owner: another key
    assert k1 != k2 and k1.startswith("upload:") and len(k1) > 20
    assert s.get("alice", k1).filename == "a.csv"
    assert s.get("bob", k1) is None and s.get(None, k1) is None  # bob cannot reach alice's upload by key
    assert [u.key for u in s.uploads("bob")] == [k2]


def test_store_drops_the_oldest_beyond_the_limits():
    ds = ds_of(csv_bytes(1000))
    s = UploadStore(Limits(max_files=2))
    keys = [s.add("o", f"f{i}.csv", ds)[0] for i in range(2)]
    k3, dropped = s.add("o", "f2.csv", ds)
    assert dropped == ["f0.csv"] and [u.key for u in s.uploads("o")] == [keys[1], k3]
    # a byte limit of 1.5 datasets keeps one
    s = UploadStore(Limits(max_files=10, max_bytes=1.5 * (ds.xy.nbytes + ds.lonlat.nbytes)))
    s.add("o", "a.csv", ds)
    _, dropped = s.add("o", "b.csv", ds)
    assert dropped == ["a.csv"] and len(s.uploads("o")) == 1


def test_store_releases_closed_and_idle_sessions_and_tells_the_board():
    alive = {"st-1": True, "st-2": True}
    s = UploadStore(Limits(idle_s=100, grace_s=10), is_alive=lambda sid: alive[sid])
    released = []
    s.on_release(released.append)
    ds = ds_of(csv_bytes())
    s.touch("a", "st-1")
    s.touch("b", "st-2")
    s.add("a", "a.csv", ds)
    s.add("b", "b.csv", ds)
    t0 = s._owners["a"].seen
    assert s.reap(t0 + 1) == []
    alive["st-1"] = False  # tab closed: kept for the grace period (a reconnect), then released
    assert s.reap(t0 + 2) == []
    assert s.reap(t0 + 13) == ["a"] and released == ["a"]
    assert s.uploads("a") == [] and len(s.uploads("b")) == 1
    assert s.reap(t0 + 200) == ["b"]  # idle longer than idle_s
    assert s.nbytes() == 0


# ------------------------------------------------------------------ the board
CFG = dict(dataset_options={"n": 2000}, depth=5, mechanism="identity")


def test_board_keeps_private_runs_for_their_owner_only():
    b = Board(workers=1)
    s = UploadStore()
    ds = ds_of(csv_bytes())
    key_ds, _ = s.add("alice", "a.csv", ds)
    cfg = RunConfig(dataset=key_ds, depth=5, mechanism="identity")
    with pytest.raises(ValueError):
        b.submit(cfg, "alice")  # a private run needs its dataset: never looked up in the registry
    k = b.submit(cfg, "alice", dataset=ds)
    b.wait([k], 60)
    assert b.status(k, "alice").state == "ok"
    assert b.status(k, "bob").state == "missing" and b.status(k).state == "missing"
    assert not b.cached(k, "bob") and b.cached(k, "alice")
    with pytest.raises(PermissionError):
        b.submit(cfg, "bob", dataset=ds)  # bob cannot join or reuse alice's run
    b.drop_owner("alice")
    assert b.status(k, "alice").state == "missing" and b.held_bytes() == 0


def test_board_counts_every_array_a_result_holds():
    arr = np.zeros(1000)

    def answerer(rects):  # a closure capturing an array, like a model's range answerer
        return arr[: len(rects)]

    obj = {"a": np.zeros(10), "f": answerer, "l": [np.zeros(5), np.zeros(5)]}
    assert deep_nbytes(obj) == 8 * (10 + 1000 + 10)
    view = arr[:10]
    assert deep_nbytes([arr, view]) == arr.nbytes  # a view is not counted twice


def test_board_light_results_hold_no_maps_and_the_limit_holds():
    from engine.run import run
    from engine.run.server._board import result_nbytes

    # room for one 128x128 run's arrays but not two (sized from a run: releases gain arrays, e.g. stderr)
    one = result_nbytes(run(RunConfig(**{**CFG, "depth": 7, "seed": 99}), use_cache=False))
    limit = 1.5 * one
    b = Board(workers=1, max_bytes=limit)
    keys = []
    for seed in range(4):
        cfg = RunConfig(**{**CFG, "depth": 7, "seed": seed})
        keys.append(b.submit(cfg, "s", light=True))
    b.wait(keys, 120)
    st_ = [b.status(k, "s", light=True) for k in keys]
    assert all(s.state == "ok" for s in st_) and all(s.result.release is None for s in st_)
    assert all("emd_m" in s.result.metrics for s in st_)
    assert b.held_bytes() == 0  # summaries only
    for seed in range(4):
        keys[seed] = b.submit(RunConfig(**{**CFG, "depth": 7, "seed": 10 + seed}), "s")
    b.wait(keys, 120)
    for k in keys:
        b.status(k, "s")
        assert b.held_bytes() <= limit
    assert sum(b.status(k, "s").state == "ok" for k in keys) < 4  # older full results were evicted
    assert not b.jm._jobs  # finished jobs do not keep their results outside the board


# ------------------------------------------------------------------ sessions in one server
def app_session() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update(SMALL)
    at.run()
    return at


def run_caption(at: AppTest) -> str:
    return next(c.value for c in at.caption if c.value.startswith("run "))


def test_same_file_in_two_sessions_shares_nothing():
    """The reported leak: B uploads A's exact bytes under its own name and must see only its own name,
    its own run (another run id), and of the people's shared ledger only the total."""
    data = csv_bytes(600, seed=7)
    a, b = app_session(), app_session()
    ka = upload(a, "alice_hiv_patients_2024.csv", data)
    click_run(a, "explore")
    kb = upload(b, "probe.csv", data)
    assert ka != kb
    labels_b = b.sidebar.selectbox(key="cfg.ds").options
    assert "probe.csv (your file)" in labels_b and not any("alice" in x for x in labels_b)
    click_run(b, "explore")
    assert "explore_private_heat" in charts(b)
    tb = texts(b)
    assert "probe.csv" in tb and "alice" not in tb
    assert run_caption(a).split(" · ")[0] != run_caption(b).split(" · ")[0]
    # one ledger per set of people: the same bytes in another session are the same people, and B sees of
    # A's runs the total only (no file name, no run)
    from engine.run.bookkeeping import BudgetStore
    from ui import uploads

    fa = uploads.store().get(a.session_state["_sid"], ka).fingerprint
    fb = uploads.store().get(b.session_state["_sid"], kb).fingerprint
    # identity and its Uniform context run in each session: ε 1 each, all four on the one ledger
    runs = BudgetStore(table="evaluations")
    assert fa == fb and runs.spent(fa) == 4.0
    # the Data page of B shows B's file
    b.switch_page("pages/data.py").run()
    b.run()
    td = texts(b)
    assert "probe.csv" in td and "alice" not in td


def test_another_sessions_key_in_the_url_is_an_unknown_dataset():
    a = app_session()
    ka = upload(a, "secret.csv", csv_bytes(300, seed=3))
    c = AppTest.from_file(APP, default_timeout=90)
    c.query_params.update({**SMALL, "ds": ka, "run": "1"})
    c.run()
    warn = " ".join(unescaped(w.value) for w in c.warning)
    assert "unknown dataset" in warn
    assert c.sidebar.selectbox(key="cfg.ds").value != ka
    assert "secret" not in texts(c)


def test_upload_limit_drops_the_oldest_with_a_message(monkeypatch):
    from ui import uploads

    at = app_session()
    monkeypatch.setattr(uploads.store(), "limits", Limits(max_files=2))
    for i in range(3):
        upload(at, f"f{i}.csv", csv_bytes(200, seed=i))
    opts = at.sidebar.selectbox(key="cfg.ds").options
    assert "f0.csv (your file)" not in opts and "f1.csv (your file)" in opts and "f2.csv (your file)" in opts
    note = " ".join(unescaped(i.value) for i in at.sidebar.info)
    assert "f0.csv" in note and "released" in note


def test_a_markdown_file_name_is_shown_as_text():
    at = app_session()
    name = "![x](http:127.0.0.1:9?pixel.png)[y](http:127.0.0.1:9) :red[z] $x$.csv"  # a base name: no "/"
    upload(at, name, csv_bytes(300))
    body = " ".join(str(m.value) for m in at.markdown)
    assert "![x](" not in body and "\\!\\[x\\]\\(" in body  # escaped: Markdown would fetch the image
    assert name in texts(at)  # and it reads as the user named it


def test_a_large_sweep_completes_within_the_board_limit(monkeypatch):
    """A 60-run sweep whose full results would be ~25x the board's limit could cycle between eviction and
    re-submission ("89/100 runs done · queued" for minutes) while results pile up outside the limit. A sweep
    keeps summaries only: it completes, and the board's bytes stay in bound."""
    from tests.support.app import running
    from ui.jobs import board

    b = board()
    monkeypatch.setattr(b, "max_bytes", 12e6)
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update(
        {**SMALL, "res": "512", "mechs": "identity,uniform", "eps_list": "0.1,0.3,1,3,10", "trials": "6"}
    )
    at.run()
    at.switch_page("pages/tradeoffs.py").run()
    at.run()
    # the memory the sweep leaves allocated, after the server's one-off warm-up (imports, kernels, the land
    # mask's 0.9 GB), and not the process's RSS, which keeps what earlier tests of the process took
    b.warm_up().result(timeout=600)
    gc.collect()
    tracemalloc.start()
    at.button(key="run_sweep").click().run()  # 60 releases past the ε limit: synthetic data, so it only informs
    rerun_until(at, lambda a: not running(a), "the sweep to finish", poll=0.2)
    g = at.session_state["_groups"]["sweep"]
    statuses = [b.status(k, at.session_state["_sid"], light=True) for k in g["keys"]]
    assert len(statuses) == 60 and all(s.state == "ok" for s in statuses)
    assert g["resubmitted"] == []  # nothing was evicted and re-run
    assert b.held_bytes() <= 12e6
    assert not b.jm._jobs  # no finished job keeps a result outside the board
    gc.collect()
    growth = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    print(f"60-run sweep at 512x512: {growth:.0f} MB left allocated")
    assert growth < 100
