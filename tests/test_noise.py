"""Statistical tests of the noise samplers.

Every distributional test runs at a fixed seed and accepts when the p-value of
a chi-square (binned counts) or Kolmogorov-Smirnov test exceeds ALPHA = 1e-3:
with a correct sampler each such assertion fails with probability 1e-3 over
seeds (the seeds are fixed, so the suite is deterministic).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats

from engine.core import noise as N
from engine.core.errors import ParamError
from engine.core.noise import secure

ALPHA = 1e-3  # false-alarm rate of each statistical assertion
# OpenDP draws are not seeded: unseeded checks use a 1e-6 false-alarm rate so CI does not flake
SECURE_ALPHA = 1e-6


# ------------------------------------------------------------------- helpers
def chisq_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit of integer samples to a pmf given on ``support``
    (consecutive integers). Bins with expected count < min_expected are pooled
    into the two tails (whose mass is whatever the kept bins leave)."""
    n = samples.size
    pmf = pmf / pmf.sum() if abs(pmf.sum() - 1) < 1e-9 else pmf
    keep = np.flatnonzero(pmf * n >= min_expected)
    lo, hi = support[keep[0]], support[keep[-1]]
    inner = (support > lo) & (support < hi)
    exp_inner = pmf[inner] * n
    exp_lo = pmf[support <= lo].sum() * n
    exp_hi = n - exp_lo - exp_inner.sum()
    obs_inner = np.bincount((samples[(samples > lo) & (samples < hi)] - lo - 1).astype(np.int64), minlength=inner.sum())
    obs = np.concatenate([[np.sum(samples <= lo)], obs_inner, [np.sum(samples >= hi)]])
    exp = np.concatenate([[exp_lo], exp_inner, [exp_hi]])
    assert obs.sum() == n
    return float(stats.chisquare(obs, exp).pvalue)


def dl_support(t: float, width: float = 40):
    k = np.arange(-int(width * t) - 5, int(width * t) + 6)
    return k, N.dl_pmf(k, t)


def polya_diff_pmf(alpha: float, r: float, jmax: int = 4000):
    """pmf of Polya(a, r) - Polya(a, r) on -jmax..jmax by direct correlation."""
    p = stats.nbinom.pmf(np.arange(jmax + 1), alpha, 1 - r)
    d = np.correlate(p, p, mode="full")  # index jmax + k <-> difference k
    return np.arange(-jmax, jmax + 1), d


# ------------------------------------------------------------ discrete Laplace
def test_discrete_laplace_matches_pmf():
    rng = np.random.default_rng(1)
    t = 2.5
    x = N.discrete_laplace(rng, t, 60_000)
    assert x.dtype == np.int64
    k, pmf = dl_support(t)
    assert chisq_pvalue(x, k, pmf) > ALPHA
    # parameterisation: r = exp(-1/t) and variance 2r/(1-r)^2
    assert N.dl_r(t) == pytest.approx(math.exp(-1 / t))
    assert N.dl_scale(N.dl_r(t)) == pytest.approx(t)
    r = N.dl_r(t)
    assert N.dl_variance(t) == pytest.approx(2 * r / (1 - r) ** 2)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert N.dl_cdf(3, t) == pytest.approx(N.dl_pmf(np.arange(-400, 4), t).sum())


def test_discrete_laplace_small_scale_is_mostly_zero():
    rng = np.random.default_rng(2)
    x = N.discrete_laplace(rng, 0.2, 20_000)
    k, pmf = dl_support(0.2, width=200)
    assert chisq_pvalue(x, k, pmf) > ALPHA


