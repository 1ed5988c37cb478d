"""Building blocks of the distributed-DP hierarchical histograms (Bagdasaryan et al.,
PoPETs 2022): the prefix tree of Section 5.6, the epsilon schedule of Eqs. 5-9,
the client encodings of Sections 4, 5.7 and Appendix B, and the sharded secure
sum of Algorithm 1 with Pólya noise shares, dropouts and modular clipping.

Node identifiers
----------------
A node at level ``l`` (0 = root) whose quadtree path is ``code`` (``2 l`` bits, one
x bit then one y bit per level, most significant first, as ``engine.core.grid``) has
the id ``(1 << 2 l) | code``: a sentinel bit followed by the path. So the root is
``1``, ``parent(id) = id >> 2``, ``children(id) = (id << 2) | {0, 1, 2, 3}``, and
sorting ids sorts nodes by level first. Ids fit in int64 for every depth <= 10.

A tree is any set of nodes containing the root (Section 5.6: nodes may be
partially split and orphaned nodes are allowed). A node with fewer than four
children present "reports": it owns one coordinate of the clients' vectors and
accumulates every client whose longest present prefix it is. Every full-depth
cell therefore maps to exactly one reporting node; :func:`paint_lut` builds that
map as a look-up table over the ``4^D`` Morton codes, which turns the clients'
encoding into one gather and the server's sum into one ``bincount``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...core.errors import EngineError, ParamError
from ...core.grid import Domain, deinterleave, morton_of_pixels
from ...core.noise import polya_difference, polya_difference_epsilon, split_shards

# =================================================================== node ids


def node_level(ids: np.ndarray) -> np.ndarray:
    """Level of each node id (exact: frexp on integers below 2^53)."""
    ids = np.asarray(ids, dtype=np.int64)
    return ((np.frexp(ids.astype(np.float64))[1] - 1) // 2).astype(np.int64)


def node_code(ids: np.ndarray, level: np.ndarray | None = None) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    lev = node_level(ids) if level is None else level
    return ids - (np.int64(1) << (2 * lev))


def make_ids(codes: np.ndarray, level: int) -> np.ndarray:
    return np.asarray(codes, dtype=np.int64) | (np.int64(1) << np.int64(2 * level))


def node_rects(ids: np.ndarray, domain: Domain) -> np.ndarray:
    """Squares (x0, y0, x1, y1) in metres of the nodes (their full regions)."""
    ids = np.asarray(ids, dtype=np.int64)
    lev = node_level(ids)
    code = node_code(ids, lev)
    out = np.empty((ids.size, 4))
    for lv in np.unique(lev):
        sel = lev == lv
        ix, iy = deinterleave(code[sel].astype(np.uint64), int(lv))
        s = domain.side / (1 << int(lv))
        out[sel, 0] = domain.x0 + ix * s
        out[sel, 1] = domain.y0 + iy * s
        out[sel, 2] = out[sel, 0] + s
        out[sel, 3] = out[sel, 1] + s
    return out


def morton_to_grid(values: np.ndarray, level: int) -> np.ndarray:
    """Values indexed by Morton code at ``level`` -> ``(2^l, 2^l)`` grid ``[iy, ix]``."""
    return np.asarray(values)[morton_of_pixels(level)]


def upsample_grid(grid: np.ndarray, factor: int) -> np.ndarray:
    """Spread every cell uniformly over ``factor x factor`` finer cells (mass kept)."""
    if factor == 1:
        return np.asarray(grid, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64) / (factor * factor)
    return np.repeat(np.repeat(g, factor, axis=0), factor, axis=1)


# =================================================================== the tree


@dataclass(frozen=True)
class PrefixTree:
    """A set of quadtree nodes (sorted int64 ids, root always present) over a
    domain of depth ``depth`` (Section 5.6)."""

    depth: int
    nodes: np.ndarray

    @classmethod
    def initial(cls, depth: int, start_level: int = 1) -> PrefixTree:
        """Every node of levels ``0..start_level`` (``start_level = 0``: the root alone)."""
        start = max(0, min(int(start_level), int(depth)))
        ids = [make_ids(np.arange(4**lv), lv) for lv in range(start + 1)]
        return cls(int(depth), np.concatenate(ids))

    @classmethod
    def from_ids(cls, depth: int, ids) -> PrefixTree:
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        if ids.size and (ids.min() < 1 or node_level(ids).max() > depth):
            raise ParamError("node ids outside the tree's depth")
        if 1 not in set(ids[:1].tolist()):
            ids = np.union1d(ids, [1])
        return cls(int(depth), ids)

    def __len__(self) -> int:
        return int(self.nodes.size)

    def child_counts(self) -> np.ndarray:
        nonroot = self.nodes[self.nodes > 1]
        parents, cnt = np.unique(nonroot >> 2, return_counts=True)
        out = np.zeros(self.nodes.size, dtype=np.int64)
        pos = np.searchsorted(self.nodes, parents)
        ok = (pos < self.nodes.size) & (self.nodes[np.minimum(pos, self.nodes.size - 1)] == parents)
        out[pos[ok]] = cnt[ok]  # orphans' parents are absent and ignored
        return out

    def reporting(self) -> np.ndarray:
        """Nodes with fewer than four children (one vector coordinate each), sorted."""
        return self.nodes[self.child_counts() < 4]

    def update(
        self, reporting: np.ndarray, counts: np.ndarray, split_above: float, collapse_at_or_below: float, can_split=None
    ) -> tuple[PrefixTree, dict]:
        """UpdateTree of Algorithm 2: split (add the four children of) every reporting
        node whose count exceeds ``split_above`` and is above the maximum depth;
        collapse (delete) every reporting node other than the root whose count is
        at most ``collapse_at_or_below``. Nodes at the maximum depth are kept.
        ``can_split`` (bool per node) adds a further condition (Appendix B)."""
        reporting = np.asarray(reporting, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.float64)
        lev = node_level(reporting)
        split_mask = (counts > split_above) & (lev < self.depth)
        if can_split is not None:
            split_mask &= np.asarray(can_split, dtype=bool)
        collapse_mask = (counts <= collapse_at_or_below) & (reporting != 1) & ~split_mask
        split = reporting[split_mask]
        children = ((split[:, None] << 2) | np.arange(4, dtype=np.int64)).ravel()
        new_children = np.setdiff1d(children, self.nodes, assume_unique=False)
        kept = np.setdiff1d(self.nodes, reporting[collapse_mask], assume_unique=True)
        nodes = np.union1d(kept, new_children)
        info = {
            "splits": int(split.size),
            "collapses": int(collapse_mask.sum()),
            "added": int(new_children.size),
        }
        return PrefixTree(self.depth, nodes), info


def paint_lut(reporting: np.ndarray, depth: int) -> np.ndarray:
    """int32 look-up table over the ``4^D`` full-depth Morton codes: the index (in
    ``reporting``) of the longest present prefix of every cell. Nodes are painted
    shallow to deep over their contiguous Morton ranges, so deeper nodes win."""
    reporting = np.asarray(reporting, dtype=np.int64)
    lut = np.full(4**depth, -1, dtype=np.int32)
    lev = node_level(reporting)
    for lv in np.unique(lev):
        sel = np.flatnonzero(lev == lv)
        codes = reporting[sel] - (np.int64(1) << np.int64(2 * lv))
        span = 4 ** (depth - int(lv))
        if span == 1:
            lut[codes] = sel
        elif sel.size * span <= 4**depth:
            idx = (codes[:, None] * span + np.arange(span, dtype=np.int64)).ravel()
            lut[idx] = np.repeat(sel.astype(np.int32), span)
        else:  # pragma: no cover - impossible for a tree (nodes of one level are disjoint)
            for k, c in zip(sel, codes):
                lut[c * span : (c + 1) * span] = k
    if lut.size and lut.min() < 0:  # every cell has a present prefix: the root
        raise EngineError("internal error: the prefix tree does not cover the domain (root missing)")
    return lut


def rebuild_density(lut: np.ndarray, values: np.ndarray, depth: int) -> np.ndarray:
    """Section 6.1: a node's value spread uniformly over the pixels it covers that
    none of its (present) descendants covers. Returns ``grid[iy, ix]`` at depth D."""
    values = np.asarray(values, dtype=np.float64)
    area = np.bincount(lut, minlength=values.size).astype(np.float64)
    per_pixel = np.divide(values, area, out=np.zeros_like(values), where=area > 0)
    return per_pixel[lut[morton_of_pixels(depth)]]


# ============================================================ schedule (Eqs 5-9)


def dl_std(eps: float, sensitivity: float) -> float:
    """Eq. 5: standard deviation sqrt(2 r)/(1 - r) of discrete Laplace, r = e^{-eps/Δ}."""
    if not eps > 0:
        return math.inf
    x = eps / sensitivity
    r = math.exp(-x)
    return math.sqrt(2 * r) / (-math.expm1(-x))


def eps_for_std(sigma: float, sensitivity: float) -> float:
    """Eq. 8: epsilon whose discrete Laplace has standard deviation ``sigma``,
    ``-Δ ln((σ² + 1 - sqrt(2σ² + 1))/σ²)``, in the cancellation-free form
    ``r = σ² / (σ² + 1 + sqrt(2σ² + 1))``."""
    if not sigma > 0:
        return math.inf
    s = sigma * sigma
    r = s / (s + 1.0 + math.sqrt(2.0 * s + 1.0))
    return -sensitivity * math.log(r)


SCHEDULES = ("paper", "reference", "fixed")


def sigma_target(schedule: str, c: float, users: int, size: int, secagg_shard: int) -> float:
    """Eq. 7 target standard deviation (in users) of one shard's noise.

    * ``paper``: ``c U/T sqrt(ceil(S_max/U))`` exactly as printed (for U >= S_max the
      square root is 1).
    * ``reference``: the public code's ``c sqrt(S_max/U) U/T`` read as TWO standard
      deviations, i.e. ``c sqrt(S_max/U) U/T / 2``: the total over ``U/S_max``
      shards then has standard deviation ``c U/(2T)``.
    """
    u, t = float(users), float(size)
    if schedule == "paper":
        return c * u / t * math.sqrt(math.ceil(secagg_shard / u))
    if schedule == "reference":
        return c * math.sqrt(secagg_shard / u) * u / t / 2.0
    raise ParamError(f"unknown schedule {schedule!r}")


def schedule_epsilon(eps_rem: float, eps_tilde: float, b: float) -> tuple[float, bool]:
    """Eq. 9: spend ``eps_tilde`` if ``b * eps_tilde <= eps_rem``, else everything left
    (and stop). Returns (epsilon, is_last).

    The comparison tolerates float rounding (relative 1e-12): ``eps_rem`` is a
    difference of float sums, and an exact tie (e.g. the fixed schedule's
    ``eps/L`` with two sub-queries left and ``b = 2``) must not end the run one
    sub-query early. A sub-query that would leave nothing (``eps_tilde >= eps_rem``)
    is always the last, so the budget is never overspent."""
    if b * eps_tilde <= eps_rem * (1.0 + 1e-12) and eps_tilde < eps_rem:
        return eps_tilde, False
    return eps_rem, True


# ================================================================= clients


@dataclass
class Clients:
    """What each client holds, as arrays.

    Single-location clients: ``code[u]`` (full-depth Morton code). Multi-location
    clients (Section 5.7): rows ``row_client``, ``row_code``, ``row_weight`` with the
    weights of each client summing to 1. ``flag[u]`` for proportion estimation.
    ``remote``: clients that stay where an out-of-core dataset is read (no arrays here;
    ``remote.signal(lut, size)`` sums their one-hot vectors in Dask tasks, see
    :class:`engine.data.parquet_source.PartitionClients`)."""

    n: int
    code: np.ndarray | None = None
    row_client: np.ndarray | None = None
    row_code: np.ndarray | None = None
    row_weight: np.ndarray | None = None
    flag: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    remote: object | None = None

    @property
    def multi(self) -> bool:
        return self.row_client is not None


def _most_visited(inv: np.ndarray, codes: np.ndarray, w: np.ndarray | None, n_users: int) -> np.ndarray:
    """Per user, the full-depth cell with the largest (weighted) number of visits
    (ties: the smallest code)."""
    key = inv.astype(np.int64) * (np.int64(1) << 21) + codes  # codes < 2^20
    uk, kinv = np.unique(key, return_inverse=True)
    tot = np.bincount(kinv, weights=w, minlength=uk.size)
    users = uk >> 21
    # order by user, then by descending total, then ascending code
    order = np.lexsort((uk & ((1 << 21) - 1), -tot, users))
    first = np.ones(order.size, dtype=bool)
    first[1:] = users[order][1:] != users[order][:-1]
    best = np.empty(n_users, dtype=np.int64)
    best[users[order][first]] = (uk & ((1 << 21) - 1))[order][first]
    return best


def prepare_clients(
    data,
    domain: Domain,
    rng: np.random.Generator,
    *,
    multi_location: str = "normalise",
    max_locations: int = 0,
    need_flag: bool = False,
    remote_ok: bool = False,
    always_multi: bool = False,
) -> Clients:
    """Turn a Dataset into clients over the domain. Rows outside the domain are
    ignored (the protocol covers the public region only). With ``remote_ok``, an
    out-of-core dataset (one with ``clients(domain)``) hands over clients that stay on its
    Dask workers, one location and no attribute each. ``always_multi``: a dataset with user
    ids takes the multi-location encoding (``multi_location``) even when every user has one
    location, so the encoding (and its sensitivity) follows from the dataset's columns and
    the parameters, never from how many locations its people have (add/remove user)."""
    if remote_ok and callable(getattr(data, "clients", None)):
        if need_flag:
            raise EngineError("proportion estimation needs the dataset's binary attribute 'flag', which it lacks")
        remote = data.clients(domain)
        if remote.n == 0:
            raise EngineError("no location falls inside the region")
        return Clients(n=remote.n, remote=remote)
    inside = domain.inside(data.xy)
    if not inside.any():
        raise EngineError("no location falls inside the region")
    codes = domain.paths(data.xy[inside]).astype(np.int64)
    w = None if data.weight is None else np.asarray(data.weight, dtype=np.float64)[inside]
    flags = None
    if need_flag:
        if data.flag is None:
            raise EngineError("proportion estimation needs the dataset's binary attribute 'flag', which it lacks")
        flags = np.asarray(data.flag, dtype=bool)[inside]
    if data.user_id is None:
        return Clients(n=int(codes.size), code=codes, flag=flags)
    _, inv = np.unique(np.asarray(data.user_id)[inside], return_inverse=True)
    inv = inv.astype(np.int64)
    n_users = int(inv.max()) + 1
    counts = np.bincount(inv, minlength=n_users)
    if counts.max() == 1 and not always_multi:
        code = np.empty(n_users, dtype=np.int64)
        code[inv] = codes
        fl = None
        if flags is not None:
            fl = np.zeros(n_users, dtype=bool)
            fl[inv] = flags
        return Clients(n=n_users, code=code, flag=fl)
    fl = None
    if flags is not None:  # a user is positive if any of its rows is
        fl = np.bincount(inv, weights=flags.astype(np.float64), minlength=n_users) > 0
    if multi_location == "most_visited" or need_flag:
        notes = ["several locations per user: each user reports its most visited cell"]
        return Clients(n=n_users, code=_most_visited(inv, codes, w, n_users), flag=fl, notes=notes)
    if multi_location != "normalise":
        raise ParamError(f"unknown multi-location mode {multi_location!r}")
    rows = np.arange(inv.size)
    notes = []
    if max_locations and counts.max() > max_locations:
        # keep a uniformly random subset of max_locations rows per user (public cap)
        order = np.lexsort((rng.random(inv.size), inv))
        start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(inv.size, dtype=np.int64)
        rank[order] = np.arange(inv.size) - np.repeat(start, counts)
        rows = rows[rank < max_locations]
        notes.append(f"users with more than {max_locations} locations keep a random {max_locations}")
    inv, codes = inv[rows], codes[rows]
    ww = np.ones(rows.size) if w is None else w[rows]
    tot = np.bincount(inv, weights=ww, minlength=n_users)
    bad = tot[inv] <= 0
    if bad.any():  # a user with all-zero weights reports its locations evenly
        ww = np.where(bad, 1.0, ww)
        tot = np.bincount(inv, weights=ww, minlength=n_users)
    return Clients(n=n_users, row_client=inv, row_code=codes, row_weight=ww / tot[inv], flag=fl, notes=notes)


def encode_multi(
    rng: np.random.Generator, row_client: np.ndarray, row_key: np.ndarray, row_weight: np.ndarray, size: int, gamma: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Section 5.7 client encoding: per client, the weighted vector over the
    ``size`` coordinates (already L1-normalised by the weights), scaled by
    ``gamma`` and stochastically rounded (``floor(v) + Bernoulli(frac(v))``).
    Returns sparse entries (client, key, integer value); every client's L1 norm
    is at most ``gamma + (its number of non-zero coordinates)``."""
    key = row_client.astype(np.int64) * np.int64(size) + row_key.astype(np.int64)
    uk, kinv = np.unique(key, return_inverse=True)
    v = gamma * np.bincount(kinv, weights=row_weight, minlength=uk.size)
    fl = np.floor(v)
    val = fl + (rng.random(uk.size) < (v - fl))
    return uk // size, uk % size, val.astype(np.int64)


