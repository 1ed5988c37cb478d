"""Like-for-like heatmap scores (engine.metrics.likeforlike): one filter for every map of a comparison."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.mechanisms.outputs import Heat
from engine.metrics import gaussian_heatmap, likeforlike, normalise, sim
from engine.run import RunConfig, run


def _rel(sigma=None, heat=None, density=None):
    d = np.ones((8, 8)) if density is None else density
    return SimpleNamespace(density=d, heat=None if heat is None else Heat(heat, sigma))


def test_common_sigma_is_the_smoothing_releases_filter():
    h = np.ones((8, 8))
    assert likeforlike.common_sigma([_rel(), _rel()]) == 0.0
    assert likeforlike.common_sigma([_rel(), _rel(3.0, h)]) == 3.0
    assert likeforlike.common_sigma([_rel(2.0, h), _rel(3.0, h), _rel(3.0, h)]) == 3.0  # the most common
    assert likeforlike.common_sigma([_rel(2.0, h), _rel(3.0, h)]) == 2.0  # a tie: the narrowest
    assert likeforlike.common_sigma([_rel(3.0, None)]) == 0.0  # a width without a published heatmap
    assert likeforlike.common_sigma([_rel(0.0, h)]) == 0.0  # a heat layer left unsmoothed


def test_a_map_without_its_own_heatmap_is_smoothed_by_the_same_filter():
    rng = np.random.default_rng(0)
    dens = rng.gamma(0.3, 1.0, (16, 16))
    got = likeforlike.scored_map(_rel(density=dens), 2.0)
    assert got == pytest.approx(normalise(gaussian_heatmap(normalise(dens), 2.0)))
    assert likeforlike.scored_map(_rel(density=dens), 0.0) == pytest.approx(normalise(dens))
    own = rng.random((16, 16))
    assert likeforlike.scored_map(_rel(2.0, own, dens), 2.0) == pytest.approx(normalise(own))  # its own H^sigma
    assert likeforlike.scored_map(_rel(1.0, own, dens), 2.0) == pytest.approx(got)  # another width: smoothed here


@pytest.fixture(scope="module")
def runs():
    cfg = dict(dataset_options={"n": 20_000}, depth=7, epsilon=1.0, seed=2)
    return {m: run(RunConfig(mechanism=m, **cfg)) for m in ("sparse_emd", "identity", "laplace_gauss")}


def test_the_rescored_runs_compare_like_for_like(runs):
    sigma = likeforlike.common_sigma(r.release for r in runs.values())
    assert sigma == pytest.approx(runs["sparse_emd"].release.heat.sigma_cells)
    truth = likeforlike.smoothed_truth(runs["identity"].truth, sigma)
    s = {m: likeforlike.rescore(truth, r.release, sigma) for m, r in runs.items()}
    # the smoothing release keeps the scores its run gave it (the same protocol)
    for k in likeforlike.SMOOTHED:
        assert s["sparse_emd"][k] == pytest.approx(runs["sparse_emd"].metrics[k], rel=1e-9)
    # Identity and the Laplace heatmap baseline release the same noisy counts: alike they score alike,
    # though their runs' own scores differ by the smoothing alone
    for k in likeforlike.SMOOTHED:
        assert s["identity"][k] == pytest.approx(s["laplace_gauss"][k], rel=1e-9)
    assert runs["identity"].metrics["sim"] < runs["laplace_gauss"].metrics["sim"]
    # unsmoothed, every run gets the plain cell-by-cell score
    plain = likeforlike.rescore(likeforlike.smoothed_truth(runs["identity"].truth, 0.0), runs["sparse_emd"].release, 0)
    want = sim(normalise(runs["sparse_emd"].truth), normalise(runs["sparse_emd"].release.density))
    assert plain["sim"] == pytest.approx(want) and plain["heatmap_sigma_cells"] == 0
