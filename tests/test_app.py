"""AppTest (no browser) tests of every dashboard page.

AppTest has no ``run_every`` timer, so these tests drive the real background
path the way the browser's poller does: click Run, then rerun the script until
the page's jobs are finished (``wait_jobs``). Jobs really run in the shared
thread pool; nothing is faked but a few tiny test mechanisms (tests/support/mechanisms.py) to
exercise the pages that are generic over releases (attack, attributes, levels,
failures); they are removed from the registry afterwards.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from engine.core.params import Param
from tests.support import ROOT
from tests.support.app import APP, charts, click_run, frame_with, open_app, running, texts, unescaped, wait_jobs
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("test_mechanisms")


# ---------------------------------------------------------------------- explore
def test_explore_run_metrics_and_url_round_trip():
    at = open_app(eps="0.5", seed="4", baselines="0")
    # widgets render with the URL's values
    assert at.sidebar.select_slider(key="cfg.eps").value == 0.5
    assert at.sidebar.number_input(key="cfg.seed").value == 4
    assert at.sidebar.selectbox(key="cfg.ds").value == "synthetic:polycentric"
    assert at.sidebar.selectbox(key="cfg.mech").value == "identity"
    assert "explore_true_heat" in charts(at)  # the true map is previewed before any run
    click_run(at, "explore")
    maps = charts(at)
    assert {"explore_true_heat", "explore_private_heat"} <= set(maps)
    assert "How good is it?" in [s.value for s in at.subheader]
    body = texts(at)
    for label in ("EMD", "L1", "Average distance people would have to move"):
        assert label in body
    qp = dict(at.query_params)
    assert qp["eps"] == "0.5" and qp["seed"] == "4" and qp["res"] == "32" and qp["run"] == "1"
    assert qp["d.n"] == "3000" and qp["mech"] == "identity" and qp["baselines"] == "0"

    # opening that URL in a new session reproduces the view (same release, same maps)
    at2 = AppTest.from_file(APP, default_timeout=90)
    at2.query_params.update(qp)
    at2.run()
    wait_jobs(at2)
    assert charts(at2)["explore_private_heat"] == maps["explore_private_heat"]
    assert dict(at2.query_params) == qp


def test_same_config_is_instant_and_identical_new_seed_is_fresh_release():
    from ui.jobs import board

    at = open_app(eps="0.7", seed="11", baselines="0")
    click_run(at, "explore")
    first = charts(at)["explore_private_heat"]
    jobs_before = len(board().jm._jobs)
    at.button(key="run_explore").click().run()  # same configuration again
    assert not running(at)  # answered at once from the shared result cache: no new job
    assert len(board().jm._jobs) == jobs_before
    assert charts(at)["explore_private_heat"] == first
    at.sidebar.number_input(key="cfg.seed").set_value(12).run()
    assert "Settings changed" in texts(at)
    click_run(at, "explore")
    assert charts(at)["explore_private_heat"] != first
    from tests.support.budget import evaluated_total, ledger_total

    spent = evaluated_total("synthetic:polycentric", {"n": 3000})
    assert spent == pytest.approx(1.4)  # two distinct runs on the same people at ε = 0.7, listed
    assert ledger_total("synthetic:polycentric", {"n": 3000}) == 0  # evaluation runs publish nothing


def test_evaluation_runs_are_listed_apart_from_the_limit(monkeypatch):
    """Evaluate runs publish nothing: past the operator's limit they run without a question, are listed apart,
    and Release is still allowed afterwards."""
    monkeypatch.setenv("HEATMAP_RELEASE_LIMIT", "0.6")
    at = open_app(ds="snow_cholera", eps="0.5", seed="21", baselines="0")
    click_run(at, "explore")
    at.sidebar.number_input(key="cfg.seed").set_value(22).run()
    click_run(at, "explore")  # 1.0 in all, past 0.6: runs, nothing asked
    assert "Settings changed" not in texts(at) and "explore_private_heat" in charts(at)
    assert not [w for w in at.warning if "limit" in w.value]
    assert any("Evaluation runs of this dataset (all sessions): 2, ε = 1 in all" in e.label for e in at.expander)
    rel = open_app(ds="snow_cholera", eps="0.5", mode="release")
    click_run(rel, "explore")
    assert not [e for e in rel.error if "Refused" in e.value] and "release_private_heat" in charts(rel)


def test_bad_url_values_are_reported_not_fatal():
    at = open_app(eps="abc", mech="nope", res="33", seed="-2")
    warned = " ".join(w.value for w in at.warning)
    for name in ("eps=abc", "mech=nope", "res=33", "seed=-2"):
        assert name in warned
    assert at.sidebar.select_slider(key="cfg.eps").value == 1.0  # defaults instead
    assert not at.exception


@pytest.mark.parametrize("how,expect", [("engine", "refuses this dataset"), ("crash", "failed unexpectedly")])
def test_engine_errors_are_messages_and_sessions_are_isolated(how, expect):
    bad = open_app(mech="_test_fails", baselines="0", **{"p._test_fails.how": how})
    good = open_app(seed="31", baselines="0")
    bad.button(key="run_explore").click().run()  # both sessions have jobs in flight at once
    good.button(key="run_explore").click().run()
    wait_jobs(bad)
    wait_jobs(good)
    errors = " ".join(e.value for e in bad.error)
    assert expect in errors
    assert "secret internal detail" not in texts(bad) and not bad.exception
    assert not good.error and "explore_private_heat" in charts(good)


def test_progress_and_cancel_keep_the_page_usable():
    at = open_app(mech="_test_slow", baselines="0", seed="41")
    at.button(key="run_explore").click().run()
    assert running(at)
    bar = next(p for p in at.get("progress") if "runs done" in p.proto.text)
    assert "Explore: 0/1 runs done" in bar.proto.text and " s" in bar.proto.text  # elapsed time
    at.sidebar.number_input(key="cfg.seed").set_value(42).run()  # the page answers while the job runs
    assert running(at)
    at.button(key="cancel_explore").click().run()
    wait_jobs(at, ceiling=20)
    assert any("cancelled" in i.value for i in at.info), texts(at)
    assert not at.error


def test_a_run_ending_while_the_page_draws_is_redrawn(monkeypatch):
    """Race: the page reads its run as still running, the run ends before the progress panel
    reads it. The panel must redraw the page (else no poller comes back and the outcome,
    here "cancelled", never shows). Forced by making the first status read of a page run stale."""
    from engine.run.server._board import Board, Status

    at = open_app(mech="_test_slow", baselines="0", seed="43")
    at.button(key="run_explore").click().run()
    at.button(key="cancel_explore").click().run()
    wait_jobs(at, ceiling=20)
    assert any("cancelled" in i.value for i in at.info)
    real = Board.status
    calls = []

    def stale_first(self, key, *args):
        calls.append(key)
        if len(calls) == 1:  # the page's first read: the run still looks alive
            return Status("running", progress=0.5)
        return real(self, key, *args)

    monkeypatch.setattr(Board, "status", stale_first)
    at.run()
    assert len(calls) > 2  # the page was drawn again after the panel saw the change
    assert any("cancelled" in i.value for i in at.info), texts(at)
    assert not running(at)


def test_online_source_downloads_with_the_button(tmp_path):
    import functools
    import hashlib
    import http.server
    import threading

    from engine.data.online import download, is_cached
    from engine.data.registry import _SOURCES, Source, add
    from engine.data.synthetic import generate

    (tmp_path / "city.bin").write_bytes(b"0123456789" * 5000)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/city.bin"

    def loader(url):
        download(url, sha256=hashlib.sha256(b"0123456789" * 5000).hexdigest(), max_bytes=10**6)
        return generate("monocentric", 2000, 0)

    add(
        Source(
            key="_test_online",
            label="Test online city",
            kind="online",
            description="Served by the test on 127.0.0.1.",
            loader=loader,
            params=(Param("url", "str", url, "address"),),
            offline=False,
            extra={"cached": lambda: is_cached(url)},
        )
    )
    try:
        at = open_app(ds="_test_online")
        assert at.sidebar.selectbox(key="cfg.ds").value == "_test_online"
        assert at.button(key="run_explore").disabled  # nothing to run before the download
        at.sidebar.button(key="dl__test_online").click().run()
        wait_until(lambda: is_cached(url), "the download")
        at.run()
        at.run()
        assert not at.button(key="run_explore").disabled
        click_run(at, "explore")
        assert "explore_private_heat" in charts(at)
    finally:
        _SOURCES.pop("_test_online", None)
        server.shutdown()


def test_weaker_than_planned_guarantee_is_shown():
    # 30% of clients drop out while the noise was planned for none: the engine reports
    # the effective epsilon, and Explore must show that warning next to the metrics
    at = open_app(mech="adaptive_hh", baselines="0", **{"p.adaptive_hh.dropout": "0.3"})
    click_run(at, "explore")
    warns = [str(w.value) for w in at.warning]
    assert any("epsilon" in w.lower() for w in warns), warns


def test_proportion_estimate_rate_and_interval_maps():
    at = open_app(mech="adaptive_hh", baselines="0", **{"p.adaptive_hh.attribute": "flag"})
    click_run(at, "explore")
    assert "Proportion estimate (Appendix B)" in [s.value for s in at.subheader]
    assert {"explore_rate_heat", "explore_ciwidth_heat"} <= set(charts(at))


def test_levels_slider_steps_through_refinement():
    at = open_app(mech="_test_levels", baselines="0")
    click_run(at, "explore")
    final = charts(at)["explore_private_heat"]
    slider = at.select_slider(key="explore.level")
    assert slider.value == 2  # the final release
    slider.set_value(0).run()
    assert charts(at)["explore_private_heat"] != final
    assert "level 0" in texts(at) and "threshold = 5" in texts(at)


def test_sparse_emd_levels_show_the_kept_cells():
    """Explore steps through Sparse EMD's measured levels (kept cells S_i, eps_i)."""
    at = open_app(mech="sparse_emd", baselines="0", **{"p.sparse_emd.w": "20"})  # the paper's w: levels from q = 2
    click_run(at, "explore")
    final = charts(at)["explore_private_heat"]
    slider = at.select_slider(key="explore.level")
    assert slider.value == len(slider.options) - 1  # the final release first
    slider.set_value(0).run()  # level q = 2: all 16 cells are kept
    assert charts(at)["explore_private_heat"] != final
    assert "level 2 · 16 cells · ε = " in texts(at)


