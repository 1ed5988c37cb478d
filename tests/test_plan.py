"""The release planner: its figures come from public inputs only, the closed forms are exact, the inverse
search meets its target, and the CLI and the Plan panel show the same numbers."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from engine.core.errors import ParamError
from engine.run.planning import _forecast as P
from tests.support.fakes import Tripwire, sentinel_source

LN20 = math.log(20.0)  # a Laplace(1/eps) draw's 95 % quantile is ln(20) / eps


def test_the_planner_never_reads_the_private_points():
    from engine.mechanisms import load_all

    load_all()
    rng = np.random.default_rng(0)
    sentinel_source("test:sentinel_a", rng.normal(0, 100, (500, 2)))
    sentinel_source("test:sentinel_b", np.zeros((7, 2)))  # other points, other count: nothing may change
    docs = []
    for key in ("test:sentinel_a", "test:sentinel_b"):
        plan = P.make_plan(
            ["identity", "privtree"],
            [0.5, 2.0],
            P.stated_users(5000),
            frame=P.frame_of(key, {}),
            depth=5,
            regions_spec="h3:7",
            runs=2,
        )
        docs.append(json.dumps(plan.to_dict(), sort_keys=True))
    assert docs[0] == docs[1]


def _people_file(path, rng, n: int):
    """``n`` people inside one box whose four corners are people too: every such file has the same region frame."""
    corners = np.array([[12.50, 55.60], [12.60, 55.60], [12.50, 55.70], [12.60, 55.70]])
    inner = rng.uniform([12.51, 55.61], [12.59, 55.69], (n - 4, 2))
    xy = np.vstack([corners, inner])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("lon,lat\n" + "".join(f"{x:.6f},{y:.6f}\n" for x, y in xy))
    return path


def _cli_plan(capsys, *args: str) -> str:
    from engine.__main__ import main

    assert main(["plan", *args]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_cli_plan_on_a_file_says_exactly_what_it_read(tmp_path, capsys):
    from engine.data import load

    path = _people_file(tmp_path / "people.csv", np.random.default_rng(1), 300)
    frame = load("file", path=str(path)).meta.extra["region_frame"]
    args = ["--dataset", "file", "--data-opt", f"path={path}", "--users", "300", "--depth", "4"]
    said = (
        f"read the file people.csv's region frame ({frame}) and its people fingerprint for the ledger; "
        "no location entered the prediction"
    )
    out = _cli_plan(capsys, *args)
    assert f"{said[0].upper()}{said[1:]}." in out.splitlines()
    assert json.loads(_cli_plan(capsys, *args, "--json"))["read"] == said
    assert "No dataset was read; no location entered the prediction." in _cli_plan(capsys, "--users", "300")


def test_the_planner_on_a_file_reads_its_frame_and_fingerprint_and_no_location(tmp_path, monkeypatch, capsys):
    """``plan --dataset file``: the file's coordinates are a tripwire everywhere but in the people fingerprint
    (the ledger's key, which the plan declares); two files of other people in the same frame plan alike."""
    from dataclasses import replace
    from types import SimpleNamespace

    from engine.data import registry
    from engine.mechanisms import load_all
    from engine.run.bookkeeping import _people as people

    load_all()
    src = registry.source("file")

    def tripwired(**options):
        ds = src.loader(**options)
        object.__setattr__(ds, "xy", ds.xy.view(Tripwire))
        object.__setattr__(ds, "lonlat", ds.lonlat.view(Tripwire))
        return ds

    real, fingerprinted = people.fingerprint_people, []

    def fingerprint(ds):
        fingerprinted.append(len(ds.lonlat))
        return real(SimpleNamespace(lonlat=ds.lonlat.view(np.ndarray), user_id=ds.user_id))

    monkeypatch.setitem(registry._SOURCES, "file", replace(src, loader=tripwired))
    monkeypatch.setattr(people, "fingerprint_people", fingerprint)
    rng = np.random.default_rng(0)
    docs = []
    for name, n in (("a", 500), ("b", 37)):  # other people, other count: nothing may change
        path = _people_file(tmp_path / name / "people.csv", rng, n)
        args = ["--dataset", "file", "--data-opt", f"path={path}", "--users", "5000", "--depth", "5", "--json"]
        out = _cli_plan(capsys, *args, "--mechanism", "identity,privtree", "--epsilon", "0.5,2", "--runs", "2")
        docs.append(json.loads(out))
    assert fingerprinted == [500, 37]  # the one read of the people, which the plan states
    assert docs[0] == docs[1]
    assert "people fingerprint for the ledger" in docs[0]["read"]


def test_identity_margin_is_the_exact_laplace_quantile():
    f = P.default_frame()
    for eps in (0.5, 2.0):
        p = P.predict("identity", eps, f, P.stated_users(3000), depth=5)
        assert p.method == "closed form" and p.runs == 1
        assert p.cell_median == pytest.approx(LN20 / eps) and p.cell_p90 == pytest.approx(LN20 / eps)


def test_a_split_unit_makes_a_closed_form_simulated():
    from engine.data.region_geometry import h3_regions

    f = P.default_frame()
    hexes = h3_regions(f.domain(5), f.crs, 7)
    assert P.exact("identity") and not P.exact("identity", hexes)  # hexagons cut cells: the spread term counts
    assert not P.exact("privtree")


def test_the_smallest_epsilon_meets_the_target_and_a_tenth_less_does_not():
    f, users = P.default_frame(), P.stated_users(3000)
    target = 6.0
    e = P.smallest_epsilon("identity", target, f, users, depth=5)
    assert e == pytest.approx(LN20 / target, rel=0.03)
    assert P.target_value(P.predict("identity", e, f, users, depth=5)) <= target
    assert P.target_value(P.predict("identity", 0.9 * e, f, users, depth=5)) > target
    assert P.smallest_epsilon("identity", 1e-3, f, users, depth=5) is None  # not even at eps 100


def test_the_search_reaches_the_smallest_epsilon_a_run_accepts():
    """A target met below ε 0.001 is found there, not at a floor of 0.001: every ε a run accepts (down to
    EPS_MIN) is searched, so the suggestion never spends more than the target needs."""
    from engine.core.epsilon import EPS_MIN
    from engine.run import RunConfig

    f, users = P.default_frame(), P.stated_users(3000)
    target = LN20 / 3e-4  # identity's cell margin is ln(20) / ε: met from ε = 0.0003
    e = P.smallest_epsilon("identity", target, f, users, depth=5)
    assert e == pytest.approx(3e-4, rel=0.01) and e < 1e-3
    assert P.target_value(P.predict("identity", e, f, users, depth=5)) <= target
    RunConfig(dataset="synthetic:zong_a", mechanism="identity", epsilon=e).validate()  # a run accepts it
    # a target even the smallest ε meets: that ε
    assert P.smallest_epsilon("identity", 2 * LN20 / EPS_MIN, f, users, depth=5) == EPS_MIN


def test_stated_users_are_checked_and_declared():
    u = P.stated_users(1234)
    assert u.n == 1234 and "1,234" in u.side_information[0]
    for bad in (0, -5, P.MAX_USERS + 1, 2.5):
        with pytest.raises(ParamError):
            P.stated_users(bad)


def test_the_user_count_of_a_published_release(tmp_path):
    out = tmp_path / "rel"
    cmd = [sys.executable, "-m", "engine", "release", "--mechanism", "identity", "--epsilon", "1"]
    cmd += ["--depth", "4", "--data-opt", "n=20000", "--format", "csv", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    u = P.released_users(out)
    # 256 cells of Laplace(1) noise: sd 22.6; the total lies within 6 sd of the 20,000 people
    assert abs(u.n - 20_000) < 6 * math.sqrt(2 * 256)
    assert "already booked" in u.basis
    with pytest.raises(ParamError, match="not a release folder"):
        P.released_users(tmp_path)


def test_cli_plan_prints_one_json_object_with_the_closed_form():
    cmd = [sys.executable, "-m", "engine", "plan", "--mechanism", "identity", "--epsilon", "0.5,1"]
    cmd += ["--users", "2000", "--depth", "4", "--target-margin", "3", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    cells = {q["epsilon"]: q["cell_median"] for q in doc["predictions"]}
    assert cells[0.5] == pytest.approx(2 * LN20) and cells[1.0] == pytest.approx(LN20)
    assert doc["suggested_epsilon"]["identity"] == pytest.approx(LN20 / 3, rel=0.03)
    assert any("stated by the analyst" in s for s in doc["side_information"])


def test_cli_plan_refuses_bad_input_in_one_line(tmp_path):
    for extra in (["--users", "0"], ["--users-from", str(tmp_path)], ["--users", "10", "--target-margin", "-1"]):
        p = subprocess.run(
            [sys.executable, "-m", "engine", "plan", *extra], capture_output=True, text=True, timeout=120
        )
        assert p.returncode == 2 and p.stderr.startswith("error:") and "Traceback" not in p.stderr


def test_plan_panel_predicts_suggests_and_sets_epsilon():
    from streamlit.testing.v1 import AppTest

    from tests.support.app import APP, SMALL

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({**SMALL, "mode": "release", "eps": "0.5"})
    at.run()
    assert "State the number of users" in "\n".join(str(i.value) for i in at.info)
    at.number_input(key="plan.users").set_value(3000).run()
    at.number_input(key="plan.target").set_value(6.0).run()
    at.button(key="plan.go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    m = next(x for x in at.metric if "Predicted 95 % margin per cell" in x.label)
    assert float(m.value.split()[0].lstrip("±")) == pytest.approx(LN20 / 0.5, rel=1e-3)  # identity's closed form
    body = "\n".join(str(x.value) for x in at.markdown)
    assert "smallest ε giving ±6 people per cell is **0.5" in body
    at.button(key="plan.use").click().run()
    assert at.sidebar.select_slider(key="cfg.eps").value == pytest.approx(LN20 / 6, rel=0.01)


def test_plan_panel_says_when_no_epsilon_meets_the_target():
    """A target below what identity's closed form reaches at the largest ε a run accepts gets a message naming
    that ε, not a traceback."""
    from streamlit.testing.v1 import AppTest

    from engine.core.epsilon import EPS_MAX
    from tests.support.app import APP, SMALL

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({**SMALL, "mode": "release", "eps": "0.5"})
    at.run()
    at.number_input(key="plan.users").set_value(3000).run()
    target = LN20 / EPS_MAX / 10  # ten times finer than identity's margin at EPS_MAX
    at.number_input(key="plan.target").set_value(target).run()
    at.button(key="plan.go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"no ε up to {EPS_MAX:g} meets" in str(w.value) for w in at.warning)
