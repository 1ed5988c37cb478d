"""Building blocks of the distributed-DP hierarchical histograms (Bagdasaryan et al.,
PoPETs 2022): the prefix tree of Section 5.6, the epsilon schedule of Eqs. 5-9,
and the client encodings of Sections 4, 5.7 and Appendix B (the sharded secure sum of
Algorithm 1 is :mod:`.secure_sum`).

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
