"""Noise samplers. Every sampler takes a seeded ``numpy.random.Generator``;
:class:`NoiseSource` bundles them for a run and adds a *secure mode* that draws
the privacy-critical integer and real-valued noise with OpenDP.

Parameterisations (used throughout the engine):

* ``laplace(rng, scale)``: density ``exp(-|x|/scale) / (2 scale)``; ``scale = Δ/ε``.
* ``discrete_laplace(rng, t)``: the two-sided geometric law on the integers,
  ``P(k) = (1-r)/(1+r) r^|k|`` with ``r = exp(-1/t)``. The engine passes the
  *scale* ``t`` (as OpenDP does); for an integer query of L1 sensitivity Δ,
  ``t = Δ/ε`` gives ε-DP. ``dl_r(t)`` and ``dl_scale(r)`` convert. Variance
  ``2r/(1-r)^2``.
* ``polya(rng, alpha, r)``: Pólya (negative binomial) law
  ``P(k) = Γ(k+α)/(k! Γ(α)) (1-r)^α r^k``, i.e. Poisson(Gamma(shape α, scale
  r/(1-r))); numpy's ``negative_binomial(α, 1-r)`` is the same law (and draws
  it exactly that way, in float64). Mean ``αr/(1-r)``, variance ``αr/(1-r)^2``.
  ``Polya(1, r) - Polya(1, r)`` is discrete Laplace(r) and the law is
  infinitely divisible: a sum of m i.i.d. ``Polya(1/N, r)`` is ``Polya(m/N, r)``.
* ``planar_laplace(rng, eps)``: geo-indistinguishability noise (Andrés et al.,
  CCS 2013), density ``eps^2/(2π) exp(-eps |z|)`` in the plane; ``eps`` is per
  metre; expected displacement ``2/eps``.

Secure mode (``NoiseSource(rng, secure=True)``): discrete Laplace, Laplace and
Gaussian noise come from OpenDP's measurements (``make_laplace`` on an ``i64``
vector domain with ``l1_distance``, which samples the discrete Laplace exactly;
``make_laplace`` on an ``f64`` vector domain with ``l1_distance`` and
``make_gaussian`` with ``l2_distance``, which OpenDP samples exactly on the
lattice of multiples of 2^k, free of the floating-point attacks on textbook
samplers), and binary randomized response from
``make_randomized_response_bitvec``. Secure mode is NOT seeded: OpenDP draws
from the operating system's CSPRNG, so runs are not reproducible. OpenDP is
slower (about 10 µs per integer, 25-60 µs per real value: 1.6 s for a 256x256
grid with Laplace).

The samplers OpenDP lacks are built, in secure mode, from exact constructions on
fair bits of the operating system's CSPRNG (``os.urandom``) and OpenDP's discrete
Laplace; no float rounding decides an outcome, and nothing comes from the seeded
stream (issue 23):

* Bernoulli(p) for a float ``p`` (:func:`secure_bernoulli`): with ``i`` the position
  of the first 1 in a stream of fair bits (``P(i) = 2^-i``), output the i-th binary
  digit of ``p``; ``P(1) = sum_i 2^-i d_i(p) = p`` exactly.
* Uniform integers below ``k`` (:func:`secure_uniform_below`): 64-bit words, rejecting
  the top ``2^64 mod k`` values, so every residue is equally likely.
* Binomial(m, p) (:func:`secure_binomial`): the m trials' first-1 positions are split
  level by level, ``N_i ~ Binomial(remaining, 1/2)`` (a popcount of fresh bits), and the
  successes are the ``N_i`` of the levels where ``p`` has a 1 digit: the same law as m
  Bernoulli(p) trials, about 2 fair bits per trial.
* k-ary randomized response: keep with Bernoulli(p), else a uniform other value.
  Unary encoding: the two binomials of :func:`unary_encoding_counts`, exact.
* Planar Laplace (:meth:`NoiseSource.add_planar_laplace`): a departure from the
  continuous law of Andrés et al., which has no exact sampler in floating point. The
  location is snapped to the lattice ``u Z^2`` (``u`` a power of two, at most
  ``1/(1000 eps)`` metres, :func:`planar_lattice_step`) and moved by ``u k`` with ``k`` in
  ``Z^2`` drawn with ``P(k) ∝ exp(-eps u |k|_2)`` (the planar Laplace law restricted to
  the lattice), by rejection from two independent discrete Laplaces (OpenDP, rate
  ``eps u / sqrt 2`` each, since ``|k|_1 <= sqrt 2 |k|_2``) accepted with probability
  ``exp(-(eps u |k|_2 - |k|_1 / s))``, decided exactly (float bounds, exact decimal
  arithmetic when they do not decide). Outputs ``u (snap(x)/u + k)`` are exact floats.
  Guarantee: for snapped inputs the output laws at ``x``, ``x'`` differ by at most
  ``e^(eps |x - x'|)`` (triangle inequality on the lattice); snapping moves each input by
  at most ``u / sqrt 2``, so for the true locations ``e^(eps (d + sqrt 2 u))``, ``sqrt 2
  eps u <= 0.0015``.
* Pólya shares (:meth:`NoiseSource.polya_difference_sum`): a shard with at least its
  planned N survivors releases discrete Laplace (OpenDP) plus
  ``Polya((m - N)/N) - Polya((m - N)/N)`` extra noise; the extra part is independent of
  the data, so its law does not enter the guarantee (post-processing) and it is drawn
  from a numpy generator seeded by fresh OS entropy (not recorded, never the run's
  seed). A shard with fewer survivors than planned has no float-safe sampler (a Pólya
  shape below 1): secure mode refuses to noise it, and the secure sum withholds it.
* The bare Pólya sampler has no secure form (:meth:`NoiseSource.polya` refuses).

Use :meth:`NoiseSource.add_laplace`, :meth:`NoiseSource.add_gaussian` and
:meth:`NoiseSource.add_discrete_laplace` to noise data: in secure mode they pass
the data vector itself through the OpenDP measurement. For floats OpenDP rounds
each input to the nearest multiple of 2^k, adds integer noise exactly and rounds
the sum to a float once (post-processing); with the default k (the smallest,
2^-1074, on which every finite float64 lies) the rounding is exact and the
measurement's privacy map is exactly ``sensitivity / scale``, so OpenDP's
floating-point-safe guarantee covers the released values themselves. Without
secure mode they return ``x + noise`` from the seeded stream, the same numbers
as ``x + rng.laplace(0, scale, x.shape)`` (resp. normal, discrete Laplace). The
bare samplers :meth:`NoiseSource.laplace` / :meth:`NoiseSource.gaussian` return
noise alone (in secure mode OpenDP's measurement applied to a zero vector);
adding that noise to real-valued data in numpy is outside OpenDP's proof (the
rounding of the final float addition depends on the data), so privacy-critical
callers use the ``add_*`` forms. For integer data and discrete Laplace the sum
is exact either way.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import Cancelled, ParamError

# ----------------------------------------------------------------------- checks


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ParamError(f"{name} must be a positive finite number (got {value})")
    return v


def _prob(name: str, value: float, *, open_hi: bool = True) -> float:
    v = float(value)
    ok = 0 < v < 1 if open_hi else 0 < v <= 1
    if not (math.isfinite(v) and ok):
        raise ParamError(f"{name} must lie in (0, 1{')' if open_hi else ']'} (got {value})")
    return v


def dl_r(t: float) -> float:
    """Discrete-Laplace parameter ``r = exp(-1/t)`` from its scale ``t``."""
    return math.exp(-1.0 / _positive("discrete Laplace scale", t))


def dl_scale(r: float) -> float:
    """Discrete-Laplace scale ``t = -1/ln r`` from its parameter ``r``."""
    return -1.0 / math.log(_prob("discrete Laplace parameter r", r))


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
    return rng.laplace(0.0, _positive("Laplace scale", scale), size)


def gaussian(rng: np.random.Generator, sigma: float, size=None) -> np.ndarray:
    """Gaussian N(0, sigma^2) noise (float64)."""
    return rng.normal(0.0, _positive("Gaussian sigma", sigma), size)


def discrete_laplace(rng: np.random.Generator, t: float, size=None) -> np.ndarray:
    """Discrete Laplace (two-sided geometric) with scale ``t`` (``r = exp(-1/t)``).

    Drawn as the difference of two i.i.d. geometric variables on {0, 1, ...}
    with success probability ``1 - r`` (numpy's geometric counts from 1; the
    offsets cancel). Returns int64.
    """
    p = -math.expm1(-1.0 / _positive("discrete Laplace scale", t))  # 1 - r without cancellation
    d = np.asarray(rng.geometric(p, size), dtype=np.int64) - np.asarray(rng.geometric(p, size), dtype=np.int64)
    return d if size is not None else d[()]  # size=None: an int64 scalar


def _one_minus_r(r: float, one_minus_r: float | None) -> float:
    """Success probability ``1 - r`` of the Pólya law: ``1.0 - r`` loses relative
    precision when ``r`` is close to 1 (large scales), so callers that know the
    scale pass ``one_minus_r`` computed as ``-expm1(-1/t)`` (= ``-expm1(-eps/Δ)``)."""
    if one_minus_r is None:
        return 1.0 - r
    p = _prob("Pólya parameter 1 - r", one_minus_r)
    if abs((1.0 - p) - r) > 1e-12:
        raise ParamError(f"one_minus_r = {one_minus_r} does not match r = {r}")
    return p


def polya(rng: np.random.Generator, alpha, r: float, size=None, *, one_minus_r: float | None = None) -> np.ndarray:
    """Pólya(alpha, r) = negative binomial with ``alpha`` "successes" and success
    probability ``1 - r`` (mean ``alpha r/(1-r)``). ``alpha`` may be an array
    (broadcast); ``alpha == 0`` gives 0. float64 throughout (never float16).
    ``one_minus_r``: ``1 - r`` computed without cancellation (``-expm1(-1/t)``),
    used instead of ``1.0 - r`` when given (precision for r close to 1)."""
    r = _prob("Pólya parameter r", r)
    p = _one_minus_r(r, one_minus_r)
    a = np.asarray(alpha, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ParamError("Pólya shape alpha must be finite and non-negative")
    if a.ndim == 0:
        if a == 0:
            return np.zeros(size, dtype=np.int64) if size is not None else np.int64(0)
        return rng.negative_binomial(float(a), p, size).astype(np.int64)
    shape = np.broadcast_shapes(a.shape, size if size is not None else a.shape)
    a = np.broadcast_to(a, shape)
    out = np.zeros(shape, dtype=np.int64)
    pos = a > 0
    out[pos] = rng.negative_binomial(a[pos], p)
    return out


def polya_difference(
    rng: np.random.Generator, alpha, r: float, size=None, *, one_minus_r: float | None = None
) -> np.ndarray:
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

    eps = _positive("planar Laplace epsilon", eps)
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
    eps = _positive("randomized response epsilon", eps)
    if k < 2:
        raise ParamError("randomized response needs at least 2 categories")
    return 1.0 / (1.0 + (k - 1) * math.exp(-eps))


def randomized_response(rng: np.random.Generator, bits, eps: float) -> np.ndarray:
    """Warner's binary randomized response: each bit is kept with probability
    ``p = e^eps/(1+e^eps)`` and flipped otherwise (eps-LDP)."""
    b = np.asarray(bits).astype(bool)
    flip = rng.random(b.shape) >= rr_keep_probability(eps)
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
    keep = rng.random(v.shape) < p
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
    eps = _positive("unary encoding epsilon", eps)
    if optimized:
        return 0.5, 1.0 / (math.exp(eps) + 1.0)
    p = 1.0 / (1.0 + math.exp(-eps / 2))
    return p, 1.0 - p


def unary_encoding_unbias(reported, n: int, eps: float, optimized: bool = True) -> np.ndarray:
    """Unbiased counts ``(s - n q)/(p - q)`` from unary-encoding report sums."""
    p, q = unary_encoding_pq(eps, optimized)
    return (np.asarray(reported, dtype=np.float64) - n * q) / (p - q)


# -------------------------------------------- distributed discrete Laplace (Pólya)


def polya_difference_epsilon(
    alpha: float, r: float, sensitivity: int = 1, *, one_minus_r: float | None = None
) -> float:
    """Pure-DP epsilon of adding ``Polya(alpha, r) - Polya(alpha, r)`` to each
    coordinate of an integer vector query of L1 sensitivity ``sensitivity``.

    * ``alpha >= 1``: the noise is discrete Laplace(r) plus independent noise,
      so (post-processing) ``eps = sensitivity * ln(1/r)``.
    * ``0 < alpha < 1`` (fewer surviving clients than planned): the Pólya pmf
      is log-convex, hence so is the symmetric difference's pmf D on k >= 0
      (a positive mixture of log-convex functions). The worst privacy-loss
      ratio is then ``ln D(0) - ln D(1)`` per unit of sensitivity (attained at
      the mode; ``ln D(0) - ln D(d)`` is concave in d, so spreading the
      sensitivity over coordinates is the worst case), with
      ``D(k) = sum_j P(j) P(j+k)`` summed in log space. It exceeds ln(1/r)
      and grows without bound as alpha -> 0.
    * ``alpha == 0``: no noise, ``inf`` (a shard with no survivors sends no data
      either; :func:`polya_difference_sum` reports 0 for it).

    ``one_minus_r``: ``1 - r`` without cancellation (see :func:`polya`).
    """
    from scipy.special import logsumexp
    from scipy.stats import nbinom

    r = _prob("Pólya parameter r", r)
    p = _one_minus_r(r, one_minus_r)
    if alpha <= 0:
        return math.inf
    unit = -math.log(r) if one_minus_r is None else -math.log1p(-p)
    if alpha >= 1:
        return sensitivity * unit
    # terms P(j)P(j+k) decay like r^{2j}: stop when below e^-60 of the head. For
    # t > ~1.3e5 the cap truncates the sums; the truncated ratio is then an upper
    # bound (the dropped tail's ratio P(j)/P(j+1) is below every kept one), so the
    # reported epsilon stays conservative.
    jmax = int(min(60.0 / (2 * unit) + 50, 4_000_000))
    j = np.arange(jmax + 2, dtype=np.float64)
    lp = nbinom.logpmf(j, alpha, p)
    ld0 = logsumexp(2 * lp[:-1])
    ld1 = logsumexp(lp[:-1] + lp[1:])
    return sensitivity * float(max(ld0 - ld1, unit))


def split_shards(n_clients: int, shard_size: int) -> np.ndarray:
    """Sizes of the ``ceil(n/S)`` secure-aggregation shards, as equal as possible
    (they differ by at most one client and none exceeds ``S``)."""
    n = int(n_clients)
    s = int(shard_size)
    if n < 1:
        raise ParamError("the number of clients must be at least 1")
    if s < 1:
        raise ParamError("the secure-aggregation shard size must be at least 1")
    k = -(-n // s)
    base, extra = divmod(n, k)
    return np.array([base + 1] * extra + [base] * (k - extra), dtype=np.int64)


@dataclass
class ShardNoise:
    """Per-shard sums of the clients' Pólya noise shares and what they guarantee.

    ``noise[s]`` is the noise the server sees in shard ``s`` (int64, one value
    per coordinate). ``client_shard[i]`` is client i's shard and
    ``client_survived[i]`` whether it sent its report (dropped clients add
    neither data nor noise). ``alpha[s] = survivors[s] / dp_shard_sizes[s]``.
    ``epsilon[s]`` is the pure-DP epsilon of the shard's noise for a query of
    L1 sensitivity ``sensitivity`` (shards hold disjoint clients: the release
    is ``max(epsilon)``-DP by parallel composition); ``planned_epsilon`` is
    ``sensitivity / t``, reached when a shard has at least ``dp_shard_sizes[s]``
    survivors; a shard with no survivors releases nothing (``epsilon[s] = 0``).
    """

    noise: np.ndarray
    t: float
    r: float
    shard_size: int
    dp_shard_sizes: np.ndarray
    shard_sizes: np.ndarray
    survivors: np.ndarray
    alpha: np.ndarray
    variance: np.ndarray
    planned_variance: float
    epsilon: np.ndarray
    planned_epsilon: float
    sensitivity: int
    client_shard: np.ndarray
    client_survived: np.ndarray
    notes: list[str] = field(default_factory=list)

    @property
    def n_shards(self) -> int:
        return int(self.shard_sizes.size)

    @property
    def effective_epsilon(self) -> float:
        """Worst shard's epsilon (parallel composition over disjoint shards)."""
        return float(self.epsilon.max())

    @property
    def discrete_laplace(self) -> np.ndarray:
        """Shards whose noise contains a full discrete Laplace (alpha >= 1)."""
        return self.alpha >= 1

    def total(self) -> np.ndarray:
        """Noise in the sum over all shards."""
        return self.noise.sum(axis=0)

    def report(self) -> dict:
        """JSON-able summary for diagnostics."""
        weak = int(((~self.discrete_laplace) & (self.survivors > 0)).sum())
        return {
            "n_shards": self.n_shards,
            "shard_size": self.shard_size,
            "dp_shard_size_min": int(self.dp_shard_sizes.min()),
            "clients": int(self.shard_sizes.sum()),
            "survivors": int(self.survivors.sum()),
            "min_survivors": int(self.survivors.min()),
            "dropout_rate": float(1 - self.survivors.sum() / max(int(self.shard_sizes.sum()), 1)),
            "discrete_laplace_scale": self.t,
            "planned_epsilon": self.planned_epsilon,
            "effective_epsilon": self.effective_epsilon,
            "planned_variance_per_coordinate": self.planned_variance,
            "min_variance_per_coordinate": float(self.variance.min()),
            "mean_variance_per_coordinate": float(self.variance.mean()),
            "weak_shards": weak,
            "empty_shards": int((self.survivors == 0).sum()),
            "notes": list(self.notes),
        }


