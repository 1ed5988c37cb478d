"""Bit-pushing: numerical aggregation from one bit per value (no maps here).

Cormode, Markov & Srinivas, "Private and Efficient Federated Numerical
Aggregation", EDBT 2024 (Proceedings of the 27th International Conference on Extending
Database Technology, OpenProceedings.org).

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
  DP noise of each bit mean (see :func:`squashed_bits`).
* :func:`estimate_variance` (Section 3.4, Lemma 3.5: ``E[X^2] - E[X]^2`` and ``E[(X - E[X])^2]``).
* Baselines (Sections 2 and 4; formulas in :func:`.baselines.baseline_mean`):
  subtractive dithering (optionally with randomized response), the piecewise
  mechanism, Duchi et al.'s one-bit mechanism, randomized rounding (optionally
  with randomized response) and Laplace noise on the clipped value.

Secure mode: the functions that draw privacy noise (:func:`bitpush`,
:func:`adaptive_bitpush`, :func:`estimate_variance`,
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
source) every draw comes from ``rng``, so a seeded run repeats draw for draw.

Layout: Algorithms 1 and 2 and the convenience estimators are in this module; the encoding,
sampling probabilities, variance formulas, randomized response and squashing thresholds in
:mod:`.bits`; one round (assignment, server log, aggregation, squashing) in :mod:`.rounds`;
the baselines in :mod:`.baselines`.

Every run returns a :class:`ServerLog`: the exact (client, bit, round, report)
tuples the server received, and the estimates are computed from that log only
(:func:`aggregate_log` sees nothing else), so "at most ``b_send`` bits per client
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
  a bit whose true mean is below it is zeroed at
  every epsilon: ages >= 64 (bit mean 0.03-0.10) vanish from mean ages and the
  error stops falling with epsilon. Here a bit is squashed when its mean is
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

import numpy as np

from ...core.errors import ParamError
from .bits import (
    MAX_BITS,
    Encoding,
    bit_probabilities,
    cap_inclusion,
    normalise_rows,
    squash_c_default,
    squash_floor,
    squash_power_floor,
)
from .rounds import (
    BitPushResult,
    BitSums,
    ServerLog,
    aggregate_log,
    mean_stderr,
    nan_if_empty,
    one_round,
    prepare_run,
    report_variance,
    shuffled_by_group,
    squashed_bits,
)


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
    :func:`squashed_bits`). ``noise``: an
    :class:`engine.core.noise.NoiseSource`; in secure mode randomized response is OpenDP's
    (the bit assignment still uses ``rng``)."""
    if rng is None:
        raise ParamError("a seeded numpy Generator is required")
    encoding = encoding or Encoding()
    codes, g, G, eps = prepare_run(
        values, codes, encoding, groups, n_groups, b_send, epsilon, squash, assignment, squash_c
    )
    b = encoding.bits
    c = float(squash_c) or squash_c_default(b)
    if probabilities is None:
        probabilities = bit_probabilities(b, "weighted", 0.5)
    p = np.atleast_2d(np.asarray(probabilities, dtype=np.float64))
    if p.shape[-1] != b or not np.isfinite(p).all() or (p < 0).any():
        raise ParamError(f"probabilities must be {b} non-negative numbers per group")
    p = normalise_rows(np.broadcast_to(p, (G, b)))
    pi = cap_inclusion(p, b_send)
    clients = np.flatnonzero(g >= 0)
    log = one_round(codes, clients, g, G, pi, b_send, eps, assignment, 1, rng, noise=noise)
    sums = aggregate_log(log, G, b, eps, b_send)
    m = sums.means()
    squashed = (
        squashed_bits(sums, eps / b_send, squash_threshold, c, squash) if eps is not None else np.zeros((G, b), bool)
    )
    m = np.where(squashed, 0.0, m)
    return BitPushResult(
        estimate=nan_if_empty(encoding.decode_mean(m), g, clients, G),
        stderr=nan_if_empty(mean_stderr(encoding, sums, squashed, eps, b_send), g, clients, G),
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
    codes, g, G, eps = prepare_run(
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
    order, starts, sizes = shuffled_by_group(clients, g, G, rng)
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
        # enough reports for both tests of squashed_bits; where the cohort cannot give every bit the
        # floor, round 1 is uniform (keeping the (2^j)^gamma weights leaves the middle bits of a
        # 32-bit value ~32 reports, and one of their noise bits or a used bit 6 goes wrong)
        floor = max(floor, squash_floor(eps / b_send, squash_threshold), squash_power_floor(eps / b_send, c))
    p1 = np.broadcast_to(bit_probabilities(b, "weighted", gamma), (G, b)).copy()
    pmin = p1.min(axis=1, keepdims=True)
    lam = np.clip((floor / slots - pmin) / np.maximum(1.0 / b - pmin, 1e-300), 0.0, 1.0)
    p1 = (1.0 - lam) * p1 + lam / b
    log1 = one_round(
        codes, c1, g, G, cap_inclusion(p1, b_send), b_send, eps, assignment, 1, rng, shuffled=True, noise=noise
    )
    s1 = aggregate_log(log1, G, b, eps, b_send)
    m1 = s1.means()

    squashed = np.zeros((G, b), dtype=bool)
    if eps is not None:
        # round 1 decides which bits round 2 need not ask about (Section 1.1: "unused bits
        # (with estimated mean 0) do not need to be sampled"); the bits it keeps are tested
        # again on the final (pooled) means below
        squashed = squashed_bits(s1, eps / b_send, squash_threshold, c, squash)

    # round 2: p2 ~ (w_j^2 v_j)^alpha on the bits not squashed
    v1 = report_variance(s1, eps, b_send)
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
    log2 = one_round(
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
    s2 = aggregate_log(log2, G, b, eps, b_send)

    if caching:
        final = s1 + s2
    else:
        use2 = s2.C > 0
        final = BitSums(np.where(use2, s2.S, s1.S), np.where(use2, s2.C, s1.C), np.where(use2, s2.Q, s1.Q))
    if eps is not None:
        # a bit that passed round 1 by chance rarely passes again with round 2's reports: at
        # 32 bits one surviving noise bit of weight 2^31 would swamp the mean
        squashed |= squashed_bits(final, eps / b_send, squash_threshold, c, squash)
    m = np.where(squashed, 0.0, final.means())
    return BitPushResult(
        estimate=nan_if_empty(encoding.decode_mean(m), g, clients, G),
        stderr=nan_if_empty(mean_stderr(encoding, final, squashed, eps, b_send), g, clients, G),
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
