"""Exact EMD with L1 ground distance (engine/metrics/emd.py).

References used here are independent of the solver: POT's exact network simplex
on the full N x N cityblock cost matrix, closed forms, the 1-D CDF formula, and
an LP duality certificate checked from scratch.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engine.core.errors import ParamError
from engine.metrics.emd import (
    _integer_problem,
    _push_bucket,
    _solve_grid,
    coarsen,
    emd_coarse,
    emd_l1,
    emd_l1_bound,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pot_emd(p, q, cell_m=1.0):
    """POT's exact EMD with the cityblock distance between cell centres."""
    ny, nx = p.shape
    yy, xx = np.mgrid[0:ny, 0:nx]
    pts = np.c_[xx.ravel(), yy.ravel()].astype(np.float64) * cell_m
    M = ot.dist(pts, pts, metric="cityblock")
    return float(ot.emd2(p.ravel() / p.sum(), q.ravel() / q.sum(), M, numItermax=10**7))


@st.composite
def grid_pair(draw, lo=1, hi=8):
    ny = draw(st.integers(lo, hi))
    nx = draw(st.integers(max(lo, 2 if ny == 1 else 1), hi))
    cell = st.one_of(st.just(0.0), st.floats(0.0, 1.0), st.floats(1e-6, 1e3))
    p = draw(arrays(np.float64, (ny, nx), elements=cell))
    q = draw(arrays(np.float64, (ny, nx), elements=cell))
    # every grid needs positive mass
    p[draw(st.integers(0, ny - 1)), draw(st.integers(0, nx - 1))] += draw(st.floats(1e-3, 10.0))
    q[draw(st.integers(0, ny - 1)), draw(st.integers(0, nx - 1))] += draw(st.floats(1e-3, 10.0))
    return p, q


# ------------------------------------------------------------ against POT
@SETTINGS
@given(grid_pair(), st.sampled_from([1.0, 0.37, 250.0]))
def test_matches_pot_exact_emd(pq, cell_m):
    p, q = pq
    ours = emd_l1(p, q, cell_m)
    ref = pot_emd(p, q, cell_m)
    # 1e-6 relative to the diameter of the grid in metres (the scale of the answer)
    scale = cell_m * max(1, sum(p.shape) - 2)
    assert abs(ours - ref) <= 1e-6 * scale, (ours, ref)


def test_matches_pot_on_larger_random_grids(rng):
    for shape in [(16, 16), (13, 21), (24, 9)]:
        p = rng.random(shape) ** 3 * (rng.random(shape) < 0.7)
        q = rng.random(shape) ** 3
        assert emd_l1(p, q) == pytest.approx(pot_emd(p, q), abs=1e-9)


# --------------------------------------------------------- closed forms
@pytest.mark.parametrize(
    "shape,a,b",
    [((8, 8), (0, 0), (7, 7)), ((5, 9), (4, 1), (0, 6)), ((1, 30), (0, 3), (0, 29)), ((37, 53), (36, 0), (2, 50))],
)
def test_point_mass_moved_costs_its_l1_displacement(shape, a, b):
    p = np.zeros(shape)
    q = np.zeros(shape)
    p[a] = 1.0
    q[b] = 3.0  # normalised inside
    d = abs(a[0] - b[0]) + abs(a[1] - b[1])
    assert emd_l1(p, q, cell_m=12.5) == pytest.approx(12.5 * d, rel=1e-12)


def test_point_mass_on_a_large_grid():
    p = np.zeros((256, 256))
    q = np.zeros((256, 256))
    p[10, 200] = 1
    q[250, 3] = 1
    assert emd_l1(p, q) == pytest.approx(240 + 197, rel=1e-12)


