"""DPCube (engine/mechanisms/dpcube): the noise-corrected squared deviation by brute force, the kd-tree on maps
whose partition is known, the consistency step against a dense least-squares solve of the two-level system, and
the mechanism's steps with the noise switched off."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.grid import Domain
from engine.mechanisms import RunContext, get
from engine.mechanisms.dpcube.kdtree import consistent_totals, estimated_sse, kd_partition, summed_area_tables
from tests.support.datasets import SIDE, square_dataset
from tests.support.noise import ZeroNoise


def test_estimated_sse_by_brute_force():
    rng = np.random.default_rng(0)
    c = rng.normal(10, 4, (6, 7))
    s, s2 = summed_area_tables(c)
    for r0, c0, r1, c1 in [(0, 0, 6, 7), (1, 2, 4, 3), (5, 6, 6, 7), (2, 0, 3, 7)]:
        block = c[r0:r1, c0:c1]
        sse = ((block - block.mean()) ** 2).sum()
        k = block.size
        assert float(estimated_sse(s, s2, r0, c0, r1, c1, 0.0)) == pytest.approx(sse)
        assert float(estimated_sse(s, s2, r0, c0, r1, c1, 0.5)) == pytest.approx(max(sse - (k - 1) * 0.5, 0.0))


def test_kd_partition_finds_the_blocks_of_a_piecewise_constant_map():
    """A map of three constant rectangles and no noise (var1 = 0, a small var2): the partition is those three
    rectangles; a constant map stays whole; a single cell cannot split."""
    c = np.zeros((8, 8))
    c[:, :3] = 50.0  # columns 0-2
    c[:5, 3:] = 10.0  # rows 0-4 of columns 3-7
    parts = kd_partition(c, 0.0, 1.0)
    assert sorted(map(tuple, parts)) == [(0, 0, 8, 3), (0, 3, 5, 8), (5, 3, 8, 8)]
    assert kd_partition(np.full((8, 8), 7.0), 0.0, 1.0).tolist() == [[0, 0, 8, 8]]
    assert kd_partition(np.ones((1, 1)), 1.0, 1.0).tolist() == [[0, 0, 1, 1]]


def test_kd_partition_does_not_split_pure_noise_much():
    """Noise alone (var1 = 1 on a constant map) has no deviation to remove beyond its own share: with var2 = 4 the
    partition stays a few rectangles (a split must beat 4 in squared deviation)."""
    c = 5.0 + np.random.default_rng(1).normal(0, 1, (16, 16))
    assert len(kd_partition(c, 1.0, 4.0)) <= 4


def test_consistent_totals_are_the_dense_least_squares_solution():
    """One partition of k cells: observations c~_j = c_j + e_j (variance var1) and y = sum c + e (variance var2).
    The least-squares estimate of sum c from the dense weighted solve equals the inverse-variance mean, and its
    variance is the solve's."""
    rng = np.random.default_rng(2)
    k, var1, var2 = 6, 2.0, 0.5
    noisy_cells, y = rng.normal(5, 1, k), 33.0
    X = np.vstack([np.eye(k), np.ones((1, k))])
    w = np.append(np.full(k, 1 / var1), 1 / var2)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    beta = cov @ X.T @ (w * np.append(noisy_cells, y))
    tot, var = consistent_totals(np.array([y]), np.array([noisy_cells.sum()]), np.array([k]), var1, var2)
    assert tot[0] == pytest.approx(beta.sum())
    assert var[0] == pytest.approx(cov.sum())


def _blocks_dataset():
    """A 16 x 16 map whose left half holds 20 people per cell and right half none."""
    cell = SIDE / 16
    xy = [((ix + 0.5) * cell, (iy + 0.5) * cell) for iy in range(16) for ix in range(8) for _ in range(20)]
    return square_dataset(xy, "dpcube"), Domain(0.0, 0.0, SIDE, 4)


@pytest.mark.parametrize("consistency", [True, False])
def test_the_mechanism_without_noise(consistency):
    """Noise off, 8 x 8 cells of 2 x 2 output cells: the partition is the two halves, the map the truth; the scales
    asked for are 1/eps1 (cells) then 1/eps2 (partitions), and the partition rectangles tile the map."""
    data, dom = _blocks_dataset()
    cls = get("dpcube")
    ctx = RunContext(rng=np.random.default_rng(0))
    zero = ZeroNoise()
    ctx.__dict__["_noise"] = zero
    rel = cls().run(data, dom, 1.0, cls.schema().resolve({"cells": 8, "consistency": consistency}), ctx)
    eps1, eps2 = rel.diagnostics["epsilon_cells"], rel.diagnostics["epsilon_partitions"]
    assert zero.scales == pytest.approx([1 / eps1, 1 / eps2]) and eps1 + eps2 == pytest.approx(1.0)
    assert rel.diagnostics["partitions"] == 2
    assert np.allclose(rel.density, dom.histogram(data.xy))
    cell = dom.cell
    areas = (rel.partition[:, 2] - rel.partition[:, 0]) * (rel.partition[:, 3] - rel.partition[:, 1]) / cell**2
    assert areas.sum() == pytest.approx(256)
    if consistency:
        assert isinstance(rel.noise, str)
    else:
        assert np.allclose(rel.noise.cell_sd(16), math.sqrt(2) / eps2 / 128)


def test_cells_must_be_a_power_of_two():
    from engine.core.errors import ParamError

    data, dom = _blocks_dataset()
    cls = get("dpcube")
    with pytest.raises(ParamError, match="power of two"):
        cls().run(data, dom, 1.0, cls.schema().resolve({"cells": 12}), RunContext(np.random.default_rng(0)))
