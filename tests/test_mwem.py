"""MWEM (engine/mechanisms/mwem): the multiplicative-weights update on 4 cells by hand, the exponential mechanism's
law (chi-square at a fixed seed), the rectangle answers by brute force, and the mechanism's budget and convergence
to its measurements."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from engine.core.grid import Domain
from engine.core.noise import NoiseSource
from engine.mechanisms import RunContext, get
from engine.mechanisms.mwem.mw import exponential_mechanism, mw_update, rect_answers
from tests.support.datasets import SIDE, square_dataset


def test_update_on_four_cells_by_hand():
    """A = (1, 1, 1, 1) on a 2 x 2 grid (n = 4); the query is the bottom row (cells 0 and 1, q(A) = 2), measured 3.
    Paper's update: the bottom row times e^((3 - 2) / 8), then the total scaled back to 4."""
    A = np.ones((2, 2))
    bottom = np.array([[0, 0, 2, 1]])  # (x0, y0, x1, y1): row 0, both columns
    out = mw_update(A, bottom, np.array([3.0]), 4.0)
    e = math.exp(1 / 8)
    assert out[0] == pytest.approx([4 * e / (2 * e + 2)] * 2)
    assert out[1] == pytest.approx([4 / (2 * e + 2)] * 2)
    # a second measurement, the left column (cells 0 and 2) measured 1, then both again: two passes in order
    left = np.array([0, 0, 1, 2])
    rects, meas = np.stack([bottom[0], left]), np.array([3.0, 1.0])
    B = A.copy()
    for _ in range(2):
        for (x0, y0, x1, y1), m in zip(rects, meas):
            q = np.zeros((2, 2))
            q[y0:y1, x0:x1] = 1.0
            B = B * np.exp(q * (m - (q * B).sum()) / (2 * 4.0))
            B = B * 4.0 / B.sum()
    assert np.allclose(mw_update(A, rects, meas, 4.0, passes=2), B)


def test_many_passes_fit_consistent_measurements():
    """Measurements that a map can meet exactly (the true answers of a 4 x 4 map) are met after enough passes,
    and the total stays n."""
    rng = np.random.default_rng(2)
    x = rng.integers(1, 20, (4, 4)).astype(float)
    rects = np.array([[0, 0, 2, 4], [1, 1, 4, 3], [0, 2, 4, 4], [3, 0, 4, 1]])
    A = mw_update(np.full((4, 4), x.sum() / 16), rects, rect_answers(x, rects), x.sum(), passes=3000)
    assert A.sum() == pytest.approx(x.sum())
    assert np.allclose(rect_answers(A, rects), rect_answers(x, rects), rtol=1e-4)


def test_rect_answers_by_brute_force():
    rng = np.random.default_rng(3)
    g = rng.random((8, 8))
    rects = np.array([[0, 0, 8, 8], [2, 3, 5, 4], [7, 0, 8, 8], [1, 1, 2, 2]])
    want = [g[y0:y1, x0:x1].sum() for x0, y0, x1, y1 in rects]
    assert np.allclose(rect_answers(g, rects), want)


def test_exponential_mechanism_has_the_papers_law():
    """20,000 seeded draws over 4 scores at epsilon 0.8: P(i) proportional to exp(0.8 s_i / 2). Chi-square
    goodness of fit, false-alarm rate 1e-3."""
    s = np.array([0.0, 1.0, 2.5, 4.0])
    noise = NoiseSource(np.random.default_rng(7))
    draws = np.array([exponential_mechanism(s, 0.8, noise) for _ in range(20_000)])
    p = np.exp(0.8 * s / 2)
    p /= p.sum()
    assert stats.chisquare(np.bincount(draws, minlength=4), 20_000 * p).pvalue > 1e-3


def test_secure_selection_uses_opendp_and_prefers_the_worst_answered_query():
    """Secure mode: OpenDP's report-noisy-max; with scores 0 and 40 at epsilon 1 the second is chosen unless the
    noise exceeds 40 / scale = 20 (probability about e^-20): always, here."""
    noise = NoiseSource(np.random.default_rng(0), secure=True)
    assert {exponential_mechanism(np.array([0.0, 40.0, 0.0]), 1.0, noise) for _ in range(20)} == {1}


def test_the_mechanism_spends_epsilon_and_meets_its_measurements():
    """With the total public and 1,000 sweeps of the update, the release answers every measured rectangle as measured
    (measurements of one map with Laplace(T / eps_m) = Laplace(0.1) noise at the largest epsilon a run accepts: some
    map meets them all, and the sweeps converge to one); the ledger adds the selection and the measurement shares to epsilon."""
    rng = np.random.default_rng(4)
    xy = rng.normal(SIDE / 2, 2000, (3000, 2)).clip(1, SIDE - 1)
    dom = Domain(0.0, 0.0, SIDE, 4)
    cls = get("mwem")
    p = cls.schema().resolve({"total": "public", "rounds": 5, "workload_queries": 50, "passes": 1000})
    rel = cls().run(square_dataset(xy, "mwem"), dom, 100.0, p, RunContext(np.random.default_rng(1)))
    assert rel.ledger.total() == pytest.approx(100.0)
    assert rel.density.sum() == pytest.approx(3000.0)
    sel = np.array(rel.diagnostics["selected"])
    got = rect_answers(rel.density, sel)
    assert np.abs(got - np.array(rel.diagnostics["measurements"])).max() < 1e-3
    p = cls.schema().resolve({"rounds": 3, "workload_queries": 50})
    rel = cls().run(square_dataset(xy, "mwem"), dom, 1.0, p, RunContext(np.random.default_rng(1)))
    steps = {e.step: e.epsilon for e in rel.ledger.entries}
    assert steps["total count N"] == pytest.approx(0.05)
    assert steps["query selection"] == pytest.approx(0.475) and steps["measurements"] == pytest.approx(0.475)


def test_average_output_is_the_mean_of_the_rounds():
    rng = np.random.default_rng(5)
    xy = rng.uniform(0, SIDE, (500, 2))
    dom = Domain(0.0, 0.0, SIDE, 3)
    cls = get("mwem")
    base = {"rounds": 1, "workload_queries": 30}
    last = cls().run(
        square_dataset(xy, "mwem"), dom, 1.0, cls.schema().resolve(base), RunContext(np.random.default_rng(2))
    )
    avg = cls().run(
        square_dataset(xy, "mwem"),
        dom,
        1.0,
        cls.schema().resolve({**base, "output": "average"}),
        RunContext(np.random.default_rng(2)),
    )
    assert np.allclose(last.density, avg.density)  # one round: the average is A_1