# ---------------------------------------------------------------------- Pólya
@pytest.mark.parametrize("alpha,r", [(0.3, 0.7), (2.5, 0.4), (1.0, 0.9)])
def test_polya_matches_negative_binomial_pmf(alpha, r):
    rng = np.random.default_rng(3)
    x = N.polya(rng, alpha, r, 40_000)
    k = np.arange(0, 3000)
    pmf = stats.nbinom.pmf(k, alpha, 1 - r)
    assert chisq_pvalue(x, k, pmf) > ALPHA
    # also the Poisson-of-Gamma construction: same law by a two-sample test
    lam = rng.gamma(alpha, r / (1 - r), 40_000)
    y = rng.poisson(lam)
    hi = int(np.quantile(np.concatenate([x, y]), 0.999))
    table = np.array(
        [np.bincount(np.minimum(x, hi), minlength=hi + 1), np.bincount(np.minimum(y, hi), minlength=hi + 1)]
    )
    table = table[:, table.sum(0) >= 10]
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_polya_alpha_zero_and_arrays():
    rng = np.random.default_rng(4)
    assert N.polya(rng, 0.0, 0.5, 5).tolist() == [0] * 5
    one = N.polya(rng, 2.0, 0.5)  # a scalar alpha without size: one draw, as for alpha = 0
    assert isinstance(one, np.int64) and one >= 0 and isinstance(N.polya(rng, 0.0, 0.5), np.int64)
    a = np.array([0.0, 1.0, 3.0])
    out = N.polya(rng, a, 0.5, (20_000, 3))
    assert out.shape == (20_000, 3)
    assert (out[:, 0] == 0).all()
    # means alpha r/(1-r) = alpha here; 6-sigma tolerance
    for j, aj in enumerate(a[1:], start=1):
        sd = math.sqrt(aj * 0.5 / 0.25 / 20_000)
        assert abs(out[:, j].mean() - aj) < 6 * sd


def test_polya_difference_with_alpha_one_is_discrete_laplace():
    rng = np.random.default_rng(5)
    t = 1.7
    x = N.polya_difference(rng, 1.0, N.dl_r(t), 60_000)
    k, pmf = dl_support(t)
    assert chisq_pvalue(x, k, pmf) > ALPHA


# ------------------------------------------------ distributed discrete Laplace
def test_sum_of_client_polya_differences_is_discrete_laplace():
    """N clients each add Polya(1/N, r) - Polya(1/N, r): the shard sum is DL(r)."""
    rng = np.random.default_rng(6)
    t = 2.0
    sn = N.polya_difference_sum(rng, 40, 25_000, t, shard_size=40, per_client=True)
    assert sn.noise.shape == (1, 25_000)
    assert sn.alpha.tolist() == [1.0]
    k, pmf = dl_support(t)
    assert chisq_pvalue(sn.noise[0], k, pmf) > ALPHA
    # the aggregated fast form, same check
    fast = N.polya_difference_sum(rng, 40, 25_000, t, shard_size=40)
    assert chisq_pvalue(fast.noise[0], k, pmf) > ALPHA
    assert fast.effective_epsilon == pytest.approx(1 / t)
    assert fast.variance[0] == pytest.approx(N.dl_variance(t))


def test_fast_and_per_client_forms_agree_with_dropout():
    """With more dropouts than planned (alpha = 27/40) both forms follow the law of
    Polya(alpha, r) - Polya(alpha, r): chi-square against its exact pmf, plus a
    two-sample test between the forms."""
    t = 3.0
    r = N.dl_r(t)
    survived = np.ones(40, dtype=bool)
    survived[:13] = False
    a = N.polya_difference_sum(np.random.default_rng(7), 40, 20_000, t, 40, survived=survived, per_client=True)
    b = N.polya_difference_sum(np.random.default_rng(8), 40, 20_000, t, 40, survived=survived)
    assert a.survivors.tolist() == b.survivors.tolist() == [27]
    assert b.alpha[0] == pytest.approx(27 / 40)
    k, pmf = polya_diff_pmf(27 / 40, r)
    assert chisq_pvalue(a.noise[0], k, pmf) > ALPHA
    assert chisq_pvalue(b.noise[0], k, pmf) > ALPHA
    lo, hi = -12, 12
    ca = np.bincount(np.clip(a.noise[0], lo, hi) - lo, minlength=hi - lo + 1)
    cb = np.bincount(np.clip(b.noise[0], lo, hi) - lo, minlength=hi - lo + 1)
    assert stats.chi2_contingency(np.array([ca, cb])).pvalue > ALPHA
    # reported variance 2 a r/(1-r)^2 matches the sample variance (6-sigma band,
    # sd of the sample variance ~ sqrt((m4 - s^4)/n))
    v = b.variance[0]
    assert v == pytest.approx(2 * (27 / 40) * r / (1 - r) ** 2)
    x = b.noise[0].astype(float)
    sd_var = math.sqrt((np.mean(x**4) - x.var() ** 2) / x.size)
    assert abs(x.var() - v) < 6 * sd_var
    # weaker than planned: epsilon above 1/t, and reported
    assert b.effective_epsilon > b.planned_epsilon == pytest.approx(1 / t)
    assert b.report()["weak_shards"] == 1
    assert any("fewer clients than planned" in s for s in b.notes)


