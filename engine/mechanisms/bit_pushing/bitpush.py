"""Bit-pushing: numerical aggregation from one bit per value (no maps here).

Cormode, Markov & Srinivas, "Private and Efficient Federated Numerical
Aggregation", EDBT 2024 (papers/cormode2024_bit_pushing_numerical_aggregation.md).

Every client holds one value ``x_i``. It is written as a ``b``-bit fixed-point
integer (``frac_bits`` fractional bits; unsigned, or two's complement when
``signed``), winsorised to the representable range (Section 4.3, "clipping the
inputs to a fixed number of bits"). The server asks each client for ONE bit
``x_i^(j)`` (``b_send`` bits with Corollary 3.2) and estimates the mean by the
linear decomposition ``xbar = sum_j w_j xbar^(j)`` with ``w_j = 2^j / 2^frac``
(Eq. 1; in two's complement the sign bit has weight ``-2^(b-1)``, which keeps
the decomposition linear; the paper's footnote 1 warns only about
sign-magnitude).

What is here, with the paper's names:

* :func:`bitpush` - Algorithm 1 (basic bit-pushing) with the sampling
  probabilities of Section 3.1: ``uniform``, ``weighted`` (``p_j ~ 2^(alpha j)``)
  and ``optimal`` (Lemma 3.3, ``p_j ~ sqrt(beta_j)``, an oracle that needs the
  bit means); central (server-assigned, quasi-Monte-Carlo) or local (client
  picks) bit assignment; ``b_send`` bits per client (Corollary 3.2).
* :func:`adaptive_bitpush` - Algorithm 2 (two rounds; ``alpha``, ``gamma``,
  ``delta`` default 0.5, 0.5, 1/3 as in Section 4.1) with "caching" (pooling
  both rounds' reports, Section 3.2).
* Local DP (Section 3.3): randomized response on each reported bit with
  ``p = e^eps / (1 + e^eps)`` and the server-side unbiasing
  ``(r - (1 - p)) / (2p - 1)``; "bit squashing" with a threshold tied to the
  DP noise of each bit mean (see :func:`_squash`).
* :func:`lemma31_variance` (Lemma 3.1 / Corollary 3.2), :func:`estimate_variance`
  (Section 3.4, Lemma 3.5: ``E[X^2] - E[X]^2`` and ``E[(X - E[X])^2]``).
* Baselines (Sections 2 and 4; formulas in REFERENCE_NOTES.md section 3):
  subtractive dithering (optionally with randomized response), the piecewise
  mechanism, Duchi et al.'s one-bit mechanism, randomized rounding (optionally
  with randomized response) and Laplace noise on the clipped value.

Secure mode: the functions that draw privacy noise (:func:`bitpush`,
:func:`adaptive_bitpush`, :func:`estimate_mean`, :func:`estimate_variance`,
:func:`baseline_mean`) take an optional ``noise``, an
:class:`engine.core.noise.NoiseSource`. When it is in secure mode, randomized response
is OpenDP's (``NoiseSource.randomized_response``: ``make_randomized_response_bitvec``)
and the Laplace baseline is ``NoiseSource.add_laplace`` (the clipped value itself
passes through OpenDP's Laplace measurement). Duchi's coin is an exact Bernoulli of
its float probability on OS entropy (``NoiseSource.bernoulli``); the piecewise
mechanism (a continuous output) has no floating-point-safe sampler and is refused
in secure mode. Everything else drawn from ``rng`` is not privacy noise
in the DP sense: which bit a client reports, the QMC offsets, the client split
of Algorithm 2, the subtractive dither ``h`` (public: the server sees it) and
the coin of randomized rounding (its bit then goes through randomized response,
which is epsilon-LDP whatever the bit). Without ``noise`` (or with a seeded
source) every draw comes from ``rng``, exactly as before.

Every run returns a :class:`ServerLog`: the exact (client, bit, round, report)
tuples the server received, and the estimates are computed from that log only
(:func:`_aggregate` sees nothing else), so "at most ``b_send`` bits per client
per value" is checkable.

Departures from the paper (each also noted where it is coded):

* Quasi-Monte-Carlo counts: the paper contacts ``c_j = p_j n`` clients; we use
  systematic rounding (a random offset) so the counts are integers with
  ``E[c_j] = p_j n`` exactly and ``|c_j - p_j n| < 1``.
* Bits that receive no report (possible when ``p_j n < 1``, or with local
  assignment) get the bit mean 0 and the worst-case variance in the standard
  error; the estimator is unbiased only when every bit with ``p_j > 0`` gets a
  report (always true centrally when ``p_j n >= 1``).
* Round 1 of Algorithm 2 mixes ``p1`` with the uniform distribution just enough
  that every bit gets at least ``round1_floor`` reports when ``delta n`` allows
  (``gamma = 0.5`` alone gives the low bits of a 32-bit value almost no
  reports, after which Algorithm 2 line 6 sets their weight to 0 and the
  estimate loses them). With local DP and squashing the floor is raised so
  that a round-1 bit mean is resolved to a quarter of the absolute squashing
  threshold (:func:`squash_floor`) and the noise test keeps a bit of mean 0.05
  with probability 97.7% (:func:`squash_power_floor`); where the cohort cannot
  give every bit that many reports, round 1 is uniform.
* Round-2 weights use ``w_j^2`` times the estimated variance of ONE report on
  bit ``j``: ``m(1 - m)`` without DP (exactly Algorithm 2 line 6; but a bit with
  fewer than ``round1_floor`` round-1 reports, as in small cohorts, uses the
  smoothed ``m = (s + 1/2)/(c + 1)`` so that a few agreeing reports do not drop
  it from round 2, which biased small-cohort means by up to 20%), and
  ``q(1 - q) / (2p - 1)^2`` with randomized response (``q`` the observed share
  of ones), i.e. Lemma 3.3 applied to the unbiased reports. A bit with fewer
  than two round-1 reports gets the worst-case variance.
* Without caching, a bit that round 2 does not ask about keeps its round-1 mean
  (Algorithm 2 would otherwise have no estimate for it).
* Bit squashing: the paper gives no formula for the threshold. Section 3.3
  says "below an absolute threshold"; Section 4.2 varies it "as a multiple of
  the expected amount of DP noise" (Figure 4a: 0.05-0.2 works well; Figure 4b
  draws 0.05 on the bit means at eps = 2). Read as an absolute threshold alone
  (this module until issue 22), a bit whose true mean is below it is zeroed at
  every epsilon: ages >= 64 (bit mean 0.03-0.10) vanished from mean ages and the
  error stopped falling with epsilon. Here a bit is squashed when its mean is
  below BOTH the absolute threshold (default 0.1, the middle of Figure 4a's
  range) and ``c`` standard errors of its DP noise. The paper's 0.05-0.2 cannot
  be multiples of this standard error (at 0.1 it keeps about half the unused
  bits, which could not give Figure 4a's gain at 32 bits), so ``c`` is set by the
  test's false-alarm rate instead: by default some unused bit of the ``b``
  survives with probability 1% (Bonferroni, :func:`squash_c_default`: c = 3.02
  at 8 bits, 3.42 at 32). A surviving noise bit of weight up to 2^31 takes round
  2's reports, so the rate must hold over all the bits: at 32 bits c = 2 ruined
  the mean and c = 3 raised its RMSE by 17% (bench figure 4c).
  Adaptive runs test the round-1 means (a squashed bit gets no round-2 reports)
  and test the bits kept again on the final pooled means. "each" squashes every
  bit below the threshold (the paper's wording); "top" squashes only the run of
  most significant bits below it (Figure 4b: "treats bits 11 and above as
  noise"). Squashing is defined for unsigned values only.
* The distributed variant (sampling and thresholding, Bharadwaj & Cormode [5])
  is not implemented: the paper gives no calibration of its (eps, delta).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from ...core.errors import ParamError

SCHEMES = ("uniform", "weighted", "optimal")
ASSIGNMENTS = ("central", "local")
SQUASH_MODES = ("off", "top", "each")
SQUASH_FWER = 0.01  # squashing: chance that some unused bit survives, over all the bits (squash_c_default)
BASELINES = ("dithering", "rounding", "duchi", "piecewise", "laplace")
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
    return _normalise_rows(root)


def _normalise_rows(a: np.ndarray) -> np.ndarray:
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
def lemma31_variance(bit_means, p, n, b_send: int = 1, weights=None) -> np.ndarray:
    """Lemma 3.1 (Corollary 3.2 with ``b_send``):
    ``V = 1/(n b_send) sum_j w_j^2 xbar^(j)(1 - xbar^(j)) / p_j`` (bits with
    ``p_j = 0`` must be constant; they contribute nothing)."""
    m = np.clip(np.asarray(bit_means, dtype=np.float64), 0.0, 1.0)
    p = np.asarray(p, dtype=np.float64)
    w = np.ldexp(1.0, np.arange(m.shape[-1])) if weights is None else np.asarray(weights, dtype=np.float64)
    beta = w**2 * m * (1.0 - m)
    terms = np.divide(beta, p, out=np.zeros_like(beta), where=p > 0)
    terms = np.where((p <= 0) & (beta > 0), np.inf, terms)
    return terms.sum(axis=-1) / (np.asarray(n, dtype=np.float64) * b_send)


def rr_keep_probability(epsilon: float) -> float:
    """Randomized response keeps the true bit with ``p = e^eps / (1 + e^eps)``."""
    return 1.0 / (1.0 + math.exp(-epsilon))


def rr_variance(epsilon: float) -> float:
    """Variance of one unbiased RR report of a bit whose true value is 0 or 1:
    ``e^eps / (e^eps - 1)^2`` (Section 3.3, from Wang et al. [29])."""
    e = math.exp(epsilon)
    return e / (e - 1.0) ** 2


def _secure(noise) -> bool:
    return noise is not None and bool(getattr(noise, "secure", False))


def randomized_response(bits: np.ndarray, epsilon: float, rng: np.random.Generator, noise=None) -> np.ndarray:
    """Client side: keep each bit with probability ``e^eps/(1+e^eps)``, else flip it.
    ``noise``: a secure-mode :class:`engine.core.noise.NoiseSource` draws the flips with
    OpenDP (not seeded); otherwise they come from ``rng``."""
    bits = np.asarray(bits, dtype=np.int8)
    if _secure(noise):
        return noise.randomized_response(bits.astype(bool), epsilon).astype(np.int8)
    flip = rng.random(bits.shape) >= rr_keep_probability(epsilon)
    return np.where(flip, 1 - bits, bits).astype(np.int8)


def rr_unbias(reports, epsilon: float) -> np.ndarray:
    """Server side: ``(r - (1 - p)) / (2p - 1)``, unbiased for the true bit."""
    p = rr_keep_probability(epsilon)
    return (np.asarray(reports, dtype=np.float64) - (1.0 - p)) / (2.0 * p - 1.0)


def _check_epsilon(epsilon):
    if epsilon is None:
        return None
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ParamError(f"epsilon must be a positive number (got {epsilon})")
    if eps > 50:
        raise ParamError(f"epsilon {eps} is too large for randomized response to mean anything (max 50)")
    return eps


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
    """Round-1 reports per bit at which the noise test of :func:`_squash` (``m < c se0``)
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