def test_offline_by_default_basemap_on_request():
    at = open_app(baselines="0")
    spec = next(iter(charts(at).values()))
    assert "cartocdn" not in spec and "mapProvider" not in spec
    assert json.loads(spec)["mapStyle"] == "__MAP_STYLE__"  # Streamlit's "no basemap" sentinel
    at.sidebar.toggle(key="cfg.basemap").set_value(True).run()
    spec = json.loads(next(iter(charts(at).values())))
    assert "cartocdn" in json.dumps(spec)
    # the heatmap is still drawn (offline the tiles fail, not the map) and the page says why
    assert any(layer["id"].endswith("_heat") for layer in spec["layers"])
    assert "needs an internet connection" in texts(at)


def test_upload_bad_and_good_files():
    at = open_app()
    at.sidebar.selectbox(key="cfg.ds").set_value("__upload__").run()
    at.sidebar.file_uploader(key="upload_file").upload("bad.csv", b"name,colour\na,red\nb,blue\n", "text/csv").run()
    assert any("bad.csv" in unescaped(e.value) for e in at.sidebar.error)
    rng = np.random.default_rng(0)
    rows = "\n".join(f"{2.3 + a:.6f},{48.85 + b:.6f}" for a, b in rng.normal(0, 0.01, (400, 2)))
    at.sidebar.file_uploader(key="upload_file").set_value(("mine.csv", f"lon,lat\n{rows}\n".encode(), "text/csv")).run()
    assert at.sidebar.selectbox(key="cfg.ds").value.startswith("upload:")
    assert "ds" not in at.query_params  # an uploaded file cannot be shared by link
    click_run(at, "explore")
    assert "explore_private_heat" in charts(at)
    assert "read off the data" in texts(at)  # the ledger states the region is side information