def test_shards_split_and_dropout_planning():
    rng = np.random.default_rng(9)
    sizes = N.split_shards(25_000, 10_000)
    assert sizes.tolist() == [8334, 8333, 8333]
    assert N.split_shards(7, 10).tolist() == [7]
    # planned for 10 % dropout, actual 5 %: every shard keeps a full discrete Laplace
    sn = N.polya_difference_sum(rng, 25_000, 50, 2.0, 10_000, dropout=0.05, planned_dropout=0.10)
    assert sn.dp_shard_sizes.tolist() == [7500, 7499, 7499]
    assert sn.discrete_laplace.all()
    assert sn.effective_epsilon == pytest.approx(0.5)
    assert sn.client_survived.sum() == sn.survivors.sum()
    assert 0.04 < 1 - sn.client_survived.mean() < 0.06
    assert np.array_equal(np.bincount(sn.client_shard), sizes)
    # actual dropout 20 % > planned 10 %: weaker in every shard
    sn2 = N.polya_difference_sum(rng, 25_000, 50, 2.0, 10_000, dropout=0.20, planned_dropout=0.10)
    assert not sn2.discrete_laplace.any()
    assert sn2.effective_epsilon > 0.5
    assert (sn2.variance < sn2.planned_variance).all()
    rep = sn2.report()
    assert rep["weak_shards"] == 3 and rep["effective_epsilon"] == pytest.approx(sn2.effective_epsilon)
    # fixed DP shard size above the shard size is flagged
    sn3 = N.polya_difference_sum(rng, 100, 5, 2.0, 50, dp_shard_size=60)
    assert any("exceeds" in s for s in sn3.notes)
    with pytest.raises(ParamError):
        N.polya_difference_sum(rng, 100, 5, 2.0, 50, dropout=1.5)


def test_polya_difference_epsilon_exact_on_truncated_pmf():
    r = N.dl_r(2.0)
    assert N.polya_difference_epsilon(1.0, r) == pytest.approx(0.5)
    assert N.polya_difference_epsilon(3.0, r, sensitivity=2) == pytest.approx(1.0)
    assert N.polya_difference_epsilon(0.0, r) == math.inf
    prev = 0.5
    for a in (0.9, 0.6, 0.3, 0.1):
        eps = N.polya_difference_epsilon(a, r)
        # brute force: max over k of ln D(k)/D(k+1) on a truncated support
        k, d = polya_diff_pmf(a, r, jmax=400)
        central = np.abs(k) <= 50  # away from the truncation
        brute = np.max(np.abs(np.diff(np.log(d[central]))))
        assert eps == pytest.approx(brute, rel=1e-6)
        assert eps > prev  # fewer survivors, weaker guarantee
        prev = eps


# ------------------------------------------------------- continuous samplers
def test_laplace_and_gaussian_match_their_cdfs():
    rng = np.random.default_rng(10)
    assert stats.kstest(N.laplace(rng, 3.0, 20_000), stats.laplace(scale=3.0).cdf).pvalue > ALPHA
    assert stats.kstest(N.gaussian(rng, 2.0, 20_000), stats.norm(scale=2.0).cdf).pvalue > ALPHA
    with pytest.raises(ParamError):
        N.laplace(rng, -1.0, 3)
    with pytest.raises(ParamError):
        N.discrete_laplace(rng, float("nan"), 3)


def test_planar_laplace_radius_and_angle():
    rng = np.random.default_rng(11)
    eps = 0.01  # per metre: mean displacement 200 m
    z = N.planar_laplace(rng, eps, 30_000)
    assert z.shape == (30_000, 2)
    rad = np.hypot(z[:, 0], z[:, 1])
    assert stats.kstest(rad, lambda r: N.planar_laplace_radius_cdf(r, eps)).pvalue > ALPHA
    ang = np.arctan2(z[:, 1], z[:, 0])
    assert stats.kstest(ang, stats.uniform(loc=-np.pi, scale=2 * np.pi).cdf).pvalue > ALPHA
    # E[r] = 2/eps; sd of r is sqrt(2)/eps, 6-sigma band
    assert abs(rad.mean() - 2 / eps) < 6 * (math.sqrt(2) / eps) / math.sqrt(rad.size)
    assert N.planar_laplace(rng, eps).shape == (2,)


