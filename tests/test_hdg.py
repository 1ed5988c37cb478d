"""HDG (engine/mechanisms/hdg): the guideline against values computed by hand, Norm-Sub and the consistency
step on small examples by hand, the response matrix against the maximum-entropy closed form, OLH's
unbiased estimate and variance formula by simulation, the aggregate law against per-user reports, and
the mechanism.

Statistical checks run at fixed seeds with a stated false-alarm rate: each test's family of checks is
Bonferroni-corrected to ALPHA = 1e-3 in all."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from engine.core.errors import EngineError, ParamError
from engine.core.grid import Domain
from engine.core.noise import NoiseSource
from engine.mechanisms import RunContext, get
from engine.mechanisms.hdg.grid_estimation import (
    consistency,
    guideline,
    norm_sub,
    post_process,
    power_of_two,
    response_matrix,
)
from engine.mechanisms.hdg.oracle import (
    count_variance,
    olh_range,
    olh_reports,
    olh_support,
    oracle_pq,
    support_likelihood,
    unbias,
)
from tests.support.datasets import SIDE, square_dataset

ALPHA = 1e-3


def _run(data, eps=1.0, depth=6, seed=0, secure=False, **params):
    cls = get("hdg")
    ctx = RunContext(rng=np.random.default_rng(seed), secure=secure)
    return cls().run(data, Domain(0.0, 0.0, SIDE, depth), eps, cls.schema().resolve(params), ctx)


# ------------------------------------------------------------------ the guideline
@pytest.mark.parametrize(
    "n, eps, g1, g2, rounded",
    [
        # e = 2.718282, (e - 1)^2 = 2.952492: g1^3 = 1e5 * 2.952492 * 0.49 / (6 e) = 8870.3;
        # g2^2 = 2 * 0.03 * 1.718282 * sqrt(1e5 / (3 e)) = 0.1030969 * 110.737
        (100_000, 1.0, 20.700, 3.3788, (16, 4)),
        # e^4 = 54.59815, (e^4 - 1)^2 = 2872.762: g1^3 = 1e6 * 2872.762 * 0.49 / 327.5889 = 4.29701e6;
        # g2^2 = 3.215889 * sqrt(1e6 / 163.7945) = 3.215889 * 78.1359
        (1_000_000, 4.0, 162.58, 15.852, (128, 16)),
        # e^0.5 = 1.648721, (e^0.5 - 1)^2 = 0.4208393: g1^3 = 1e4 * 0.4208393 * 0.49 / 9.892327 = 208.456;
        # g2^2 = 0.0389233 * sqrt(1e4 / 4.946164) = 0.0389233 * 44.964
        (10_000, 0.5, 5.9293, 1.3229, (4, 2)),
    ],
)
def test_guideline_against_values_computed_by_hand(n, eps, g1, g2, rounded):
    real = guideline(n, eps)
    assert real == pytest.approx((g1, g2), rel=1e-3)
    assert (power_of_two(real[0], 256), power_of_two(real[1], 256)) == rounded


def test_powers_of_two_nearest_at_least_two_at_most_the_map():
    assert [power_of_two(g, 256) for g in (0.3, 1.0, 2.9, 3.1, 6.0, 6.01, 11.9, 12.1, 300.0)] == [
        2,
        2,
        2,
        4,
        4,  # equidistant from 4 and 8: the smaller
        8,
        8,
        16,
        256,
    ]
    assert power_of_two(100.0, 32) == 32
    with pytest.raises(ParamError, match="2 x 2"):
        power_of_two(3.0, 1)


# ------------------------------------------------------------------ Norm-Sub
def test_norm_sub_by_hand():
    # positives 0.5 + 0.4 + 0.3 = 1.2: delta = 0.2 / 3, every positive cell stays positive
    assert norm_sub(np.array([0.5, 0.4, 0.3, -0.2])) == pytest.approx([0.5 - 0.2 / 3, 0.4 - 0.2 / 3, 0.3 - 0.2 / 3, 0])
    # 0.05 - 0.25 / 3 < 0: the cell drops out and delta = (1.2 - 1) / 2 = 0.1
    assert norm_sub(np.array([0.7, 0.5, 0.05, -0.1])) == pytest.approx([0.6, 0.4, 0.0, 0.0])
    # below the total: delta = (0.4 - 1) / 3 = -0.2 raises every cell, the negative one to 0.1
    assert norm_sub(np.array([0.2, 0.3, -0.1])) == pytest.approx([0.4, 0.5, 0.1])
    # any total (counts), and a 2-D grid keeps its shape
    out = norm_sub(np.array([[30.0, -5.0], [10.0, 0.0]]), total=30.0)
    assert out.shape == (2, 2) and out == pytest.approx(np.array([[25.0, 0.0], [5.0, 0.0]]))


def test_norm_sub_is_the_projection_onto_the_simplex():
    """The closest non-negative vector of the given total (by KKT: max(f - delta, 0) for one delta)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        f = rng.normal(0.1, 0.2, 12)
        out = norm_sub(f)
        assert out.sum() == pytest.approx(1.0) and (out >= 0).all()
        for _ in range(50):  # no other point of the simplex is closer
            y = rng.dirichlet(np.ones(12))
            assert np.sum((f - out) ** 2) <= np.sum((f - y) ** 2) + 1e-12


