"""DAWA (engine/mechanisms/dawa): the Hilbert order, the partition's cost function and dynamic programme,
GreedyH's closed forms and least squares against explicit linear algebra, the workload, the mechanism.

Statistical checks run at fixed seeds with a stated false-alarm rate (chi-square at 1e-3)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from engine.core.errors import ParamError
from engine.core.grid import Domain
from engine.mechanisms import RunContext, get
from engine.mechanisms.dawa.greedyh import (
    P_GRID,
    all_ranges_sample,
    bucket_workload,
    build_tree,
    greedy_weights,
    least_squares,
    node_totals,
    node_weights,
)
from engine.mechanisms.dawa.hilbert import hilbert_order, hilbert_xy
from engine.mechanisms.dawa.partition import (
    candidate_lengths,
    cost_noise_scale,
    least_cost_partition,
    noisy_costs,
    private_partition,
    window_devs,
)
from tests.support.datasets import SIDE, square_dataset
from tests.support.noise import ZeroNoise


def greedyh_matrix(tree, weights: np.ndarray) -> np.ndarray:
    """GreedyH's weighted strategy as a dense matrix (measured nodes x buckets), to check it on small cases."""
    lo, hi = tree.nodes()
    keep = np.flatnonzero(weights > 0)
    A = np.zeros((keep.size, tree.m))
    for r, k in enumerate(keep):
        A[r, lo[k] : hi[k]] = weights[k]
    return A


def partition_cost(x: np.ndarray, starts: np.ndarray, eps2: float) -> float:
    """Noise-free total cost of a partition: sum over buckets of dev(B) + 1/eps2 (the paper's Section 3)."""
    edges = np.append(starts, x.size)
    return float(
        sum(np.abs(x[a:b] - x[a:b].mean()).sum() + 1.0 / eps2 for a, b in zip(edges[:-1], edges[1:], strict=True))
    )