# ------------------------------------------------------------------ server log
@dataclass
class ServerLog:
    """Everything the server received: one row per report.

    ``client`` indexes the input values, ``bit`` is the bit index asked for
    (-1: a whole perturbed value, for the baselines), ``round`` is 1 or 2,
    ``report`` what arrived (0/1, or the perturbed number), ``group`` the
    client's (public) group, e.g. its region."""

    client: np.ndarray
    bit: np.ndarray
    round: np.ndarray
    report: np.ndarray
    group: np.ndarray
    aux: np.ndarray | None = None  # public per-report randomness the server also sees (dithering's h)

    @classmethod
    def empty(cls) -> ServerLog:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.astype(np.int16), z.astype(np.int8), z.astype(np.float64), z)

    @classmethod
    def concat(cls, logs: list[ServerLog]) -> ServerLog:
        logs = [lg for lg in logs if lg is not None]
        if not logs:
            return cls.empty()
        aux = None
        if any(lg.aux is not None for lg in logs):
            aux = np.concatenate([lg.aux if lg.aux is not None else np.full(len(lg), np.nan) for lg in logs])
        return cls(
            np.concatenate([lg.client for lg in logs]),
            np.concatenate([lg.bit for lg in logs]),
            np.concatenate([lg.round for lg in logs]),
            np.concatenate([lg.report for lg in logs]),
            np.concatenate([lg.group for lg in logs]),
            aux,
        )

    def __len__(self) -> int:
        return int(self.client.size)

    def reads_per_client(self, n_clients: int) -> np.ndarray:
        return np.bincount(self.client, minlength=n_clients)

    def max_reads_per_client(self) -> int:
        return int(np.bincount(self.client).max()) if len(self) else 0

    def distinct_pairs(self) -> bool:
        """True when no (client, bit) pair was read twice."""
        if not len(self):
            return True
        key = self.client.astype(np.int64) * 128 + (self.bit.astype(np.int64) + 1)
        return np.unique(key).size == key.size