# ---------------------------------------------------------------------- compare
def test_compare_marks_best_and_ranks():
    """The ranking is on one chosen metric (EMD by default) over 5 seeds, with intervals
    and ties marked, rather than a mean rank over 8 correlated metrics of one seed."""
    at = open_app("compare", mechs="identity,uniform", eps="1", seed="2")
    assert at.sidebar.multiselect(key="cfg.mechs").value == ["identity", "uniform"]
    click_run(at, "compare")
    assert {"compare_true_heat", "compare_identity_heat", "compare_uniform_heat"} <= set(charts(at))
    table, rank = frame_with(at, "EMD ↓"), frame_with(at, "Tied with the best")
    assert table.shape[0] == 2 and table.apply(lambda c: c.str.startswith("★")).to_numpy().any()
    assert list(rank["Rank"]) == [1, 2] and set(rank["Mechanism"]) == set(table.index)
    assert rank["Tied with the best"].iloc[0] == "yes"  # the best is tied with itself
    assert "over 5 releases per mechanism (seeds 2–6)" in texts(at)
    groups = at.session_state["_groups"]["compare"]
    assert sorted(c["seed"] for c in groups["configs"]) == sorted([2, 3, 4, 5, 6] * 2)
    # the EMDs behind the ranking: its order is that of the mean EMD over the 5 seeds
    from ui.jobs import board

    emd = {}
    for c, k in zip(groups["configs"], groups["keys"]):
        r = board().result(k, at.session_state["_sid"])
        emd.setdefault(c["mechanism"], []).append(r.metrics["emd_m"])
    best = min(emd, key=lambda m: np.mean(emd[m]))
    assert rank["Mechanism"].iloc[0].lower().startswith(best[:4])
    at.selectbox(key="compare.rank").set_value("sim").run()
    assert at.query_params["rank"] == "sim"
    qp = at.query_params
    assert qp["mechs"] == "identity,uniform" and qp["run"] == "1"


