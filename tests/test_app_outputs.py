"""AppTest of the research outputs: like-for-like scores on Compare and the CSV downloads of every results
page (Compare, Range queries, Attributes, Attack)."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from engine.metrics import cc, gaussian_heatmap, kl, normalise, sim
from tests.support.app import click_run, frame_with, open_app, texts

pytestmark = pytest.mark.usefixtures("test_mechanisms")


@pytest.fixture
def downloads(monkeypatch):
    """Every file a download button hands the browser in this test: {file name: bytes}."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    got: dict[str, bytes] = {}
    real = MemoryMediaFileStorage.load_and_get_id

    def keep(self, path_or_data, mimetype, kind, filename=None):
        if filename:
            got[filename] = path_or_data if isinstance(path_or_data, bytes) else str(path_or_data).encode()
        return real(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", keep)
    return got


def _results(at, seed: int) -> dict:
    from ui.jobs import board

    g = at.session_state["_groups"]["compare"]
    out = {}
    for c, k in zip(g["configs"], g["keys"]):
        if c["seed"] == seed:
            out[c["mechanism"]] = board().result(k, at.session_state["_sid"])
    return out


def _scores(truth, density, sigma):
    t, p = normalise(truth), normalise(density)
    if sigma > 0:
        t, p = normalise(gaussian_heatmap(t, sigma)), normalise(gaussian_heatmap(p, sigma))
    return {"sim": sim(t, p), "cc": cc(t, p), "kl": kl(t, p)}


def test_compare_scores_every_map_with_the_same_smoothing(downloads):
    """Sparse EMD publishes a Gaussian heatmap and is scored on it (Ghazi et al.'s protocol); Identity is not.
    The comparison scores Identity's map through the same filter too, says so, and offers the unsmoothed
    scores for both."""
    at = open_app("compare", mechs="sparse_emd,identity", eps="1", seed="3")
    click_run(at, "compare")
    res = _results(at, 3)
    sigma = res["sparse_emd"].release.diagnostics["sigma_cells"]
    assert sigma > 0 and res["identity"].metrics["heatmap_sigma_cells"] == 0  # the runs' own scores differ in kind
    assert f"σ = {sigma:.3g} cells" in texts(at)
    csv = pd.read_csv(io.BytesIO(downloads["compare_metrics.csv"])).set_index("key")
    for key in ("identity", "sparse_emd"):
        want = _scores(res[key].truth, res[key].release.density, sigma)
        assert csv.loc[key, "sim"] == pytest.approx(want["sim"], rel=1e-9)
        assert csv.loc[key, "cc"] == pytest.approx(want["cc"], rel=1e-9)
        assert csv.loc[key, "kl"] == pytest.approx(want["kl"], rel=1e-6)
        assert csv.loc[key, "sim_cc_kl_filter [cells]"] == pytest.approx(sigma)
    # Identity's smoothed SIM is not its unsmoothed one: the table did rescore it
    assert csv.loc["identity", "sim"] != pytest.approx(res["identity"].metrics["sim"], rel=1e-3)
    table = frame_with(at, "SIM ↑")
    shown = table["SIM ↑"].str.replace("★ ", "")
    assert list(shown) == [f"{v:.3f}" for v in csv["sim"]]

    at.radio(key="compare.smooth").set_value("unsmoothed").run()
    assert at.query_params["smooth"] == "unsmoothed"
    assert "every map scored unsmoothed" in texts(at)
    csv = pd.read_csv(io.BytesIO(downloads["compare_metrics.csv"])).set_index("key")
    for key in ("identity", "sparse_emd"):
        want = _scores(res[key].truth, res[key].release.density, 0)
        assert csv.loc[key, "sim"] == pytest.approx(want["sim"], rel=1e-9)
        assert csv.loc[key, "kl"] == pytest.approx(want["kl"], rel=1e-6)
    # the ranking ranks the same scores, every seed of it in its CSV
    seeds = pd.read_csv(io.BytesIO(downloads["compare_ranking_seeds.csv"]))
    assert sorted(seeds["seed"]) == sorted([3, 4, 5, 6, 7] * 2)
    first = seeds[seeds["seed"] == 3].set_index("mechanism")["sim"]
    assert sorted(first) == pytest.approx(sorted(csv["sim"]), rel=1e-9)


def test_range_queries_offer_their_answers_and_workload_as_csv(downloads):
    at = open_app("ranges", mechs="identity,uniform", seed="3", rx="2,12", ry="5,15")
    click_run(at, "ranges")
    shown = frame_with(at, "Answer")
    answers = pd.read_csv(io.BytesIO(downloads["range_answers.csv"]))
    unit = next(c for c in answers.columns if c.startswith("Answer ["))
    assert unit in ("Answer [people]", "Answer [locations]")
    assert list(answers["Mechanism"]) == list(shown["Mechanism"])
    assert answers[unit].tolist() == pytest.approx(shown["Answer"].tolist())
    true = answers[unit.replace("Answer", "True")]
    err = answers[unit.replace("Answer", "Error")]
    assert (answers[unit] - true).tolist() == pytest.approx(err.tolist(), abs=0.11)  # rounded to 0.1
    workload = pd.read_csv(io.BytesIO(downloads["range_workload.csv"]))
    assert set(workload["mechanism"]) == set(shown["Mechanism"]) and len(workload) == 2 * 500
    rel = (workload["answer"] - workload["true"]).abs() / workload["true"].clip(lower=1e-300)
    big = workload["true"] > 0.001 * 3000  # above ψ the relative error is |answer - true| / true
    assert workload.loc[big, "relative_error"].tolist() == pytest.approx(rel[big].tolist())


def test_attributes_offer_the_regions_as_csv(downloads):
    at = open_app("attributes", mech="_test_regions")
    click_run(at, "attributes")
    df = frame_with(at, "private mean")
    csv = pd.read_csv(io.BytesIO(downloads["attribute_regions.csv"]))
    assert len(csv) == len(df) == 4
    mean_col = next(c for c in csv.columns if c.startswith("private mean ["))
    assert csv[mean_col].tolist() == pytest.approx(df["private mean"].tolist(), nan_ok=True)
    assert csv["suppressed"].tolist() == df["suppressed"].tolist()
    assert (csv["x1 [m]"] > csv["x0 [m]"]).all() and (csv["y1 [m]"] > csv["y0 [m]"]).all()


def test_attack_offers_its_figures_as_csv(downloads):
    at = open_app("attack", mech="identity")
    click_run(at, "attack")
    csv = pd.read_csv(io.BytesIO(downloads["privacy_attack.csv"]))
    shown = {m.label: m.value for m in at.metric}
    assert csv.loc[0, "mechanism"] == "identity"
    from ui import explain

    assert explain.fmt("privacy_distance_m", csv.loc[0, "privacy_distance_m [m]"]) == shown["Privacy distance"]
    assert explain.fmt("privacy_ratio", csv.loc[0, "privacy_ratio"]) == shown["Privacy ratio"]
    body = texts(at)
    assert "A trusted curator sees every location in the clear" in body  # a central mechanism's server
    assert "sees only the aggregate" not in body
