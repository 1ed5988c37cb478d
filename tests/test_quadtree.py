"""QuadTree (engine/mechanisms/quadtree): the geometric budget against the paper's formula, the post-processing
against a dense least-squares solve of the whole tree (counts weighted by their level's epsilon squared), its
standard errors against that solve's covariance, and the raw leaves without post-processing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.grid import Domain
from engine.mechanisms import RunContext, get
from engine.mechanisms.central.trees import hierarchical_budget
from engine.mechanisms.quadtree.mechanism import geometric_budget
from tests.support.datasets import SIDE, square_dataset


class _RecordedNoise:
    """Adds Laplace noise from its own stream and keeps every noisy output, in the order asked for."""

    secure = False

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.outputs, self.scales = [], []

    def add_laplace(self, x, scale):
        out = np.asarray(x, dtype=np.float64) + self.rng.laplace(0.0, scale, np.shape(x))
        self.outputs.append(out)
        self.scales.append(scale)
        return out


def design(h: int) -> tuple[np.ndarray, np.ndarray]:
    """Every node of the full quadtree of height h over 2^h x 2^h leaves (row-major), root first: its 0/1 row
    over the leaves, and its level (0 = root)."""
    m = 1 << h
    rows, level = [], []
    for d in range(h + 1):
        s = m >> d  # a level-d node covers s x s leaves
        for iy in range(1 << d):
            for ix in range(1 << d):
                r = np.zeros((m, m))
                r[iy * s : (iy + 1) * s, ix * s : (ix + 1) * s] = 1.0
                rows.append(r.ravel())
                level.append(d)
    return np.array(rows), np.array(level)


@pytest.mark.parametrize("h", [0, 1, 3, 8])
def test_geometric_budget_is_the_papers(h):
    """eps_i = 2^((h-i)/3) eps (2^(1/3) - 1) / (2^((h+1)/3) - 1), i counted from the leaves: it sums to eps, grows by
    2^(1/3) per level towards the leaves, and is the split the hierarchical baseline's 'geometric' computes."""
    e = geometric_budget(h, 0.7)
    assert e.sum() == pytest.approx(0.7)
    if h:
        assert np.allclose(e[1:] / e[:-1], 2 ** (1 / 3))
    assert np.allclose(e, hierarchical_budget(h + 1, 0.7, "geometric", 2))
    if h == 1:  # by hand: root eps (2^(1/3) - 1) / (2^(2/3) - 1), leaves 2^(1/3) times that
        root = 0.7 * (2 ** (1 / 3) - 1) / (2 ** (2 / 3) - 1)
        assert e == pytest.approx([root, 2 ** (1 / 3) * root])


@pytest.mark.parametrize("budget", ["geometric", "uniform"])
def test_post_processing_is_the_dense_least_squares_solution(budget):
    """The leaves released equal argmin over consistent trees of sum_v eps_(level v)^2 (Y_v - beta_v)^2, solved
    densely from the very noisy counts the mechanism drew; their standard errors are the square roots of the
    diagonal of that solve's covariance (X' Omega X)^-1, Omega = eps_level^2 / 2."""
    h = 3
    rng = np.random.default_rng(11)
    xy = rng.normal(SIDE / 2, 3000, (400, 2)).clip(1, SIDE - 1)
    dom = Domain(0.0, 0.0, SIDE, h)
    cls = get("quadtree")
    ctx = RunContext(rng=np.random.default_rng(0))
    noise = _RecordedNoise(3)
    ctx.__dict__["_noise"] = noise
    rel = cls().run(square_dataset(xy, "quadtree"), dom, 1.0, cls.schema().resolve({"budget": budget}), ctx)
    X, level = design(h)
    eps = np.array(rel.diagnostics["epsilon_per_level"])
    assert noise.scales == pytest.approx(list(1.0 / eps))
    Y = np.concatenate([o.ravel() for o in noise.outputs])
    omega = eps[level] ** 2 / 2.0
    cov = np.linalg.inv(X.T @ (omega[:, None] * X))
    beta = cov @ X.T @ (omega * Y)
    assert np.allclose(rel.density.ravel(), beta)
    assert np.allclose(rel.noise.cell_sd(rel.domain.n).ravel() ** 2, np.diag(cov))
    assert rel.ledger.total() == pytest.approx(1.0)


def test_without_post_processing_the_raw_leaves_are_released():
    xy = np.random.default_rng(2).uniform(0, SIDE, (200, 2))
    dom = Domain(0.0, 0.0, SIDE, 3)
    cls = get("quadtree")
    ctx = RunContext(rng=np.random.default_rng(0))
    noise = _RecordedNoise(5)
    ctx.__dict__["_noise"] = noise
    rel = cls().run(square_dataset(xy, "quadtree"), dom, 1.0, cls.schema().resolve({"post_processing": False}), ctx)
    assert np.array_equal(rel.density, noise.outputs[-1])
    e_leaf = rel.diagnostics["epsilon_per_level"][-1]
    assert np.allclose(rel.noise.cell_sd(rel.domain.n), math.sqrt(2) / e_leaf)


def test_coarser_leaves_are_spread_over_their_cells():
    """height 2 on an 8 x 8 map is the 4 x 4 map's tree (same noisy counts at the same seed), each leaf's estimate
    and standard error spread evenly over its 2 x 2 output cells."""
    xy = np.random.default_rng(6).uniform(0, SIDE, (300, 2))
    cls = get("quadtree")
    p = cls.schema().resolve({"height": 2})
    coarse = cls().run(
        square_dataset(xy, "quadtree"), Domain(0.0, 0.0, SIDE, 3), 1.0, p, RunContext(np.random.default_rng(1))
    )
    leaves = cls().run(
        square_dataset(xy, "quadtree"), Domain(0.0, 0.0, SIDE, 2), 1.0, p, RunContext(np.random.default_rng(1))
    )
    assert coarse.diagnostics["height"] == 2 and len(coarse.diagnostics["epsilon_per_level"]) == 3
    assert np.allclose(coarse.density, np.kron(leaves.density, np.ones((2, 2))) / 4)
    assert np.allclose(coarse.noise.cell_sd(8), np.kron(leaves.noise.cell_sd(4), np.ones((2, 2))) / 4)