def test_compare_keeps_a_partly_failed_result_while_the_next_run_goes():
    """A comparison whose first mechanism failed still has good maps; they stay on the page
    (as the last good view) while the next comparison runs, as on every other page."""
    at = open_app("compare", mechs="_test_fails,identity", eps="0.5", seed="5")  # 5 seeds each: under the ε limit
    click_run(at, "compare")
    assert "refuses this dataset" in " ".join(e.value for e in at.error)
    assert "compare_identity_heat" in charts(at)
    at.sidebar.multiselect(key="cfg.mechs").set_value(["_test_slow"]).run()
    at.button(key="run_compare").click().run()
    assert running(at)
    assert "compare_identity_heat" in charts(at)  # the previous good maps, not an empty page
    at.button(key="cancel_compare").click().run()
    wait_jobs(at, ceiling=20)
    assert not at.exception


# -------------------------------------------------------------------- trade-offs
def test_tradeoffs_sweep_curves_frontier_and_csv():
    at = open_app("tradeoffs", mechs="identity,uniform", eps_list="0.5,2", trials="2", seed="0")
    click_run(at, "sweep")
    assert len(at.get("vega_lite_chart")) == 2  # error curves + frontier
    trials = frame_with(at, "eps_x_n")
    assert len(trials) == 8 and set(trials["seed"]) == {0, 1}
    assert {"mechanism", "epsilon", "n_users", "eps_x_n", "emd_m"} <= set(trials.columns)
    assert at.get("download_button")
    assert at.query_params["eps_list"] == "0.5,2" and at.query_params["trials"] == "2"


def test_sweep_summary_confidence_interval():
    import pandas as pd
    from scipy import stats

    from engine.run.analysis import frontier, summarise

    df = pd.DataFrame(
        {"mechanism": ["a"] * 3 + ["b"] * 3, "epsilon": [1.0] * 6, "emd_m": [1.0, 2.0, 3.0, 0.5, 0.5, 0.8]}
    )
    s = summarise(df, "emd_m", "epsilon").set_index("mechanism")
    half = stats.t.ppf(0.975, 2) * 1.0 / np.sqrt(3)  # sd of (1,2,3) is 1
    assert s.loc["a", "mean"] == pytest.approx(2.0) and s.loc["a", "hi"] - 2.0 == pytest.approx(half)
    assert frontier(s.reset_index(), "emd_m", "epsilon")["best mechanism"].tolist() == ["b"]