# -------------------------------------------------------- randomized response
def test_binary_randomized_response_and_unbiasing():
    rng = np.random.default_rng(12)
    eps = 1.0
    p = math.e / (1 + math.e)
    assert N.rr_keep_probability(eps) == pytest.approx(p)
    bits = np.zeros(100_000, dtype=bool)
    bits[:30_000] = True
    out = N.randomized_response(rng, bits, eps)
    kept = (out == bits).sum()
    assert stats.binomtest(int(kept), bits.size, p).pvalue > ALPHA
    est = N.rr_unbias_count(out.sum(), bits.size, eps)
    sd = math.sqrt(bits.size * p * (1 - p)) / (2 * p - 1)
    assert abs(est - 30_000) < 4.5 * sd  # normal tail 7e-6
    assert N.rr_unbias_mean(out.mean(), eps) == pytest.approx(est / bits.size)


def test_kary_randomized_response_distribution_and_unbiasing():
    rng = np.random.default_rng(13)
    k, eps = 5, 1.2
    v = np.full(50_000, 2)
    out = N.randomized_response_kary(rng, v, k, eps)
    p = math.exp(eps) / (math.exp(eps) + k - 1)
    q = (1 - p) / (k - 1)
    exp = np.array([q, q, p, q, q]) * v.size
    assert stats.chisquare(np.bincount(out, minlength=k), exp).pvalue > ALPHA
    truth = np.array([10_000, 0, 25_000, 5_000, 10_000])
    vals = np.repeat(np.arange(k), truth)
    rep = np.bincount(N.randomized_response_kary(rng, vals, k, eps), minlength=k)
    est = N.rr_kary_unbias_counts(rep, vals.size, k, eps)
    sd = math.sqrt(vals.size * 0.25) / (p - q)
    assert np.all(np.abs(est - truth) < 5 * sd)
    with pytest.raises(ParamError):
        N.randomized_response_kary(rng, np.array([5]), k, eps)


def test_unary_encoding_aggregate_matches_per_user_bits():
    rng = np.random.default_rng(14)
    eps, n = 1.0, 4000
    counts = np.array([100, 0, 2500, 1400])
    p, q = N.unary_encoding_pq(eps)
    assert (p, q) == pytest.approx((0.5, 1 / (math.e + 1)))
    reps = np.array([N.unary_encoding_counts(rng, counts, n, eps) for _ in range(400)])
    # per-user simulation of the same bits
    onehot = np.zeros((n, 4), dtype=bool)
    onehot[np.arange(n), np.repeat(np.arange(4), counts)] = True
    direct = np.array([np.where(onehot, rng.random((n, 4)) < p, rng.random((n, 4)) < q).sum(0) for _ in range(400)])
    for j in range(4):
        assert stats.ks_2samp(reps[:, j], direct[:, j]).pvalue > ALPHA
    est = N.unary_encoding_unbias(reps.mean(0), n, eps)
    sd = np.sqrt(n * 0.25 / 400) / (p - q)
    assert np.all(np.abs(est - counts) < 6 * sd)


# ----------------------------------------------------------------- NoiseSource
def test_noise_source_is_deterministic_given_the_seed():
    a = N.NoiseSource(np.random.default_rng(99))
    b = N.NoiseSource(np.random.default_rng(99))
    assert np.array_equal(a.discrete_laplace(2.0, 50), b.discrete_laplace(2.0, 50))
    assert np.array_equal(a.laplace(1.0, 50), b.laplace(1.0, 50))
    assert np.array_equal(a.planar_laplace(0.1, 5), b.planar_laplace(0.1, 5))
    assert np.array_equal(a.polya_difference_sum(30, 8, 2.0, 10).noise, b.polya_difference_sum(30, 8, 2.0, 10).noise)