# ------------------------------------------------------------------ consistency
def test_consistency_step_by_hand():
    """g1 = 8, g2 = 2 (b = 4): weights 1/4 (1-D interval of 4 cells) and 1/2 (2-D column of 2 cells), so
    T = T1/3 + 2 T2/3."""
    fx = np.array([0.05, 0.1, 0.15, 0.2, 0.1, 0.1, 0.15, 0.15])  # intervals: 0.5, 0.5
    fy = np.full(8, 0.125)  # intervals: 0.5, 0.5
    f2 = np.array([[0.2, 0.1], [0.4, 0.3]])  # [iy, ix]: columns 0.6, 0.4; rows 0.3, 0.7
    consistency(fx, fy, f2)
    # x: T = (0.5 + 1.2)/3, (0.5 + 0.8)/3 = 0.566667, 0.433333; 1-D cells +-0.0666667/4, columns -+0.0333333/2
    assert fx == pytest.approx(np.array([0.05, 0.1, 0.15, 0.2, 0.1, 0.1, 0.15, 0.15]) + np.repeat([1, -1], 4) / 60)
    # y (after x, rows still 0.3, 0.7): T = (0.5 + 0.6)/3, (0.5 + 1.4)/3 = 0.366667, 0.633333;
    # 1-D cells -+0.1333333/4, rows +-0.0666667/2
    assert fy == pytest.approx(np.repeat([0.125 - 1 / 30, 0.125 + 1 / 30], 4))
    hand = np.array([[0.2 - 1 / 60 + 1 / 30, 0.1 + 1 / 60 + 1 / 30], [0.4 - 1 / 60 - 1 / 30, 0.3 + 1 / 60 - 1 / 30]])
    assert f2 == pytest.approx(hand)
    assert f2.sum(axis=0) == pytest.approx(fx.reshape(2, 4).sum(axis=1))  # the y step kept x consistent
    assert f2.sum(axis=1) == pytest.approx(fy.reshape(2, 4).sum(axis=1))


def test_post_processing_ends_non_negative_summing_to_one_and_nearly_consistent():
    rng = np.random.default_rng(5)
    true = rng.gamma(0.05, 1.0, (64, 64))
    true /= true.sum()
    noisy = [true.sum(0), true.sum(1), true.reshape(8, 8, 8, 8).sum((1, 3))]
    noisy = [v + rng.normal(0, 0.02, v.shape) for v in noisy]
    fx, fy, f2, done = post_process(*noisy, rounds=1000, tol=1e-12)
    for f in (fx, fy, f2):
        assert (f >= 0).all() and f.sum() == pytest.approx(1.0)
    gap = np.abs(fx.reshape(8, 8).sum(1) - f2.sum(0)).sum() + np.abs(fy.reshape(8, 8).sum(1) - f2.sum(1)).sum()
    assert done < 1000  # it converged
    raw = post_process(*noisy, rounds=0)
    raw_gap = np.abs(raw[0].reshape(8, 8).sum(1) - raw[2].sum(0)).sum()
    assert gap < 1e-9 < raw_gap