def test_frontier_marks_mechanisms_tied_with_the_best():
    """Over paired seeds, a mechanism not significantly worse than the best is tied
    (DPComp); one clearly worse is not."""
    import pandas as pd

    from engine.run.analysis import frontier, summarise

    rng = np.random.default_rng(0)
    best = rng.normal(1.0, 0.1, 8)
    df = pd.DataFrame(
        {
            "mechanism": ["a"] * 8 + ["b"] * 8 + ["c"] * 8,
            "epsilon": [1.0] * 24,
            "seed": list(range(8)) * 3,
            "emd_m": np.concatenate([best, best + np.tile([0.05, -0.05], 4), best + 1.0]),  # b: no mean difference
        }
    )
    fr = frontier(summarise(df, "emd_m", "epsilon"), "emd_m", "epsilon", df)
    assert fr["best mechanism"].iloc[0] in ("a", "b")
    tied = fr["tied with the best"].iloc[0]
    assert "c" not in tied and ({"a", "b"} - {fr["best mechanism"].iloc[0]}).pop() in tied


# ----------------------------------------------------------------- range queries
def test_range_queries_answers_and_workload():
    from engine.run import RunConfig, prepare

    at = open_app("ranges", mechs="identity", seed="3", rx="2,12", ry="5,15")
    click_run(at, "ranges")
    assert at.slider(key="rq.x").value == (2.0, 12.0)
    cfg = RunConfig(dataset_options={"n": 3000, "seed": 0}, depth=5, seed=3)
    ds, dom, *_ = prepare(cfg)
    x0, y0 = dom.x0 + 2000, dom.y0 + 5000
    inside = (ds.xy[:, 0] >= x0) & (ds.xy[:, 0] < dom.x0 + 12000) & (ds.xy[:, 1] >= y0) & (ds.xy[:, 1] < dom.y0 + 15000)
    assert at.metric[0].value == f"{int(inside.sum()):,}"
    answers = frame_with(at, "Answer")
    assert list(answers["Mechanism"]) == ["Identity"]
    at.slider(key="rq.x").set_value((0.0, 20.0)).run()
    assert frame_with(at, "Answer")["Answer"].iloc[0] != answers["Answer"].iloc[0]
    assert at.query_params["rx"] == "0,20"
    assert at.get("vega_lite_chart")  # workload error distribution


def test_snh_answers_range_queries_with_its_model():
    """SNH through the dashboard: its trained networks answer the Range queries
    page, next to IDENTITY@ParamSelect; the public auxiliary data is stated."""
    from engine.run import RunConfig, prepare

    small_nets = {
        "p.snh.k": "2",
        "p.snh.preset": "custom",
        "p.snh.depth": "2",
        "p.snh.width": "32",
        "p.snh.epochs": "100",
        "p.snh.rho_m": "2000",
    }
    at = open_app("ranges", mechs="snh,identity_paramselect", seed="3", rx="2,12", ry="5,15", **small_nets)
    click_run(at, "ranges")
    answers = frame_with(at, "Answer")
    assert len(answers) == 2 and answers["Mechanism"].str.contains("SNH").any()
    cfg = RunConfig(dataset_options={"n": 3000, "seed": 0}, depth=5, seed=3)
    ds, dom, *_ = prepare(cfg)
    x0, y0 = dom.x0 + 2000, dom.y0 + 5000
    inside = (ds.xy[:, 0] >= x0) & (ds.xy[:, 0] < dom.x0 + 12000) & (ds.xy[:, 1] >= y0) & (ds.xy[:, 1] < dom.y0 + 15000)
    snh_answer = float(answers.loc[answers["Mechanism"].str.contains("SNH"), "Answer"].iloc[0])
    # a 10 x 10 km box holds a large share of the city: the model's answer is in the right range
    assert 0.3 * inside.sum() < snh_answer < 3 * inside.sum()
    at.slider(key="rq.x").set_value((0.0, 20.0)).run()
    changed = frame_with(at, "Answer")
    assert float(changed.loc[changed["Mechanism"].str.contains("SNH"), "Answer"].iloc[0]) != snh_answer

    # Explore: its density grid on the map, the public auxiliary data declared as side information
    ex = open_app("explore", mech="snh", seed="3", **small_nets)
    click_run(ex, "explore")
    assert set(charts(ex)) == {"explore_true_heat", "explore_private_heat"}
    assert "SNH" in texts(ex)
    shown = texts(ex) + " ".join(str(d.value.to_dict()) for d in ex.dataframe)
    assert "treated as public" in shown.lower()


