"""AHP (engine/mechanisms/ahp): the threshold, the cluster error and the greedy clustering against a literal
restatement of the rule (without the scan's shortcut), and the mechanism's steps with the noise switched off."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.grid import Domain
from engine.mechanisms import RunContext, get
from engine.mechanisms.ahp.clustering import cluster_labels, greedy_clusters, threshold
from tests.support.datasets import SIDE, square_dataset
from tests.support.noise import ZeroNoise


def err(values, eps2):
    """A cluster's estimated error, from its definition: squared deviation from its mean + 2 / (eps2^2 |C|)."""
    v = np.asarray(values, dtype=float)
    return float(((v - v.mean()) ** 2).sum() + 2.0 / (eps2**2 * v.size))


def err_star(v, j, eps2):
    """Value j's least error as the first of a new cluster j .. j + l - 1: (v_j - mean)^2 + 2 / (eps2^2 l^2), the
    lengths scanned upwards until the distance has grown by at least what the noise share can still fall."""
    two = 2.0 / eps2**2
    floor = two / (len(v) - j) ** 2
    best, last_dev, last_noise = two, 0.0, two
    for length in range(2, len(v) - j + 1):
        dev = (v[j] - np.mean(v[j : j + length])) ** 2
        noise = two / length**2
        if dev - last_dev >= last_noise - floor:
            break
        best = min(best, dev + noise)
        last_dev, last_noise = dev, noise
    return best


def literal_greedy(v, eps2):
    """The greedy rule as stated: j joins C unless err(C + j) >= err(C) + err*(j); err* computed for every j."""
    starts, i = [0], 0
    for j in range(1, len(v)):
        if err(v[i : j + 1], eps2) >= err(v[i:j], eps2) + err_star(v, j, eps2):
            starts.append(j)
            i = j
    return starts


def test_threshold_zeroes_counts_at_or_below_eta_ln_n_over_eps1():
    noisy = np.array([-3.0, 0.5, 1.0, 2.0, 7.5])
    out, theta = threshold(noisy, 0.5, 0.8)
    assert theta == pytest.approx(0.5 * math.log(5) / 0.8)  # 1.006
    assert np.array_equal(out, [0.0, 0.0, 0.0, 2.0, 7.5])  # 1.0 is below theta


@pytest.mark.parametrize("seed", range(12))
def test_greedy_clustering_follows_the_rule(seed):
    rng = np.random.default_rng(seed)
    v = np.sort(
        np.concatenate([np.zeros(rng.integers(0, 40)), rng.exponential(rng.uniform(1, 40), rng.integers(3, 120))])
    )
    eps2 = float(rng.uniform(0.05, 2.0))
    assert list(greedy_clusters(v, eps2)) == literal_greedy(v, eps2)


def test_well_separated_levels_form_one_cluster_each():
    """Counts 0, 40 and 400 with nothing between: the noise of a cluster mean (eps2 = 1) is far below any
    mixing's deviation, and far above splitting a level: three clusters, in increasing order, whatever the cells'
    order on the map."""
    rng = np.random.default_rng(1)
    counts = rng.permutation(np.repeat([0.0, 40.0, 400.0], [50, 30, 20]))
    labels = cluster_labels(counts, 1.0)
    assert labels.max() == 2
    for level, lab in ((0.0, 0), (40.0, 1), (400.0, 2)):
        assert np.all(labels[counts == level] == lab)


def test_the_mechanism_without_noise_releases_cluster_means():
    """Noise off: the threshold zeroes nothing above it, the clusters are the map's levels, each cell receives its
    cluster's (true) mean; the Laplace scales asked for are 1/eps1 (cells) then 1/eps2 (clusters)."""
    dom = Domain(0.0, 0.0, SIDE, 3)
    cell = SIDE / 8
    centres = lambda ix, iy: [((ix + 0.5) * cell, (iy + 0.5) * cell)]  # noqa: E731
    xy = []
    for iy in range(8):
        for ix in range(8):
            k = 30 if ix < 4 else (5 if iy < 4 else 0)
            xy += centres(ix, iy) * k
    cls = get("ahp")
    ctx = RunContext(rng=np.random.default_rng(0))
    zero = ZeroNoise()
    ctx.__dict__["_noise"] = zero
    rel = cls().run(square_dataset(xy, "ahp"), dom, 1.0, cls.schema().resolve({}), ctx)
    eps1, eps2 = rel.diagnostics["epsilon_counts"], rel.diagnostics["epsilon_clusters"]
    assert eps1 == pytest.approx(0.85) and eps1 + eps2 == pytest.approx(1.0)
    assert zero.scales == pytest.approx([1 / eps1, 1 / eps2])
    assert rel.diagnostics["threshold"] == pytest.approx(0.35 * math.log(64) / eps1)
    assert np.allclose(rel.density, dom.histogram(np.array(xy)))
    assert rel.diagnostics["cluster_count"] == 3
    sizes = np.bincount(rel.extras["clusters"].ravel())
    assert np.allclose(rel.noise.cell_sd(rel.domain.n), math.sqrt(2) / eps2 / sizes[rel.extras["clusters"]])
    assert rel.ledger.total() == pytest.approx(1.0)
