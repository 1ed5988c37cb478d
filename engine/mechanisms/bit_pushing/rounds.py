"""One round of bit-pushing as the server runs it: which client reports which bit (central
quasi-Monte-Carlo or local assignment), the :class:`ServerLog` of what the server received, the bit
means aggregated from that log only, squashing and standard errors, and :class:`BitPushResult`.
Algorithms 1 and 2 (:mod:`.bitpush`) are made of these rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...core.errors import ParamError
from .bits import Encoding, bit_of, check_optional_epsilon, randomized_response, rr_keep_probability, squash_noise_se

ASSIGNMENTS = ("central", "local")
SQUASH_MODES = ("off", "top", "each")


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
def group_layout(groups: np.ndarray | None, n: int, n_groups: int | None):
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


def shuffled_by_group(clients: np.ndarray, g: np.ndarray, G: int, rng: np.random.Generator):
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
class BitSums:
    S: np.ndarray  # (G, b) sums of unbiased reports
    C: np.ndarray  # (G, b) report counts
    Q: np.ndarray  # (G, b) sums of raw reports (ones)

    def __add__(self, other: BitSums) -> BitSums:
        return BitSums(self.S + other.S, self.C + other.C, self.Q + other.Q)

    def means(self) -> np.ndarray:
        return np.divide(self.S, self.C, out=np.zeros_like(self.S), where=self.C > 0)


def aggregate_log(log: ServerLog, G: int, b: int, epsilon: float | None, b_send: int) -> BitSums:
    """Server side: sums and counts per (group, bit) FROM THE LOG ONLY."""
    key = log.group * b + log.bit.astype(np.int64)
    C = np.bincount(key, minlength=G * b).reshape(G, b).astype(np.float64)
    Q = np.bincount(key, weights=log.report, minlength=G * b).reshape(G, b).astype(np.float64)  # empty log: int
    if epsilon is None:
        S = Q.copy()
    else:
        p = rr_keep_probability(epsilon / b_send)
        S = (Q - C * (1.0 - p)) / (2.0 * p - 1.0)
    return BitSums(S, C, Q)


def report_variance(sums: BitSums, epsilon: float | None, b_send: int) -> np.ndarray:
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


def squashed_bits(sums: BitSums, epsilon: float, threshold: float, c: float, mode: str) -> np.ndarray:
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


def mean_stderr(encoding: Encoding, sums: BitSums, squashed, epsilon, b_send) -> np.ndarray:
    w2 = encoding.weights**2
    v = report_variance(sums, epsilon, b_send)
    unk = 0.25 if epsilon is None else 0.25 / (2.0 * rr_keep_probability(epsilon / b_send) - 1.0) ** 2
    per_bit = np.where(sums.C > 0, v / np.maximum(sums.C, 1.0), unk)  # no report: worst case
    per_bit = np.where(squashed, 0.0, per_bit)
    return np.sqrt((w2 * per_bit).sum(axis=1))


def prepare_run(values, codes, encoding, groups, n_groups, b_send, epsilon, squash, assignment, squash_c=0.0):
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
    g, G = group_layout(groups, codes.size, n_groups)
    return codes, g, G, check_optional_epsilon(epsilon)


def one_round(codes, clients, g, G, pi, b_send, epsilon, assignment, rnd, rng, shuffled=False, noise=None):
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
            order, starts, sizes = shuffled_by_group(clients, g, G, rng)
        c, bt, gr = _central_reads(order, starts, sizes, pi, b_send, rng)
    else:
        c, bt, gr = _local_reads(clients, g, pi, b_send, rng)
    return _collect(codes, c, bt, gr, rnd, epsilon, b_send, rng, noise)


def nan_if_empty(a: np.ndarray, g: np.ndarray, clients: np.ndarray, G: int) -> np.ndarray:
    """No estimate (NaN) for a group without any contacted client."""
    return np.where(np.bincount(g[clients], minlength=G) > 0, a, np.nan)