# ------------------------------------------------------------------ attack / attributes
def test_attack_page_shows_one_users_view():
    at = open_app("attack", mech="_test_per_user")
    assert at.sidebar.selectbox(key="atk.mech").value == "_test_per_user"
    click_run(at, "attack")
    assert "User 0" in [s.value for s in at.subheader]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Best guess is off by"] == "100 m"  # the test view shifts everyone 100 m east
    spec = next(iter(charts(at).values()))
    assert '"candidates"' in spec and '"truth"' in spec
    at.number_input(key="atk.user").set_value(3).run()
    assert at.query_params["user"] == "3" and "User 3" in [s.value for s in at.subheader]


def test_attack_page_privacy_utility_curve():
    at = open_app("attack", mech="federated_rff_kde", **{"d.n": "1500", "res": "16"})
    click_run(at, "attack")
    assert "Privacy-utility curve" in [s.value for s in at.subheader]
    at.button(key="atk.curve.go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    df = frame_with(at, "privacy ratio")
    assert set(df["method"]) == {"Federated RFF KDE", "Geo-ind + KDE", "Federated KDE"}
    rff = df[df["method"] == "Federated RFF KDE"].set_index("setting")
    # B = 0 is the 0-feature baseline: privacy ratio 1; exact KDE gives the attacker almost everything
    assert abs(rff.loc["B=0", "privacy ratio"] - 1.0) < 1e-9
    assert df[df["method"] == "Federated KDE"]["privacy ratio"].iloc[0] < 0.2


def test_attack_page_explains_aggregate_views():
    at = open_app("attack", mech="identity")
    click_run(at, "attack")
    assert any("nothing per user" in i.value for i in at.info)
    assert any(m.label == "Privacy distance" for m in at.metric)


def test_attributes_page_regional_means():
    at = open_app("attributes", mech="_test_regions")
    click_run(at, "attributes")
    assert len(at.get("deck_gl_json_chart")) == 2
    df = frame_with(at, "private mean")
    assert len(df) == 4 and int(df["suppressed"].sum()) == 1
    np.testing.assert_allclose(df["error"].dropna(), 1.0)


# ------------------------------------------------------------------- methods / data
def test_methods_page_has_a_section_per_mechanism():
    from engine.mechanisms import registry
    from ui.methods import code_location

    at = open_app("methods")
    headers = [h.value for h in at.header]
    body = texts(at)
    for key, cls in registry().items():
        assert (cls.label or cls.key) in headers
        if cls.__module__.startswith("engine."):  # the page says where each mechanism's code is
            path, package = code_location(key)
            assert f"`{path}`" in body and (ROOT / path).is_file()
            assert package == "" or ((ROOT / package).is_dir() and path.startswith(package))
    assert len(at.code) >= 1  # docstrings


def test_data_page_provenance_and_density():
    at = open_app("data")
    body = texts(at)
    assert "SYNTHETIC DATA" in body and "Point density" in " ".join(h.proto.body for h in at.get("html"))
    assert "data_density_heat" in charts(at)
    table = at.table[0].value
    assert "Licence" in table.index and "Locations" in table.index
    assert table.loc["Locations"].iloc[0] == "3,000"
    catalogue = frame_with(at, "Key")
    assert "synthetic:polycentric" in set(catalogue["Key"])
    assert "file" not in set(catalogue["Key"])  # the server-path loader is never offered in the browser
