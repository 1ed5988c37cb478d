"""HDMM (engine/mechanisms/hdmm): the p-Identity objective and gradient, the strategy's closed-form expected error
and the Kronecker least squares against dense linear algebra on small grids, the published all-range figure,
the mechanism's closed form against seeded simulation, its margins and its disk cache.

Statistical checks run at fixed seeds with a stated false-alarm rate (two-sided z at 1e-3)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.core import cache
from engine.core.grid import Domain
from engine.core.workload import RangeWorkload, all_range_gram
from engine.data.dataset import Dataset, DatasetMeta
from engine.mechanisms import RunContext, get
from engine.mechanisms.hdmm import mechanism as hm
from engine.mechanisms.hdmm.strategy import (
    expected_error,
    gram_inverse,
    kron_answers,
    kron_least_squares,
    opt0,
    opt0_best,
    opt0_objective,
    optimise,
    pseudo_inverse,
    strategy_matrix,
)

Z_1E3 = stats.norm.ppf(1 - 1e-3 / 2)  # two-sided z at a false-alarm rate of 1e-3
SIDE = 8_000.0


def _rects(n: int, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, n, (count, 4))
    return np.column_stack([a[:, :2].min(1), a[:, 2:].min(1), a[:, :2].max(1), a[:, 2:].max(1)])[:, [0, 1, 2, 3]]


def _dataset(xy: np.ndarray) -> Dataset:
    meta = DatasetMeta(name="t", source="test", synthetic=True, bbox=(0.0, 0.0, 0.07, 0.07))
    return Dataset(xy=xy, lonlat=xy / 111_320.0, crs="", meta=meta)


# --------------------------------------------------------------------- OPT_0
def test_objective_is_the_dense_error_and_its_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    n, p = 12, 3
    W = RangeWorkload.rectangles(_rects(n, 30, 1), n)
    G = W.cx.T @ W.cx
    theta = rng.random((p, n))
    f, grad = opt0_objective(theta, G)
    A = strategy_matrix(theta)
    assert f == pytest.approx(np.trace(G @ np.linalg.inv(A.T @ A)), rel=1e-10)
    h = 1e-6
    for r, c in [(0, 0), (1, 5), (2, 11)]:
        e = np.zeros_like(theta)
        e[r, c] = h
        num = (opt0_objective(theta + e, G)[0] - opt0_objective(theta - e, G)[0]) / (2 * h)
        assert grad[r, c] == pytest.approx(num, rel=1e-5)


def test_p_identity_has_sensitivity_one_and_its_inverses_are_exact():
    theta = np.random.default_rng(1).random((2, 9))
    A = strategy_matrix(theta)
    assert (A >= 0).all() and np.allclose(np.abs(A).sum(axis=0), 1.0)
    assert np.allclose(gram_inverse(theta), np.linalg.inv(A.T @ A))
    assert np.allclose(pseudo_inverse(theta), np.linalg.pinv(A))


def test_opt0_best_never_loses_to_the_identity_and_beats_it_on_all_ranges():
    """From the paper's random start alone the optimiser ends above the identity's error on 16 cells with p = 1
    (a local minimum); the best of its starts and of the identity does not."""
    G16 = all_range_gram(16)
    assert opt0_objective(opt0(G16, 1), G16)[0] > 1.02 * np.trace(G16)  # the identity's error is tr(G)
    assert opt0_objective(opt0_best(G16, 1), G16)[0] <= np.trace(G16)
    G64 = all_range_gram(64)
    assert opt0_objective(opt0_best(G64, 4), G64)[0] < 0.8 * np.trace(G64)


# --------------------------------------------------------------------- closed form vs dense
@pytest.mark.parametrize("kind", ["all ranges", "rectangles"])
def test_expected_error_equals_the_dense_computation_on_8x8(kind):
    n = 8
    w = RangeWorkload.all_ranges(n) if kind == "all ranges" else RangeWorkload.rectangles(_rects(n, 40, 2), n)
    rng = np.random.default_rng(3)
    ty, tx = rng.random((2, n)), rng.random((1, n))
    A = np.kron(strategy_matrix(ty), strategy_matrix(tx))
    W = w.dense()
    assert np.abs(A).sum(axis=0).max() == pytest.approx(1.0)  # the product is of sensitivity 1 too
    dense = np.trace(W.T @ W @ np.linalg.inv(A.T @ A))
    assert expected_error(w, ty, tx) == pytest.approx(dense, rel=1e-10)


def test_kronecker_least_squares_equals_the_dense_solve():
    n = 8
    rng = np.random.default_rng(4)
    ty, tx = rng.random((2, n)), rng.random((3, n))
    Ay, Ax = strategy_matrix(ty), strategy_matrix(tx)
    Y = kron_answers(Ay, Ax, rng.random((n, n))) + rng.normal(size=(n + 2, n + 3))
    dense = np.linalg.lstsq(np.kron(Ay, Ax), Y.ravel(), rcond=None)[0]
    assert np.allclose(kron_least_squares(pseudo_inverse(ty), pseudo_inverse(tx), Y).ravel(), dense)
    assert np.allclose(kron_answers(Ay, Ax, np.eye(n)).ravel(), np.kron(Ay, Ax) @ np.eye(n).ravel())


def test_union_of_kronecker_rounds_beat_the_all_range_strategy_on_small_squares():
    """Block coordinate descent on the squares' exact Gram: the strategy it finds answers them better than the
    one optimised for all ranges, and no worse than the identity (best on squares this small)."""
    n = 32
    w = RangeWorkload.rectangles(_rects(n, 200, 5) / 8, n)  # squares-like: sides up to an eighth of the grid
    ty, tx, rounds = optimise(w, 2)
    ay, ax, _ = optimise(RangeWorkload.all_ranges(n), 2)
    own = expected_error(w, ty, tx)
    assert rounds >= 1
    assert own < expected_error(w, ay, ax)
    assert own <= expected_error(w, np.zeros((1, n)), np.zeros((1, n))) * (1 + 1e-12)  # Θ = 0: the identity


def test_published_all_range_figure_256():
    """HDMM's README: Kronecker p-Identity (p = 16 per axis) on all 2-D ranges of 256 x 256, RMSE 32.69 per query
    at ε = sqrt(2) (its error module's default: Laplace variance 2/ε² = 1); reproduced within 3 %."""
    w = RangeWorkload.all_ranges(256)
    ty, tx, _ = optimise(w, 16)
    rmse = np.sqrt(expected_error(w, ty, tx) / w.queries)
    assert rmse == pytest.approx(32.69, rel=0.03)


# --------------------------------------------------------------------- the mechanism
def _run(key, data, dom, eps, seed, **params):
    cls = get(key)
    return cls().run(data, dom, eps, cls.schema().resolve(params), RunContext(rng=np.random.default_rng(seed)))


def test_expected_error_matches_seeded_simulation():
    """Mean total squared error of the workload's answers over 400 releases against the closed form
    (2/ε²) tr(W^T W (A^T A)^-1): a z-test at a false-alarm rate of 1e-3."""
    dom = Domain(0.0, 0.0, SIDE, 3)
    rng = np.random.default_rng(6)
    data = _dataset(rng.uniform(0, SIDE, (300, 2)))
    truth = data.true_histogram(dom).astype(np.float64)
    eps = 0.7
    w = hm.workload_of(dom, {"workload": "all ranges"})
    W = w.dense()
    errs = []
    for s in range(400):
        r = _run("hdmm", data, dom, eps, s)
        errs.append(float(np.sum((W @ (r.density - truth).ravel()) ** 2)))
    ty, tx = hm.strategy_for(w, hm.strategy_p(dom, {"p": 0}))
    expected = 2 / eps**2 * expected_error(w, ty, tx)
    errs = np.array(errs)
    z = (errs.mean() - expected) / (errs.std(ddof=1) / np.sqrt(errs.size))
    assert abs(z) < Z_1E3, (errs.mean(), expected)
    assert r.diagnostics["expected_rmse"] == pytest.approx(np.sqrt(expected / w.queries))


def test_stderr_and_region_variance_are_the_kronecker_covariance():
    dom = Domain(0.0, 0.0, SIDE, 3)
    data = _dataset(np.random.default_rng(7).uniform(0, SIDE, (100, 2)))
    eps = 1.3
    r = _run("hdmm", data, dom, eps, 0, workload="squares", workload_queries=50)
    w = hm.workload_of(dom, get("hdmm").schema().resolve({"workload": "squares", "workload_queries": 50}))
    ty, tx = hm.strategy_for(w, 1)
    A = np.kron(strategy_matrix(ty), strategy_matrix(tx))
    cov = 2 / eps**2 * np.linalg.inv(A.T @ A)
    assert np.allclose(r.noise.cell_sd(8).ravel() ** 2, np.diag(cov))
    var_of = r.noise.covariance.variance
    a = np.zeros((8, 8))
    a[2:5, 1:7] = 1.0
    a[6, 0] = 0.5
    assert var_of(a.ravel()) == pytest.approx(a.ravel() @ cov @ a.ravel(), rel=1e-10)


def test_record_and_user_units_and_the_ledger():
    dom = Domain(0.0, 0.0, SIDE, 2)
    xy = np.array([[500.0, 500.0], [600.0, 600.0], [7000.0, 7000.0]])
    meta = DatasetMeta(name="t", source="test", synthetic=True, bbox=(0.0, 0.0, 0.07, 0.07))
    data = Dataset(xy=xy, lonlat=xy / 111_320.0, crs="", meta=meta, user_id=np.array([0, 0, 1]))
    r = _run("hdmm", data, dom, 1.0, 0)
    assert r.ledger.total() == pytest.approx(1.0)
    assert get("hdmm").neighbouring_for({"unit": "record"}) == "add/remove record"
    assert get("hdmm").matrix_mechanism({})
    # the estimate is unbiased: its mean over noise is the bounded histogram (2 users, 1 each)
    mean = np.mean([_run("hdmm", data, dom, 50.0, s).density.sum() for s in range(50)])
    assert mean == pytest.approx(2.0, abs=0.2)


def test_the_strategy_is_optimised_once_and_read_back_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(tmp_path))
    calls = []
    real = hm.optimise

    def counted(w, p):
        calls.append(p)
        return real(w, p)

    monkeypatch.setattr(hm, "optimise", counted)
    w = RangeWorkload.all_ranges(16)
    first = hm.strategy_for(w, 1)
    second = hm.strategy_for(w, 1)
    assert calls == [1]
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    assert list((tmp_path / "data_free" / "hdmm_strategy").glob("*.f64"))
    hm.strategy_for(w, 2)  # another p is another strategy
    assert calls == [1, 2]
    cache._DATA_FREE_MEMO.clear()  # a new process: read back from the disk, not optimised again
    third = hm.strategy_for(w, 1)
    assert calls == [1, 2] and np.array_equal(first[0], third[0])


