"""Seeded samplers and their laws: Laplace, Gaussian, discrete Laplace, Pólya, planar Laplace,
binary and k-ary randomized response, unary encoding, the exponential mechanism for a quantile. Every
sampler takes a seeded
``numpy.random.Generator``; the parameterisations are in :mod:`engine.core.noise`."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParamError

# ----------------------------------------------------------------------- checks


def check_positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ParamError(f"{name} must be a positive finite number (got {value})")
    return v


def check_probability(name: str, value: float, *, open_hi: bool = True) -> float:
    v = float(value)
    ok = 0 < v < 1 if open_hi else 0 < v <= 1
    if not (math.isfinite(v) and ok):
        raise ParamError(f"{name} must lie in (0, 1{')' if open_hi else ']'} (got {value})")
    return v


def dl_r(t: float) -> float:
    """Discrete-Laplace parameter ``r = exp(-1/t)`` from its scale ``t``."""
    return math.exp(-1.0 / check_positive("discrete Laplace scale", t))


def dl_scale(r: float) -> float:
    """Discrete-Laplace scale ``t = -1/ln r`` from its parameter ``r``."""
    return -1.0 / math.log(check_probability("discrete Laplace parameter r", r))


def dl_variance(t: float) -> float:
    """Variance ``2r/(1-r)^2`` of discrete Laplace with scale ``t``."""
    r = dl_r(t)
    return 2 * r / (-math.expm1(-1.0 / t)) ** 2


def dl_pmf(k, t: float) -> np.ndarray:
    """``P(k) = (1-r)/(1+r) r^|k|`` (vectorised, for tests and tables)."""
    r = dl_r(t)
    return -math.expm1(-1.0 / t) / (1 + r) * np.exp(-np.abs(np.asarray(k, dtype=np.float64)) / t)


def dl_cdf(k, t: float) -> np.ndarray:
    """``P(X <= k)`` of discrete Laplace with scale ``t``."""
    r = dl_r(t)
    k = np.floor(np.asarray(k, dtype=np.float64))
    neg = r ** (-k) / (1 + r)  # k < 0: sum_{j<=k} = r^{|k|}/(1+r)
    pos = 1 - r ** (k + 1) / (1 + r)
    return np.where(k < 0, neg, pos)


# ------------------------------------------------------------------- samplers


def laplace(rng: np.random.Generator, scale: float, size=None) -> np.ndarray:
    """Laplace(0, scale) noise (float64)."""
    return rng.laplace(0.0, check_positive("Laplace scale", scale), size)


def gaussian(rng: np.random.Generator, sigma: float, size=None) -> np.ndarray:
    """Gaussian N(0, sigma^2) noise (float64)."""
    return rng.normal(0.0, check_positive("Gaussian sigma", sigma), size)


def discrete_laplace(rng: np.random.Generator, t: float, size=None) -> np.ndarray:
    """Discrete Laplace (two-sided geometric) with scale ``t`` (``r = exp(-1/t)``).

    Drawn as the difference of two i.i.d. geometric variables on {0, 1, ...}
    with success probability ``1 - r`` (numpy's geometric counts from 1; the
    offsets cancel). Returns int64.
    """
    p = -math.expm1(-1.0 / check_positive("discrete Laplace scale", t))  # 1 - r without cancellation
    d = np.asarray(rng.geometric(p, size), dtype=np.int64) - np.asarray(rng.geometric(p, size), dtype=np.int64)
    return d if size is not None else d[()]  # size=None: an int64 scalar


def polya_success(r: float, one_minus_r: float | None) -> float:
    """Success probability ``1 - r`` of the Pólya law: ``1.0 - r`` loses relative
    precision when ``r`` is close to 1 (large scales), so callers that know the
    scale pass ``one_minus_r`` computed as ``-expm1(-1/t)`` (= ``-expm1(-eps/Δ)``)."""
    if one_minus_r is None:
        return 1.0 - r
    p = check_probability("Pólya parameter 1 - r", one_minus_r)
    if abs((1.0 - p) - r) > 1e-12:
        raise ParamError(f"one_minus_r = {one_minus_r} does not match r = {r}")
    return p


def polya(
    rng: np.random.Generator, alpha, r: float, size=None, *, one_minus_r: float | None = None
) -> np.ndarray | np.int64:
    """Pólya(alpha, r) = negative binomial with ``alpha`` "successes" and success
    probability ``1 - r`` (mean ``alpha r/(1-r)``). ``alpha`` may be an array
    (broadcast); ``alpha == 0`` gives 0 (one ``np.int64`` for a scalar ``alpha`` without ``size``).
    float64 throughout (never float16).
    ``one_minus_r``: ``1 - r`` computed without cancellation (``-expm1(-1/t)``),
    used instead of ``1.0 - r`` when given (precision for r close to 1)."""
    r = check_probability("Pólya parameter r", r)
    p = polya_success(r, one_minus_r)
    a = np.asarray(alpha, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ParamError("Pólya shape alpha must be finite and non-negative")
    if a.ndim == 0:
        if a == 0:
            return np.zeros(size, dtype=np.int64) if size is not None else np.int64(0)
        return np.asarray(rng.negative_binomial(float(a), p, size), dtype=np.int64)[()]  # a scalar without size
    shape = np.broadcast_shapes(a.shape, size if size is not None else a.shape)
    a = np.broadcast_to(a, shape)
    out = np.zeros(shape, dtype=np.int64)
    pos = a > 0
    out[pos] = rng.negative_binomial(a[pos], p)
    return out


def polya_difference(
    rng: np.random.Generator, alpha, r: float, size=None, *, one_minus_r: float | None = None
) -> np.ndarray | np.int64:
    """``Polya(alpha, r) - Polya(alpha, r)``: discrete Laplace(r) when ``alpha = 1``."""
    return polya(rng, alpha, r, size, one_minus_r=one_minus_r) - polya(rng, alpha, r, size, one_minus_r=one_minus_r)


def planar_laplace(rng: np.random.Generator, eps: float, size: int | None = None) -> np.ndarray:
    """Planar Laplace displacements (geo-indistinguishability), shape ``(size, 2)``
    (or ``(2,)``), in the units of ``1/eps`` (metres when eps is per metre).

    Polar method of Andrés et al.: angle uniform in [0, 2π); radius
    ``r = -(W_{-1}((p-1)/e) + 1)/eps`` with ``p`` uniform in [0, 1) and W_{-1}
    the lower branch of Lambert's W, which inverts the radial CDF
    ``C(r) = 1 - (1 + eps r) e^{-eps r}``. E[r] = 2/eps.
    """
    from scipy.special import lambertw

    eps = check_positive("planar Laplace epsilon", eps)
    n = 1 if size is None else int(size)
    theta = rng.uniform(0.0, 2 * np.pi, n)
    p = rng.random(n)
    radius = -(np.real(lambertw((p - 1) / np.e, k=-1)) + 1) / eps
    radius = np.maximum(radius, 0.0)  # p = 0 gives W = -1 exactly; guard rounding
    out = np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=-1)
    return out[0] if size is None else out


def planar_laplace_radius_cdf(r, eps: float) -> np.ndarray:
    """Radial CDF of planar Laplace, ``C(r) = 1 - (1 + eps r) e^{-eps r}``."""
    x = eps * np.asarray(r, dtype=np.float64)
    return 1 - (1 + x) * np.exp(-x)


# ----------------------------------------------------------- randomized response


def rr_keep_probability(eps: float, k: int = 2) -> float:
    """Probability that k-ary randomized response reports the true value,
    ``e^eps / (e^eps + k - 1)`` (binary: ``e^eps/(1+e^eps)``)."""
    eps = check_positive("randomized response epsilon", eps)
    if k < 2:
        raise ParamError("randomized response needs at least 2 categories")
    return 1.0 / (1.0 + (k - 1) * math.exp(-eps))


# numpy's largest uniform draw (``Generator.random`` returns multiples of 2^-53 below 1). A keep probability
# within 2^-54 of 1 rounds to 1.0 (binary randomized response from eps = 37.4 on), and a draw below 1.0
# would then keep every report: no noise at all. Capped here, the seeded samplers change a report with
# probability 2^-53 at least, more often than eps asks, so the guarantee holds at every eps
# (the secure samplers draw the exact probability).
LAST_DRAW = 1.0 - 2.0**-53


def randomized_response(rng: np.random.Generator, bits, eps: float) -> np.ndarray:
    """Warner's binary randomized response: each bit is kept with probability
    ``p = e^eps/(1+e^eps)`` and flipped otherwise (eps-LDP; seeded: see :data:`LAST_DRAW`)."""
    b = np.asarray(bits).astype(bool)
    flip = rng.random(b.shape) >= min(rr_keep_probability(eps), LAST_DRAW)
    return b ^ flip


def rr_unbias_count(count_ones, n, eps: float):
    """Unbiased estimate of the number of true ones among ``n`` binary RR reports
    with ``count_ones`` observed ones: ``(c - n q)/(p - q)``, ``q = 1 - p``."""
    p = rr_keep_probability(eps)
    q = 1 - p
    return (np.asarray(count_ones, dtype=np.float64) - np.asarray(n, dtype=np.float64) * q) / (p - q)


def rr_unbias_mean(observed_mean, eps: float):
    """Unbiased estimate of the true proportion from the observed proportion."""
    p = rr_keep_probability(eps)
    return (np.asarray(observed_mean, dtype=np.float64) - (1 - p)) / (2 * p - 1)


def randomized_response_kary(rng: np.random.Generator, values, k: int, eps: float) -> np.ndarray:
    """Generalised (k-ary, "direct encoding") randomized response on values in
    ``0..k-1``: report the truth with probability ``p = e^eps/(e^eps+k-1)``,
    otherwise one of the other ``k - 1`` values uniformly (eps-LDP)."""
    v = np.asarray(values, dtype=np.int64)
    if v.size and (v.min() < 0 or v.max() >= k):
        raise ParamError(f"k-ary randomized response needs values in 0..{k - 1}")
    p = rr_keep_probability(eps, k)
    keep = rng.random(v.shape) < min(p, LAST_DRAW)
    other = rng.integers(0, k - 1, v.shape)
    other = other + (other >= v)  # uniform over the k-1 values != v
    return np.where(keep, v, other)


def rr_kary_unbias_counts(counts, n, k: int, eps: float) -> np.ndarray:
    """Unbiased category counts from k-ary RR report counts: ``(c - n q)/(p - q)``
    with ``q = (1 - p)/(k - 1)``."""
    p = rr_keep_probability(eps, k)
    q = (1 - p) / (k - 1)
    return (np.asarray(counts, dtype=np.float64) - n * q) / (p - q)


def unary_encoding_counts(rng: np.random.Generator, counts, n: int, eps: float, optimized: bool = True) -> np.ndarray:
    """Aggregate simulation of unary encoding (one bit per category, each bit
    perturbed independently). Every user's bit for category v is reported as 1
    with probability ``p`` if it was 1, ``q`` if it was 0; with ``counts[v]``
    true ones among ``n`` users the reported sum is
    ``Binomial(counts[v], p) + Binomial(n - counts[v], q)`` exactly, drawn here
    without materialising n x k bits. Optimized unary encoding (Wang et al.,
    USENIX Security 2017): ``p = 1/2, q = 1/(e^eps+1)``; symmetric (RAPPOR-like):
    ``p = e^{eps/2}/(e^{eps/2}+1), q = 1 - p``. Each user holds one category, so
    two bits differ between neighbours and the guarantee is eps-LDP."""
    c = np.asarray(counts, dtype=np.int64)
    if c.size and (c.min() < 0 or c.max() > n):
        raise ParamError("unary encoding counts must lie in 0..n")
    p, q = unary_encoding_pq(eps, optimized)
    return rng.binomial(c, p) + rng.binomial(n - c, q)


def unary_encoding_pq(eps: float, optimized: bool = True) -> tuple[float, float]:
    eps = check_positive("unary encoding epsilon", eps)
    if optimized:
        return 0.5, 1.0 / (math.exp(eps) + 1.0)
    p = 1.0 / (1.0 + math.exp(-eps / 2))
    return p, 1.0 - p


def unary_encoding_unbias(reported, n: int, eps: float, optimized: bool = True) -> np.ndarray:
    """Unbiased counts ``(s - n q)/(p - q)`` from unary-encoding report sums."""
    p, q = unary_encoding_pq(eps, optimized)
    return (np.asarray(reported, dtype=np.float64) - n * q) / (p - q)


# --------------------------------------------------------------------- quantiles
def quantile_scores(values, candidates, alpha: float) -> np.ndarray:
    """How far each candidate is from being the ``alpha``-quantile of ``values``, in people: ``|(1 - alpha)
    #{x < c} - alpha #{x > c}|`` (Smith 2011, as OpenDP's ``make_quantile_score_candidates`` scores it,
    there in integer units of the fraction ``alpha``). One value more or fewer moves a score by at most
    ``max(alpha, 1 - alpha)``."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    c = np.asarray(candidates, dtype=np.float64)
    below = np.searchsorted(x, c, side="left")
    above = x.size - np.searchsorted(x, c, side="right")
    return np.abs((1 - alpha) * below - alpha * above)


