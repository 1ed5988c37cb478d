"""An upload's automatic resolution in Release mode comes from a DP count (a share of ε, a step of the ledger)
or a number the analyst states: its exact number of people reaches no Release-mode screen and no release file.
The count step's noise is what its ledger entry says."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from streamlit.testing.v1 import AppTest

from engine.core.noise import dl_cdf
from engine.data.files import load_file
from engine.run import RunConfig
from engine.run.execution._frame import auto_side, dp_count
from engine.run.execution._release_files import manifest
from engine.run.execution._runner import prepare_run, run
from tests.support.app import APP, texts, upload, wait_jobs
from tests.support.files import csv_bytes

N = 1987  # people in the upload: an unusual number, so that any of its spellings is its own
SPELLINGS = ("1987", "1,987", "1.987e3", "1.987e+03", "1 987", "1\u202f987", "1987.0")
ALPHA = 1e-3  # false-alarm rate of each statistical test


def spelled(text: str) -> list[str]:
    return [s for s in SPELLINGS if s in text]


def sidebar_text(at: AppTest) -> str:
    parts = [texts(at)]
    for w in at.sidebar.select_slider:  # the labels of the options as drawn
        parts += [w.label, *map(str, w.options)]
    parts += [str(w.label) for w in at.sidebar.number_input]
    return "\n".join(parts)


def test_release_mode_shows_and_publishes_no_exact_count_of_an_upload():
    from ui.controls import Display
    from ui.jobs import board
    from ui.release import release_report
    from ui.views import scale_for

    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({"baselines": "0"})
    at.run()
    upload(at, "people.csv", csv_bytes(N, seed=4))
    at.sidebar.radio(key="cfg.mode").set_value("release").run()
    assert at.sidebar.select_slider(key="cfg.res").value == "auto"
    assert not spelled(sidebar_text(at)), spelled(sidebar_text(at))  # the Plan panel's page included
    assert "Users (a public bound you state)" in [w.label for w in at.number_input]
    at.sidebar.selectbox(key="cfg.frame").set_value("dp").run()  # a DP frame too: its step and its statement
    at.button(key="run_explore").click().run()
    wait_jobs(at)
    assert not spelled(sidebar_text(at))
    assert "**Frame**: the square around DP quantiles 1 % and 99 % of the people's coordinates" in texts(at)
    key = at.session_state["_groups"]["explore"]["keys"][0]
    res = board().result(key, at.session_state["_sid"])
    doc = json.dumps(manifest(res))
    page = release_report(res, scale_for(np.clip(res.release.density, 0, None), res.release.domain, Display()))
    assert not spelled(doc) and not spelled(page), (spelled(doc), spelled(page))
    frame, count = res.release.ledger.entries[:2]
    assert frame.step == "frame: DP quantiles of the coordinates" and frame.epsilon == pytest.approx(
        0.1 * res.config.epsilon
    )
    assert count.step == "count of the people (automatic resolution)"
    assert count.epsilon == pytest.approx(0.05 * res.config.epsilon)
    assert res.release.ledger.total() == pytest.approx(res.config.epsilon)  # the steps and the mechanism sum to ε
    for text in (doc, page):  # both steps and the frame are stated in the files
        assert "count of the people" in text and "the square around DP quantiles" in text
    # Evaluate may show the exact count, labelled as evaluation
    at.sidebar.radio(key="cfg.mode").set_value("evaluate").run()
    assert f"Evaluation only: your file holds {N:,} people" in texts(at)


def test_a_stated_number_sets_the_grid_and_is_declared():
    ds = load_file(csv_bytes(N, seed=4), "people.csv")
    cfg = RunConfig(dataset="file:people.csv", mechanism="identity", mode="release", resolution="auto", people=20_000)
    res = run(cfg, dataset=ds)
    assert res.release.domain.n == auto_side(20_000) == 128
    assert [e.step for e in res.release.ledger.entries] == ["cell counts"]  # nothing spent on the grid
    doc = manifest(res)
    assert any("20,000 people: a public number" in s for s in doc["side_information"])
    assert not spelled(json.dumps(doc))


@pytest.mark.parametrize("mode", ["evaluate", "release"])
def test_the_automatic_grid_follows_a_dp_count_in_both_modes(mode):
    """The same rule in both modes: the ledger's first step is the count, the mechanism gets the rest of ε;
    Evaluate records the exact count and the draw as evaluation, Release neither."""
    ds = load_file(csv_bytes(N, seed=4), "people.csv")
    cfg = RunConfig(
        dataset="file:people.csv", mechanism="hierarchical", epsilon=0.5, mode=mode, resolution="auto", count_share=0.1
    )
    res = run(cfg, dataset=ds)
    led = res.release.ledger
    assert led.entries[0].step.startswith("count of the people") and led.entries[0].epsilon == pytest.approx(0.05)
    assert led.total() == pytest.approx(0.5) and sum(e.epsilon for e in led.entries[1:]) == pytest.approx(0.45)
    if mode == "evaluate":
        assert res.evaluation["people_exact"] == N
        assert res.release.domain.n == auto_side(res.evaluation["people_dp_count"])
    else:
        assert res.evaluation in (None, {}) and res.n_users is None


@pytest.mark.parametrize("secure", [False, True])
def test_the_dp_count_has_the_noise_its_ledger_entry_states(secure):
    """4,000 counts of one dataset: their differences from the true count follow discrete Laplace of scale
    1/ε, ε read off the ledger entry (chi-square over the central values and the two tails, false-alarm rate
    ALPHA); seeded numpy (Evaluate) and OpenDP (Release)."""
    from engine.core.noise import NoiseSource

    ds = load_file(csv_bytes(300, seed=2), "people.csv")
    noise = NoiseSource(np.random.default_rng(7), secure=secure)
    draws, eps = [], set()
    for _ in range(4000):
        noisy, true, entry = dp_count(ds, 0.2, "add/remove user", noise)
        draws.append(noisy - true)
        eps.add(entry.epsilon)
    (e,) = eps
    t = 1.0 / e
    edges = np.arange(-15, 16)  # bins (-inf, -15], (-15, -14], ..., (14, 15], (15, inf)
    cdf = dl_cdf(edges, t)
    expected = np.diff(np.concatenate([[0.0], cdf, [1.0]])) * len(draws)
    observed = np.bincount(np.searchsorted(edges, draws, side="left"), minlength=edges.size + 1)
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_evaluate_predicts_release_and_draws_from_the_seed():
    ds = load_file(csv_bytes(N, seed=4), "people.csv")
    cfg = RunConfig(dataset="file:people.csv", mechanism="identity", resolution="auto", count_share=0.05, seed=11)
    a, b = prepare_run(cfg, ds), prepare_run(cfg, ds)
    assert a.domain == b.domain and a.setup.evaluation == b.setup.evaluation  # the page's truth and the run agree
    assert a.setup.evaluation["people_exact"] == N


def test_the_command_line_releases_an_automatic_grid_without_the_count(tmp_path, capsys):
    from engine.__main__ import main

    path = tmp_path / "people.csv"
    path.write_bytes(csv_bytes(N, seed=4))
    out = tmp_path / "rel"
    argv = ["release", "--dataset", "file", "--data-opt", f"path={path}", "--depth", "auto", "--out", str(out)]
    assert main([*argv, "--mechanism", "hierarchical", "--frame", "dp"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "manifest.json").read_text())
    steps = [e["step"] for e in doc["ledger"]["entries"]]
    assert steps[:2] == ["frame: DP quantiles of the coordinates", "count of the people (automatic resolution)"]
    assert doc["ledger"]["total_epsilon"] == pytest.approx(1.0)
    assert not spelled(json.dumps(doc)) and not spelled(printed)


def test_the_command_line_uses_a_catalogues_published_size(capsys):
    from engine.__main__ import main

    assert main(["run", "--data-opt", "n=3000", "--depth", "auto", "--no-cache", "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["people"] == 3000 and out["config"]["count_share"] == 0.0
    assert [e["step"] for e in out["ledger"]["entries"]] == ["cell counts"]  # nothing spent on a public size
    assert out["ledger"]["side_information"] == []  # nor anything to declare


def test_the_data_page_shows_no_statistic_of_an_upload_in_release_mode():
    """The Data page has no Mode of its own: in a session switched to Release it keeps the public card and
    shows neither counts nor density (the upload's exact numbers of locations and users are not DP outputs)."""
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({"baselines": "0"})
    at.run()
    upload(at, "people.csv", csv_bytes(N, seed=4))
    at.sidebar.radio(key="cfg.mode").set_value("release").run()
    at.switch_page("pages/data.py").run()
    assert not at.exception
    assert "Release mode: the data's counts, density and attributes are not shown" in texts(at)
    shown = texts(at) + "\n" + "\n".join(str(t.value) for t in at.table)
    assert not spelled(shown), spelled(shown)
    assert not at.get("deck_gl_json_chart")  # no density map
    at.switch_page("pages/explore.py").run()
    at.sidebar.radio(key="cfg.mode").set_value("evaluate").run()
    at.switch_page("pages/data.py").run()
    assert f"{N:,}" in "\n".join(str(t.value) for t in at.table)  # Evaluate still inspects the data
