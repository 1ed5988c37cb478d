"""Bit-pushing estimators (engine/mechanisms/bit_pushing/bitpush.py): Cormode, Markov & Srinivas, EDBT 2024.

Statistical tests use fixed seeds. z-tests use |z| < 4.5 (two-sided false-alarm
rate 7e-6 per test); variance-ratio tests use a band of 5 standard errors of
the sample variance (false-alarm rate < 1e-6)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats

from engine.core.errors import ParamError
from engine.core.noise import NoiseSource
from engine.mechanisms.bit_pushing import bitpush as B
from engine.mechanisms.bit_pushing.baselines import BASELINES, _piecewise, baseline_mean
from engine.mechanisms.bit_pushing.bits import (
    SQUASH_FWER,
    Encoding,
    bit_of,
    bit_probabilities,
    cap_inclusion,
    randomized_response,
    rr_keep_probability,
    rr_unbias,
    rr_variance,
    squash_c_default,
)
from engine.mechanisms.bit_pushing.rounds import BitSums, aggregate_log, squashed_bits


def lemma31_variance(bit_means, p, n, b_send: int = 1, weights=None) -> np.ndarray:
    """Cormode et al.'s Lemma 3.1 (Corollary 3.2 with ``b_send``), the variance the tests hold the mechanism to:
    ``V = 1/(n b_send) sum_j w_j^2 xbar^(j)(1 - xbar^(j)) / p_j`` (bits with ``p_j = 0`` must be constant)."""
    m = np.clip(np.asarray(bit_means, dtype=np.float64), 0.0, 1.0)
    p = np.asarray(p, dtype=np.float64)
    w = np.ldexp(1.0, np.arange(m.shape[-1])) if weights is None else np.asarray(weights, dtype=np.float64)
    beta = w**2 * m * (1.0 - m)
    terms = np.divide(beta, p, out=np.zeros_like(beta), where=p > 0)
    terms = np.where((p <= 0) & (beta > 0), np.inf, terms)
    return terms.sum(axis=-1) / (np.asarray(n, dtype=np.float64) * b_send)


Z = 4.5


def ages(n: int, rng: np.random.Generator) -> np.ndarray:
    """An ages-like mixture (children, adults, elderly), integers 0..99."""
    k = rng.choice(3, n, p=[0.25, 0.55, 0.20])
    a = np.where(k == 0, rng.uniform(0, 18, n), np.where(k == 1, rng.normal(40, 12, n), rng.normal(70, 9, n)))
    return np.clip(np.rint(a), 0, 99)


# ------------------------------------------------------------------ encoding
def test_encoding_linear_decomposition_unsigned_signed_fixed_point():
    rng = np.random.default_rng(0)
    for enc, lo, hi in (
        (Encoding(10), 0, 1023),
        (Encoding(8, 3), 0, 255 / 8),
        (Encoding(12, 2, signed=True), -512, 511.75),
    ):
        v = rng.uniform(lo - 50, hi + 50, 5000)
        codes, clipped = enc.encode(v)
        x = enc.decode(codes)
        # winsorised to the representable range, rounded to the fixed-point grid
        assert x.min() >= enc.low and x.max() <= enc.high
        assert enc.low == lo and enc.high == hi
        np.testing.assert_array_equal(
            clipped, (np.rint(v * enc.scale) < lo * enc.scale) | (v * enc.scale > hi * enc.scale + 0.5)
        )
        inside = ~clipped
        assert np.abs(x[inside] - v[inside]).max() <= 0.5 / enc.scale + 1e-12
        # Eq. 1: x = sum_j w_j x^(j), also in two's complement (sign bit weight -2^(b-1))
        bits = np.stack([bit_of(codes, j) for j in range(enc.bits)], axis=1)
        np.testing.assert_allclose(bits @ enc.weights, x, rtol=0, atol=1e-9)
        np.testing.assert_allclose(enc.decode_mean(bits.mean(axis=0)), x.mean(), rtol=1e-12)


def test_encoding_rejects_bad_input():
    with pytest.raises(ParamError, match="bit depth"):
        Encoding(0)
    with pytest.raises(ParamError, match="signed"):
        Encoding(1, signed=True)
    with pytest.raises(ParamError, match="finite"):
        Encoding(8).encode([1.0, np.nan])


# ------------------------------------------------------- sampling probabilities
def test_probabilities_uniform_weighted_and_lemma33_optimal():
    p = bit_probabilities(6, "weighted", alpha=1.0)
    np.testing.assert_allclose(p, 2.0 ** np.arange(6) / 63)
    np.testing.assert_allclose(bit_probabilities(5, "uniform"), 0.2)
    m = np.array([0.5, 0.3, 0.9, 0.1, 0.45, 0.02])
    popt = bit_probabilities(6, "optimal", bit_means=m)
    beta = 4.0 ** np.arange(6) * m * (1 - m)
    np.testing.assert_allclose(popt, np.sqrt(beta) / np.sqrt(beta).sum())
    vopt = lemma31_variance(m, popt, 1000)
    # Lemma 3.3: (sum sqrt beta)^2 / n, and no other distribution does better
    assert vopt == pytest.approx(np.sqrt(beta).sum() ** 2 / 1000)
    rng = np.random.default_rng(1)
    for q in rng.dirichlet(np.ones(6), 200):
        assert lemma31_variance(m, q, 1000) >= vopt * (1 - 1e-12)
    with pytest.raises(ParamError, match="bit means"):
        bit_probabilities(6, "optimal")


def test_cap_inclusion_for_several_bits_per_client():
    p = bit_probabilities(8, "weighted", alpha=1.0)
    pi = cap_inclusion(p, 3)
    assert pi.sum() == pytest.approx(3.0)
    assert pi.max() <= 1.0 + 1e-12
    assert pi[0, -1] == pytest.approx(1.0)  # the top bit is always asked


# ------------------------------------------------------------- unbiasedness
def _z(est, truth):
    est = np.asarray(est)
    return (est.mean() - truth) / (est.std(ddof=1) / math.sqrt(est.size))


@pytest.mark.parametrize(
    "assignment,b_send,eps",
    [("central", 1, None), ("local", 1, None), ("central", 3, None), ("central", 1, 1.0), ("local", 2, 2.0)],
)
def test_basic_bitpushing_is_unbiased(assignment, b_send, eps):
    # Lemma 3.1 (and Section 3.3 with randomized response): E[estimate] = the population mean
    rng = np.random.default_rng(2)
    x = ages(200, rng)  # small n, many repetitions: a 1/count bias would show (e.g. dividing by c_j + 1)
    enc = Encoding(8)
    p = bit_probabilities(8, "weighted", 0.5)
    est = [B.bitpush(x, enc, p, rng, assignment=assignment, b_send=b_send, epsilon=eps).value for _ in range(1000)]
    assert abs(_z(est, x.mean())) < Z


def test_lemma31_variance_matches_empirical_variance():
    # superpopulation view of the proof: each client's value is a fresh draw from a known law, so bit j's
    # reports are Bernoulli(xbar^(j)); with n p_j integer, V = sum_j 4^j xbar(1 - xbar) / (n p_j) exactly.
    rng = np.random.default_rng(3)
    support = np.array([3, 17, 40, 66, 90, 120, 200, 255])
    pmf = np.array([0.05, 0.1, 0.2, 0.25, 0.15, 0.1, 0.1, 0.05])
    enc = Encoding(8)
    bits = np.stack([bit_of(support.astype(np.uint64), j) for j in range(8)], axis=1)
    xbar_j = pmf @ bits
    mu = pmf @ support
    n = 1600
    p = np.array([1, 1, 2, 2, 3, 3, 4, 4]) / 20.0  # n p_j integers
    est = np.array([B.bitpush(rng.choice(support, n, p=pmf), enc, p, rng).value for _ in range(2000)])
    v = lemma31_variance(xbar_j, p, n)
    band = 5 * math.sqrt(2 / (est.size - 1))
    assert abs(est.var(ddof=1) / v - 1) < band
    assert abs(_z(est, mu)) < Z
    # Corollary 3.2: sending 2 bits at least halves it (bit correlations only reduce it further)
    est2 = np.array([B.bitpush(rng.choice(support, n, p=pmf), enc, p, rng, b_send=2).value for _ in range(1000)])
    v2 = lemma31_variance(xbar_j, cap_inclusion(p, 2)[0] / 2, n, b_send=2)
    assert est2.var(ddof=1) < v2 * (1 + 5 * math.sqrt(2 / 999))
    assert est2.var(ddof=1) < 0.7 * est.var(ddof=1)


# ------------------------------------------------------- randomized response
def test_randomized_response_unbiasing_and_variance():
    rng = np.random.default_rng(4)
    for eps in (0.5, 2.0):
        for truth in (0, 1):
            bits = np.full(200_000, truth, dtype=np.int8)
            y = rr_unbias(randomized_response(bits, eps, rng), eps)
            v = rr_variance(eps)  # e^eps / (e^eps - 1)^2, the paper's Section 3.3 formula
            assert abs(y.mean() - truth) < Z * math.sqrt(v / y.size)
            assert y.var() == pytest.approx(v, rel=5 * math.sqrt(2 / y.size) * 1.5)
        # p = e^eps / (1 + e^eps) keeps a bit
        kept = (randomized_response(np.zeros(200_000, np.int8), eps, rng) == 0).mean()
        p = math.exp(eps) / (1 + math.exp(eps))
        assert abs(kept - p) < Z * math.sqrt(p * (1 - p) / 200_000)


# ------------------------------------------------------------ the server view
def test_server_reads_at_most_b_send_bits_per_client_and_estimate_comes_from_the_log():
    rng = np.random.default_rng(5)
    x = ages(5000, rng)
    groups = rng.integers(-1, 4, x.size)  # -1: never contacted (e.g. a suppressed region)
    enc = Encoding(10)
    runs = [
        B.adaptive_bitpush(x, enc, rng, groups=groups, n_groups=4),
        B.adaptive_bitpush(x, enc, rng, groups=groups, n_groups=4, assignment="local", epsilon=1.0, squash="top"),
        B.bitpush(x, enc, bit_probabilities(10, "uniform"), rng, groups=groups, n_groups=4, b_send=3),
        B.bitpush(x, enc, bit_probabilities(10, "uniform"), rng, assignment="local", b_send=4),
    ]
    for res in runs:
        log = res.log
        reads = log.reads_per_client(x.size)
        assert reads.max() <= res.b_send  # at most b_send bits per client per value, across both rounds
        assert log.distinct_pairs()
        if res.n_clients.size == 4:
            assert (groups[log.client] >= 0).all()  # excluded clients are never read
            np.testing.assert_array_equal(log.group, groups[log.client])
        # the reports are exactly the clients' bits (no DP) -- nothing else is read
        if res.epsilon is None:
            codes, _ = enc.encode(x)
            np.testing.assert_array_equal(log.report, bit_of(codes[log.client], log.bit))
        # the estimate is a function of the log alone
        sums = aggregate_log(log, res.n_clients.size, enc.bits, res.epsilon, res.b_send)
        m = np.where(res.squashed, 0.0, sums.means())
        if res.rounds == 1:
            np.testing.assert_allclose(enc.decode_mean(m), res.estimate, rtol=1e-12)
    # central adaptive with b_send = 1: every contacted client answers exactly once
    assert runs[0].log.reads_per_client(x.size)[groups >= 0].min() == 1


def test_central_assignment_counts_are_quasi_monte_carlo():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, 1000).astype(float)
    p = bit_probabilities(8, "weighted", 0.7)
    res = B.bitpush(x, Encoding(8), p, rng)
    assert np.abs(res.counts[0] - 1000 * p).max() < 1.0  # exact up to rounding, not binomial
    assert res.counts.sum() == 1000


# ------------------------------------------------------------------ adaptive
def test_adaptive_drops_constant_bits_and_is_exact_on_constant_data():
    rng = np.random.default_rng(7)
    res = B.adaptive_bitpush(np.full(3000, 700.0), Encoding(10), rng)
    assert res.value == 700.0 and res.stderr[0] == 0.0
    assert (res.probabilities[1] == 0).all()  # nothing left to learn: round 2 asks nothing
    assert len(res.log) == res.info["round1_clients"][0]
    x = ages(10_000, rng)
    res = B.adaptive_bitpush(x, Encoding(16), rng)
    assert (res.probabilities[1][0, 7:] == 0).all()  # ages < 128: bits 7.. are unused (Algorithm 2 line 6)
    assert (res.probabilities[1][0, :7] > 0).all()
    assert abs(res.value - x.mean()) < Z * res.stderr[0]


def test_adaptive_is_insensitive_to_bit_depth_unlike_one_round_weighted():
    # Figure 1c's shape, small: the adaptive error hardly moves from 8 to 32 bits
    rng = np.random.default_rng(8)
    x = ages(5000, rng)

    def rmse(method, b, **kw):
        enc = Encoding(b)
        if method == "adaptive":
            e = [B.adaptive_bitpush(x, enc, rng, **kw).value - x.mean() for _ in range(40)]
        else:
            p = bit_probabilities(b, method, 0.5, None, enc.weights)
            e = [B.bitpush(x, enc, p, rng, **kw).value - x.mean() for _ in range(40)]
        return math.sqrt(np.mean(np.square(e)))

    a8, a32 = rmse("adaptive", 8), rmse("adaptive", 32)
    w8, w32 = rmse("weighted", 8), rmse("weighted", 32)
    assert a32 < 2.0 * a8
    assert w32 > 5.0 * w8
    assert rmse("adaptive", 8, caching=False) > 0.9 * a8  # pooling both rounds does not hurt


def test_adaptive_small_cohorts_are_not_biased():
    # with few round-1 reports a bit whose reports agree is kept in round 2 (see round1_floor)
    rng = np.random.default_rng(9)
    x = ages(150, rng)
    est = [B.adaptive_bitpush(x, Encoding(10), rng).value for _ in range(400)]
    assert abs(_z(est, x.mean())) < Z


def test_signed_values():
    rng = np.random.default_rng(10)
    x = rng.normal(-3.0, 20.0, 4000)
    enc = Encoding(10, 1, signed=True)
    truth = enc.decode(enc.encode(x)[0]).mean()
    est = [B.adaptive_bitpush(x, enc, rng).value for _ in range(100)]
    assert abs(_z(est, truth)) < Z
    assert abs(np.mean(est) - truth) < 1.0


# --------------------------------------------------------------- squashing
def test_bit_squashing_removes_noise_bits_under_ldp():
    rng = np.random.default_rng(11)
    x = ages(60_000, rng)
    enc = Encoding(24)
    res = B.adaptive_bitpush(x, enc, rng, epsilon=2.0, squash="top", squash_threshold=0.1)
    assert res.squashed[0, 7:].all() and not res.squashed[0, :7].any()
    assert (res.probabilities[1][0, 7:] == 0).all()
    plain = B.adaptive_bitpush(x, enc, rng, epsilon=2.0)
    assert abs(res.value - x.mean()) < 5.0 < abs(plain.value - x.mean())
    # "each": a bit below the threshold is squashed even under a used bit. 10,000 reports per
    # bit at eps = 2: 3 noise standard errors are 0.0128, below the absolute 0.05
    m = np.array([[0.5, 0.005, 0.5, 0.01, 0.0]])
    sums = BitSums(m * 1e4, np.full_like(m, 1e4), np.zeros_like(m))
    np.testing.assert_array_equal(squashed_bits(sums, 2.0, 0.05, 3.0, "each")[0], [0, 1, 0, 1, 1])
    np.testing.assert_array_equal(squashed_bits(sums, 2.0, 0.05, 3.0, "top")[0], [0, 0, 0, 1, 1])
    m = np.array([[0.5, 0.02, 0.5, 0.03, 0.0]])
    sums = BitSums(m * 1e4, np.full_like(m, 1e4), np.zeros_like(m))
    # 0.02 is 4.7 noise se: a used bit, kept although below the absolute 0.05
    np.testing.assert_array_equal(squashed_bits(sums, 2.0, 0.05, 3.0, "each")[0], [0, 0, 0, 0, 1])
    sums = BitSums(m * 100, np.full_like(m, 100), np.zeros_like(m))  # 100 reports: 3 se = 0.128 > 0.05
    np.testing.assert_array_equal(squashed_bits(sums, 2.0, 0.05, 3.0, "each")[0], [0, 1, 0, 1, 1])
    with pytest.raises(ParamError, match="unsigned"):
        B.adaptive_bitpush(x, Encoding(10, signed=True), rng, epsilon=1.0, squash="top")
    with pytest.raises(ParamError, match="standard errors"):
        B.adaptive_bitpush(x, enc, rng, epsilon=1.0, squash="top", squash_c=-1.0)


@pytest.mark.parametrize("tau", [0.05, 0.2])
def test_squashed_ldp_error_hardly_grows_from_10_to_32_bits(tau):
    """Figure 4c: with squashing, adaptive bit-pushing under LDP keeps its accuracy as the
    bit depth grows. A noise bit of weight up to 2^31 that survives, or bit 6 (ages >= 64,
    mean ~0.17) squashed for want of round-1 reports, multiplies the 32-bit RMSE by 10-200
    (a wrong round-1 floor does both). Bound 3x over 50 runs each:
    the ratio of two RMSEs of 50 runs has a relative sd of ~15%, so a correct run (~1.2x)
    exceeds 3x with probability below 1e-6."""
    x = ages(60_000, np.random.default_rng(13))

    def rmse(bits):
        rng = np.random.default_rng(14)
        e = [
            B.adaptive_bitpush(x, Encoding(bits), rng, epsilon=2.0, squash="top", squash_threshold=tau).value - x.mean()
            for _ in range(50)
        ]
        return math.sqrt(np.mean(np.square(e)))

    assert rmse(32) < 3.0 * rmse(10)


def test_default_squashing_c_holds_the_false_alarm_rate_over_all_bits():
    for bits in (8, 10, 32, 62):
        c = squash_c_default(bits)
        assert bits * stats.norm.sf(c) == pytest.approx(SQUASH_FWER, rel=1e-9)  # Bonferroni
    assert squash_c_default(8) == pytest.approx(3.02, abs=0.01)
    assert squash_c_default(32) == pytest.approx(3.42, abs=0.01)


@pytest.mark.parametrize("c", [1.0, 2.0])
def test_an_unused_bit_survives_squashing_at_the_stated_rate(c):
    """A bit no client uses is kept only when its unbiased mean reaches c noise standard
    errors; with 100 reports its raw count of ones is Binomial(100, 1 - p), which gives the
    exact survival rate (close to 1 - Phi(c)). Binomial test at false-alarm rate 1e-3."""
    rng = np.random.default_rng(30 + int(c))
    G, per, eps = 3000, 800, 1.0
    x = rng.integers(0, 128, G * per).astype(float)  # bit 7 is never set
    groups = np.repeat(np.arange(G), per)
    res = B.bitpush(
        x,
        Encoding(8),
        bit_probabilities(8, "uniform"),
        rng,
        groups=groups,
        epsilon=eps,
        squash="each",
        squash_threshold=0.5,
        squash_c=c,
    )
    assert (res.counts[:, 7] == 100).all()  # quasi-Monte-Carlo: exactly 800 / 8 reports per bit
    p = rr_keep_probability(eps)
    se0 = math.sqrt(rr_variance(eps) / 100)
    # kept <=> (Q/100 - (1 - p)) / (2p - 1) >= c se0 <=> Q >= 100 ((1 - p) + (2p - 1) c se0)
    q_min = math.ceil(100 * ((1 - p) + (2 * p - 1) * c * se0) - 1e-9)
    rate = stats.binom.sf(q_min - 1, 100, 1 - p)
    kept = int((~res.squashed[:, 7]).sum())
    assert stats.binomtest(kept, G, rate).pvalue > 1e-3
    assert abs(rate - stats.norm.sf(c)) < 0.3 * stats.norm.sf(c)  # the docstring's 1 - Phi(c)


def test_squashing_keeps_a_small_used_bit_once_the_noise_resolves_it():
    """With an absolute threshold 0.1 alone a bit of mean 0.04 would be zeroed at every
    epsilon (here ages >= 64: 2.6 years of a mean of ~40 would vanish). The threshold
    follows the noise: at eps = 5 the bit is kept and the mean is unbiased (z-test at
    |z| < 4.5 over 60 runs, false-alarm rate 7e-6); at eps = 0.3, where 3 noise standard
    errors exceed 0.1, the absolute threshold still squashes it."""
    rng = np.random.default_rng(12)
    n = 30_000
    x = np.where(rng.random(n) < 0.04, rng.integers(64, 100, n), rng.integers(0, 64, n)).astype(float)
    enc = Encoding(8)
    runs = [B.adaptive_bitpush(x, enc, rng, epsilon=5.0, squash="top") for _ in range(60)]
    assert not any(r.squashed[0, 6] for r in runs) and all(r.squashed[0, 7] for r in runs)
    assert abs(_z([r.value for r in runs], x.mean())) < Z
    low = B.adaptive_bitpush(x, enc, rng, epsilon=0.3, squash="top")
    assert low.squashed[0, 6]


# ----------------------------------------------------- variance (Lemma 3.5)
def test_variance_estimation_centered_beats_moments_when_mean_dominates():
    rng = np.random.default_rng(12)
    x = np.clip(np.rint(rng.normal(800, 20, 20_000)), 0, 1023)
    enc = Encoding(10)
    err = {}
    for how in ("centered", "moments"):
        e = []
        for _ in range(10):
            out = B.estimate_variance(x, enc, rng, how=how)
            assert out["log"].max_reads_per_client() == 1  # one bit of one derived value per client
            e.append(out["variance"] - x.var())
        err[how] = math.sqrt(np.mean(np.square(e))) / x.var()
    assert err["centered"] < 0.15
    assert err["centered"] < err["moments"] / 3  # Lemma 3.5: (sigma^2 + xbar^2/n)^2/n vs (sigma^2 + xbar^2)^2/n


# --------------------------------------------------------------- baselines
@pytest.mark.parametrize("method", BASELINES)
def test_baselines_are_unbiased(method):
    rng = np.random.default_rng(13)
    x = ages(3000, rng)
    est = [baseline_mean(x, method, 0.0, 127.0, rng, 1.0).estimate[0] for _ in range(200)]
    assert abs(_z(est, x.mean())) < Z


def test_baseline_details():
    rng = np.random.default_rng(14)
    x = rng.uniform(0, 1, 100_000)
    # subtractive dithering without DP: the error is uniform on [-1/2, 1/2] (variance 1/12)
    r = baseline_mean(x, "dithering", 0.0, 1.0, rng)
    assert (r.per_client - x).var() == pytest.approx(1 / 12, rel=0.03)
    assert r.log.aux is not None and r.log.max_reads_per_client() == 1
    # piecewise: output within [-C, C]
    eps = 1.0
    C = (math.exp(eps / 2) + 1) / (math.exp(eps / 2) - 1)
    t = _piecewise(np.linspace(-1, 1, 50_000), eps, rng)
    assert t.min() >= -C and t.max() <= C
    # Duchi's one-bit mechanism and randomized rounding + RR have the same variance
    vd = baseline_mean(x, "duchi", 0.0, 1.0, rng, eps).per_client.var()
    vr = baseline_mean(x, "rounding", 0.0, 1.0, rng, eps).per_client.var()
    assert vd == pytest.approx(vr, rel=0.03)
    with pytest.raises(ParamError, match="needs epsilon"):
        baseline_mean(x, "piecewise", 0.0, 1.0, rng)
    with pytest.raises(ParamError, match="low < high"):
        baseline_mean(x, "laplace", 1.0, 1.0, rng, 1.0)


# ------------------------------------------------------------ errors, seeds
def test_bad_parameters_raise_clear_errors():
    rng = np.random.default_rng(15)
    x = np.arange(100.0)
    with pytest.raises(ParamError, match="bits sent per client"):
        B.bitpush(x, Encoding(8), None, rng, b_send=9)
    with pytest.raises(ParamError, match="delta"):
        B.adaptive_bitpush(x, Encoding(8), rng, delta=1.0)
    with pytest.raises(ParamError, match="epsilon"):
        B.adaptive_bitpush(x, Encoding(8), rng, epsilon=-1)
    with pytest.raises(ParamError, match="assignment"):
        B.adaptive_bitpush(x, Encoding(8), rng, assignment="both")
    with pytest.raises(ParamError, match="Generator"):
        B.adaptive_bitpush(x, Encoding(8), None)


def test_deterministic_given_the_seed():
    x = ages(2000, np.random.default_rng(0))
    a = B.adaptive_bitpush(x, Encoding(10), np.random.default_rng(42), epsilon=1.0, squash="top")
    b = B.adaptive_bitpush(x, Encoding(10), np.random.default_rng(42), epsilon=1.0, squash="top")
    assert a.value == b.value
    np.testing.assert_array_equal(a.log.report, b.log.report)


def test_group_without_clients_has_no_estimate():
    rng = np.random.default_rng(16)
    x = ages(400, rng)
    g = np.where(np.arange(400) < 300, 0, -1)  # group 1 has nobody, the last 100 clients are excluded
    for res in (
        B.adaptive_bitpush(x, Encoding(8), rng, groups=g, n_groups=2),
        B.bitpush(x, Encoding(8), None, rng, groups=g, n_groups=2),
    ):
        assert np.isfinite(res.estimate[0]) and np.isnan(res.estimate[1]) and np.isnan(res.stderr[1])
        assert res.log.client.max() < 300


# ------------------------------------------------------------- secure mode (OpenDP)
ALPHA = 7e-6  # false-alarm rate of the binomial tests below (|z| < 4.5; OpenDP is not seeded: per run)
# OpenDP draws are not seeded: unseeded checks use a 1e-6 false-alarm rate so CI does not flake
SECURE_ALPHA = 1e-6


def _secure(seed=0):
    return NoiseSource(np.random.default_rng(seed), secure=True)


def test_seeded_randomized_response_and_laplace_baseline_are_the_plain_numpy_formulas():
    """Without secure mode the numbers are the plain numpy formulas on the same stream, so a seeded run repeats."""
    bits = (np.arange(500) % 3 == 0).astype(np.int8)
    rng = np.random.default_rng(21)
    ref = copy.deepcopy(rng)
    out = randomized_response(bits, 0.7, rng, NoiseSource(rng))  # a seeded source changes nothing
    flip = ref.random(bits.shape) >= 1 / (1 + math.exp(-0.7))
    np.testing.assert_array_equal(out, np.where(flip, 1 - bits, bits))
    x = ages(300, np.random.default_rng(3))
    rng = np.random.default_rng(22)
    ref = copy.deepcopy(rng)
    res = baseline_mean(x, "laplace", 0.0, 127.0, rng, 0.8)
    xs = (np.clip(x, 0.0, 127.0) - 0.0) / 127.0
    np.testing.assert_array_equal(res.log.report, xs * 127.0 + 0.0 + ref.laplace(0.0, 127.0 / 0.8, x.size))


@pytest.mark.parametrize("fn", ["bitpush", "adaptive"] + [f"baseline:{m}" for m in BASELINES])
def test_seeded_noise_source_gives_identical_results(fn):
    x = ages(800, np.random.default_rng(4))
    enc = Encoding(8)

    def go(noise):
        rng = np.random.default_rng(5)
        if fn == "bitpush":
            return B.bitpush(x, enc, None, rng, epsilon=1.0, noise=noise).log.report
        if fn == "adaptive":
            return B.adaptive_bitpush(x, enc, rng, epsilon=1.0, squash="top", noise=noise).log.report
        return baseline_mean(x, fn.split(":")[1], 0.0, 255.0, rng, 1.0, noise=noise).log.report

    np.testing.assert_array_equal(go(None), go(NoiseSource(np.random.default_rng(99))))


def test_secure_randomized_response_law_and_no_rng_use():
    bits = (np.arange(60_000) % 4 == 0).astype(np.int8)
    rng = np.random.default_rng(0)
    state = copy.deepcopy(rng.bit_generator.state)
    out = randomized_response(bits, 1.2, rng, _secure())
    assert out.dtype == np.int8 and out.shape == bits.shape
    assert rng.bit_generator.state == state  # the flips did not come from the numpy stream
    p = rr_keep_probability(1.2)
    kept = out == bits
    assert stats.binomtest(int(kept.sum()), bits.size, p).pvalue > SECURE_ALPHA
    assert stats.binomtest(int(kept[bits == 1].sum()), int((bits == 1).sum()), p).pvalue > SECURE_ALPHA


def test_secure_bitpush_keeps_bit_choices_on_rng_and_stays_unbiased():
    x = ages(4000, np.random.default_rng(6))
    enc = Encoding(8)
    seeded = B.bitpush(x, enc, None, np.random.default_rng(7), epsilon=2.0)
    secure = B.bitpush(x, enc, None, np.random.default_rng(7), epsilon=2.0, noise=_secure())
    np.testing.assert_array_equal(secure.log.client, seeded.log.client)  # which bit: numpy, as when seeded
    np.testing.assert_array_equal(secure.log.bit, seeded.log.bit)
    assert not np.array_equal(secure.log.report, seeded.log.report)  # the RR flips: OpenDP
    assert abs(secure.value - x.mean()) < Z * secure.stderr[0]
    # adaptive: no squashing (its bias is the paper's trade-off, not the noise source's) and a
    # round-1 floor of 200 reports per bit, so no bit is dropped on all-zero round-1 reports
    ad = B.adaptive_bitpush(x, enc, np.random.default_rng(8), epsilon=2.0, round1_floor=200, noise=_secure())
    assert abs(ad.value - x.mean()) < Z * ad.stderr[0]


def test_secure_laplace_baseline_law_and_numpy_only_mechanisms():
    x = ages(3000, np.random.default_rng(9))
    res = baseline_mean(x, "laplace", 0.0, 127.0, np.random.default_rng(10), 1.5, noise=_secure())
    resid = res.log.report - np.clip(x, 0.0, 127.0)
    b = 127.0 / 1.5  # E|Laplace(b)| = b, sd b: 6 standard errors (false-alarm rate ~2e-9)
    assert abs(np.abs(resid).mean() / b - 1) < 6 / math.sqrt(resid.size)
    # piecewise has no floating-point-safe sampler: refused in secure mode
    with pytest.raises(ParamError, match="piecewise"):
        baseline_mean(x, "piecewise", 0.0, 127.0, np.random.default_rng(11), 1.0, noise=_secure())
    # Duchi's coin: an exact Bernoulli on OS entropy, not the seeded stream, with the same law
    a = baseline_mean(x, "duchi", 0.0, 127.0, np.random.default_rng(11), 1.0)
    b = baseline_mean(x, "duchi", 0.0, 127.0, np.random.default_rng(11), 1.0, noise=_secure())
    assert not np.array_equal(a.log.report, b.log.report)
    e = math.exp(1.0)
    big = (e + 1) / (e - 1)
    p_plus = 0.5 + (2 * np.clip(x, 0.0, 127.0) / 127.0 - 1) / (2 * big)
    # the number of +B reports: a sum of independent Bernoullis, within 6 standard deviations
    assert abs((b.log.report > 0).sum() - p_plus.sum()) < 6 * np.sqrt((p_plus * (1 - p_plus)).sum())
    # dithering: the public dither h stays on rng, the randomized response moves to OpenDP
    a = baseline_mean(x, "dithering", 0.0, 127.0, np.random.default_rng(12), 1.0)
    b = baseline_mean(x, "dithering", 0.0, 127.0, np.random.default_rng(12), 1.0, noise=_secure())
    np.testing.assert_array_equal(a.log.aux, b.log.aux)
    assert not np.array_equal(a.log.report, b.log.report)


def test_ldp_adaptive_stderr_is_calibrated_when_high_bits_are_empty():
    # Ages in 0..100 on 10 bits, 4 regions of ~750 clients, epsilon 2: the top bits
    # are all zero, so a round-1 randomized-response sample can be all zeros. The
    # reported standard error must still cover the error: over 4 x 120 seeded
    # regional releases |z| stays below 4.5 (a calibrated Gaussian estimator
    # exceeds it with probability ~3e-3 over all 480) and ~95% lie within 1.96.
    enc = Encoding(10)
    rng0 = np.random.default_rng(11)
    values = np.clip(rng0.normal(40, 15, 3000), 0, 100)
    groups = rng0.integers(0, 4, 3000)
    true = np.array([values[groups == g].mean() for g in range(4)])
    z = []
    for seed in range(120):
        res = B.adaptive_bitpush(values, enc, np.random.default_rng(seed), epsilon=2.0, groups=groups, n_groups=4)
        z.append(np.abs((res.estimate - true) / res.stderr))
    z = np.concatenate(z)
    assert z.max() < 4.5, z.max()
    assert 0.90 <= np.mean(z < 1.96) <= 0.99