# ---------------------------------------------------------------------- result
@dataclass
class BitPushResult:
    """Estimates per group (``(G,)`` arrays; ``G = 1`` without groups)."""

    estimate: np.ndarray
    stderr: np.ndarray
    bit_means: np.ndarray  # (G, b) final (pooled, squashed) bit means
    counts: np.ndarray  # (G, b) reports behind each bit mean
    probabilities: list[np.ndarray]  # per round, (G, b)
    squashed: np.ndarray  # (G, b) bool
    n_clients: np.ndarray  # (G,) clients contacted
    log_parts: list[ServerLog]  # one per round
    encoding: Encoding
    epsilon: float | None = None
    rounds: int = 1
    b_send: int = 1
    info: dict = field(default_factory=dict)
    _log: ServerLog | None = field(default=None, repr=False)

    @property
    def value(self) -> float:
        """The single estimate (``G = 1``)."""
        return float(self.estimate[0])

    @property
    def log(self) -> ServerLog:
        """Every report the server received, all rounds (concatenated on first use)."""
        if self._log is None:
            self._log = ServerLog.concat(self.log_parts)
        return self._log


# ----------------------------------------------------------- client assignment
def _group_layout(groups: np.ndarray | None, n: int, n_groups: int | None):
    if groups is None:
        g = np.zeros(n, dtype=np.int64)
        G = 1
    else:
        g = np.asarray(groups, dtype=np.int64).ravel()
        if g.size != n:
            raise ParamError(f"groups has {g.size} entries for {n} values")
        G = int(n_groups) if n_groups is not None else int(g.max(initial=-1)) + 1
        if (g >= G).any():
            raise ParamError("a group id is not below n_groups")
    return g, max(G, 1)


def _shuffled_by_group(clients: np.ndarray, g: np.ndarray, G: int, rng: np.random.Generator):
    """Clients in a random order, grouped; returns (order, starts, sizes)."""
    if clients.size and clients[-1] + 1 == clients.size:  # all clients: permute indices directly
        perm = rng.permutation(clients.size)
    else:
        perm = clients[rng.permutation(clients.size)]
    if G == 1:
        return perm, np.zeros(1, dtype=np.int64), np.array([perm.size])
    perm = perm[np.argsort(g[perm], kind="stable")]
    sizes = np.bincount(g[perm], minlength=G)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return perm, starts, sizes


def _systematic_counts(sizes: np.ndarray, pi: np.ndarray, b_send: int, rng: np.random.Generator) -> np.ndarray:
    """Integer counts per (group, bit) with ``E[c_j] = n pi_j`` and ``|c_j - n pi_j| < 1``
    (quasi-Monte-Carlo: systematic rounding of the cumulative allocation)."""
    G, b = pi.shape
    total = sizes.astype(np.float64) * b_send
    cum = np.cumsum(pi / b_send, axis=1) * total[:, None]
    u = rng.random((G, 1))
    cum_i = np.floor(cum + u).astype(np.int64)
    cum_i[:, -1] = (sizes * b_send).astype(np.int64)  # guard against rounding of sum(pi)
    cum_i = np.minimum(np.maximum.accumulate(cum_i, axis=1), cum_i[:, -1:])
    counts = np.diff(np.concatenate([np.zeros((G, 1), dtype=np.int64), cum_i], axis=1), axis=1)
    return np.maximum(counts, 0)


def _central_reads(order, starts, sizes, pi, b_send, rng):
    """Server-assigned bits: exactly ``c_j`` slots per bit, dealt round-robin over the
    group's shuffled clients so a client never gets the same bit twice."""
    G, b = pi.shape
    counts = _systematic_counts(sizes, pi, b_send, rng)
    slots_per_group = sizes * b_send
    bit = np.repeat(np.tile(np.arange(b, dtype=np.int16), G), counts.ravel())
    grp = np.repeat(np.arange(G, dtype=np.int64), slots_per_group)
    if b_send == 1:  # slot s of a group is its s-th shuffled client: no dealing needed
        return order, bit, grp
    slot_start = np.concatenate([[0], np.cumsum(slots_per_group)[:-1]])
    s = np.arange(bit.size, dtype=np.int64) - slot_start[grp]
    rank = s % np.maximum(sizes[grp], 1)
    client = order[starts[grp] + rank]
    return client, bit, grp