def test_corner_to_uniform_and_half_shift_closed_forms():
    ny, nx = 64, 48
    corner = np.zeros((ny, nx))
    corner[0, 0] = 1
    # mean L1 distance from the corner cell to a uniformly chosen cell
    assert emd_l1(corner, np.ones((ny, nx))) == pytest.approx((ny - 1) / 2 + (nx - 1) / 2, rel=1e-12)
    n = 96
    left = np.zeros((n, n))
    left[:, : n // 2] = 1
    right = np.zeros((n, n))
    right[:, n // 2 :] = 1
    # every cell's mass moves exactly n/2 cells east, and nothing can do better:
    # the x-coordinate's mean must grow by n/2
    assert emd_l1(left, right) == pytest.approx(n / 2, rel=1e-12)
    checker = (np.add.outer(np.arange(n), np.arange(n)) % 2).astype(float)
    assert emd_l1(checker, 1 - checker) == pytest.approx(1.0, rel=1e-12)


@SETTINGS
@given(st.integers(2, 40), st.data())
def test_one_row_grid_equals_1d_cdf_formula(n, data):
    p = data.draw(arrays(np.float64, (1, n), elements=st.floats(0, 1)))
    q = data.draw(arrays(np.float64, (1, n), elements=st.floats(0, 1)))
    p[0, 0] += 0.5
    q[0, -1] += 0.5
    cdf = np.cumsum(p[0] / p.sum()) - np.cumsum(q[0] / q.sum())
    expected = float(np.abs(cdf[:-1]).sum())  # W1 on the line = integral of |F_p - F_q|
    assert emd_l1(p, q) == pytest.approx(expected, abs=1e-9)
    assert emd_l1(p.T, q.T) == pytest.approx(expected, abs=1e-9)


def test_is_2d_wasserstein_not_1d_over_pixel_values(rng):
    # same multiset of pixel values, different places: a 1-D Wasserstein distance
    # between the value distributions would be 0, the EMD between maps is not
    p = rng.random((12, 12))
    q = p[::-1, ::-1].copy()
    assert np.array_equal(np.sort(p.ravel()), np.sort(q.ravel()))
    assert emd_l1(p, q) > 0.05
    assert emd_l1(p, q) == pytest.approx(pot_emd(p, q), abs=1e-9)


# ------------------------------------------------------------ metric axioms
@SETTINGS
@given(grid_pair(2, 8), st.data())
def test_metric_axioms(pq, data):
    p, q = pq
    r = data.draw(arrays(np.float64, p.shape, elements=st.floats(0, 5)))
    r[0, 0] += 1
    tol = 1e-9
    assert emd_l1(p, p) == 0.0
    assert emd_l1(p, 7 * p) == pytest.approx(0.0, abs=tol)  # normalised inside
    pq_, qp = emd_l1(p, q), emd_l1(q, p)
    assert pq_ == pytest.approx(qp, abs=tol)
    assert emd_l1(p, r) <= emd_l1(p, q) + emd_l1(q, r) + tol
    # zero only for equal distributions: EMD >= |difference of mean x| (1-Lipschitz test fn)
    pn, qn = p / p.sum(), q / q.sum()
    xs = np.arange(p.shape[1])
    ys = np.arange(p.shape[0])
    lower = max(abs((pn.sum(0) - qn.sum(0)) @ xs), abs((pn.sum(1) - qn.sum(1)) @ ys))
    assert pq_ >= lower - tol
    if np.abs(pn - qn).sum() > 1e-6:
        assert pq_ > 0


def test_symmetries_and_units(rng):
    p = rng.random((30, 47)) ** 2
    q = rng.random((30, 47)) ** 2
    v = emd_l1(p, q)
    assert emd_l1(p.T, q.T) == pytest.approx(v, abs=1e-12)
    assert emd_l1(p[::-1], q[::-1]) == pytest.approx(v, abs=1e-12)
    assert emd_l1(p[:, ::-1], q[:, ::-1]) == pytest.approx(v, abs=1e-12)
    assert emd_l1(p, q, cell_m=156.25) == pytest.approx(156.25 * v, rel=1e-12)
    assert emd_l1(3 * p, 0.01 * q) == pytest.approx(v, abs=1e-12)


# --------------------------------------------- optimality certificate
def _check_certificate(b, sol):
    """Flow conserves mass, potentials are 1-Lipschitz, flow only on tight arcs,
    primal cost == dual value: together a proof of optimality (LP duality)."""
    gh, gv, pi = sol.g_h, sol.g_v, sol.pi
    div = np.zeros_like(b)
    div[:, :-1] += gh
    div[:, 1:] -= gh
    div[:-1, :] += gv
    div[1:, :] -= gv
    assert np.array_equal(div, b)
    dx = pi[:, 1:] - pi[:, :-1]
    dy = pi[1:, :] - pi[:-1, :]
    assert np.abs(dx).max(initial=0) <= 1 and np.abs(dy).max(initial=0) <= 1
    assert np.all(dx[gh > 0] == 1) and np.all(dx[gh < 0] == -1)
    assert np.all(dy[gv > 0] == 1) and np.all(dy[gv < 0] == -1)
    primal = int(np.abs(gh).sum()) + int(np.abs(gv).sum())
    dual = -sum(int(v) for v in (b * pi).ravel())  # Python ints: no overflow
    assert primal == dual == sol.cost


@pytest.mark.parametrize("shape", [(40, 56), (97, 61), (128, 128)])
def test_duality_certificate_on_larger_grids(rng, shape):
    for sparse in (False, True):
        p = rng.exponential(size=shape)
        q = rng.exponential(size=shape)
        if sparse:
            p *= rng.random(shape) < 0.03
            p[0, 0] += 1
        b, S, _ = _integer_problem(p, q)
        assert b.sum() == 0 and int(np.clip(b, 0, None).sum()) <= S
        _check_certificate(b, _solve_grid(b))


def test_bucket_queue_grows_when_full():
    bk = np.zeros((3, 2), np.int32)
    bn = np.zeros(3, np.int64)
    for v in range(5):
        bk = _push_bucket(bk, bn, 1, v)
    assert bk.shape[1] >= 5 and bn[1] == 5 and list(bk[1, :5]) == [0, 1, 2, 3, 4]
    assert bn[0] == 0 and bn[2] == 0


# --------------------------------------------------------------- rounding
def test_rounding_bound_is_tiny_and_value_in_metres(rng):
    p = rng.random((64, 64))
    q = rng.random((64, 64))
    v, bound = emd_l1_bound(p, q, cell_m=100.0)
    assert v == pytest.approx(100.0 * emd_l1(p, q), rel=1e-15)
    assert 0 < bound < 1e-8 * 100.0


def test_huge_masses_do_not_overflow():
    p = np.full((3, 3), 1e308)
    q = np.full((3, 3), 1e308)
    q[1, 1] = 0
    assert emd_l1(p, q) == pytest.approx(pot_emd(p / 1e308, q / 1e308), abs=1e-9)
    assert emd_coarse(p, q, 1.0, 1)[0] == 0.0  # one 3x3 block holds everything


def test_tiny_masses_are_not_lost():
    p = np.full((4, 4), 1e-300)
    q = np.full((4, 4), 1e-300)
    p[0, 0] = 2e-300
    assert emd_l1(p, q) == pytest.approx(pot_emd(p * 1e300, q * 1e300), abs=1e-9)


# ---------------------------------------------------------------- coarse
def test_coarsen_sums_blocks_with_padding():
    g = np.arange(35, dtype=float).reshape(5, 7)
    c = coarsen(g, 3)
    assert c.shape == (2, 3)
    assert c.sum() == pytest.approx(g.sum())
    assert c[0, 0] == g[:3, :3].sum() and c[1, 2] == g[3:, 6:].sum()


@SETTINGS
@given(st.integers(2, 24), st.integers(2, 24), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_coarse_emd_error_bound_holds(ny, nx, max_cells, seed):
    rng = np.random.default_rng(seed)
    p = rng.random((ny, nx)) ** 4
    q = rng.random((ny, nx)) ** 4 * (rng.random((ny, nx)) < 0.5)
    q[rng.integers(ny), rng.integers(nx)] += 1
    cell = 50.0
    fine, fine_rounding = emd_l1_bound(p, q, cell)
    value, bound = emd_coarse(p, q, cell, max_cells)
    k = math.ceil(max(ny, nx) / max_cells)
    # the bound is on the exact fine EMD; ours is within its own rounding bound of it
    assert abs(fine - value) <= bound + fine_rounding
    assert bound <= 2 * (k - 1) * cell + 1e-6 * cell  # the worst-case bound
    # the value is the exact EMD of the k x k block sums with cell side k*cell
    pc, qc = coarsen(p / p.sum(), k), coarsen(q / q.sum(), k)
    assert max(pc.shape) <= max_cells
    assert value == pytest.approx(emd_l1(pc, qc, k * cell), abs=1e-9 * cell)
    if k == 1:
        assert value == pytest.approx(fine, abs=1e-9 * cell) and bound < 1e-9 * cell


def test_coarse_bound_is_attained_within_a_factor_two():
    # all mass of p in the west column of a 4x4 block, q in the east column: the
    # coarse grids are equal (value 0) while the fine EMD is 3 cells
    p = np.zeros((4, 4))
    q = np.zeros((4, 4))
    p[:, 0] = 1
    q[:, 3] = 1
    value, bound = emd_coarse(p, q, 1.0, 1)
    assert value == 0.0
    assert emd_l1(p, q) == pytest.approx(3.0)
    # moving each unit to its block centre costs 1.5 in x plus 1.0 on average in y
    assert bound == pytest.approx(5.0) and 3.0 <= bound <= 2 * 3.0


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "p,q,match",
    [
        (np.ones((3, 3)), np.ones((3, 4)), "same shape"),
        (np.ones(9), np.ones(9), "2-D"),
        (-np.ones((3, 3)), np.ones((3, 3)), "negative"),
        (np.zeros((3, 3)), np.ones((3, 3)), "zero total mass"),
        (np.full((3, 3), np.nan), np.ones((3, 3)), "NaN"),
        (np.ones((0, 3)), np.ones((0, 3)), "empty"),
    ],
)
def test_bad_grids_raise_param_error(p, q, match):
    with pytest.raises(ParamError, match=match):
        emd_l1(p, q)


def test_bad_parameters_raise_param_error():
    p = np.ones((4, 4))
    for bad in (0, -1.0, float("nan"), "x"):
        with pytest.raises(ParamError, match="cell_m"):
            emd_l1(p, p, cell_m=bad)
    for bad in (0, -3, 2.5):
        with pytest.raises(ParamError, match="max_cells"):
            emd_coarse(p, p, 1.0, bad)


def test_single_cell_grid():
    assert emd_l1(np.ones((1, 1)), 5 * np.ones((1, 1))) == 0.0