def test_secure_discrete_laplace_matches_pmf_and_is_unseeded():
    t = 2.0
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    x = ns.discrete_laplace(t, 20_000)
    assert x.dtype == np.int64 and x.shape == (20_000,)
    k, pmf = dl_support(t)
    # OpenDP draws from the OS entropy source: not seeded, so this chi-square
    # is not reproducible; its false-alarm rate is still ALPHA per run.
    assert chisq_pvalue(x, k, pmf) > SECURE_ALPHA
    other = N.NoiseSource(np.random.default_rng(0), secure=True).discrete_laplace(t, 200)
    assert not np.array_equal(x[:200], other)  # same seed, different draws (P(equal) ~ 1e-150)
    assert ns.discrete_laplace(t, (3, 4)).shape == (3, 4)
    assert np.ndim(ns.discrete_laplace(t)) == 0


def test_secure_continuous_samplers_and_rr():
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    assert stats.kstest(ns.laplace(1.5, 4000), stats.laplace(scale=1.5).cdf).pvalue > SECURE_ALPHA
    assert stats.kstest(ns.gaussian(2.0, 1500), stats.norm(scale=2.0).cdf).pvalue > SECURE_ALPHA
    bits = np.zeros(200_003, dtype=bool)
    bits[::3] = True
    out = ns.randomized_response(bits, 0.8)
    assert out.shape == bits.shape
    p = N.rr_keep_probability(0.8)
    assert stats.binomtest(int((out == bits).sum()), bits.size, p).pvalue > SECURE_ALPHA
    # flips independent of the bit value
    assert stats.binomtest(int((out == bits)[bits].sum()), int(bits.sum()), p).pvalue > SECURE_ALPHA


def test_secure_polya_sum_uses_discrete_laplace_for_full_shards():
    t = 1.5
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    sn = ns.polya_difference_sum(200, 15_000, t, shard_size=200)
    assert sn.discrete_laplace.all()
    k, pmf = dl_support(t)
    assert chisq_pvalue(sn.noise[0], k, pmf) > SECURE_ALPHA  # not seeded (see above)


# ------------------------------------------------ add_* (data through the noise)
def _copy(rng: np.random.Generator) -> np.random.Generator:
    return copy.deepcopy(rng)


@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (0,)])
def test_add_forms_without_secure_mode_are_plain_numpy_bit_for_bit(shape):
    """Non-secure add_laplace / add_gaussian / add_discrete_laplace return exactly
    ``x + rng.<law>(0, scale, x.shape)`` from the same stream (so a seeded run repeats),
    and leave the stream where those plain draws leave it."""
    data = np.random.default_rng(1)
    x = data.normal(0, 50, shape) if shape else 12.375
    xi = data.integers(-100, 100, shape) if shape else 17
    rng = np.random.default_rng(2024)
    ref = _copy(rng)
    ns = N.NoiseSource(rng)
    size = shape if shape else None
    out = ns.add_laplace(x, 0.7)
    assert np.array_equal(out, x + ref.laplace(0, 0.7, size))
    assert np.shape(out) == shape and np.asarray(out).dtype == np.float64
    assert np.array_equal(ns.add_gaussian(x, 2.5), x + ref.normal(0, 2.5, size))
    out_i = ns.add_discrete_laplace(xi, 1.5)
    assert np.array_equal(out_i, xi + N.discrete_laplace(ref, 1.5, size))
    assert np.asarray(out_i).dtype == np.int64
    assert rng.random() == ref.random()  # the streams are still in step


def test_add_forms_reject_bad_data_and_scales():
    ns = N.NoiseSource(np.random.default_rng(0))
    with pytest.raises(ParamError, match="finite"):
        ns.add_laplace([1.0, np.nan], 1.0)
    with pytest.raises(ParamError, match="finite"):
        ns.add_gaussian([np.inf], 1.0)
    with pytest.raises(ParamError, match="integer"):
        ns.add_discrete_laplace([1.5, 2.0], 1.0)
    with pytest.raises(ParamError):
        ns.add_laplace([1.0], 0.0)
    assert ns.add_discrete_laplace(np.array([3.0, -4.0]), 1.0).dtype == np.int64  # integral floats are accepted


