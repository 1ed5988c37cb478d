"""How bit-pushing writes a value as bits and reads them (Cormode, Markov & Srinivas, EDBT 2024): the
fixed-point :class:`Encoding` (Section 4.3), the bit sampling probabilities of Section 3.1 (uniform,
weighted, Lemma 3.3's optimal), the variance of Lemma 3.1 / Corollary 3.2, randomized response on one
bit (Section 3.3) and the squashing thresholds. Departures from the paper: :mod:`.bitpush`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.noise import randomized_response as seeded_randomized_response

SCHEMES = ("uniform", "weighted", "optimal")


SQUASH_FWER = 0.01  # squashing: chance that some unused bit survives, over all the bits (squash_c_default)


MAX_BITS = 62


# --------------------------------------------------------------------- encoding
@dataclass(frozen=True)
class Encoding:
    """Fixed-point representation: ``bits`` in total, ``frac_bits`` of them after
    the binary point; unsigned or two's complement."""

    bits: int = 10
    frac_bits: int = 0
    signed: bool = False

    def __post_init__(self):
        if not (isinstance(self.bits, (int, np.integer)) and 1 <= self.bits <= MAX_BITS):
            raise ParamError(f"bit depth must be an integer in 1..{MAX_BITS} (got {self.bits})")
        if not (isinstance(self.frac_bits, (int, np.integer)) and 0 <= self.frac_bits <= 32):
            raise ParamError(f"fractional bits must be an integer in 0..32 (got {self.frac_bits})")
        if self.signed and self.bits < 2:
            raise ParamError("a signed encoding needs at least 2 bits (one is the sign)")

    @property
    def scale(self) -> float:
        return float(2.0**self.frac_bits)

    @property
    def int_range(self) -> tuple[int, int]:
        if self.signed:
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1

    @property
    def low(self) -> float:
        """Smallest representable value (inputs below are clipped to it)."""
        return self.int_range[0] / self.scale

    @property
    def high(self) -> float:
        """Largest representable value (inputs above are clipped to it)."""
        return self.int_range[1] / self.scale

    @property
    def weights(self) -> np.ndarray:
        """``w_j`` of the linear decomposition ``x = sum_j w_j x^(j)`` (Eq. 1)."""
        w = np.ldexp(1.0, np.arange(self.bits)) / self.scale
        if self.signed:
            w[-1] = -w[-1]  # two's complement: the sign bit weighs -2^(b-1)
        return w

    def encode(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Real values -> ``uint64`` codes (round to nearest, clip = winsorise).
        Returns ``(codes, clipped_mask)``. NaN is an error."""
        v = np.asarray(values, dtype=np.float64).ravel()
        if not np.isfinite(v).all():
            raise ParamError("values to encode must be finite numbers (drop missing values first)")
        lo, hi = self.int_range
        scaled = np.rint(v * self.scale)
        clipped = (scaled < lo) | (scaled > hi)
        np.clip(scaled, lo, hi, out=scaled)
        if not self.signed and self.bits <= 52:  # exact in float64: one conversion
            return scaled.astype(np.uint64), clipped
        ints = np.minimum(scaled.astype(np.int64), hi)  # float rounding near 2^62
        if self.signed:
            ints = ints & ((1 << self.bits) - 1)  # two's complement in b bits
        return ints.astype(np.uint64), clipped

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Codes -> the real values they represent."""
        c = np.asarray(codes, dtype=np.uint64).astype(np.int64)
        if self.signed:
            c = np.where(c >= (1 << (self.bits - 1)), c - (1 << self.bits), c)
        return c / self.scale

    def decode_mean(self, bit_means: np.ndarray) -> np.ndarray:
        """``sum_j w_j m_j`` over the last axis."""
        return np.asarray(bit_means, dtype=np.float64) @ self.weights


def bit_of(codes: np.ndarray, bit: np.ndarray | int) -> np.ndarray:
    """Bit ``j`` of each code (0/1 as int8)."""
    return ((np.asarray(codes, dtype=np.uint64) >> np.asarray(bit, dtype=np.uint64)) & np.uint64(1)).astype(np.int8)


def true_bit_means(codes: np.ndarray, bits: int, groups: np.ndarray | None = None, n_groups: int = 1) -> np.ndarray:
    """Exact bit means ``xbar^(j)`` per group, shape ``(G, b)`` (evaluation and
    the Lemma 3.3 oracle only: the server never computes this)."""
    codes = np.asarray(codes, dtype=np.uint64)
    g = np.zeros(codes.size, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    keep = g >= 0
    codes, g = codes[keep], g[keep]
    n = np.bincount(g, minlength=n_groups).astype(np.float64)
    out = np.zeros((n_groups, bits))
    for j in range(bits):
        out[:, j] = np.bincount(g, weights=bit_of(codes, j), minlength=n_groups)
    return np.divide(out, n[:, None], out=np.zeros_like(out), where=n[:, None] > 0)


# ------------------------------------------------------- sampling probabilities
def bit_probabilities(
    bits: int, scheme: str = "weighted", alpha: float = 0.5, bit_means=None, weights=None
) -> np.ndarray:
    """Bit sampling probabilities ``p_j`` (Section 3.1).

    ``uniform``: ``1/b``; ``weighted``: ``p_j ~ 2^(alpha j)``; ``optimal``:
    Lemma 3.3, ``p_j ~ sqrt(beta_j)`` with ``beta_j = w_j^2 xbar^(j)(1 - xbar^(j))``
    (needs ``bit_means``, shape ``(b,)`` or ``(G, b)``; a group whose bits are all
    constant gets the uniform distribution)."""
    if scheme not in SCHEMES:
        raise ParamError(f"unknown sampling scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    j = np.arange(bits, dtype=np.float64)
    if scheme == "uniform":
        return np.full(bits, 1.0 / bits)
    if scheme == "weighted":
        if not (math.isfinite(alpha) and alpha >= 0):
            raise ParamError(f"alpha must be a non-negative number (got {alpha})")
        p = np.exp2(alpha * (j - j[-1]))  # shifted exponent: no overflow at 62 bits
        return p / p.sum()
    if bit_means is None:
        raise ParamError("the optimal (Lemma 3.3) probabilities need the bit means")
    m = np.clip(np.asarray(bit_means, dtype=np.float64), 0.0, 1.0)
    w = np.ldexp(1.0, np.arange(bits)) if weights is None else np.asarray(weights, dtype=np.float64)
    root = np.abs(w) * np.sqrt(m * (1.0 - m))
    return normalise_rows(root)


def normalise_rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    s = a.sum(axis=-1, keepdims=True)
    uniform = np.full_like(a, 1.0 / a.shape[-1])
    return np.where(s > 0, a / np.where(s > 0, s, 1.0), uniform)


def cap_inclusion(p: np.ndarray, b_send: int) -> np.ndarray:
    """Inclusion probabilities ``pi_j = min(1, b_send * p_j)`` rescaled to sum to
    ``b_send`` (water-filling), so a client can be asked ``b_send`` distinct bits."""
    p = np.atleast_2d(np.asarray(p, dtype=np.float64))
    if b_send == 1:
        return p.copy()
    pi = b_send * p
    for _ in range(p.shape[-1] + 1):
        over = pi > 1.0
        if not over.any():
            break
        fixed = over | (pi >= 1.0)
        pi = np.where(fixed, 1.0, pi)
        rest = np.where(fixed, 0.0, pi)
        need = b_send - fixed.sum(axis=-1, keepdims=True)
        s = rest.sum(axis=-1, keepdims=True)
        scale = np.divide(need, s, out=np.zeros_like(s), where=s > 0)
        pi = np.where(fixed, 1.0, rest * scale)
    return pi


# ------------------------------------------------------------ variance formulas
def rr_keep_probability(epsilon: float) -> float:
    """Randomized response keeps the true bit with ``p = e^eps / (1 + e^eps)``."""
    return 1.0 / (1.0 + math.exp(-epsilon))


def rr_variance(epsilon: float) -> float:
    """Variance of one unbiased RR report of a bit whose true value is 0 or 1:
    ``e^eps / (e^eps - 1)^2`` (Section 3.3, from Wang et al. [29])."""
    e = math.exp(epsilon)
    return e / (e - 1.0) ** 2


def is_secure(noise) -> bool:
    return noise is not None and bool(getattr(noise, "secure", False))


def randomized_response(bits: np.ndarray, epsilon: float, rng: np.random.Generator, noise=None) -> np.ndarray:
    """Client side: keep each bit with probability ``e^eps/(1+e^eps)``, else flip it.
    ``noise``: a secure-mode :class:`engine.core.noise.NoiseSource` draws the flips with
    OpenDP (not seeded); otherwise they come from ``rng``."""
    bits = np.asarray(bits, dtype=np.int8).astype(bool)
    if is_secure(noise):
        return noise.randomized_response(bits, epsilon).astype(np.int8)
    return seeded_randomized_response(rng, bits, epsilon).astype(np.int8)


def rr_unbias(reports, epsilon: float) -> np.ndarray:
    """Server side: ``(r - (1 - p)) / (2p - 1)``, unbiased for the true bit."""
    p = rr_keep_probability(epsilon)
    return (np.asarray(reports, dtype=np.float64) - (1.0 - p)) / (2.0 * p - 1.0)


def check_optional_epsilon(epsilon):
    """The run's epsilon (:func:`engine.core.epsilon.check_epsilon`), or None for the variants without one."""
    return None if epsilon is None else check_epsilon(epsilon)


def squash_floor(epsilon: float, threshold: float, z: float = 4.0) -> int:
    """Round-1 reports per bit needed so that a round-1 bit mean has a standard
    deviation of at most ``threshold / z``, whatever the bit: with ``z = 4`` a bit
    whose true mean is 0 crosses the threshold with probability ~3e-5, and a used
    bit is squashed wrongly only if its mean is within a few ``threshold / z`` of it."""
    if threshold <= 0:
        return 0
    # worst-case sd of one unbiased RR report: 1 / (2 (2p - 1)) = sqrt(e^eps / (e^eps - 1)^2 + 1/4)
    sd = math.sqrt(rr_variance(epsilon) + 0.25)
    return int(math.ceil((z * sd / threshold) ** 2))


def squash_power_floor(epsilon: float, c: float, mean: float = 0.05, z: float = 2.0) -> int:
    """Round-1 reports per bit at which the noise test of :func:`.rounds.squashed_bits` (``m < c se0``)
    keeps a bit of true mean ``mean`` with probability ``Phi(z)`` (97.7%):
    ``mean - c se0 >= z se1``, ``se0`` the noise-only and ``se1`` the bit's own standard
    error. ``mean = 0.05`` is the smallest absolute threshold of the paper's Figure 4a: a
    bit the paper would not call noise at any threshold it tried."""
    if c <= 0:
        return 0
    v0 = rr_variance(epsilon)
    return int(math.ceil(((c * math.sqrt(v0) + z * math.sqrt(mean * (1.0 - mean) + v0)) / mean) ** 2))


def squash_c_default(bits: int, fwer: float = SQUASH_FWER) -> float:
    """Noise standard errors ``c`` a bit's mean must reach to escape squashing: the
    one-sided level ``fwer / bits`` (Bonferroni), so that an unused bit survives in a
    ``bits``-bit value with probability at most about ``fwer``: c = 3.02 for 8 bits, 3.42
    for 32. One surviving noise bit takes round 2's reports (its weight is 2^j), so the
    rate must hold over all the bits: at 32 bits a per-bit c = 3 raised the RMSE by 17%."""
    return float(NormalDist().inv_cdf(1.0 - fwer / bits))


def squash_noise_se(counts: np.ndarray, epsilon: float) -> np.ndarray:
    """Standard error of a bit mean made of ``counts`` unbiased RR reports when the bit
    is 0 for every client, i.e. the expected DP noise of an unused bit:
    ``sqrt(e^eps / (e^eps - 1)^2 / c)`` (Section 3.3's variance of one report, [29]);
    ``inf`` where there is no report."""
    c = np.asarray(counts, dtype=np.float64)
    return np.sqrt(np.divide(rr_variance(epsilon), c, out=np.full_like(c, np.inf), where=c > 0))