def polya_difference_sum(
    rng: np.random.Generator,
    n_clients: int,
    size: int,
    t: float,
    shard_size: int,
    dp_shard_size: int | None = None,
    dropout: float = 0.0,
    planned_dropout: float = 0.0,
    survived: np.ndarray | None = None,
    per_client: bool = False,
    sensitivity: int = 1,
    dl_sampler=None,
) -> ShardNoise:
    """Distributed discrete Laplace by secure aggregation of Pólya shares
    (Bagdasaryan et al. 2022, Section 4, "Handling dropouts and adversarial clients", and Appendix A.3).

    ``n_clients`` clients are split into ``ceil(n/S)`` shards of at most
    ``S = shard_size`` (:func:`split_shards`). Each client planned for a DP
    shard of ``N = dp_shard_size`` clients and adds
    ``Polya(1/N, r) - Polya(1/N, r)`` with ``r = exp(-1/t)`` to each of its
    ``size`` coordinates. The paper uses ``N = (1 - δ_drop) S_max`` to tolerate
    a dropout rate δ_drop; with ``dp_shard_size=None`` each shard plans for
    ``N_s = floor((1 - planned_dropout) * size_s)`` of its own clients (shards
    of an even split can be smaller than S). A client drops before sending
    with probability ``dropout`` (or as given by the boolean mask ``survived``).

    With ``m`` survivors a shard's noise is ``Polya(m/N, r) - Polya(m/N, r)``:
    discrete Laplace with scale ``t`` (eps = sensitivity/t) plus extra noise
    when ``m >= N``; weaker than planned when ``m < N`` (see
    :func:`polya_difference_epsilon`). The fast form draws exactly this, one
    pair of negative-binomial draws per shard coordinate (infinite
    divisibility); ``per_client=True`` draws every client's share and sums
    them (slow; for verification). ``dl_sampler(t, size)`` (secure mode)
    replaces the discrete-Laplace part of shards with ``m >= N``: noise =
    DL(t) + Polya((m-N)/N) difference.
    """
    t = _positive("discrete Laplace scale", t)
    r = dl_r(t)
    if not 0 < r < 1:
        raise ParamError(f"discrete Laplace scale {t} is too small or too large to sample")
    omr = -math.expm1(-1.0 / t)  # 1 - r without cancellation (r is close to 1 for large t)
    size = int(size)
    if size < 1:
        raise ParamError("the noise vector needs at least one coordinate")
    sizes = split_shards(n_clients, shard_size)
    n = int(sizes.sum())
    if int(sensitivity) < 1:
        raise ParamError("sensitivity must be a positive integer")
    notes: list[str] = []
    if dp_shard_size is None:
        pd = float(planned_dropout)
        if not (0 <= pd < 1):
            raise ParamError(f"planned dropout rate must lie in [0, 1) (got {planned_dropout})")
        N = np.maximum(np.floor((1 - pd) * sizes + 1e-9).astype(np.int64), 1)
    else:
        if int(dp_shard_size) < 1:
            raise ParamError("the DP shard size must be at least 1")
        N = np.full(sizes.size, int(dp_shard_size), dtype=np.int64)
        if dp_shard_size > shard_size:
            notes.append(
                f"DP shard size {dp_shard_size} exceeds the SecAgg shard size {shard_size}: no shard reaches it"
            )
        elif sizes.min() < dp_shard_size:
            notes.append(
                f"the smallest shard has {int(sizes.min())} clients, fewer than the DP shard size {dp_shard_size}"
            )

    client_shard = np.repeat(np.arange(sizes.size), sizes)
    if survived is not None:
        alive = np.asarray(survived, dtype=bool)
        if alive.shape != (n,):
            raise ParamError(f"the survivor mask must have one entry per client ({n})")
    else:
        d = float(dropout)
        if not (0 <= d < 1):
            raise ParamError(f"dropout rate must lie in [0, 1) (got {dropout})")
        alive = rng.random(n) >= d if d > 0 else np.ones(n, dtype=bool)
    surv = np.bincount(client_shard[alive], minlength=sizes.size).astype(np.int64)
    alpha = surv / N

    noise = np.zeros((sizes.size, size), dtype=np.int64)
    if per_client:
        for s in range(sizes.size):
            a1 = 1.0 / int(N[s])
            m = int(surv[s])
            for start in range(0, m, 4096):  # chunks bound the memory to 4096 x size
                c = min(4096, m - start)
                noise[s] += polya_difference(rng, a1, r, (c, size), one_minus_r=omr).sum(axis=0)
    elif dl_sampler is None:
        # one vectorised pair of negative-binomial draws for all shards and coordinates
        noise[:] = polya_difference(rng, np.broadcast_to(alpha[:, None], noise.shape), r, one_minus_r=omr)
    else:
        full = alpha >= 1
        if full.any():
            noise[full] = np.asarray(dl_sampler(t, int(full.sum()) * size), dtype=np.int64).reshape(-1, size)
            extra = np.broadcast_to((alpha[full] - 1)[:, None], (int(full.sum()), size))
            noise[full] += polya_difference(rng, extra, r, one_minus_r=omr)
        if (~full).any():
            rest = np.broadcast_to(alpha[~full][:, None], (int((~full).sum()), size))
            noise[~full] = polya_difference(rng, rest, r, one_minus_r=omr)

    q = r / omr**2  # Var Polya(1, r)
    variance = 2 * alpha * q
    ua, back = np.unique(alpha, return_inverse=True)  # many shards share a survivor count
    eps_u = [polya_difference_epsilon(float(a), r, int(sensitivity), one_minus_r=omr) if a > 0 else 0.0 for a in ua]
    # a shard without survivors sends neither data nor noise: it releases nothing (epsilon 0, not inf)
    eps = np.array(eps_u)[back.reshape(-1)]
    planned = int(sensitivity) / t
    weak = (alpha < 1) & (surv > 0)
    if weak.any():
        notes.append(
            f"{int(weak.sum())} shard(s) kept fewer clients than planned: their noise is a sum of fewer Pólya "
            f"shares than a discrete Laplace; worst epsilon {eps.max():.4g} instead of {planned:.4g}"
        )
    if (surv == 0).any():
        notes.append(f"{int((surv == 0).sum())} shard(s) lost every client: they release nothing (epsilon 0)")
    return ShardNoise(
        noise=noise,
        t=t,
        r=r,
        shard_size=int(shard_size),
        dp_shard_sizes=N,
        shard_sizes=sizes,
        survivors=surv,
        alpha=alpha,
        variance=variance,
        planned_variance=2 * q,
        epsilon=eps,
        planned_epsilon=planned,
        sensitivity=int(sensitivity),
        client_shard=client_shard,
        client_survived=alive,
        notes=notes,
    )


