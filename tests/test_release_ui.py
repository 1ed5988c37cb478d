"""In the dashboard: Evaluate and Release modes, fresh seeds, one ledger per dataset for every
session (server-wide, in SQLite), Release mode's binding limit and its DP-only export."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from streamlit.testing.v1 import AppTest

from tests.support.app import APP, SMALL, charts, click_run, open_app, rerun_until, texts, wait_jobs
from tests.support.budget import ledger_total


def test_a_session_starts_from_a_fresh_seed_and_can_draw_another():
    seeds = set()
    for _ in range(3):
        at = AppTest.from_file(APP, default_timeout=90)
        at.query_params.update(SMALL)
        at.run()
        seeds.add(at.sidebar.number_input(key="cfg.seed").value)
    assert len(seeds) == 3 and 0 not in seeds  # drawn from OS entropy, not a guessable 0
    s0 = at.sidebar.number_input(key="cfg.seed").value
    assert at.query_params["seed"] == str(s0)  # shown and in the link, so a run can be reproduced
    at.sidebar.button(key="new_seed").click().run()
    assert at.sidebar.number_input(key="cfg.seed").value != s0
    fixed = open_app(seed="7")
    assert fixed.sidebar.number_input(key="cfg.seed").value == 7  # a fixed seed is an explicit choice


def test_release_mode_shows_and_exports_only_the_release():
    at = open_app(mode="release", eps="0.5", res="32")
    assert "The true map is not shown in this mode" in texts(at)
    assert not charts(at)  # no true map, not even before a run
    assert not [w for w in at.sidebar.number_input if w.key == "cfg.seed"]  # no seed in Release mode
    click_run(at, "explore")
    assert "release_private_heat" in charts(at) and "explore_true_heat" not in charts(at)
    body = texts(at)
    assert "How good is it?" not in body and "EMD" not in body  # no metric against the truth
    assert ledger_total("synthetic:polycentric", {"n": 3000}) == pytest.approx(0.5)
    at.button(key="run_explore").click().run()  # the release on screen is shown again: no new release
    wait_jobs(at)
    assert ledger_total("synthetic:polycentric", {"n": 3000}) == pytest.approx(0.5)
    dl = next(b for b in at.get("download_button") if "release" in str(b.proto.label).lower())
    assert "zip" in str(dl.proto.label)


def test_release_zip_holds_dp_outputs_only():
    from engine.run import RunConfig, run
    from ui.release import release_zip

    res = run(RunConfig(dataset_options={"n": 3000}, depth=5, epsilon=0.5, mode="release"))
    z = zipfile.ZipFile(io.BytesIO(release_zip(res)))
    names = set(z.namelist())
    assert {"manifest.json"} <= names and any(n.endswith(".tif") for n in names)
    manifest = json.loads(z.read("manifest.json"))
    text = json.dumps(manifest).lower()
    for banned in ('"seed"', "n_users", "n_points", "metrics", "emd", "truth"):
        assert banned not in text, banned
    assert manifest["ledger"]["total_epsilon"] == pytest.approx(0.5)


def test_release_mode_refuses_past_the_limit(monkeypatch):
    monkeypatch.setenv("HEATMAP_RELEASE_LIMIT", "0.8")  # the operator's setting: no session can raise it
    at = open_app(mode="release", eps="0.5", res="32", ds="snow_cholera")
    click_run(at, "explore")
    assert ledger_total("snow_cholera", {}) == pytest.approx(0.5)
    at.sidebar.select_slider(key="cfg.eps").set_value(0.5).run()
    at.sidebar.select_slider(key="cfg.res").set_value(64).run()  # another release of the same people
    at.button(key="run_explore").click().run()
    assert any("Refused" in e.value for e in at.error)
    assert ledger_total("snow_cholera", {}) == pytest.approx(0.5)  # nothing booked past the limit


def test_evaluation_pages_stop_in_release_mode():
    at = open_app("compare", mode="release")
    assert "Release mode: Compare compares private maps with the true data" in texts(at)
    assert not charts(at)


def test_two_sessions_share_one_ledger_per_dataset():
    """The budget belongs to the data: a second session sees what the first released."""
    a = open_app(ds="snow_cholera", eps="0.3", mode="release")
    click_run(a, "explore")
    b = open_app(ds="snow_cholera", eps="0.3", res="64", mode="release")  # another release (the same one is shown)
    assert "all sessions: **0.3**" in " ".join(p.proto.text for p in b.get("progress"))
    click_run(b, "explore")
    assert ledger_total("snow_cholera", {}) == pytest.approx(0.6)
    a.run()
    assert "all sessions: **0.6**" in " ".join(p.proto.text for p in a.get("progress"))


def test_mixed_relations_are_flagged_and_the_ledger_names_the_relation():
    at = open_app("compare", mechs="identity,adaptive_hh", eps="0.4", seed="1")
    click_run(at, "compare")
    warn = " ".join(w.value for w in at.warning)
    assert "different neighbouring relations" in warn and "zero-out user" in warn and "add/remove user" in warn
    ex = open_app(mech="adaptive_hh", baselines="0", eps="0.5", seed="1")
    click_run(ex, "explore")
    assert "Neighbouring relation:** zero-out user" in texts(ex)


def test_adaptive_hh_add_remove_option_names_its_relation_and_joins_add_remove_comparisons():
    """Adaptive HH's relation option: chosen in its parameters, the ledger names
    add/remove user and books the private client count, the guarantee mentions the option, and a
    comparison with an add/remove baseline is not flagged as mixing relations."""
    ex = open_app(mech="adaptive_hh", baselines="0", eps="0.5", seed="1")
    box = ex.sidebar.selectbox(key="cfg.p.adaptive_hh.relation")
    assert box.options == ["zero-out", "add/remove"] and "whether a person took part" in box.help

    def shown():  # the keys of the add/remove parameters' widgets on the page
        names = ("clients_source", "count_share", "count_failure", "clients_bound")
        keys = {w.key for kind in ("selectbox", "select_slider", "number_input") for w in ex.sidebar.get(kind)}
        return {n for n in names if f"cfg.p.adaptive_hh.{n}" in keys}

    assert shown() == set()  # zero-out: the add/remove parameters are not offered
    box.set_value("add/remove").run()
    assert shown() == {"clients_source", "count_share", "count_failure"}  # a private count by default
    ex.sidebar.selectbox(key="cfg.p.adaptive_hh.clients_source").set_value("public_bound").run()
    assert shown() == {"clients_source", "clients_bound"}
    ex.sidebar.selectbox(key="cfg.p.adaptive_hh.clients_source").set_value("dp_count").run()
    click_run(ex, "explore")
    text = texts(ex)
    assert "Neighbouring relation:** add/remove user" in text and "zero-out user (" not in text
    assert "from a private count" in text and "with relation = add/remove" in text
    steps = [step for df in ex.dataframe if "Step" in df.value for step in df.value["Step"]]
    assert steps[0] == "DP count of clients" and steps[1].startswith("sub-query 1")
    cmp_ = open_app(
        "compare", mechs="identity,adaptive_hh", eps="0.4", seed="1", **{"p.adaptive_hh.relation": "add/remove"}
    )
    click_run(cmp_, "compare")
    assert not any("different neighbouring relations" in w.value for w in cmp_.warning)
    assert {"compare_identity_heat", "compare_adaptive_hh_heat"} <= set(charts(cmp_))


def test_methods_audits_a_mechanism_in_the_background():
    at = open_app("methods")
    at.button(key="audit_identity").click().run()
    rerun_until(at, lambda a: any("measured lower bound" in s.value for s in a.success), "the audit", poll=0.3)
    msg = next(s.value for s in at.success if "measured lower bound" in s.value)
    assert "within its claim" in msg and "add/remove user" in msg


def test_the_ledger_books_the_effective_epsilon_above_the_plan():
    """Under excess dropout a distributed run spends more than planned (its ledger books the effective ε):
    the dataset's ledger gets the difference, once."""
    from types import SimpleNamespace

    from engine.core.accounting import Ledger
    from engine.run import RunConfig
    from ui import budget

    cfg = RunConfig(dataset_options={"n": 3000}, mechanism="adaptive_hh", epsilon=1.0, mode="release")
    led = Ledger()
    led.spend("sub-query 1 (effective, 40% dropout)", 1.25)
    status = SimpleNamespace(state="ok", result=SimpleNamespace(epsilon_spent=led.total()))
    bk = budget.bookkeeper()
    booking = bk.book(cfg, note="test")
    for _ in range(2):
        bk.settle(cfg, booking, status.result)
    assert ledger_total("synthetic:polycentric", {"n": 3000}) == pytest.approx(1.25)


def test_methods_audits_adaptive_hh_under_add_remove_too():
    """The add/remove variant is audited from Methods under its own relation."""
    at = open_app("methods")
    at.radio(key="audit_variant_adaptive_hh").set_value("relation = add/remove").run()
    at.button(key="audit_adaptive_hh").click().run()
    rerun_until(at, lambda a: any("measured lower bound" in s.value for s in a.success), "the audit", poll=0.3)
    msg = next(s.value for s in at.success if "measured lower bound" in s.value)
    assert "within its claim" in msg and "add/remove user" in msg