def test_secure_add_passes_the_data_itself_to_opendp(monkeypatch):
    """Secure mode hands the data vector (not zeros) to the OpenDP measurement and
    returns its output unchanged, reshaped."""
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    seen = []

    def fake(kind, scale):
        def meas(arg):
            seen.append((kind, scale, np.asarray(arg).copy()))
            return [v + 1 for v in arg]

        return meas

    monkeypatch.setattr(ns, "_opendp", fake)
    x = np.array([[0.1, 2.5], [-3.0, 1e6]])
    out = ns.add_laplace(x, 0.5)
    assert seen[-1][0] == "lap" and seen[-1][1] == 0.5 and np.array_equal(seen[-1][2], x.ravel())
    assert np.array_equal(out, x + 1) and out.shape == x.shape
    assert ns.add_gaussian(4.0, 2.0) == 5.0 and seen[-1][0] == "gauss"
    out_i = ns.add_discrete_laplace(np.array([5, 6]), 3.0)
    assert seen[-1][0] == "dlap" and np.array_equal(seen[-1][2], [5, 6]) and out_i.dtype == np.int64


def test_opendp_measurements_have_the_exact_privacy_map():
    """Default k is the finest lattice, so the float Laplace map is exactly sensitivity/scale
    (no rounding slack) and the Gaussian one rho = d^2 / (2 sigma^2)."""
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    assert ns.opendp_measurement("laplace", 0.5).map(1.0) == 2.0
    assert ns.opendp_measurement("laplace", 0.25).map(3.0) == 12.0
    assert ns.opendp_measurement("discrete_laplace", 2.0).map(1) == 0.5
    assert ns.opendp_measurement("gaussian", 2.0).map(1.0) == pytest.approx(1 / 8)
    with pytest.raises(ParamError):
        ns.opendp_measurement("planar", 1.0)


def test_secure_add_laplace_has_the_laplace_law_around_the_data():
    """x + Laplace(scale) through OpenDP on non-integer data: the residuals out - x follow
    Laplace(scale) (KS p-value > ALPHA). OpenDP is not seeded, so the false-alarm rate
    ALPHA holds per run rather than once for a fixed seed (the other checks here use
    6-standard-error bands, false-alarm rate ~2e-9)."""
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    x = np.random.default_rng(3).uniform(-1e3, 1e3, 3000)
    out = ns.add_laplace(x, 1.7)
    assert out.shape == x.shape and out.dtype == np.float64
    assert stats.kstest(out - x, stats.laplace(scale=1.7).cdf).pvalue > SECURE_ALPHA
    again = N.NoiseSource(np.random.default_rng(0), secure=True).add_laplace(x[:50], 1.7)
    assert not np.array_equal(again, out[:50])  # same seed, different draws: OpenDP is not seeded
    assert np.ndim(ns.add_laplace(2.0, 1.0)) == 0
    # Gaussian and discrete Laplace (their laws are tested on the bare samplers above): the
    # second moment of the residuals within 6 standard errors (false-alarm rate ~2e-9)
    g = ns.add_gaussian(x[:1500], 2.0) - x[:1500]
    assert abs(np.mean(g**2) / 4.0 - 1) < 6 * math.sqrt(2 / g.size)
    xi = np.random.default_rng(4).integers(-1000, 1000, 3000)
    d = (ns.add_discrete_laplace(xi, 2.0) - xi).astype(float)
    assert abs(np.mean(d**2) - N.dl_variance(2.0)) < 6 * np.std(d**2) / math.sqrt(d.size)


# ------------------------------------------------------------- Pólya precision
def test_polya_uses_one_minus_r_when_given():
    t = 5.0
    r, p = N.dl_r(t), -math.expm1(-1 / t)
    rng = np.random.default_rng(11)
    ref = _copy(rng)
    assert np.array_equal(N.polya(rng, 2.0, r, 6, one_minus_r=p), ref.negative_binomial(2.0, p, 6))
    a = np.array([0.0, 0.5, 3.0])
    out = N.polya(rng, a, r, one_minus_r=p)
    assert out[0] == 0 and np.array_equal(out[1:], ref.negative_binomial(a[1:], p))
    with pytest.raises(ParamError, match="does not match"):
        N.polya(rng, 1.0, r, 3, one_minus_r=0.5)
    with pytest.raises(ParamError):
        N.polya(rng, 1.0, r, 3, one_minus_r=0.0)