# ====================================================== proportion (App. B)


def proportion_ci(n0: np.ndarray, n1: np.ndarray, noise_var: float, level: float = 0.95):
    """Rate ``n1/(n0+n1)`` per region from noisy counts, with a normal-approximation
    interval combining the binomial sampling variance ``p(1-p)/n`` and the DP noise
    on both counts (delta method: ``((1-p)^2 + p^2) σ² / n²``). Returns
    (rate, low, high, n) with the rate clipped to [0, 1] and n to >= 1."""
    from scipy.stats import norm

    n = np.maximum(np.asarray(n0, dtype=np.float64) + np.asarray(n1, dtype=np.float64), 1.0)
    p = np.clip(np.asarray(n1, dtype=np.float64) / n, 0.0, 1.0)
    var = p * (1 - p) / n + ((1 - p) ** 2 + p**2) * noise_var / n**2
    z = float(norm.ppf(0.5 + level / 2))
    half = z * np.sqrt(var)
    return p, np.clip(p - half, 0.0, 1.0), np.clip(p + half, 0.0, 1.0), n


# ==================================================== sharded secure sum (Alg. 1)


def wrap_signed(x: np.ndarray, bits: int) -> np.ndarray:
    """Modular clipping: ``x mod 2^q`` represented in ``[-2^(q-1), 2^(q-1))``."""
    if not bits:
        return np.asarray(x)
    m = np.int64(1) << np.int64(bits)
    h = np.int64(1) << np.int64(bits - 1)
    return (np.asarray(x, dtype=np.int64) + h) % m - h


