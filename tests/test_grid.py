import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.errors import ParamError
from engine.core.grid import (
    Domain,
    deinterleave,
    downsample,
    interleave,
    prefix,
    pyramid,
    range_counts,
)


def brute_hist(xy, d):
    out = np.zeros((d.n, d.n))
    for x, y in xy:
        ix = min(int((x - d.x0) / d.cell), d.n - 1)
        iy = min(int((y - d.y0) / d.cell), d.n - 1)
        out[iy, ix] += 1
    return out


def test_histogram_matches_brute_force_and_orientation(rng):
    d = Domain(-50.0, 10.0, 100.0, 3)
    xy = rng.uniform([-50, 10], [50, 110], (500, 2))
    h = d.histogram(xy)
    assert np.array_equal(h, brute_hist(xy, d))
    # a point in the south-west corner lands in row 0 (south), column 0 (west)
    h1 = d.histogram(np.array([[-49.0, 11.0], [49.0, 11.0]]))
    assert h1[0, 0] == 1 and h1[0, -1] == 1 and h1.sum() == 2


def test_histogram_weights_and_numpy_fallback(rng, monkeypatch):
    import engine.core.grid as G

    d = Domain(0, 0, 1, 4)
    xy = rng.random((1000, 2))
    w = rng.random(1000)
    fast = d.histogram(xy, w)
    monkeypatch.setattr(G, "HAVE_NUMBA", False)
    slow = d.histogram(xy, w)
    assert np.allclose(fast, slow)
    assert np.isclose(fast.sum(), w.sum())


def test_domain_validation():
    with pytest.raises(ParamError):
        Domain(0, 0, 10, 11)
    with pytest.raises(ParamError):
        Domain(0, 0, -1, 3)
    with pytest.raises(ParamError):
        Domain.around(0, 0, 0, 5, 3)
    d = Domain.around(0, 0, 10, 4, 2)
    assert d.side >= 10 and d.inside(np.array([[10.0, 4.0], [0.0, 0.0]])).all()


def test_quadtree_paths_x_bit_then_y_bit():
    # depth 2, cell (ix=2, iy=1): level-1 bits x=1,y=0 -> 0b10; level-2 bits x=0,y=1 -> 0b01
    code = interleave(np.array([2]), np.array([1]), 2)
    assert int(code[0]) == 0b1001
    assert int(prefix(code, 2, 1)[0]) == 0b10
    ix, iy = deinterleave(code, 2)
    assert (ix[0], iy[0]) == (2, 1)


@given(st.integers(1, 10), st.data())
@settings(max_examples=40, deadline=None)
def test_interleave_roundtrip(depth, data):
    n = 1 << depth
    ix = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    iy = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=len(ix), max_size=len(ix))))
    rx, ry = deinterleave(interleave(ix, iy, depth), depth)
    assert np.array_equal(rx, ix) and np.array_equal(ry, iy)


def test_domain_paths_agree_with_cells(rng):
    d = Domain(0, 0, 1, 5)
    xy = rng.random((200, 2))
    ix, iy = d.cell_index(xy)
    codes = d.paths(xy)
    # the level-l prefix is the cell of the same point in the 2^l grid
    for level in range(6):
        sub = d.with_depth(level)
        jx, jy = sub.cell_index(xy)
        assert np.array_equal(prefix(codes, 5, level), interleave(jx, jy, level))


def test_pyramid_and_up_down_sampling(rng):
    g = rng.integers(0, 10, (16, 16)).astype(float)
    levels = pyramid(g)
    assert [lv.shape[0] for lv in levels] == [1, 2, 4, 8, 16]
    assert all(np.isclose(lv.sum(), g.sum()) for lv in levels)
    assert np.array_equal(downsample(g, 4), levels[2])


def test_range_counts_partial_cells():
    d = Domain(0, 0, 4, 2)  # 4x4 cells of 1 m
    g = np.arange(16, dtype=float).reshape(4, 4)
    # the whole domain
    assert np.isclose(range_counts(g, d, [[0, 0, 4, 4]])[0], g.sum())
    # half of cell (iy=0, ix=0) horizontally: 0.5 * g[0,0] = 0
    # half of cell (iy=1, ix=2): value 6 -> 3
    assert np.isclose(range_counts(g, d, [[2, 1, 2.5, 2]])[0], 3.0)
    # a quarter of each of four cells around the point (2, 2): cells (1,1)=5,(1,2)=6,(2,1)=9,(2,2)=10
    assert np.isclose(range_counts(g, d, [[1.5, 1.5, 2.5, 2.5]])[0], (5 + 6 + 9 + 10) / 4)
    # clipped outside the domain, and empty rectangles count zero
    assert np.isclose(range_counts(g, d, [[-10, -10, 10, 10]])[0], g.sum())
    assert range_counts(g, d, [[3, 3, 1, 1]])[0] == 0


def test_random_queries_inside(rng):
    d = Domain(0, 0, 1000, 6)
    q = d.random_square_queries(rng, 100, (0.01, 0.1))
    assert (q[:, 0] >= 0).all() and (q[:, 2] <= 1000).all()
    sides = q[:, 2] - q[:, 0]
    assert np.allclose(sides, q[:, 3] - q[:, 1]) and sides.min() >= 10 - 1e-9 and sides.max() <= 100 + 1e-9
    with pytest.raises(ParamError):
        d.random_square_queries(rng, 10, (0.5, 0.1))