# ------------------------------------------------------------------ the response matrix
def test_response_matrix_is_the_maximum_entropy_fit_of_consistent_grids():
    """For consistent grids the fit is m[iy, ix] = fx[ix] fy[iy] f2[c] / (Fx[cx] Fy[cy]) (Fx, Fy the grids'
    coarse marginals): it matches every grid and has the exponential-family form a[ix] b[iy] c[block],
    which characterises the maximum-entropy matrix under these constraints."""
    rng = np.random.default_rng(2)
    g1, g2 = 32, 4
    b = g1 // g2
    true = rng.gamma(0.3, 1.0, (g1, g1))
    true /= true.sum()
    fx, fy, f2 = true.sum(0), true.sum(1), true.reshape(g2, b, g2, b).sum((1, 3))
    m, sweeps = response_matrix(fx, fy, f2, 100, 1e-12)
    coarse = np.repeat(np.repeat(f2 / np.outer(f2.sum(1), f2.sum(0)), b, 0), b, 1)
    assert m == pytest.approx(np.outer(fy, fx) * coarse, abs=1e-14)
    assert m.sum(0) == pytest.approx(fx) and m.sum(1) == pytest.approx(fy)
    assert m.reshape(g2, b, g2, b).sum((1, 3)) == pytest.approx(f2)
    assert sweeps <= 3


# ------------------------------------------------------------------ the frequency oracle
def test_olh_report_has_likelihood_ratio_e_eps():
    for eps in (0.1, 0.5, 1.0, 2.0, 4.0):
        g = olh_range(eps)
        p, q = oracle_pq("olh", eps)
        assert g == max(2, round(math.exp(eps) + 1)) and q == 1 / g
        assert p / ((1 - p) / (g - 1)) == pytest.approx(math.exp(eps))  # kept vs any other value
        po, qo = oracle_pq("oue", eps)
        assert (po / qo) * ((1 - qo) / (1 - po)) == pytest.approx(math.exp(eps))  # two bits differ
    with pytest.raises(ParamError, match="oracle"):
        oracle_pq("grr", 1.0)


def test_olh_per_user_estimate_is_unbiased_with_the_stated_variance():
    """Devices hashing with Carter-Wegman functions: over R runs, the unbiased counts' mean is the truth and
    their variance the formula's (z tests on the mean, chi-square on the variance; 2 x 8 checks)."""
    rng = np.random.default_rng(11)
    eps, k, runs = 1.0, 8, 3000
    counts = np.array([120, 60, 40, 30, 25, 15, 10, 0])
    cells = np.repeat(np.arange(k), counts)
    n = cells.size
    p, q = oracle_pq("olh", eps)
    est = np.empty((runs, k))
    for r in range(runs):
        a, b, y = olh_reports(rng, cells, eps)
        est[r] = unbias(olh_support(a, b, y, k, eps), n, p, q)
    var = count_variance(n, counts, p, q)
    z = (est.mean(0) - counts) / np.sqrt(var / runs)
    assert (np.abs(z) < stats.norm.isf(ALPHA / (4 * k))).all(), z
    chi = (runs - 1) * est.var(0, ddof=1) / var
    lo, hi = stats.chi2.ppf(ALPHA / (4 * k), runs - 1), stats.chi2.isf(ALPHA / (4 * k), runs - 1)
    assert ((lo < chi) & (chi < hi)).all(), chi / (runs - 1)
    # about n 4 e^eps / (e^eps - 1)^2 for an empty cell (the paper's approximation; g rounds e^eps + 1)
    assert var[-1] == pytest.approx(n * 4 * math.e / (math.e - 1) ** 2, rel=0.02)