@pytest.mark.parametrize("k", [2, 8])
def test_block_variances_in_one_pass_equal_one_per_block(k):
    from engine.data.region_geometry import block_regions
    from engine.regions.margins import block_margins

    dom = Domain(0.0, 0.0, SIDE, 5)
    r = _run("hdmm", _dataset(np.random.default_rng(8).uniform(0, SIDE, (200, 2))), dom, 1.0, 0)
    var_of = r.noise.covariance.variance
    regions = block_regions(dom, "", k)
    each = [var_of(regions.weights.getrow(i).toarray().ravel()) for i in range(len(regions))]
    assert np.allclose(block_margins(r, "", k).noise_sd ** 2, each, rtol=1e-10)


def test_the_planner_gives_hdmm_its_closed_form():
    """HDMM's margins are fixed by ε, the grid and its public strategy: one proxy run is the exact prediction, the
    per-cell 95 % margins the Laplace quantile of its Kronecker standard errors, whatever the user count."""
    from engine.regions.margins import LAPLACE95
    from engine.run.planning import _forecast as P

    ty, tx = hm.strategy_for(RangeWorkload.all_ranges(32), 2)
    sd = np.sqrt(2.0 / 0.8**2 * np.outer(np.diag(gram_inverse(ty)), np.diag(gram_inverse(tx))))
    for users in (500, 20_000):
        p = P.predict("hdmm", 0.8, P.default_frame(), P.stated_users(users), depth=5)
        assert p.method == "closed form" and p.runs == 1
        assert p.cell_median == pytest.approx(np.median(LAPLACE95 * sd))
        assert p.cell_p90 == pytest.approx(np.quantile(LAPLACE95 * sd, 0.9))
