"""The SVD lower bound (engine/metrics/lower_bound.py) and the implicit workloads it reads (engine/core/workload.py):
against numpy's SVD of the dense workload on small grids, below the closed-form expected error of every matrix
mechanism here (Identity, the hierarchical tree at full height, HDMM), attained where it is known to be, and
computed once per workload."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core.errors import ParamError
from engine.core.grid import Domain, range_counts
from engine.core.workload import RangeWorkload
from engine.data.dataset import Dataset, DatasetMeta
from engine.mechanisms import RunContext, get
from engine.metrics import lower_bound as lb

SIDE = 8_000.0


def _rects(n: int, count: int, seed: int, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n + 1, (count, 4)) if integer else rng.uniform(0, n, (count, 4))
    x0, x1 = np.minimum(a[:, 0], a[:, 2]), np.maximum(a[:, 0], a[:, 2])
    y0, y1 = np.minimum(a[:, 1], a[:, 3]), np.maximum(a[:, 1], a[:, 3])
    return np.column_stack([x0, y0, np.maximum(x1, x0 + 1), np.maximum(y1, y0 + 1)]).clip(0, n)


def _svd_factor(W: np.ndarray) -> float:
    return np.linalg.svd(W, compute_uv=False).sum() ** 2 / W.shape[1]


WORKLOADS = {
    "all ranges 4": lambda: RangeWorkload.all_ranges(4),
    "all ranges 8": lambda: RangeWorkload.all_ranges(8),
    "30 fractional rectangles on 8 x 8 (q < N)": lambda: RangeWorkload.rectangles(_rects(8, 30, 1), 8),
    "200 whole-cell rectangles on 8 x 8 (q > N)": lambda: RangeWorkload.rectangles(_rects(8, 200, 2, True), 8),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_factor_equals_numpys_svd_of_the_dense_workload(name):
    w = WORKLOADS[name]()
    assert lb.svd_bound_factor(w) == pytest.approx(_svd_factor(w.dense()), rel=1e-9)


def test_implicit_forms_are_the_dense_workload():
    n = 8
    rects = _rects(n, 25, 3)
    w = RangeWorkload.rectangles(rects, n)
    W = w.dense()
    assert np.allclose(w.row_gram(), W @ W.T)
    # a row answers its rectangle as the grid does (partly covered cells by area)
    grid = np.random.default_rng(4).random((n, n))
    dom = Domain(0.0, 0.0, SIDE, 3)
    assert np.allclose(W @ grid.ravel(), range_counts(grid, dom, rects * dom.cell))
    assert RangeWorkload.all_ranges(n).dense().shape == ((n * (n + 1) // 2) ** 2, n * n)
    assert RangeWorkload.all_ranges(n).queries == (n * (n + 1) // 2) ** 2


def test_attained_by_the_laplace_mechanism_on_cells_and_on_the_total():
    """The identity workload (every cell a query): (2/ε²) N, Identity's own error. The total: 2/ε², one Laplace
    draw on the total."""
    n, eps = 8, 0.5
    cells = np.array([[i, j, i + 1, j + 1] for j in range(n) for i in range(n)], dtype=float)
    assert lb.tse_bound(RangeWorkload.rectangles(cells, n), eps) == pytest.approx(2 / eps**2 * n * n)
    assert lb.tse_bound(RangeWorkload.rectangles([[0, 0, n, n]], n), eps) == pytest.approx(2 / eps**2)


def _dataset() -> Dataset:
    xy = np.random.default_rng(5).uniform(0, SIDE, (50, 2))
    meta = DatasetMeta(name="t", source="test", synthetic=True, bbox=(0.0, 0.0, 0.07, 0.07))
    return Dataset(xy=xy, lonlat=xy / 111_320.0, crs="", meta=meta)


def _release(key, eps, **params):
    cls = get(key)
    dom = Domain(0.0, 0.0, SIDE, 3)
    return cls().run(_dataset(), dom, eps, cls.schema().resolve(params), RunContext(rng=np.random.default_rng(0)))


@pytest.mark.parametrize("name", ["all ranges 8", "30 fractional rectangles on 8 x 8 (q < N)"])
def test_every_matrix_mechanism_is_at_or_above_the_bound(name):
    """Closed-form expected total squared error on the workload, from each mechanism's own covariance: Identity
    (independent cells), the hierarchical tree with leaves at the cells (its constrained inference's
    covariance, engine.regions.margins) and HDMM optimised for the workload (its Kronecker covariance)."""
    from engine.mechanisms.hdmm import mechanism as hm
    from engine.mechanisms.hdmm.strategy import expected_error

    w, eps = WORKLOADS[name](), 1.0
    W = w.dense()
    bound = lb.tse_bound(w, eps)
    identity = float((W**2 @ _release("identity", eps).noise.sd ** 2).sum())
    assert identity == pytest.approx(2 / eps**2 * (W**2).sum())
    tree = _release("hierarchical", eps, height=3).noise.covariance.variance
    hierarchical = sum(tree(row) for row in W)
    hdmm = 2 / eps**2 * expected_error(w, *hm.strategy_for(w, 1))
    for tse in (identity, hierarchical, hdmm):
        assert tse >= bound * (1 - 1e-12)
    assert hdmm <= identity * (1 + 1e-12)  # HDMM's family holds the identity


def test_computed_once_per_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(tmp_path))
    calls = []
    real = lb._nuclear_norm_sq
    monkeypatch.setattr(lb, "_nuclear_norm_sq", lambda w: calls.append(w.key()) or real(w))
    w = RangeWorkload.rectangles(_rects(8, 20, 6), 8)
    assert lb.svd_bound_factor(w) == lb.svd_bound_factor(w)
    assert len(calls) == 1
    lb.svd_bound_factor(RangeWorkload.rectangles(_rects(8, 20, 7), 8))  # another workload, another entry
    assert len(calls) == 2


def test_rmse_bound_scales_as_one_over_epsilon_and_refuses_bad_input():
    w = RangeWorkload.all_ranges(16)
    assert lb.rmse_bound(w, 0.5) == pytest.approx(2 * lb.rmse_bound(w, 1.0))
    assert lb.rmse_bound(w, 1.0) == pytest.approx(np.sqrt(2 * lb.svd_bound_factor(w) / w.queries))
    with pytest.raises(ParamError):
        lb.rmse_bound(w, 0.0)
    with pytest.raises(ParamError):
        RangeWorkload.rectangles(np.zeros((0, 4)), 8)


def test_range_errors_carry_the_rmse_as_a_multiple_of_the_bound():
    """With the run's ε, the metrics hold the RMSE over the 200 squares and its ratio to the bound for those very
    squares; Identity's expected RMSE there is at least the bound (a matrix mechanism)."""
    from engine import metrics as M
    from engine.mechanisms import Release

    d = Domain(0.0, 0.0, 1000.0, 5)
    g = np.random.default_rng(2).poisson(3.0, (32, 32)).astype(float)
    noisy = Release(g + np.random.default_rng(3).laplace(0, 2.0, g.shape), d, None, None, None)
    out = M.range_query_errors(g, noisy, d, np.random.default_rng(4), epsilon=0.5)
    rects = d.random_square_queries(np.random.default_rng(4), M.RANGE_QUERIES, M.RANGE_SIDE_FRAC)
    w = RangeWorkload.rectangles(d.rect_to_cells(rects), d.n)
    assert out["range_rmse_x_bound"] == pytest.approx(out["range_rmse"] / lb.rmse_bound(w, 0.5))
    identity_rmse = np.sqrt(2 / 0.5**2 * np.mean((w.cx**2).sum(1) * (w.cy**2).sum(1)))  # Laplace(1/ε) per cell
    assert identity_rmse >= lb.rmse_bound(w, 0.5)
    assert "range_rmse_x_bound" not in M.range_query_errors(g, noisy, d, np.random.default_rng(4))


def test_a_damaged_cache_entry_is_computed_again(tmp_path, monkeypatch):
    from engine.core import cache

    monkeypatch.setenv("HEATMAP_CACHE_DIR", str(tmp_path))
    w = RangeWorkload.rectangles(_rects(8, 20, 8), 8)
    good = lb.svd_bound_factor(w)
    (entry,) = (tmp_path / "data_free" / "svd_bound").glob("*.f64")
    entry.write_bytes(entry.read_bytes()[:-3])  # cut short, as by a full disk
    cache._DATA_FREE_MEMO.clear()
    assert lb.svd_bound_factor(w) == good
    cache._DATA_FREE_MEMO.clear()
    assert cache.data_free("svd_bound", w.key(), lambda: pytest.fail("recomputed"))["factor"] == good