def _local_reads(clients, g, pi, b_send, rng):
    """Client-chosen bits: each client draws ``b_send`` distinct bits with inclusion
    probabilities ``pi`` (systematic sampling with its own random offset)."""
    G, b = pi.shape
    cum = np.cumsum(pi, axis=1)
    cum[:, -1] = b_send  # exact total
    off = np.arange(G, dtype=np.float64)[:, None] * (b_send + 1)
    flat = (cum + off).ravel()
    gc = g[clients]
    u = rng.random(clients.size)
    reads_c, reads_b = [], []
    for k in range(b_send):
        pos = np.searchsorted(flat, u + k + gc * (b_send + 1), side="right")
        reads_c.append(clients)
        reads_b.append((pos - gc * b).astype(np.int16))
    client = np.concatenate(reads_c)
    return client, np.concatenate(reads_b), g[client]


def _collect(codes, client, bit, grp, rnd, epsilon, b_send, rng, noise=None) -> ServerLog:
    """Client side: read the asked bit, apply randomized response; the server logs it."""
    report = bit_of(codes[client], bit)
    if epsilon is not None:
        report = randomized_response(report, epsilon / b_send, rng, noise)
    return ServerLog(
        client=client.astype(np.int64, copy=False),
        bit=bit.astype(np.int16, copy=False),
        round=np.full(client.size, rnd, dtype=np.int8),
        report=report,  # int8 bits
        group=grp.astype(np.int64, copy=False),
    )


@dataclass
class _Sums:
    S: np.ndarray  # (G, b) sums of unbiased reports
    C: np.ndarray  # (G, b) report counts
    Q: np.ndarray  # (G, b) sums of raw reports (ones)

    def __add__(self, other: _Sums) -> _Sums:
        return _Sums(self.S + other.S, self.C + other.C, self.Q + other.Q)

    def means(self) -> np.ndarray:
        return np.divide(self.S, self.C, out=np.zeros_like(self.S), where=self.C > 0)


def _aggregate(log: ServerLog, G: int, b: int, epsilon: float | None, b_send: int) -> _Sums:
    """Server side: sums and counts per (group, bit) FROM THE LOG ONLY."""
    key = log.group * b + log.bit.astype(np.int64)
    C = np.bincount(key, minlength=G * b).reshape(G, b).astype(np.float64)
    Q = np.bincount(key, weights=log.report, minlength=G * b).reshape(G, b).astype(np.float64)  # empty log: int
    if epsilon is None:
        S = Q.copy()
    else:
        p = rr_keep_probability(epsilon / b_send)
        S = (Q - C * (1.0 - p)) / (2.0 * p - 1.0)
    return _Sums(S, C, Q)


def _report_variance(sums: _Sums, epsilon: float | None, b_send: int) -> np.ndarray:
    """Estimated variance of ONE unbiased report per (group, bit): the sample
    variance of the reports (worst case 1/4 / (2p - 1)^2 with fewer than two)."""
    k = 1.0 if epsilon is None else 2.0 * rr_keep_probability(epsilon / b_send) - 1.0
    q = np.divide(sums.Q, sums.C, out=np.full_like(sums.Q, 0.5), where=sums.C > 0)
    if epsilon is not None:
        # under randomized response a raw report is 1 with probability in [1-p, p]:
        # clipping keeps the variance at least the RR floor (an all-zero round-1
        # sample would otherwise claim zero variance and starve the bit in round 2)
        keep = rr_keep_probability(epsilon / b_send)
        q = np.clip(q, 1.0 - keep, keep)
    c = sums.C
    v = q * (1.0 - q) * np.divide(c, c - 1.0, out=np.ones_like(c), where=c > 1) / k**2
    return np.where(c >= 2, v, 0.25 / k**2)


def _squash(sums: _Sums, epsilon: float, threshold: float, c: float, mode: str) -> np.ndarray:
    """Bit squashing (Section 3.3): a bit is treated as noise when its unbiased mean is
    below the absolute ``threshold`` (Section 3.3) AND below ``c`` standard errors of the
    DP noise of its reports (Section 4.2, Figure 4a: the threshold is "a multiple of the
    expected amount of DP noise"): ``m_j < min(threshold, c sqrt(e^eps/(e^eps-1)^2 / C_j))``,
    ``C_j`` its reports, ``epsilon`` per report. For a bit that no client uses this is a
    one-sided test at level about ``1 - Phi(c)`` (0.13% for ``c = 3``; the exact binomial
    rate is higher with few reports, e.g. 0.6% with 25 at eps = 1); a used bit of mean
    ``mu`` is squashed with probability about ``Phi((c se0 - mu) / se1)``, so the bias
    it leaves vanishes as epsilon or its reports grow (with the absolute threshold alone,
    a bit whose mean is below it is zeroed at every epsilon). The absolute threshold caps
    the rule where the noise is so large that c standard errors would exceed it (there
    the test cannot tell a used bit from noise, and zeroing it would cost more than its
    noise). Bits without a report are never squashed."""
    if mode == "off":
        return np.zeros(sums.S.shape, dtype=bool)
    tau = np.minimum(threshold, c * squash_noise_se(sums.C, epsilon))
    below = (sums.means() < tau) & (sums.C >= 1)
    if mode == "each":
        return below
    # "top": only the run of most significant bits that are all below the threshold
    return np.logical_and.accumulate(below[:, ::-1], axis=1)[:, ::-1]


def _stderr(encoding: Encoding, sums: _Sums, squashed, epsilon, b_send) -> np.ndarray:
    w2 = encoding.weights**2
    v = _report_variance(sums, epsilon, b_send)
    unk = 0.25 if epsilon is None else 0.25 / (2.0 * rr_keep_probability(epsilon / b_send) - 1.0) ** 2
    per_bit = np.where(sums.C > 0, v / np.maximum(sums.C, 1.0), unk)  # no report: worst case
    per_bit = np.where(squashed, 0.0, per_bit)
    return np.sqrt((w2 * per_bit).sum(axis=1))