def test_polya_epsilon_precise_when_r_is_close_to_one():
    """At t = 1e12, 1 - r computed from r = exp(-1/t) keeps ~4 significant digits; with
    one_minus_r = -expm1(-1/t) the epsilon of a full shard is 1/t to machine precision."""
    t = 1e12
    r = N.dl_r(t)
    p = -math.expm1(-1 / t)
    assert N.polya_difference_epsilon(1.0, r, one_minus_r=p) == pytest.approx(1 / t, rel=1e-12)
    assert abs(N.polya_difference_epsilon(1.0, r) * t - 1) > 1e-6  # from r alone (1 - r cancels): visibly off
    # alpha < 1 still exceeds 1/t (with a moderate t the sums are not truncated)
    t2 = 40.0
    e = N.polya_difference_epsilon(0.5, N.dl_r(t2), one_minus_r=-math.expm1(-1 / t2))
    assert e == pytest.approx(N.polya_difference_epsilon(0.5, N.dl_r(t2)), rel=1e-9) and e > 1 / t2


def test_shard_without_survivors_releases_nothing():
    """A shard whose clients all dropped sends neither data nor noise: epsilon 0 (not inf),
    not counted as weak, and the effective epsilon is that of the other shards."""
    t = 2.0
    survived = np.ones(40, dtype=bool)
    survived[:20] = False  # shard 0 (clients 0..19) loses everyone
    sn = N.polya_difference_sum(np.random.default_rng(5), 40, 30, t, 20, survived=survived)
    assert sn.survivors.tolist() == [0, 20]
    assert sn.epsilon[0] == 0.0 and sn.epsilon[1] == pytest.approx(1 / t)
    assert sn.effective_epsilon == pytest.approx(1 / t)
    assert not sn.noise[0].any()
    rep = sn.report()
    assert rep["empty_shards"] == 1 and rep["weak_shards"] == 0
    assert any("lost every client" in s for s in sn.notes)
    assert not any("fewer clients than planned" in s for s in sn.notes)


# ------------------------------------- secure mode: exact samplers on OS entropy
def test_secure_bernoulli_is_exact_for_float_probabilities():
    for p in (0.3, 1 / 3, 2.0**-20 * 3, 0.999):
        x = N.secure_bernoulli(p, 200_000)
        assert x.dtype == bool and stats.binomtest(int(x.sum()), x.size, p).pvalue > SECURE_ALPHA
    assert not N.secure_bernoulli(0.0, 1000).any() and N.secure_bernoulli(1.0, 1000).all()
    # one probability per draw
    p = np.tile([0.1, 0.5, 0.75, 1.0, 0.0], 40_000)
    x = N.secure_bernoulli(p).reshape(-1, 5)
    for j, pj in enumerate((0.1, 0.5, 0.75)):
        assert stats.binomtest(int(x[:, j].sum()), len(x), pj).pvalue > SECURE_ALPHA
    assert x[:, 3].all() and not x[:, 4].any()
    # the binary digits are the exact expansion of the float
    d = secure._binary_digits(0.3)
    assert sum(int(b) * 2.0 ** -(i + 1) for i, b in enumerate(d)) == 0.3
    with pytest.raises(ParamError):
        N.secure_bernoulli(1.5, 3)


def test_secure_uniform_and_binomial_laws():
    u = N.secure_uniform_below(7, 70_000)
    assert u.min() >= 0 and u.max() <= 6
    assert stats.chisquare(np.bincount(u, minlength=7)).pvalue > SECURE_ALPHA
    # Binomial(m, p) for several m at once (word boundaries at 64), against the exact pmf
    for m, p in ((1, 0.27), (63, 0.5), (65, 0.27), (1000, 1 / 3)):
        draws = np.array([N.secure_binomial(np.full(500, m), p) for _ in range(8)]).ravel()
        k = np.arange(m + 1)
        assert chisq_pvalue(draws, k, stats.binom.pmf(k, m, p)) > SECURE_ALPHA, (m, p)
    assert N.secure_binomial(np.array([0, 5]), 1.0).tolist() == [0, 5]