@dataclass
class ShardedSum:
    """The server's view of one sub-query: the sum over shards, and the facts the
    simulation knows about its noise."""

    total: np.ndarray  # int64, summed over the released shards (scaled units)
    r: float
    shard_sizes: np.ndarray
    dp_shard_sizes: np.ndarray
    survivors: np.ndarray
    released: np.ndarray  # bool per shard (False: withheld, "abort" policy)
    alpha_total: float  # sum over released shards of survivors / N
    effective_epsilon: float  # worst shard (parallel composition)
    overflowed: int = 0  # coordinates whose shard sum wrapped (clipping demo)
    verified_shards: int = 0
    path: str = "aggregated"
    # committee mode (add/remove user): noise-adding clients planned per shard, and the epsilon of
    # the server's own view of the shard sums (below the release's when a shard lacked its committee)
    committee: int = 0
    server_epsilon: float | None = None

    @property
    def noise_std(self) -> float:
        """Standard deviation of the total noise per coordinate (scaled units)."""
        r = self.r
        if r <= 0:
            return 0.0
        return math.sqrt(self.alpha_total * 2 * r) / (1 - r)


def secure_sum(
    ctx,
    client: np.ndarray,
    key: np.ndarray,
    value: np.ndarray | None,
    n_clients: int,
    size: int,
    eps: float | None,
    sensitivity: int,
    *,
    secagg_shard: int,
    dp_shard: int = 0,
    planned_dropout: float = 0.0,
    dropout: float = 0.0,
    excess: str = "release",
    clip_bits: int = 0,
    verify: bool = False,
    signal: np.ndarray | None = None,
    n_shards: int = 0,
    committee: int = 0,
) -> ShardedSum:
    """Algorithm 1, vectorised. ``n_clients`` clients (entries ``client``, ``key``,
    ``value``: client ``client[e]`` adds ``value[e]`` (1 if None) to coordinate
    ``key[e]``) are split at random into ``ceil(n/S_max)`` shards of at most
    ``S_max`` (as equal as possible). A fraction ``dropout`` of each shard (rounded)
    drops before sending. Each surviving client adds ``Polya(1/N, r) - Polya(1/N, r)``
    to every coordinate, ``r = e^{-eps/Δ}`` and ``N`` the DP shard size
    (``dp_shard`` or ``floor((1 - planned_dropout) * shard size)``); the server gets
    each shard's sum modulo ``2^q`` (``clip_bits = q``; 0 = no clipping) and adds the
    shards up. ``eps=None`` adds no noise.

    Paths: with clipping, secure mode, or ``verify``, the noise is drawn per shard
    (and with ``verify`` per client, masked by :mod:`engine.core.secagg`); otherwise the
    total noise is drawn at once as ``Polya(A, r) - Polya(A, r)`` with ``A`` the sum
    of ``m_s / N_s`` over shards, which is exactly the law of the sum of every
    client's share (Pólya laws with one ``r`` add up in ``alpha``).

    Shards with fewer survivors than ``N`` carry weaker noise: ``excess='release'``
    still releases them (the guarantee degrades; see ``effective_epsilon``);
    ``excess='abort'`` withholds them, as a SecAgg instance configured with a
    threshold of ``N`` survivors would. Secure mode always withholds them: a Pólya
    shape below 1 has no floating-point-safe sampler (:mod:`engine.core.noise`); and it
    refuses ``verify``, whose per-client shares are numpy draws.

    ``signal``: the clients' vectors already summed where they live (the partition tasks of
    an out-of-core dataset, :class:`engine.data.parquet_source.PartitionClients`) instead of
    the entries; only on the aggregated path, whose noise does not depend on which client is
    in which shard, so the result is the one the entries would give.

    Committee mode (``committee > 0``, with ``n_shards``; Adaptive HH under add/remove user):
    the layout and the noise are planned from a public number of clients L, never from
    ``n_clients``. The clients are split at random into ``n_shards`` shards as equal as
    possible (however many there are), and in each shard a random ``committee`` of them (the
    planned clients per shard, ``floor(L / n_shards)``) add ``Polya(1/N) - Polya(1/N)`` shares,
    ``N = dp_shard`` or ``floor((1 - planned_dropout) * committee)``; the other clients add
    none. Every shard's noise is then ``Polya(committee/N) - Polya(committee/N)``, the same law
    whatever the number of clients: with at least L clients every shard holds its committee;
    with fewer, the aggregator adds the missing members' shares itself before the release
    (so the released sum's law never depends on the count), and ``server_epsilon`` reports
    the weaker noise of the server's own view of those shards. The released total is then the
    clients' sum plus ``Polya(A) - Polya(A)`` noise, ``A = n_shards * committee / N``, however the
    clients were split. Refused: actual dropouts (a dropped committee member would make the
    noise depend on who took part) and modular clipping (each shard's wrap would make the total
    depend on the split, which depends on the number of clients).
    """
    rng = ctx.rng
    secure = bool(getattr(ctx, "secure", False))
    if secure and verify:
        raise ParamError(
            "verification mode draws every client's Pólya shares from the seeded numpy stream; it is not "
            "available in secure mode"
        )
    if signal is not None and (clip_bits or verify or secure or dropout > 0):
        raise ParamError(
            "clients summed in Dask tasks (an out-of-core dataset) give the server the total of their vectors "
            "only: modular clipping, dropouts, verification and secure mode need every shard's sum; run them on "
            "the dataset read into memory (in_memory=true)"
        )
    if signal is None:
        client = np.asarray(client, dtype=np.int64)
        key = np.asarray(key, dtype=np.int64)
    committee = int(committee)
    if committee:
        if dropout > 0:
            raise ParamError(
                "under add/remove user the noise is planned for a committee of clients per shard; simulated "
                "dropouts would make the noise depend on who took part: set the dropout to 0 (a planned dropout "
                "margin is fine)"
            )
        if clip_bits:
            raise ParamError(
                "under add/remove user modular clipping is not available: it wraps each shard's sum, so the "
                "released total would depend on how the clients were split into shards, and that split depends "
                "on their number; set the clipping bits to 0"
            )
        k = int(n_shards)
        if k < 1 or committee < 1:
            raise ParamError("committee mode needs at least one shard and one planned client per shard")
        base, extra = divmod(int(n_clients), k)
        sizes = np.array([base + 1] * extra + [base] * (k - extra), dtype=np.int64)
        planned = np.full(k, committee, dtype=np.int64)
    else:
        sizes = split_shards(n_clients, secagg_shard)
        k = sizes.size
        planned = sizes
    if dp_shard:
        N = np.full(k, int(dp_shard), dtype=np.int64)
    else:
        N = np.maximum(np.floor((1.0 - planned_dropout) * planned + 1e-9).astype(np.int64), 1)
    drops = np.floor(dropout * sizes + 0.5).astype(np.int64)
    surv = sizes - drops
    # shard sums are materialised only when they matter (clipping wraps each shard's
    # sum; secure mode draws each shard's noise; verification masks each shard)
    need_shards = bool(clip_bits) or verify or secure

    def assign():
        """Each client's shard (a random split) and whether it survives the dropout."""
        perm = rng.permutation(n_clients)
        shard_of = np.empty(n_clients, dtype=np.int64)
        shard_of[perm] = np.repeat(np.arange(k), sizes)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        pos = np.empty(n_clients, dtype=np.int64)
        pos[perm] = np.arange(n_clients) - np.repeat(starts, sizes)
        return shard_of, pos < surv[shard_of]

    shard_of, alive = assign() if need_shards or dropout > 0 else (None, None)
    noisy = eps is not None and math.isfinite(eps)
    r = math.exp(-eps / sensitivity) if noisy else 0.0
    # the noise's Pólya shape per shard: survivors' shares, or (committee mode) the planned
    # committee's, shortfalls topped up by the aggregator
    alpha = (planned if committee else surv) / N
    released = np.ones(k, dtype=bool)
    if noisy and (excess == "abort" or secure):
        released = alpha >= 1.0
    elif excess not in ("release", "abort"):
        raise ParamError(f"unknown dropout policy {excess!r}")
    if shard_of is None and not released.all():
        # withheld shards (policy 'abort': a DP shard size above some shards' size) send nothing, so the
        # aggregated path must know which clients they hold, not sum everyone
        if signal is not None:
            raise ParamError(
                "some secure-aggregation shards are smaller than the DP shard size and would be withheld; clients "
                "summed in Dask tasks cannot leave them out: lower the DP shard size or use the policy 'release'"
            )
        shard_of, alive = assign()
    if not released.any():
        raise EngineError(
            "every secure-aggregation shard lost more clients than its DP shard size allows, so the server "
            "received nothing (policy 'abort', or secure mode, which withholds such shards); lower the dropout or "
            "plan for it with a smaller DP shard"
        )
    eps_eff = 0.0
    if noisy:
        cache: dict[float, float] = {}
        # a shard with no survivors sums nobody's data (and no noise): it leaks nothing
        for a in alpha[released & ((planned if committee else surv) > 0)]:
            a = float(a)
            if a not in cache:
                cache[a] = polya_difference_epsilon(a, r, int(sensitivity)) if a < 1 else eps
            eps_eff = max(eps_eff, cache[a])
    else:
        eps_eff = math.inf
    server_eps = None
    if committee and noisy:  # the server's view: only the members present added shares
        own = np.minimum(sizes, planned) / N
        server_eps = 0.0
        for a in np.unique(own[released & (sizes > 0)]):
            a = float(a)
            server_eps = max(server_eps, polya_difference_epsilon(a, r, int(sensitivity)) if a < 1 else eps)

    overflowed = 0
    verified = 0
    path = "aggregated"
    if verify:
        total, verified = _per_client_sum(
            ctx, client, key, value, shard_of, alive, released, size, N, r if noisy else 0.0, clip_bits, committee
        )
        path = "per-client (verified SecAgg)"
    elif need_shards:
        ok = alive[client] & released[shard_of[client]]
        flat = shard_of[client[ok]] * size + key[ok]
        w = None if value is None else value[ok].astype(np.float64)
        sig = np.rint(np.bincount(flat, weights=w, minlength=k * size)).astype(np.int64).reshape(k, size)
        if noisy:
            if secure:
                adders = planned if committee else sizes
                sig += _secure_shard_noise(
                    ctx, adders, N, planned if committee else surv, released, size, eps, sensitivity
                )
            else:
                a = np.where(released, alpha, 0.0)
                sig += polya_difference(rng, a[:, None], r, (k, size))
        if clip_bits:
            wrapped = wrap_signed(sig, clip_bits)
            overflowed = int((wrapped != sig)[released].any(axis=0).sum())
            sig = wrapped
        total = sig[released].sum(axis=0)
        path = "per-shard"
    else:
        if alive is not None:  # dropped clients (and withheld shards) send nothing
            ok = alive[client] & released[shard_of[client]]
            key = key[ok]
            value = None if value is None else value[ok]
        if signal is not None:
            total = np.asarray(signal, dtype=np.int64)
        else:
            w = None if value is None else value.astype(np.float64)
            total = np.rint(np.bincount(key, weights=w, minlength=size)).astype(np.int64)
        if noisy:
            total = total + polya_difference(rng, float(alpha[released].sum()), r, size)
    return ShardedSum(
        total=np.asarray(total, dtype=np.int64),
        r=r,
        shard_sizes=sizes,
        dp_shard_sizes=N,
        survivors=surv,
        released=released,
        alpha_total=float(alpha[released].sum()) if noisy else 0.0,
        effective_epsilon=float(eps_eff),
        overflowed=overflowed,
        verified_shards=verified,
        path=path,
        committee=committee,
        server_epsilon=server_eps,
    )