def quantile_epsilon(alpha: float, scale: float, d_in: int = 1) -> float:
    """The ε of :func:`noisy_quantile` at ``scale`` when neighbours differ in ``d_in`` values (inserted or
    deleted): ``2 d_in max(alpha, 1 - alpha) / scale``, OpenDP's ``make_private_quantile`` map (the
    exponential mechanism's factor 2: a score is not monotone in the data)."""
    return 2.0 * d_in * max(alpha, 1 - alpha) / check_positive("quantile scale", scale)


def quantile_scale(alpha: float, epsilon: float, d_in: int = 1) -> float:
    """The scale at which :func:`noisy_quantile` spends ``epsilon`` (the inverse of :func:`quantile_epsilon`)."""
    return 2.0 * d_in * max(alpha, 1 - alpha) / check_positive("quantile epsilon", epsilon)


def noisy_quantile(rng: np.random.Generator, values, candidates, alpha: float, scale: float) -> float:
    """The exponential mechanism for the ``alpha``-quantile over public sorted ``candidates``: the candidate
    whose minus score plus Exponential(``scale``) noise is largest (report noisy max with exponential noise,
    McKenna & Sheldon 2020, whose law is permute-and-flip's), as OpenDP's ``make_private_quantile`` under
    ``max_divergence`` draws it; ε from :func:`quantile_epsilon`."""
    check_probability("quantile", alpha)
    s = quantile_scores(values, candidates, alpha)
    return float(np.asarray(candidates, dtype=np.float64)[np.argmax(rng.exponential(scale, s.size) - s)])