def test_secure_kary_rr_and_unary_encoding_are_exact_and_unseeded():
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    k, eps = 5, 0.9
    vals = np.repeat(np.arange(k), 20_000)
    rep = ns.randomized_response_kary(vals, k, eps)
    p = N.rr_keep_probability(eps, k)
    assert stats.binomtest(int((rep == vals).sum()), vals.size, p).pvalue > SECURE_ALPHA
    other = rep[(vals == 2) & (rep != 2)]  # the others uniformly
    assert stats.chisquare(np.bincount(other, minlength=k)[[0, 1, 3, 4]]).pvalue > SECURE_ALPHA
    again = N.NoiseSource(np.random.default_rng(0), secure=True).randomized_response_kary(vals[:500], k, eps)
    assert not np.array_equal(again, rep[:500])
    counts, n = np.array([0, 10, 300]), 300
    sums = np.array([ns.unary_encoding_counts(counts, n, 1.2) for _ in range(2000)])
    pp, q = N.unary_encoding_pq(1.2)
    for c, col in zip(counts, sums.T):  # Binomial(c, p) + Binomial(n - c, q): mean and variance
        mean, var = c * pp + (n - c) * q, c * pp * (1 - pp) + (n - c) * q * (1 - q)
        assert abs(col.mean() - mean) < 5 * np.sqrt(var / len(col))


def test_secure_planar_lattice_law_and_exact_acceptance():
    # coarse lattice (b = eps u = 0.5): P(k) ∝ exp(-0.5 |k|_2) on Z^2, against the exact pmf
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    k = ns._planar_lattice(0.5, 40_000)
    r = np.arange(-60, 61)
    X, Y = np.meshgrid(r, r)
    pmf = np.exp(-0.5 * np.hypot(X, Y))
    pmf /= pmf.sum()
    idx = (k[:, 1] + 60) * 121 + (k[:, 0] + 60)
    assert np.abs(k).max() <= 60
    obs = np.bincount(idx, minlength=121 * 121)
    keep = pmf.ravel() * len(k) >= 5
    exp = pmf.ravel() * len(k)
    o = np.append(obs[keep], obs[~keep].sum())
    e = np.append(exp[keep], exp[~keep].sum())
    assert stats.chisquare(o, e * o.sum() / e.sum()).pvalue > SECURE_ALPHA
    # the exact fallback: U's first 53 bits straddle exp(-g); P(accept) = the straddled fraction
    from decimal import Decimal, localcontext

    b, s = 0.3, np.sqrt(2) / 0.3 * (1 + 2.0**-40)
    with localcontext() as c:
        c.prec = 60
        a = (-(Decimal(b) * Decimal(25).sqrt() - Decimal(7) / Decimal(s))).exp() * Decimal(2**53)
    head = int(a)
    frac = float(a - head)
    got = sum(secure._accept_planar_exact(3, 4, b, s, head) for _ in range(3000))
    assert stats.binomtest(got, 3000, frac).pvalue > SECURE_ALPHA
    assert secure._accept_planar_exact(3, 4, b, s, head - 1) and not secure._accept_planar_exact(3, 4, b, s, head + 1)


def test_secure_planar_laplace_and_polya_refusals():
    ns = N.NoiseSource(np.random.default_rng(0), secure=True)
    eps = 0.004
    z = ns.planar_laplace(eps, 8000)
    u = N.planar_lattice_step(eps)
    assert u == 0.25 and np.array_equal(z / u, np.round(z / u))
    assert stats.kstest(np.hypot(*z.T), lambda x: N.planar_laplace_radius_cdf(x, eps)).pvalue > SECURE_ALPHA
    out = ns.add_planar_laplace([[100.06, -3.3]], eps)
    assert np.array_equal(out / u, np.round(out / u))
    with pytest.raises(ParamError, match="Pólya"):
        ns.polya(1.0, 0.5, 3)
    with pytest.raises(ParamError, match="fewer clients"):  # a shard below its planned size
        ns.polya_difference_sum(10, 4, 2.0, 10, survived=np.arange(10) < 7)
    with pytest.raises(ParamError, match="share"):
        ns.polya_difference_sum(10, 4, 2.0, 10, per_client=True)
    # a full shard with extra survivors: discrete Laplace plus extra Pólya from fresh entropy
    a = N.NoiseSource(np.random.default_rng(0), secure=True).polya_difference_sum(20, 20_000, 2.0, 20, dp_shard_size=10)
    b = N.NoiseSource(np.random.default_rng(0), secure=True).polya_difference_sum(20, 20_000, 2.0, 20, dp_shard_size=10)
    assert a.alpha[0] == 2.0 and not np.array_equal(a.noise, b.noise)
    # variance 2 alpha r/(1-r)^2 within 0.1 relative (about 6 standard errors of a sample variance)
    assert abs(a.noise.var() / (2 * a.alpha[0] * N.dl_r(2.0) / (1 - N.dl_r(2.0)) ** 2) - 1) < 0.1