def _secure_shard_noise(ctx, sizes, N, surv, released, size, eps, sensitivity) -> np.ndarray:
    """Secure mode: the engine's NoiseSource draws each released shard's noise (OpenDP's
    discrete Laplace, plus the extra Pólya part from fresh OS entropy)."""
    out = np.zeros((sizes.size, size), dtype=np.int64)
    t = sensitivity / eps
    # one call per shard, each drawing the shard's whole vector at once (OpenDP is called vectorised)
    for s in np.flatnonzero(released):
        mask = np.zeros(int(sizes[s]), dtype=bool)
        mask[: int(surv[s])] = True
        sn = ctx.noise.polya_difference_sum(
            int(sizes[s]), size, t, int(sizes[s]), dp_shard_size=int(N[s]), survived=mask
        )
        out[s] = sn.noise[0]
    return out


def _per_client_sum(ctx, client, key, value, shard_of, alive, released, size, N, r, clip_bits, committee=0):
    """Verification mode: every client builds its vector, adds its own Pólya shares,
    clips it modulo 2^q and masks it with pairwise masks (engine.core.secagg); the server
    unmasks each shard's sum. Raises if the masked sum differs from the plain one.
    ``committee``: only that many members of each shard (a random subset) add shares; the
    aggregator adds the shares of missing members after unmasking (see :func:`secure_sum`)."""
    from ...core import secagg

    rng = ctx.rng
    bits = clip_bits or 64
    total = np.zeros(size, dtype=np.int64)
    verified = 0
    k = released.size
    for s in range(k):
        if not released[s]:
            continue
        members = np.flatnonzero((shard_of == s) & alive)
        m = members.size
        if m == 0:
            if committee and r > 0:  # nobody arrived: the aggregator adds the committee's noise
                top = polya_difference(rng, committee / float(N[s]), r, size)
                total += wrap_signed(top, clip_bits) if clip_bits else top
            continue
        local = np.full(shard_of.size, -1, dtype=np.int64)
        local[members] = np.arange(m)
        sel = local[client] >= 0
        vec = np.zeros((m, size), dtype=np.int64)
        np.add.at(vec, (local[client[sel]], key[sel]), 1 if value is None else value[sel])
        adders = m if not committee else min(m, committee)
        if r > 0:
            who = np.arange(m) if adders == m else rng.choice(m, adders, replace=False)
            vec[who] += polya_difference(rng, 1.0 / float(N[s]), r, (adders, size))
        vec = wrap_signed(vec, clip_bits) if clip_bits else vec
        res = secagg.secure_sum(vec, bits, rng)
        if not res.verified:
            raise EngineError("secure aggregation check failed: the unmasked sum differs from the plain sum")
        shard_total = np.asarray(res.total, dtype=np.int64)
        if r > 0 and committee > adders:  # the aggregator's top-up for absent committee members
            shard_total = shard_total + polya_difference(rng, (committee - adders) / float(N[s]), r, size)
            shard_total = wrap_signed(shard_total, clip_bits) if clip_bits else shard_total
        total += shard_total
        verified += 1
    return total, verified