def _two_sample_p(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square test that two samples of integers come from one law (values pooled into bins of at least
    10 expected per sample)."""
    vals = np.concatenate([a, b])
    edges, cum = [vals.min()], 0
    counts = np.bincount(vals - vals.min())
    for v, c in enumerate(counts):
        cum += c
        if cum >= 20 and v + vals.min() + 1 <= vals.max():
            edges.append(v + vals.min() + 1)
            cum = 0
    edges.append(vals.max() + 1)
    table = np.array([np.histogram(x, bins=edges)[0] for x in (a, b)])
    table = table[:, table.sum(0) > 0]
    return float(stats.chi2_contingency(table)[1])


def _statistics(s: np.ndarray) -> list[np.ndarray]:
    """Each cell's support count, two sums of pairs of cells and the total: the marginals and the joint
    law's covariances."""
    return [*s.T, s[:, 0] + s[:, 1], s[:, 2] + s[:, 3], s.sum(1)]


def test_aggregate_law_matches_per_user_hashing():
    """The binomial aggregate (NoiseSource.report_counts) against users who each draw a random function
    [k] -> [g] and perturb its value at their cell: the same law, per cell and jointly (8 two-sample
    chi-square tests). The same tests reject a law with the right marginals and dependent cells."""
    rng = np.random.default_rng(21)
    eps, runs = 1.0, 4000
    counts = np.array([12, 8, 6, 4, 0])
    k, n = counts.size, int(counts.sum())
    cells = np.repeat(np.arange(k), counts)
    g = olh_range(eps)
    p, q = oracle_pq("olh", eps)
    h = rng.integers(0, g, (runs, n, k))  # each user's hash function, a uniformly random table
    x = h[:, np.arange(n), cells]
    other = rng.integers(0, g - 1, (runs, n))
    y = np.where(rng.random((runs, n)) < p, x, other + (other >= x))
    per_user = (h == y[:, :, None]).sum(axis=1)
    noise = NoiseSource(np.random.default_rng(22))
    aggregate = np.array([noise.report_counts(counts, n, p, q) for _ in range(runs)])
    pvals = [_two_sample_p(a, b) for a, b in zip(_statistics(per_user), _statistics(aggregate))]
    assert min(pvals) > ALPHA / len(pvals), pvals
    # the right law per cell, but the cells moving together (one uniform draw per run through every cell's
    # inverse distribution function): the joint statistics see it
    u = rng.random(runs)
    wrong = np.empty((runs, k), dtype=np.int64)
    for v, c in enumerate(counts):
        pmf = np.convolve(stats.binom.pmf(np.arange(c + 1), c, p), stats.binom.pmf(np.arange(n - c + 1), n - c, q))
        wrong[:, v] = np.searchsorted(np.cumsum(pmf), u)
    assert min(_two_sample_p(a, b) for a, b in zip(_statistics(per_user), _statistics(wrong))) < ALPHA / len(pvals)


def test_secure_report_counts_follow_the_same_law():
    """Secure mode's exact binomials against numpy's, per cell (two-sample chi-square, 3 checks)."""
    counts, n, p, q = np.array([40, 10, 0]), 60, 0.5, 0.2
    fast = NoiseSource(np.random.default_rng(4))
    secure = NoiseSource(np.random.default_rng(4), secure=True)
    a = np.array([fast.report_counts(counts, n, p, q) for _ in range(1500)])
    b = np.array([secure.report_counts(counts, n, p, q) for _ in range(1500)])
    assert min(_two_sample_p(u, v) for u, v in zip(a.T, b.T)) > ALPHA / 3
    with pytest.raises(ParamError, match="0..n"):
        fast.report_counts([70], n, p, q)


# ------------------------------------------------------------------ the mechanism
@pytest.fixture(scope="module")
def city():
    rng = np.random.default_rng(0)
    centres = np.array([[4000.0, 5000.0], [11000.0, 9000.0], [7000.0, 13000.0]])
    xy = centres[rng.integers(0, 3, 30_000)] + rng.normal(0, 1200, (30_000, 2))
    return square_dataset(np.clip(xy, 1.0, SIDE - 1.0), "hdg")


def test_release_counts_every_user_once_from_its_grids(city):
    rel = _run(city, eps=2.0, depth=7)
    d = rel.diagnostics
    real = guideline(len(city.xy), 2.0)
    assert (d["g1"], d["g2"]) == (power_of_two(real[0], 128), power_of_two(real[1], 128))
    assert sorted(d["group_sizes"].values()) == [10_000, 10_000, 10_000]
    dens, m = rel.density, rel.extras["response_matrix"]
    assert dens.shape == (128, 128) and (dens >= 0).all() and dens.sum() == pytest.approx(30_000)
    r = 128 // d["g1"]
    assert dens.reshape(d["g1"], r, d["g1"], r).sum((1, 3)) == pytest.approx(m)  # the matrix, spread evenly
    assert m.sum(0) == pytest.approx(rel.extras["grid_x"], rel=1e-6, abs=1e-6)
    assert m.sum(1) == pytest.approx(rel.extras["grid_y"], rel=1e-6, abs=1e-6)
    truth = city.true_histogram(Domain(0.0, 0.0, SIDE, 7))
    uniform = np.full_like(truth, truth.sum() / truth.size)
    assert np.abs(dens - truth).sum() < 0.75 * np.abs(uniform - truth).sum()
    assert rel.ledger.total() == 2.0 and rel.server_view.kind == "per_user"
    assert rel.communication.bits_per_client == 62 + math.ceil(math.log2(olh_range(2.0)))


def test_parameters_and_bad_input(city):
    rel = _run(city, g1=32, g2=8, oracle="oue")
    assert (rel.diagnostics["g1"], rel.diagnostics["g2"]) == (32, 8)
    assert rel.communication.elements_per_client == pytest.approx((32 + 32 + 64) / 3)
    with pytest.raises(ParamError, match="power of two"):
        _run(city, g1=24)
    with pytest.raises(ParamError, match="power of two"):
        _run(city, g1=128)  # above the 64-cell map
    with pytest.raises(ParamError, match="must not exceed"):
        _run(city, g1=8, g2=16)
    assert _run(city, eps=0.1, g2=16).diagnostics["g2"] <= _run(city, eps=0.1).diagnostics["g1"]
    with pytest.raises(EngineError, match="at least 3 users"):
        _run(square_dataset([[100.0, 100.0], [200.0, 200.0]], "hdg"))


def test_several_locations_per_person_count_once_at_the_most_visited_cell():
    xy = np.array([[1000.0, 1000.0]] * 3 + [[15000.0, 15000.0]] + [[8000.0, 8000.0]] * 2)
    data = square_dataset(xy, "hdg", user_id=np.array([0, 0, 0, 0, 1, 2]))
    rel = _run(data, eps=1.0, depth=3, g1=8, g2=2)
    assert rel.diagnostics["users"] == 3 and rel.density.sum() == pytest.approx(3.0)
    assert any("most visited" in w for w in rel.warnings)


def test_secure_mode_and_the_attackers_view(city):
    rel = _run(city, eps=1.0, depth=5, secure=True)
    assert rel.density.sum() == pytest.approx(30_000)
    rel = _run(city, eps=4.0, depth=6)
    cands = rel.server_view.candidates(np.arange(5))
    assert len(cands) == 5
    for pts, w in cands:
        assert w.sum() == pytest.approx(1.0) and len(pts) <= 4096
        assert ((pts >= 0) & (pts <= SIDE)).all()
    # one report's likelihood over cells: at most e^eps apart (the guarantee, seen by the attacker)
    for oracle in ("olh", "oue"):
        like = support_likelihood(oracle, 1.5, 64, 3, np.random.default_rng(1))
        assert like.max() / like.min() == pytest.approx(math.exp(1.5))