def _prepare(values, codes, encoding, groups, n_groups, b_send, epsilon, squash, assignment, squash_c=0.0):
    if not (isinstance(squash_c, (int, float, np.floating)) and math.isfinite(squash_c) and squash_c >= 0):
        raise ParamError(f"the squashing threshold c must be a non-negative number of standard errors (got {squash_c})")
    if assignment not in ASSIGNMENTS:
        raise ParamError(f"bit assignment must be one of {', '.join(ASSIGNMENTS)} (got {assignment!r})")
    if squash not in SQUASH_MODES:
        raise ParamError(f"bit squashing must be one of {', '.join(SQUASH_MODES)} (got {squash!r})")
    if squash != "off" and encoding.signed:
        raise ParamError("bit squashing is defined for unsigned values only (use an unsigned encoding)")
    if not (isinstance(b_send, (int, np.integer)) and 1 <= b_send <= encoding.bits):
        raise ParamError(f"bits sent per client must be an integer in 1..{encoding.bits} (got {b_send})")
    if codes is None:
        if values is None:
            raise ParamError("give the values (or their codes)")
        codes, _ = encoding.encode(values)
    codes = np.asarray(codes, dtype=np.uint64).ravel()
    if codes.size == 0:
        raise ParamError("there are no values to aggregate")
    g, G = _group_layout(groups, codes.size, n_groups)
    return codes, g, G, _check_epsilon(epsilon)


def _round(codes, clients, g, G, pi, b_send, epsilon, assignment, rnd, rng, shuffled=False, noise=None):
    """One round of Algorithm 1 over ``clients``; ``shuffled``: they are already in a
    random order, grouped (saves a shuffle of a million clients). ``rng`` picks the bits;
    randomized response uses ``noise`` in secure mode (see :func:`randomized_response`)."""
    if clients.size == 0:
        return ServerLog.empty()
    if assignment == "central":
        if shuffled:
            order = clients
            sizes = np.array([order.size]) if G == 1 else np.bincount(g[order], minlength=G)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        else:
            order, starts, sizes = _shuffled_by_group(clients, g, G, rng)
        c, bt, gr = _central_reads(order, starts, sizes, pi, b_send, rng)
    else:
        c, bt, gr = _local_reads(clients, g, pi, b_send, rng)
    return _collect(codes, c, bt, gr, rnd, epsilon, b_send, rng, noise)


def _nan_if_empty(a: np.ndarray, g: np.ndarray, clients: np.ndarray, G: int) -> np.ndarray:
    """No estimate (NaN) for a group without any contacted client."""
    return np.where(np.bincount(g[clients], minlength=G) > 0, a, np.nan)


# ------------------------------------------------------------------ Algorithm 1
def bitpush(
    values=None,
    encoding: Encoding | None = None,
    probabilities=None,
    rng: np.random.Generator | None = None,
    *,
    codes=None,
    groups=None,
    n_groups: int | None = None,
    assignment: str = "central",
    b_send: int = 1,
    epsilon: float | None = None,
    squash: str = "off",
    squash_threshold: float = 0.1,
    squash_c: float = 0.0,
    noise=None,
) -> BitPushResult:
    """Algorithm 1 (basic bit-pushing), per group.

    ``probabilities``: ``(b,)`` or ``(G, b)`` sampling probabilities ``p`` (see
    :func:`bit_probabilities`); a bit with ``p_j = 0`` is never asked and counts as
    0 (Lemma 3.3's optimum does that to constant bits, so it needs their values from
    elsewhere). Clients with a negative group id are not contacted.
    ``epsilon``: randomized response on every reported bit (local DP; each client
    spends ``epsilon`` in total, ``epsilon / b_send`` per bit). ``squash``: bit
    squashing of the final bit means below ``squash_threshold`` and ``squash_c`` noise
    standard errors (0: :func:`squash_c_default`; only meaningful with ``epsilon``; see
    :func:`_squash`). ``noise``: an
    :class:`engine.core.noise.NoiseSource`; in secure mode randomized response is OpenDP's
    (the bit assignment still uses ``rng``)."""
    if rng is None:
        raise ParamError("a seeded numpy Generator is required")
    encoding = encoding or Encoding()
    codes, g, G, eps = _prepare(
        values, codes, encoding, groups, n_groups, b_send, epsilon, squash, assignment, squash_c
    )
    b = encoding.bits
    c = float(squash_c) or squash_c_default(b)
    if probabilities is None:
        probabilities = bit_probabilities(b, "weighted", 0.5)
    p = np.atleast_2d(np.asarray(probabilities, dtype=np.float64))
    if p.shape[-1] != b or not np.isfinite(p).all() or (p < 0).any():
        raise ParamError(f"probabilities must be {b} non-negative numbers per group")
    p = _normalise_rows(np.broadcast_to(p, (G, b)))
    pi = cap_inclusion(p, b_send)
    clients = np.flatnonzero(g >= 0)
    log = _round(codes, clients, g, G, pi, b_send, eps, assignment, 1, rng, noise=noise)
    sums = _aggregate(log, G, b, eps, b_send)
    m = sums.means()
    squashed = _squash(sums, eps / b_send, squash_threshold, c, squash) if eps is not None else np.zeros((G, b), bool)
    m = np.where(squashed, 0.0, m)
    return BitPushResult(
        estimate=_nan_if_empty(encoding.decode_mean(m), g, clients, G),
        stderr=_nan_if_empty(_stderr(encoding, sums, squashed, eps, b_send), g, clients, G),
        bit_means=m,
        counts=sums.C,
        probabilities=[p],
        squashed=squashed,
        n_clients=np.bincount(g[clients], minlength=G),
        log_parts=[log],
        encoding=encoding,
        epsilon=eps,
        rounds=1,
        b_send=b_send,
    )


