"""AppTest of the research outputs: like-for-like scores on Compare and the CSV downloads of every results
page (Compare, Range queries, Attributes, Attack)."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from test_app import click_run, frame_with, open_app, test_mechanisms, texts  # noqa: F401 (a fixture)

from engine.metrics import cc, gaussian_heatmap, kl, normalise, sim


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