# ------------------------------------------- secure-mode exact samplers (OS entropy)
# Exact constructions on fair bits of the operating system's CSPRNG (see the module
# docstring): no floating-point rounding decides an outcome and nothing is seeded.

SECURE_WORDS = 1 << 22  # 64-bit words of OS entropy per draw (32 MB), between cancel checks
PLANAR_LATTICE_FRACTION = 1000  # the planar lattice step is at most 1/(1000 eps)


def _os_words(n: int) -> np.ndarray:
    """``n`` uniform 64-bit words from the operating system's CSPRNG."""
    return np.frombuffer(bytearray(os.urandom(8 * int(n))), dtype=np.uint64)


def fresh_generator() -> np.random.Generator:
    """A numpy generator seeded with 128 bits of OS entropy (never recorded): for draws that
    do not enter a guarantee (noise independent of the data, added after an exact DP step)."""
    return np.random.default_rng(int.from_bytes(os.urandom(16), "little"))


def _binary_digits(p: float) -> np.ndarray:
    """The binary digits ``d_1, d_2, ...`` of ``p`` in [0, 1] as a bool array (``d_i`` at
    index ``i - 1``; ``p = sum_i d_i 2^-i`` exactly, at most 1074 digits; 1.0 = 0.111...
    truncated at 1100 digits, whose tail has probability 2^-1100 of being reached)."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ParamError(f"a probability must lie in [0, 1] (got {p})")
    if p == 1.0:
        return np.ones(1100, dtype=bool)
    num, den = p.as_integer_ratio()  # den = 2^k
    k = den.bit_length() - 1
    return np.array([(num >> (k - i)) & 1 for i in range(1, k + 1)], dtype=bool)


def _first_one(n: int) -> np.ndarray:
    """Position ``i >= 1`` of the first 1 in a fresh stream of fair bits, ``P(i) = 2^-i``."""
    out = np.zeros(int(n), dtype=np.int64)
    todo = np.arange(int(n))
    offset = 0
    while todo.size:
        w = _os_words(todo.size) >> np.uint64(11)  # 53 fair bits, exact as a float64
        _, e = np.frexp(w.astype(np.float64))  # e = bit length (0 for w = 0)
        hit = w > 0
        out[todo[hit]] = offset + 54 - e[hit]
        todo = todo[~hit]
        offset += 53
    return out


def secure_bernoulli(p, size=None) -> np.ndarray:
    """Exact Bernoulli(``p``) draws (bool) from OS entropy: the first-1 position ``i`` of
    fair bits picks the i-th binary digit of ``p``. ``p`` a float in [0, 1], or an array of
    them (one per draw; then ``size`` is its shape)."""
    pa = np.asarray(p, dtype=np.float64)
    if pa.ndim == 0:
        d = _binary_digits(float(pa))
        n = int(np.prod(size)) if size is not None else 1
        lv = _first_one(n)
        out = np.zeros(n, dtype=bool)
        ok = lv <= d.size
        out[ok] = d[lv[ok] - 1]
        return out.reshape(size) if size is not None else out[0]
    if not (np.all(pa >= 0) and np.all(pa <= 1)):
        raise ParamError("probabilities must lie in [0, 1]")
    flat = pa.ravel()
    lv = _first_one(flat.size)
    # digit i of p is floor(p 2^i) mod 2, exact in float64 while 2^i p stays finite (i <= 1000)
    near = lv <= 1000
    out = np.zeros(flat.size, dtype=bool)
    out[near] = np.mod(np.floor(np.ldexp(flat[near], lv[near])), 2.0) == 1.0
    out[flat == 1.0] = True  # 1 = 0.111... in binary
    for j in np.flatnonzero(~near):  # probability below 2^-1000 per draw
        d = _binary_digits(float(flat[j]))
        out[j] = bool(lv[j] <= d.size and d[lv[j] - 1])
    return out.reshape(pa.shape)


def secure_uniform_below(k: int, size) -> np.ndarray:
    """Uniform integers in ``0..k-1`` (int64) from OS entropy, exact: 64-bit words above the
    largest multiple of ``k`` are drawn again."""
    k = int(k)
    if k < 1:
        raise ParamError("the range of a uniform integer must hold at least one value")
    n = int(np.prod(size))
    top = np.uint64(2**64 - 1 - (2**64 % k))  # accept w <= top: exactly (2^64 // k) k words
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        w = _os_words(todo.size)
        ok = w <= top
        out[todo[ok]] = (w[ok] % np.uint64(k)).astype(np.int64)
        todo = todo[~ok]
    return out.reshape(size)


def _binomial_half(m: np.ndarray, cancel_cb=None) -> np.ndarray:
    """Binomial(m_j, 1/2) for each entry: the popcount of m_j fresh fair bits."""
    m = np.asarray(m, dtype=np.int64)
    out = np.zeros(m.size, dtype=np.int64)
    words = (m + 63) // 64
    start = 0
    while start < m.size:  # chunks of at most SECURE_WORDS words (one cell may exceed it alone)
        if cancel_cb is not None and cancel_cb():
            raise Cancelled("the run was cancelled")
        stop = start + max(1, int(np.searchsorted(np.cumsum(words[start:]), SECURE_WORDS, side="right")))
        wc = words[start:stop]
        w = _os_words(int(wc.sum()))
        ends = np.cumsum(wc)
        rem = m[start:stop] % 64
        last = (ends - 1)[(wc > 0) & (rem > 0)]  # a partial last word keeps its low m mod 64 bits
        w[last] &= (np.uint64(1) << rem[(wc > 0) & (rem > 0)].astype(np.uint64)) - np.uint64(1)
        cs = np.concatenate([[0], np.cumsum(np.bitwise_count(w), dtype=np.int64)])
        out[start:stop] = cs[ends] - cs[ends - wc]
        start = stop
    return out


def secure_binomial(m, p: float, cancel_cb=None) -> np.ndarray:
    """Exact Binomial(``m``, ``p``) per entry of ``m`` (int64) from OS entropy: the trials'
    first-1 positions are split level by level (``N_i ~ Binomial(remaining, 1/2)``) and the
    successes are the trials at the levels where ``p`` has a 1 digit (module docstring)."""
    m = np.asarray(m, dtype=np.int64)
    if m.size and m.min() < 0:
        raise ParamError("binomial trial counts must be non-negative")
    digits = _binary_digits(p)
    rem = m.ravel().copy()
    succ = np.zeros(rem.size, dtype=np.int64)
    for d in digits:
        if not rem.any():
            break
        n_i = _binomial_half(rem, cancel_cb)
        if d:
            succ += n_i
        rem -= n_i
    return succ.reshape(m.shape)


def planar_lattice_step(eps: float) -> float:
    """The lattice step ``u`` of secure planar Laplace: the largest power of two at most
    ``1 / (1000 eps)`` (metres when eps is per metre)."""
    eps = _positive("planar Laplace epsilon", eps)
    return 2.0 ** math.floor(math.log2(1.0 / (PLANAR_LATTICE_FRACTION * eps)))


def _accept_planar(k1: np.ndarray, k2: np.ndarray, b: float, s: float) -> np.ndarray:
    """Exact Bernoulli(exp(-g)) per lattice vector, ``g = b |k|_2 - |k|_1 / s >= 0``.

    A 53-bit uniform U (the real uniform lies in [U, U + 2^-53)) is compared with the float
    value of exp(-g) and a bound on its error; the rare undecided draws (about 1e-13) are
    decided with exact decimal arithmetic and more fair bits."""
    a1 = np.abs(k1).astype(np.float64)
    a2 = np.abs(k2).astype(np.float64)
    l2, l1 = np.hypot(a1, a2), a1 + a2
    acc = np.exp(-(b * l2 - l1 / s))
    err = 8 * 2.0**-52 * (b * l2 + l1 / s) + 2.0**-48  # float errors of g, exp and the comparisons
    u = (_os_words(acc.size) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    yes = u + 2.0**-53 <= acc - err
    no = u >= acc + err
    for j in np.flatnonzero(~(yes | no)):
        yes[j] = _accept_planar_exact(int(abs(k1[j])), int(abs(k2[j])), b, s, int(u[j] * 2.0**53))
    return yes


def _accept_planar_exact(a1: int, a2: int, b: float, s: float, head: int) -> bool:
    """Decide U < exp(-(b sqrt(a1^2 + a2^2) - (a1 + a2)/s)) exactly: U's first 53 bits are
    ``head``; more fair bits and more decimal digits until the comparison is certain."""
    from decimal import Decimal, localcontext

    bits, num = 53, head
    digits = 40
    while True:
        extra = 128
        num = (num << extra) | int.from_bytes(os.urandom(extra // 8), "big")
        bits += extra
        digits += 40
        with localcontext() as c:
            c.prec = digits
            g = Decimal(b) * Decimal(a1 * a1 + a2 * a2).sqrt() - Decimal(a1 + a2) / Decimal(s)
            a = (-g).exp()
            tol = Decimal(10) ** (8 - digits)  # a few units in the last digit of each operation
            lo = Decimal(num) / Decimal(2**bits)
            hi = Decimal(num + 1) / Decimal(2**bits)
            if hi <= a - tol:
                return True
            if lo >= a + tol:
                return False


# ------------------------------------------------------------------ NoiseSource


SECURE_BATCH = 8192  # values per OpenDP call in secure mode (see NoiseSource._secure_add)


class NoiseSource:
    """The noise of one run: the seeded numpy stream, or OpenDP in secure mode.

    ``secure=False``: every draw comes from ``rng`` (deterministic given the
    seed). ``secure=True``: every sampler is floating-point safe and unseeded:
    discrete Laplace, Laplace, Gaussian and binary randomized response come from
    OpenDP (exact integer / lattice samplers fed by the OS entropy source; NOT
    seeded, NOT reproducible), k-ary randomized response, unary encoding,
    Bernoulli, planar Laplace and Pólya shares from the exact constructions of
    the module docstring; ``rng`` is never used for noise. Privacy-critical code
    noises data with :meth:`add_laplace`, :meth:`add_gaussian`,
    :meth:`add_discrete_laplace` and :meth:`add_planar_laplace`, which in secure
    mode pass the data itself through the exact sampler. See the module docstring.
    """

    _KINDS = {"laplace": "lap", "gaussian": "gauss", "discrete_laplace": "dlap"}

    def __init__(self, rng: np.random.Generator, secure: bool = False, cancel_cb=None):
        self.rng = rng
        self.secure = bool(secure)
        self.cancel_cb = cancel_cb  # () -> bool; checked between OpenDP batches (secure mode)
        self._meas: dict = {}

    @property
    def description(self) -> str:
        """Where the privacy noise comes from (for diagnostics)."""
        if self.secure:
            return "OpenDP and exact samplers on the OS entropy source (secure mode; not seeded)"
        return "seeded numpy Generator"

    # ---- OpenDP plumbing
    def _opendp(self, kind: str, scale: float):
        key = (kind, float(scale))
        m = self._meas.get(key)
        if m is None:
            import opendp.prelude as dp

            dp.enable_features("contrib")
            # default k: the finest lattice (2^-1074 for float64), on which every finite float lies, so
            # OpenDP's rounding of the input is exact and its privacy map is exactly d_in / scale
            if kind == "dlap":
                space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
                m = dp.m.make_laplace(*space, scale=float(scale))
            elif kind == "lap":
                space = dp.vector_domain(dp.atom_domain(T="f64", nan=False)), dp.l1_distance(T="f64")
                m = dp.m.make_laplace(*space, scale=float(scale))
            elif kind == "gauss":
                space = dp.vector_domain(dp.atom_domain(T="f64", nan=False)), dp.l2_distance(T="f64")
                m = dp.m.make_gaussian(*space, scale=float(scale))
            else:  # pragma: no cover
                raise ValueError(kind)
            self._meas[key] = m
        return m

    def opendp_measurement(self, kind: str, scale: float):
        """The OpenDP measurement secure mode uses for ``kind`` (``laplace``,
        ``gaussian``, ``discrete_laplace``) at ``scale``: a vector measurement whose
        ``map(d_in)`` gives the privacy loss (epsilon; rho for the Gaussian)."""
        if kind not in self._KINDS:
            raise ParamError(f"no OpenDP measurement for {kind!r}; expected one of {', '.join(self._KINDS)}")
        return self._opendp(self._KINDS[kind], _positive(f"{kind} scale", scale))

    def _secure_add(self, kind: str, scale: float, xa: np.ndarray, dtype):
        """``xa`` passed through OpenDP's vector measurement (same shape; a scalar for 0-d).

        The vector goes through in batches of ``SECURE_BATCH`` values (about 0.1-0.5 s of
        OpenDP each), with ``cancel_cb`` checked before each: a cancelled run stops within a
        batch. Same law and guarantee as one call: the measurement adds independent noise
        per coordinate, and the batches' privacy losses add up to the whole vector's
        (``sum_b d_b / scale = d / scale`` for L1 and Laplace; ``sum_b d_b^2 / (2 sigma^2) =
        d^2 / (2 sigma^2)`` zCDP for L2 and the Gaussian)."""
        if xa.size == 0:
            return xa.astype(dtype, copy=True)
        flat = xa.ravel()
        meas = self._opendp(kind, scale)
        out = np.empty(flat.size, dtype=dtype)
        for i in range(0, flat.size, SECURE_BATCH):
            if self.cancel_cb is not None and self.cancel_cb():
                raise Cancelled("the run was cancelled")
            part = flat[i : i + SECURE_BATCH]
            out[i : i + part.size] = meas(part if dtype == np.int64 else part.tolist())
        return out.reshape(xa.shape) if xa.ndim else out[0]

    @staticmethod
    def _float_data(x) -> np.ndarray:
        xa = np.asarray(x, dtype=np.float64)
        if not np.isfinite(xa).all():
            raise ParamError("the values to noise must be finite numbers (got NaN or infinity)")
        return xa

    @staticmethod
    def _int_data(x) -> np.ndarray:
        xa = np.asarray(x)
        if xa.dtype.kind in "iub":
            return xa.astype(np.int64)
        xf = np.asarray(xa, dtype=np.float64)
        if not (np.isfinite(xf).all() and np.array_equal(xf, np.round(xf))) or (np.abs(xf) >= 2.0**63).any():
            raise ParamError("discrete Laplace noise needs integer data (int64)")
        return xf.astype(np.int64)

    @staticmethod
    def _size(xa: np.ndarray):
        return xa.shape if xa.ndim else None

    # ---- data + noise (the privacy-critical forms)
    def add_laplace(self, x, scale: float):
        """``x + Laplace(0, scale)`` per element, float64 (a scalar for a scalar ``x``):
        the Laplace mechanism, ``scale = Δ1/ε`` for a query of L1 sensitivity Δ1.

        Secure mode: ``x`` itself goes through OpenDP's ``make_laplace`` on a float64
        vector domain with ``l1_distance`` (the released values are OpenDP's output).
        Otherwise exactly ``x + rng.laplace(0, scale, x.shape)`` (the numbers of the
        seeded stream, bit for bit). ``x`` must be finite."""
        scale = _positive("Laplace scale", scale)
        xa = self._float_data(x)
        if self.secure:
            return self._secure_add("lap", scale, xa, np.float64)
        return xa + self.rng.laplace(0.0, scale, self._size(xa))

    def add_gaussian(self, x, sigma: float):
        """``x + N(0, sigma^2)`` per element, float64. Secure mode: ``x`` goes through
        OpenDP's ``make_gaussian`` (float64 vector domain, ``l2_distance``; its map is
        zCDP rho = Δ2^2/(2 sigma^2)). Otherwise exactly ``x + rng.normal(0, sigma, x.shape)``."""
        sigma = _positive("Gaussian sigma", sigma)
        xa = self._float_data(x)
        if self.secure:
            return self._secure_add("gauss", sigma, xa, np.float64)
        return xa + self.rng.normal(0.0, sigma, self._size(xa))

    def add_discrete_laplace(self, x_int, scale: float):
        """``x + DiscreteLaplace(scale)`` per element on integer data, int64. Secure mode:
        ``x`` goes through OpenDP's ``make_laplace`` on an int64 vector domain with
        ``l1_distance`` (saturating at the int64 range). Otherwise exactly
        ``x + discrete_laplace(rng, scale, x.shape)``."""
        t = _positive("discrete Laplace scale", scale)
        xa = self._int_data(x_int)
        if self.secure:
            return self._secure_add("dlap", t, xa, np.int64)
        return xa + discrete_laplace(self.rng, t, self._size(xa))

    # ---- bare noise (to add to data, prefer the add_* forms above)
    def _secure_draw(self, kind: str, scale: float, size, dtype):
        zeros = np.zeros(() if size is None else size, dtype=dtype)
        return self._secure_add(kind, scale, zeros, dtype)

    def laplace(self, scale: float, size=None) -> np.ndarray:
        """Laplace(0, scale) noise alone (see the module docstring: adding it to real data
        outside OpenDP is not covered by OpenDP's proof; use :meth:`add_laplace`)."""
        if self.secure:
            return self._secure_draw("lap", _positive("Laplace scale", scale), size, np.float64)
        return laplace(self.rng, scale, size)

    def discrete_laplace(self, t: float, size=None) -> np.ndarray:
        """Discrete Laplace with scale ``t`` (``r = exp(-1/t)``), int64."""
        if self.secure:
            return self._secure_draw("dlap", _positive("discrete Laplace scale", t), size, np.int64)
        return discrete_laplace(self.rng, t, size)

    def gaussian(self, sigma: float, size=None) -> np.ndarray:
        """N(0, sigma^2) noise alone (prefer :meth:`add_gaussian` for data)."""
        if self.secure:
            return self._secure_draw("gauss", _positive("Gaussian sigma", sigma), size, np.float64)
        return gaussian(self.rng, sigma, size)

    def polya(self, alpha, r: float, size=None, *, one_minus_r: float | None = None) -> np.ndarray:
        """Pólya draws from the seeded stream; secure mode has no float-safe Pólya sampler for
        a general shape (see :meth:`polya_difference_sum` for the secure shares)."""
        if self.secure:
            raise ParamError("secure mode has no floating-point-safe Pólya sampler for a general shape")
        return polya(self.rng, alpha, r, size, one_minus_r=one_minus_r)

    def polya_difference_sum(self, n_clients: int, size: int, t: float, shard_size: int, **kw) -> ShardNoise:
        """:func:`polya_difference_sum`. Secure mode: the discrete-Laplace part of every shard is
        OpenDP's and the extra Pólya part (independent of the data) comes from fresh OS entropy,
        never from ``rng``; a shard with fewer survivors than planned (Pólya shape below 1) is
        refused, as there is no float-safe sampler for it (callers withhold such shards); the
        per-client form (numpy shares) is refused."""
        if not self.secure:
            return polya_difference_sum(self.rng, n_clients, size, t, shard_size, **kw)
        if kw.get("per_client"):
            raise ParamError("secure mode cannot draw every client's Pólya share (no float-safe sampler)")
        kw["dl_sampler"] = lambda tt, n: self.discrete_laplace(tt, n)
        sn = polya_difference_sum(fresh_generator(), n_clients, size, t, shard_size, **kw)
        if ((sn.alpha < 1) & (sn.survivors > 0)).any():
            raise ParamError(
                "a secure-aggregation shard kept fewer clients than its DP shard size: its Pólya noise (shape below "
                "1) has no floating-point-safe sampler; withhold such shards in secure mode"
            )
        return sn

    def planar_laplace(self, eps: float, size: int | None = None) -> np.ndarray:
        """Planar Laplace displacements. Secure mode: the lattice law of the module docstring
        (multiples of :func:`planar_lattice_step`), to be added to a lattice point: use
        :meth:`add_planar_laplace` for locations."""
        if not self.secure:
            return planar_laplace(self.rng, eps, size)
        eps = _positive("planar Laplace epsilon", eps)
        n = 1 if size is None else int(size)
        u = planar_lattice_step(eps)
        out = self._planar_lattice(eps * u, n).astype(np.float64) * u
        return out[0] if size is None else out

    def add_planar_laplace(self, xy, eps: float) -> np.ndarray:
        """Locations ``xy`` (n, 2) moved by planar Laplace noise of ``eps`` per unit of
        distance. Without secure mode exactly ``xy + planar_laplace(rng, eps, n)`` (the seeded
        stream, as before). Secure mode: each location snapped to the lattice ``u Z^2``
        (:func:`planar_lattice_step`) and moved by ``u k``, ``P(k) ∝ exp(-eps u |k|_2)``: exact
        lattice points (module docstring, with the guarantee)."""
        eps = _positive("planar Laplace epsilon", eps)
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        if not np.isfinite(xy).all():
            raise ParamError("the locations to noise must be finite numbers")
        if not self.secure:
            return xy + planar_laplace(self.rng, eps, len(xy))
        u = planar_lattice_step(eps)
        return (np.rint(xy / u) + self._planar_lattice(eps * u, len(xy))) * u

    def _planar_lattice(self, b: float, n: int) -> np.ndarray:
        """``n`` integer vectors with ``P(k) ∝ exp(-b |k|_2)``: pairs of discrete Laplaces of
        scale ``s >= sqrt 2 / b`` (OpenDP) accepted with probability ``exp(-(b |k|_2 - |k|_1/s))``."""
        s = math.sqrt(2.0) / b * (1 + 2.0**-40)  # 1/s < b/sqrt 2, so the acceptance is at most 1
        out = np.zeros((n, 2), dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            m = todo.size + todo.size // 3 + 8  # the acceptance rate is about pi/4
            k = np.asarray(self.discrete_laplace(s, (m, 2)), dtype=np.int64)
            k = k[_accept_planar(k[:, 0], k[:, 1], b, s)][: todo.size]
            out[todo[: len(k)]] = k
            todo = todo[len(k) :]
        return out

    def bernoulli(self, p, size=None) -> np.ndarray:
        """Bernoulli(``p``) draws (bool); ``p`` a float or an array (one per draw). Secure mode:
        exact on OS entropy (:func:`secure_bernoulli`); otherwise ``rng.random(shape) < p``."""
        if self.secure:
            return secure_bernoulli(p, size)
        pa = np.asarray(p, dtype=np.float64)
        return self.rng.random(size if pa.ndim == 0 else pa.shape) < pa

    def randomized_response(self, bits, eps: float) -> np.ndarray:
        """Binary randomized response (secure mode: OpenDP's bit-vector RR, whose
        flip probability f = 2/(1+e^eps) gives keep probability e^eps/(1+e^eps))."""
        if not self.secure:
            return randomized_response(self.rng, bits, eps)
        b = np.asarray(bits).astype(bool)
        if b.size == 0:
            return b.copy()
        import opendp.prelude as dp

        dp.enable_features("contrib")
        f = 2.0 / (1.0 + math.exp(_positive("randomized response epsilon", eps)))  # 2 (1 - p), no cancellation
        key = ("rr", f)
        m = self._meas.get(key)
        if m is None:
            # max_weight only enters OpenDP's privacy map, which we do not use here
            m = dp.m.make_randomized_response_bitvec(dp.bitvector_domain(max_weight=1), dp.discrete_distance(), f=f)
            self._meas[key] = m
        packed = np.packbits(b.ravel())
        out = np.empty_like(packed)
        step = SECURE_BATCH * 16  # bytes: about 0.05 s of OpenDP, then the cancel check
        for i in range(0, packed.size, step):  # each bit is flipped independently: batches are one call's law
            if self.cancel_cb is not None and self.cancel_cb():
                raise Cancelled("the run was cancelled")
            out[i : i + step] = np.frombuffer(m(packed[i : i + step].tobytes()), dtype=np.uint8)
        return np.unpackbits(out)[: b.size].astype(bool).reshape(b.shape)

    def randomized_response_kary(self, values, k: int, eps: float) -> np.ndarray:
        """k-ary randomized response (:func:`randomized_response_kary`). Secure mode: keep with
        an exact Bernoulli of the float ``e^eps/(e^eps+k-1)``, else an exactly uniform other
        value, on OS entropy (the float rounding of the keep probability moves epsilon by a
        relative 1e-16 at most)."""
        if not self.secure:
            return randomized_response_kary(self.rng, values, k, eps)
        v = np.asarray(values, dtype=np.int64)
        if v.size and (v.min() < 0 or v.max() >= k):
            raise ParamError(f"k-ary randomized response needs values in 0..{k - 1}")
        keep = secure_bernoulli(rr_keep_probability(eps, k), v.shape)
        other = secure_uniform_below(k - 1, v.shape)
        return np.where(keep, v, other + (other >= v))

    def unary_encoding_counts(self, counts, n: int, eps: float, optimized: bool = True) -> np.ndarray:
        """Report sums of unary encoding (:func:`unary_encoding_counts`). Secure mode: the two
        binomials drawn exactly on OS entropy (:func:`secure_binomial`, about 2 fair bits per
        user and category)."""
        if not self.secure:
            return unary_encoding_counts(self.rng, counts, n, eps, optimized)
        c = np.asarray(counts, dtype=np.int64)
        if c.size and (c.min() < 0 or c.max() > n):
            raise ParamError("unary encoding counts must lie in 0..n")
        p, q = unary_encoding_pq(eps, optimized)
        return secure_binomial(c, p, self.cancel_cb) + secure_binomial(int(n) - c, q, self.cancel_cb)