# ------------------------------------------------------------------ Algorithm 2
def adaptive_bitpush(
    values=None,
    encoding: Encoding | None = None,
    rng: np.random.Generator | None = None,
    *,
    codes=None,
    alpha: float = 0.5,
    gamma: float = 0.5,
    delta: float = 1.0 / 3.0,
    caching: bool = True,
    groups=None,
    n_groups: int | None = None,
    assignment: str = "central",
    b_send: int = 1,
    epsilon: float | None = None,
    squash: str = "off",
    squash_threshold: float = 0.1,
    squash_c: float = 0.0,
    round1_floor: int = 32,
    noise=None,
) -> BitPushResult:
    """Algorithm 2 (adaptive two-round bit-pushing), per group.

    Round 1: a ``delta`` fraction of each group's clients reports with
    ``p1_j ~ (2^j)^gamma`` (mixed with uniform to give every bit at least
    ``round1_floor`` reports when possible). Round 2: the others report with
    ``p2_j ~ (w_j^2 v_j)^alpha``, ``v_j`` the estimated variance of one report on
    bit ``j`` (= ``m1_j (1 - m1_j)`` without DP, Algorithm 2 line 6); squashed bits
    get ``p2_j = 0``. Final: with ``caching`` the bit means pool both rounds
    (line 9), else round 2 alone. ``noise``: as in :func:`bitpush` (secure mode:
    OpenDP randomized response in both rounds)."""
    if rng is None:
        raise ParamError("a seeded numpy Generator is required")
    encoding = encoding or Encoding()
    codes, g, G, eps = _prepare(
        values, codes, encoding, groups, n_groups, b_send, epsilon, squash, assignment, squash_c
    )
    for name, v, lo, hi in (("alpha", alpha, 0.0, 4.0), ("gamma", gamma, 0.0, 4.0), ("delta", delta, 0.0, 1.0)):
        if not (math.isfinite(v) and lo <= v <= hi) or (name == "delta" and not 0.0 < v < 1.0):
            raise ParamError(f"{name} must be in {'(0, 1)' if name == 'delta' else f'[{lo}, {hi}]'} (got {v})")
    if round1_floor < 0:
        raise ParamError("the round-1 floor must be non-negative")
    b = encoding.bits
    w = encoding.weights
    c = float(squash_c) or squash_c_default(b)

    # split each group's clients: a delta fraction answers round 1 (server's choice)
    clients = np.flatnonzero(g >= 0)
    order, starts, sizes = _shuffled_by_group(clients, g, G, rng)
    n1 = np.floor(delta * sizes + 0.5).astype(np.int64)
    if G == 1:
        c1, c2 = order[: n1[0]], order[n1[0] :]
    else:
        rank = np.arange(order.size) - np.repeat(starts, sizes)
        in_r1 = rank < np.repeat(n1, sizes)
        c1, c2 = order[in_r1], order[~in_r1]

    # round 1: p1 ~ (2^j)^gamma, mixed with uniform up to the floor
    slots = np.maximum(n1 * b_send, 1).astype(np.float64)[:, None]
    floor = int(round1_floor)
    if eps is not None and squash != "off":
        # enough reports for both tests of _squash; where the cohort cannot give every bit the
        # floor, round 1 is uniform (keeping the (2^j)^gamma weights leaves the middle bits of a
        # 32-bit value ~32 reports, and one of their noise bits or a used bit 6 goes wrong)
        floor = max(floor, squash_floor(eps / b_send, squash_threshold), squash_power_floor(eps / b_send, c))
    p1 = np.broadcast_to(bit_probabilities(b, "weighted", gamma), (G, b)).copy()
    pmin = p1.min(axis=1, keepdims=True)
    lam = np.clip((floor / slots - pmin) / np.maximum(1.0 / b - pmin, 1e-300), 0.0, 1.0)
    p1 = (1.0 - lam) * p1 + lam / b
    log1 = _round(
        codes, c1, g, G, cap_inclusion(p1, b_send), b_send, eps, assignment, 1, rng, shuffled=True, noise=noise
    )
    s1 = _aggregate(log1, G, b, eps, b_send)
    m1 = s1.means()

    squashed = np.zeros((G, b), dtype=bool)
    if eps is not None:
        # round 1 decides which bits round 2 need not ask about (Section 1.1: "unused bits
        # (with estimated mean 0) do not need to be sampled"); the bits it keeps are tested
        # again on the final (pooled) means below
        squashed = _squash(s1, eps / b_send, squash_threshold, c, squash)

    # round 2: p2 ~ (w_j^2 v_j)^alpha on the bits not squashed
    v1 = _report_variance(s1, eps, b_send)
    if eps is None:
        # line 6: v = m1 (1 - m1), so a bit whose reports all agree gets p2 = 0. With fewer than
        # round1_floor reports (small cohorts) that is weak evidence, and dropping a bit biases the
        # estimate: such bits use the smoothed m~ = (s + 1/2) / (c + 1) instead.
        mm = np.clip(m1, 0.0, 1.0)
        smooth = (s1.S + 0.5) / (s1.C + 1.0)
        unsettled = s1.C < max(int(round1_floor), 1)
        mm = np.where(unsettled, smooth, mm)
        v1 = mm * (1.0 - mm)
    beta = np.where(squashed, 0.0, w**2 * v1)
    with np.errstate(divide="ignore"):
        # beta^alpha in log space, scaled by each row's largest term (w_j^2 reaches 4^61)
        logp = np.where(beta > 0, alpha * np.log(np.where(beta > 0, beta, 1.0)), -np.inf)
    top = logp.max(axis=1, keepdims=True)
    raw = np.where(np.isfinite(logp), np.exp(logp - np.where(np.isfinite(top), top, 0.0)), 0.0)
    if alpha == 0:
        raw = np.where(beta > 0, 1.0, 0.0)
    s = raw.sum(axis=1, keepdims=True)
    p2 = np.divide(raw, s, out=np.zeros_like(raw), where=s > 0)
    active = s[:, 0] > 0  # a group with nothing left to learn asks nothing in round 2
    c2_active = c2 if active.all() else c2[active[g[c2]]]
    log2 = _round(
        codes,
        c2_active,
        g,
        G,
        cap_inclusion(np.where(active[:, None], p2, 1.0 / b), b_send),
        b_send,
        eps,
        assignment,
        2,
        rng,
        shuffled=True,
        noise=noise,
    )
    s2 = _aggregate(log2, G, b, eps, b_send)

    if caching:
        final = s1 + s2
    else:
        use2 = s2.C > 0
        final = _Sums(np.where(use2, s2.S, s1.S), np.where(use2, s2.C, s1.C), np.where(use2, s2.Q, s1.Q))
    if eps is not None:
        # a bit that passed round 1 by chance rarely passes again with round 2's reports: at
        # 32 bits one surviving noise bit of weight 2^31 would swamp the mean
        squashed |= _squash(final, eps / b_send, squash_threshold, c, squash)
    m = np.where(squashed, 0.0, final.means())
    return BitPushResult(
        estimate=_nan_if_empty(encoding.decode_mean(m), g, clients, G),
        stderr=_nan_if_empty(_stderr(encoding, final, squashed, eps, b_send), g, clients, G),
        bit_means=m,
        counts=final.C,
        probabilities=[p1, p2],
        squashed=squashed,
        n_clients=np.bincount(g[clients], minlength=G),
        log_parts=[log1, log2],
        encoding=encoding,
        epsilon=eps,
        rounds=2,
        b_send=b_send,
        info={"round1_clients": n1, "round1_floor": floor, "round1_means": m1},
    )