# ------------------------------------------------------------------ Hilbert order
@pytest.mark.parametrize("depth", [0, 1, 2, 3, 5, 8])
def test_hilbert_order_is_a_bijection_of_adjacent_steps(depth):
    n = 1 << depth
    order = hilbert_order(depth)
    assert np.array_equal(np.sort(order), np.arange(n * n))
    x, y = hilbert_xy(depth)
    assert np.all((0 <= x) & (x < n) & (0 <= y) & (y < n))
    if depth:
        assert np.all(np.abs(np.diff(x)) + np.abs(np.diff(y)) == 1)  # each step moves to an edge neighbour
        # the curve's quadrant structure: each quarter of the order fills one quadrant
        q = (x >= n // 2).astype(int) * 2 + (y >= n // 2)
        assert all(len(set(q[k * n * n // 4 : (k + 1) * n * n // 4])) == 1 for k in range(4))


# ------------------------------------------------------------------ partition
def test_window_devs_are_the_deviation_from_the_mean():
    rng = np.random.default_rng(3)
    x = rng.poisson(2.0, 300).astype(float) * rng.random(300)
    for length in (1, 2, 3, 8, 64, 300):
        want = [np.abs(x[s : s + length] - x[s : s + length].mean()).sum() for s in range(x.size - length + 1)]
        assert np.allclose(window_devs(x, length), want, atol=1e-9)


def _brute_force_best(x, lengths, eps2):
    """The least noise-free cost over every partition into buckets of the allowed lengths."""
    allowed = set(int(v) for v in lengths) | {1}
    best = np.inf
    n = x.size
    for cuts in itertools.product([0, 1], repeat=n - 1):
        starts = np.concatenate([[0], np.flatnonzero(cuts) + 1])
        if not set(np.diff(np.append(starts, n)).tolist()) <= allowed:
            continue
        best = min(best, partition_cost(x, starts, eps2))
    return best


@pytest.mark.parametrize("variant", ["approx", "exact"])
def test_least_cost_partition_is_the_minimum_over_all_partitions(variant):
    """Without noise the dynamic programme returns a partition of least total cost dev(B) + 1/eps2."""
    rng = np.random.default_rng(11)
    for trial in range(6):
        n = 8
        x = rng.poisson(3.0, n).astype(float) * (rng.random(n) < 0.6)
        eps2 = [0.2, 1.0, 5.0][trial % 3]
        starts = private_partition(x, 1.0, eps2, ZeroNoise(), variant)
        assert starts[0] == 0 and np.all(np.diff(starts) > 0)
        lengths = np.diff(np.append(starts, n))
        assert set(lengths.tolist()) <= set(candidate_lengths(n, variant).tolist()) | {1}
        assert partition_cost(x, starts, eps2) == pytest.approx(
            _brute_force_best(x, candidate_lengths(n, variant), eps2)
        )


def test_uniform_data_is_one_bucket_and_a_spike_is_cut_out():
    eps2 = 1.0
    assert private_partition(np.full(16, 3.0), 1.0, eps2, ZeroNoise()).tolist() == [0]
    x = np.zeros(16)
    x[5] = 50.0
    starts = private_partition(x, 1.0, eps2, ZeroNoise())
    edges = np.append(starts, 16)
    assert [5, 6] in [[a, b] for a, b in zip(edges[:-1], edges[1:])]  # the spike alone in its bucket


def test_cost_noise_scales_and_clamp():
    n, eps1, eps2 = 16, 0.5, 2.0
    noise = ZeroNoise()
    lengths = candidate_lengths(n, "approx")
    assert lengths.tolist() == [2, 4, 8, 16]
    costs = noisy_costs(np.zeros(n), lengths, eps1, eps2, noise)
    assert noise.scales == pytest.approx([(2 - 1 / L - 1 / n) / eps1 for L in lengths])
    assert cost_noise_scale(16, 16, eps1) == pytest.approx((2 - 2 / 16) / eps1)
    assert np.all(costs[np.isfinite(costs)] == 1 / eps2)  # zero deviation: just the measuring cost
    # a noisy cost never falls below 1/eps2: with real noise, the clamp holds
    rng_costs = noisy_costs(np.zeros(n), lengths, eps1, eps2, _Gen(np.random.default_rng(0)))
    assert rng_costs[np.isfinite(rng_costs)].min() == pytest.approx(1 / eps2)
    assert np.isinf(costs[3, 1:]).all()  # the length-16 bucket only starts at 0


class _Gen:
    def __init__(self, rng):
        self.rng = rng

    def add_laplace(self, x, scale):
        return np.asarray(x) + self.rng.laplace(0, scale, np.shape(x))


def test_exact_partition_refuses_large_maps():
    with pytest.raises(ParamError, match="exact partition"):
        candidate_lengths(4096, "exact")
    with pytest.raises(ParamError, match="unknown partition"):
        candidate_lengths(16, "greedy")


def test_least_cost_partition_prefers_cheaper_long_buckets():
    costs = np.full((1, 4), np.inf)
    costs[0, :3] = [0.5, 10.0, 0.5]
    assert least_cost_partition(costs, np.array([2]), 1.0).tolist() == [0, 2]


# ------------------------------------------------------------------ GreedyH
def _all_ranges(m):
    rows = [(a, b) for a in range(m) for b in range(a + 1, m + 1)]
    Q = np.zeros((len(rows), m))
    for i, (a, b) in enumerate(rows):
        Q[i, a:b] = 1.0
    return Q


@pytest.mark.parametrize("m", [1, 2, 5, 16, 37])
def test_greedyh_closed_forms_match_explicit_algebra(m):
    """The weights sum to 1 on every bucket's path (L1 sensitivity 1), the greedy error is
    trace(Q'Q (A'A)^-1) of the weighted strategy, and the tree least squares is numpy's lstsq with
    the diagonal of (A'A)^-1 as variances."""
    rng = np.random.default_rng(m)
    Q = _all_ranges(m) * rng.random((1, m))  # ranges with unequal bucket coverage
    tree = build_tree(m)
    shares, err = greedy_weights(tree, sp.csr_matrix(Q))
    w = node_weights(tree, shares)
    A = greedyh_matrix(tree, w)
    assert np.allclose(A.sum(axis=0), 1.0)
    cov = np.linalg.inv(A.T @ A)
    assert err == pytest.approx(np.trace(Q.T @ Q @ cov), rel=1e-9)
    x = rng.random(m) * 20
    y = node_totals(tree, x) * w + rng.normal(size=w.size) * (w > 0)
    est, var = least_squares(tree, w, y, 2.5)
    want = np.linalg.lstsq(A, y[w > 0], rcond=None)[0]
    assert np.allclose(est, want, atol=1e-9)
    assert np.allclose(var, 2.5 * np.diag(cov), rtol=1e-9)


def _node_objective(K, below, p, delta):
    """trace(K (A^T A)^-1) for a node's query of weight (1 - p) sqrt(delta) above its children's strategy x p."""
    A = np.vstack([(1 - p) * np.sqrt(delta) * np.ones((1, K.shape[0])), p * below])
    return np.trace(K @ np.linalg.inv(A.T @ A))


def test_greedyh_depth_decay_is_the_search_over_a_discounted_node_query():
    """With the depth decay, the share chosen at every node of depth d minimises, over the grid, the explicit
    trace(K' (A'^T A')^-1) where the node's own query has weight (1 - p) 2^(-d/4) (variance discounted by
    delta = 2^(-d/2)) over the children's chosen strategies scaled by p, and K' is the node's block of
    Q^T Q + ridge I with the blocks between the two children scaled by delta."""
    m, ridge = 64, 0.3
    rng = np.random.default_rng(3)
    Q = _all_ranges(m) * rng.random((1, m))
    K = Q.T @ Q + ridge * np.eye(m)
    tree = build_tree(m)
    shares, _ = greedy_weights(tree, sp.csr_matrix(Q), ridge)

    def strategy(d, k):
        lo, hi, left = tree.lo[d][k], tree.hi[d][k], tree.left[d][k]
        if left < 0:
            return np.ones((1, 1))
        p = shares[d][k]
        kids = [strategy(d + 1, left), strategy(d + 1, left + 1)]
        below = np.block(
            [
                [kids[0], np.zeros((kids[0].shape[0], kids[1].shape[1]))],
                [np.zeros((kids[1].shape[0], kids[0].shape[1])), kids[1]],
            ]
        )
        checked.append((d, k, lo, hi, kids, p))
        return np.vstack([(1 - p) * np.ones((1, hi - lo)), p * below]) if p < 1 else below

    checked = []
    strategy(0, 0)
    differs = 0
    for d, _k, lo, hi, kids, chosen in checked:
        delta = 2.0 ** (-d / 2.0)
        n_left = kids[0].shape[1]
        Kv = K[lo:hi, lo:hi].copy()
        Kv[:n_left, n_left:] *= delta
        Kv[n_left:, :n_left] *= delta
        below = np.block(
            [
                [kids[0], np.zeros((kids[0].shape[0], kids[1].shape[1]))],
                [np.zeros((kids[1].shape[0], kids[0].shape[1])), kids[1]],
            ]
        )
        obj = np.array([_node_objective(Kv, below, p, delta) for p in P_GRID])
        assert obj[np.flatnonzero(np.isclose(P_GRID, chosen))[0]] <= obj.min() * (1 + 1e-9)
        exact = [_node_objective(K[lo:hi, lo:hi], below, p, 1.0) for p in P_GRID]
        differs += not np.isclose(P_GRID[int(np.argmin(exact))], chosen)
    assert len(checked) == m - 1
    assert differs > 0  # the discount changes some node's share on this workload


def test_greedyh_depth_decay_lowers_the_error_on_many_buckets():
    """All ranges over 256 buckets: the discounted search's strategy has a lower exact expected error than
    the undiscounted (myopic) one's, by more than a tenth."""
    Q = sp.csr_matrix(_all_ranges(256))
    tree = build_tree(256)
    assert greedy_weights(tree, Q)[1] < 0.9 * greedy_weights(tree, Q, decay=False)[1]


def test_greedyh_point_queries_are_a_ridge_on_the_workload():
    """``ridge`` = every bucket as an extra point query of that weight: the closed form equals the explicit
    trace with ``Q^T Q + ridge I``; and on a workload that never cuts two buckets apart, the point queries
    keep the split's share from the grid's floor."""
    m = 9
    Q = _all_ranges(m)[::5]
    tree = build_tree(m)
    shares, err = greedy_weights(tree, sp.csr_matrix(Q), ridge=0.7)
    A = greedyh_matrix(tree, node_weights(tree, shares))
    assert err == pytest.approx(np.trace((Q.T @ Q + 0.7 * np.eye(m)) @ np.linalg.inv(A.T @ A)), rel=1e-9)
    whole = np.ones((1, 2))  # one query, over both buckets
    assert greedy_weights(build_tree(2), sp.csr_matrix(whole))[0][0][0] == pytest.approx(0.01)
    assert greedy_weights(build_tree(2), sp.csr_matrix(whole), ridge=1.0)[0][0][0] > 0.3


def test_greedyh_beats_identity_on_many_buckets():
    """On all ranges over 128 buckets the greedy weights measure some inner nodes (p < 1) and lower the
    expected error below measuring each bucket alone (the identity strategy: sum of range lengths)."""
    m = 128
    Q = _all_ranges(m)
    shares, err = greedy_weights(build_tree(m), sp.csr_matrix(Q))
    assert min(s.min() for s in shares) < 1.0
    assert err < Q.sum() * 0.95


def test_bucket_workload_is_each_query_share_of_each_bucket():
    rng = np.random.default_rng(5)
    n = 8
    labels = np.repeat(np.arange(16), 4)[rng.permutation(64)].reshape(n, n)
    sizes = np.bincount(labels.ravel())
    rects = all_ranges_sample(n, 50, rng)
    Q = bucket_workload(rects, labels, sizes).toarray()
    for (x0, y0, x1, y1), row in zip(rects, Q):
        want = np.bincount(labels[y0:y1, x0:x1].ravel(), minlength=16) / sizes
        assert np.allclose(row, want)


def test_all_ranges_sample_is_uniform_over_ranges():
    """Chi-square goodness of fit of the x-intervals of a 3-cell axis (6 intervals) to uniform, at a 1e-3
    false-alarm rate."""
    rects = all_ranges_sample(3, 60_000, np.random.default_rng(2))
    assert np.all(rects[:, 2] > rects[:, 0]) and np.all(rects[:, 3] > rects[:, 1])
    codes = rects[:, 0] * 4 + rects[:, 2]
    _, counts = np.unique(codes, return_counts=True)
    assert counts.size == 6
    assert stats.chisquare(counts).pvalue > 1e-3


# ------------------------------------------------------------------ the mechanism
def _run(ds, depth=4, eps=1.0, seed=0, **params):
    cls = get("dawa")
    p = cls.schema().resolve(params)
    return cls().run(ds, Domain(0.0, 0.0, SIDE, depth), eps, p, RunContext(rng=np.random.default_rng(seed)))


@pytest.fixture(scope="module")
def city():
    rng = np.random.default_rng(7)
    return square_dataset(rng.normal(SIDE / 2, 2500, (3000, 2)).clip(1, SIDE - 1), "dawa")


def test_release_follows_its_buckets_and_budget(city):
    rel = _run(city, depth=5, eps=2.0)
    labels = rel.extras["buckets"]
    assert labels.shape == (32, 32) and labels.max() + 1 == rel.diagnostics["buckets"]
    # cells of a bucket share its estimate evenly
    for b in range(labels.max() + 1):
        vals = rel.density[labels == b]
        assert np.allclose(vals, rel.extras["bucket_estimates"][b] / vals.size)
    # buckets are contiguous intervals of the Hilbert order
    along = labels.ravel()[hilbert_order(5)]
    assert np.all(np.diff(along) >= 0) and np.all(np.diff(along) <= 1)
    assert rel.ledger.total() == pytest.approx(2.0)
    assert rel.diagnostics["epsilon_partition"] == pytest.approx(0.5)
    truth = city.true_histogram(Domain(0.0, 0.0, SIDE, 5))
    assert abs(rel.density.sum() - truth.sum()) < 60  # the total: a few noise scales of 1/eps2


def test_dawa_beats_identity_at_small_scale(city):
    """DPBench's finding at small scale: on 3,000 points over 64 x 64 cells at epsilon 0.1, DAWA's
    mean absolute error per cell is below the Laplace histogram's (median over 5 seeds)."""
    dom = Domain(0.0, 0.0, SIDE, 6)
    truth = city.true_histogram(dom)
    ident = get("identity")
    dawa_err, id_err = [], []
    for s in range(5):
        dawa_err.append(np.abs(_run(city, depth=6, eps=0.1, seed=s).density - truth).mean())
        r = ident().run(city, dom, 0.1, ident.schema().resolve({}), RunContext(rng=np.random.default_rng(s)))
        id_err.append(np.abs(r.density - truth).mean())
    assert np.median(dawa_err) < 0.5 * np.median(id_err)


def test_squares_workload_and_bad_input(city):
    rel = _run(city, workload="squares", side_min_pct=5.0, side_max_pct=20.0)
    assert rel.diagnostics["workload"] == "squares"
    with pytest.raises(ParamError, match="square sides"):
        _run(city, workload="squares", side_min_pct=30.0, side_max_pct=20.0)
    with pytest.raises(ParamError, match="exact partition"):
        _run(city, depth=6, partition="exact")
    small = _run(city, depth=3, partition="exact")
    assert small.diagnostics["partition"] == "exact"