# --------------------------------------------------------------- convenience
def estimate_mean(
    values,
    encoding: Encoding,
    rng: np.random.Generator,
    method: str = "adaptive",
    *,
    alpha: float = 0.5,
    bit_means=None,
    **kw,
) -> BitPushResult:
    """One entry point: ``adaptive`` (Algorithm 2) or a one-round scheme
    (``uniform``, ``weighted`` with ``alpha``, ``optimal`` with ``bit_means``).
    ``noise=`` (secure mode) is passed on through ``kw``."""
    if method == "adaptive":
        return adaptive_bitpush(values, encoding, rng, alpha=alpha, **kw)
    for k in ("gamma", "delta", "caching", "round1_floor"):
        kw.pop(k, None)
    p = bit_probabilities(encoding.bits, method, alpha, bit_means, encoding.weights)
    return bitpush(values, encoding, p, rng, **kw)


def estimate_variance(
    values,
    encoding: Encoding,
    rng: np.random.Generator,
    how: str = "centered",
    split: float = 0.5,
    **adaptive_kw,
) -> dict:
    """Variance of the values from one bit per client (Section 3.4, Lemma 3.5).

    ``moments``: a ``split`` fraction estimates ``E[X]``, the rest ``E[X^2]``;
    ``sigma^2 = E[X^2] - E[X]^2``. ``centered``: a ``split`` fraction estimates
    ``mu``; the server publishes ``mu`` and the rest report a bit of
    ``(x - mu)^2``: ``sigma^2 = E[(X - mu)^2]``. Both use adaptive bit-pushing;
    the squares use ``2 b`` bits with ``2 frac_bits`` fractional bits."""
    if how not in ("moments", "centered"):
        raise ParamError("variance estimation is 'moments' (E[X^2]-E[X]^2) or 'centered' (E[(X-E[X])^2])")
    if not 0.0 < split < 1.0:
        raise ParamError(f"the client split must be in (0, 1) (got {split})")
    sq_bits = 2 * encoding.bits
    if sq_bits > MAX_BITS or 2 * encoding.frac_bits > 32:
        raise ParamError(f"variance estimation squares the values: 2 x {encoding.bits} bits exceeds {MAX_BITS}")
    codes, _ = encoding.encode(values)
    x = encoding.decode(codes)  # the winsorised fixed-point values
    n = x.size
    if n < 4:
        raise ParamError("variance estimation needs at least 4 clients")
    perm = rng.permutation(n)
    k = int(round(split * n))
    a, rest = perm[:k], perm[k:]
    sq = Encoding(sq_bits, 2 * encoding.frac_bits, False)
    r_mean = adaptive_bitpush(encoding=encoding, rng=rng, codes=codes[a], **adaptive_kw)
    mu = r_mean.value
    if how == "moments":
        r_sq = adaptive_bitpush(x[rest] ** 2, sq, rng, **adaptive_kw)
        var = r_sq.value - mu**2
    else:
        r_sq = adaptive_bitpush((x[rest] - mu) ** 2, sq, rng, **adaptive_kw)
        var = r_sq.value
    log_sq = r_sq.log
    log_sq = ServerLog(rest[log_sq.client], log_sq.bit, log_sq.round + 2, log_sq.report, log_sq.group)
    log_mu = r_mean.log
    log_mu = ServerLog(a[log_mu.client], log_mu.bit, log_mu.round, log_mu.report, log_mu.group)
    return {"variance": float(var), "mean": float(mu), "log": ServerLog.concat([log_mu, log_sq]), "how": how}


# ------------------------------------------------------------------ baselines
@dataclass
class BaselineResult:
    estimate: np.ndarray  # (G,)
    stderr: np.ndarray  # (G,)
    per_client: np.ndarray  # unbiased per-client estimates (server side)
    log: ServerLog
    n_clients: np.ndarray
    method: str
    epsilon: float | None


def baseline_mean(
    values,
    method: str,
    low: float,
    high: float,
    rng: np.random.Generator,
    epsilon: float | None = None,
    *,
    groups=None,
    n_groups: int | None = None,
    noise=None,
) -> BaselineResult:
    """Classical one-report mean estimators on the public range ``[low, high]``
    (inputs are clipped to it). Each client sends one report:

    * ``dithering`` (subtractive dithering, Ben-Basat et al. [3]): the client draws
      ``h ~ U[0,1]`` and sends ``1[x' >= h]`` (x' the value scaled to [0,1]); the
      server, which also sees ``h``, estimates ``bit + h - 1/2``. With ``epsilon``
      the bit goes through randomized response and is unbiased first (the
      paper's LDP baseline).
    * ``rounding`` (randomized rounding): send ``1`` with probability ``x'``;
      with ``epsilon`` randomized response on that bit.
    * ``duchi`` (Duchi et al. [13], one bit): ``t = 2x' - 1`` in [-1, 1]; output
      ``+-B``, ``B = (e^eps + 1)/(e^eps - 1)``, ``P(+B) = 1/2 + t/(2B)`` (needs epsilon).
    * ``piecewise`` (Wang et al. [28]; REFERENCE_NOTES section 3; needs epsilon).
    * ``laplace``: Laplace noise of scale ``(high - low)/eps`` on the clipped value.

    ``noise``: an :class:`engine.core.noise.NoiseSource`. In secure mode randomized
    response (dithering, rounding) is OpenDP's and the Laplace report is
    ``noise.add_laplace`` (the value passes through OpenDP's Laplace measurement),
    Duchi's coin ``noise.bernoulli`` (exact, OS entropy; the float rounding of
    ``1/2 + t/(2B)`` moves epsilon by a relative 1e-16 at most), and the piecewise
    mechanism, a continuous output without a floating-point-safe sampler, is
    refused. The dither ``h``
    and the rounding coin stay on ``rng`` (not privacy noise: see the module
    docstring). Without a secure ``noise`` every draw comes from ``rng``.
    """
    if method not in BASELINES:
        raise ParamError(f"unknown baseline {method!r}; expected one of {', '.join(BASELINES)}")
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ParamError(f"the public range must have low < high (got {low}, {high})")
    eps = _check_epsilon(epsilon)
    if eps is None and method in ("duchi", "piecewise", "laplace"):
        raise ParamError(f"the {method} mechanism is a local-DP mechanism: it needs epsilon")
    if method == "piecewise" and _secure(noise):
        raise ParamError(
            "the piecewise mechanism has no floating-point-safe sampler (its output is continuous); in secure "
            "mode use duchi, laplace, dithering or rounding"
        )
    v = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(v).all():
        raise ParamError("values must be finite numbers (drop missing values first)")
    g, G = _group_layout(groups, v.size, n_groups)
    clients = np.flatnonzero(g >= 0)
    width = high - low
    xs = (np.clip(v[clients], low, high) - low) / width  # in [0, 1]
    aux = None
    if method in ("dithering", "rounding"):
        if method == "dithering":
            h = rng.random(xs.size)
            bit = (xs >= h).astype(np.int8)
            aux = h
        else:
            bit = (rng.random(xs.size) < xs).astype(np.int8)
        report = bit.astype(np.float64) if eps is None else randomized_response(bit, eps, rng, noise).astype(np.float64)
        unb = report if eps is None else rr_unbias(report, eps)
        est01 = unb + h - 0.5 if method == "dithering" else unb
    elif method == "duchi":
        e = math.exp(eps)
        B = (e + 1.0) / (e - 1.0)
        t = 2.0 * xs - 1.0
        p_plus = 0.5 + t / (2.0 * B)
        plus = noise.bernoulli(p_plus) if _secure(noise) else rng.random(xs.size) < p_plus
        report = np.where(plus, B, -B)
        est01 = (report + 1.0) / 2.0
    elif method == "piecewise":  # seeded numpy only (refused in secure mode above)
        report = _piecewise(2.0 * xs - 1.0, eps, rng)
        est01 = (report + 1.0) / 2.0
    else:
        from ...core.noise import NoiseSource

        src = noise if _secure(noise) else NoiseSource(rng)  # seeded: x + rng.laplace(0, scale, n), as before
        report = src.add_laplace(xs * width + low, width / eps)
        est01 = (report - low) / width
    per_client = low + width * est01
    gc = g[clients]
    cnt = np.bincount(gc, minlength=G).astype(np.float64)
    s = np.bincount(gc, weights=per_client, minlength=G)
    s2 = np.bincount(gc, weights=per_client**2, minlength=G)
    mean = np.divide(s, cnt, out=np.zeros(G), where=cnt > 0)
    var = np.divide(s2 - cnt * mean**2, cnt - 1, out=np.full(G, np.inf), where=cnt > 1)
    stderr = np.sqrt(np.maximum(var, 0.0) / np.maximum(cnt, 1.0))
    log = ServerLog(
        client=clients.astype(np.int64),
        bit=np.full(clients.size, 0 if method in ("dithering", "rounding") else -1, dtype=np.int16),
        round=np.ones(clients.size, dtype=np.int8),
        report=np.asarray(report, dtype=np.float64),
        group=gc,
        aux=aux,
    )
    return BaselineResult(mean, stderr, per_client, log, cnt.astype(np.int64), method, eps)


def _piecewise(t: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Piecewise mechanism on ``t`` in [-1, 1]; unbiased, output in [-C, C]. Its noise
    comes from the numpy ``rng`` (no floating-point-safe sampler: refused in secure mode)."""
    e2 = math.exp(eps / 2.0)
    C = (e2 + 1.0) / (e2 - 1.0)
    lft = (C + 1.0) / 2.0 * t - (C - 1.0) / 2.0
    rgt = lft + C - 1.0
    centre = rng.random(t.size) < e2 / (e2 + 1.0)
    u = rng.random(t.size)
    inside = lft + u * (C - 1.0)
    # outside: uniform on [-C, l) U (r, C], total length C + 1
    pos = u * (C + 1.0)
    left_len = lft + C
    outside = np.where(pos < left_len, -C + pos, rgt + (pos - left_len))
    return np.where(centre, inside, outside)
