"""The sharded secure sum of Bagdasaryan et al. (PoPETs 2022), Algorithm 1: clients' vectors summed
under SecAgg shards with Pólya noise shares (distributed discrete Laplace), client dropouts and
modular clipping, as the server sees it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.errors import EngineError, ParamError
from ...core.noise import polya_difference, polya_difference_epsilon, split_shards


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
    _check_paths(secure, verify, signal, clip_bits, dropout)
    if signal is None:
        client = np.asarray(client, dtype=np.int64)
        key = np.asarray(key, dtype=np.int64)
    committee = int(committee)
    k, sizes, planned, N, surv = _layout(
        n_clients, secagg_shard, n_shards, committee, dp_shard, planned_dropout, dropout, clip_bits
    )
    # shard sums are materialised only when they matter (clipping wraps each shard's
    # sum; secure mode draws each shard's noise; verification masks each shard)
    need_shards = bool(clip_bits) or verify or secure

    shard_of, alive = _assign(rng, n_clients, sizes, surv) if need_shards or dropout > 0 else (None, None)
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
        shard_of, alive = _assign(rng, n_clients, sizes, surv)
    if not released.any():
        raise EngineError(
            "every secure-aggregation shard lost more clients than its DP shard size allows, so the server "
            "received nothing (policy 'abort', or secure mode, which withholds such shards); lower the dropout or "
            "plan for it with a smaller DP shard"
        )
    eps_eff, server_eps = _epsilons(alpha, planned, surv, sizes, N, released, committee, r, eps, sensitivity)
    overflowed = 0
    verified = 0
    path = "aggregated"
    if verify:
        total, verified = _per_client_sum(
            ctx, client, key, value, shard_of, alive, released, size, N, r if noisy else 0.0, clip_bits, committee
        )
        path = "per-client (verified SecAgg)"
    elif need_shards:
        shards = (sizes, planned, surv, N, alpha, released, shard_of, alive)
        total, overflowed = _per_shard_total(
            ctx, client, key, value, size, shards, r, eps, sensitivity, clip_bits, committee, secure
        )
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


def _assign(rng, n_clients: int, sizes: np.ndarray, surv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each client's shard (a random split into shards of ``sizes``) and whether it survives the dropout."""
    perm = rng.permutation(n_clients)
    shard_of = np.empty(n_clients, dtype=np.int64)
    shard_of[perm] = np.repeat(np.arange(sizes.size), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.empty(n_clients, dtype=np.int64)
    pos[perm] = np.arange(n_clients) - np.repeat(starts, sizes)
    return shard_of, pos < surv[shard_of]


def _check_paths(secure: bool, verify: bool, signal, clip_bits: int, dropout: float) -> None:
    """The options that cannot go together."""
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


def _layout(n_clients, secagg_shard, n_shards, committee, dp_shard, planned_dropout, dropout, clip_bits) -> tuple:
    """The shards: ``(k, sizes, planned, N, survivors)``; ``planned`` the clients whose shares each shard's noise
    is planned from (the committee in committee mode), ``N`` the DP shard sizes."""
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
    return k, sizes, planned, N, sizes - drops


def _epsilons(alpha, planned, surv, sizes, N, released, committee, r, eps, sensitivity) -> tuple[float, float | None]:
    """The release's effective epsilon (the worst released shard, parallel composition; infinite without noise)
    and, in committee mode, the epsilon of the server's own view of the shard sums."""
    if eps is None or not math.isfinite(eps):
        return math.inf, None
    eps_eff = 0.0
    cache: dict[float, float] = {}
    # a shard with no survivors sums nobody's data (and no noise): it leaks nothing
    for a in alpha[released & ((planned if committee else surv) > 0)]:
        a = float(a)
        if a not in cache:
            cache[a] = polya_difference_epsilon(a, r, int(sensitivity)) if a < 1 else eps
        eps_eff = max(eps_eff, cache[a])
    server_eps = None
    if committee:  # the server's view: only the members present added shares
        own = np.minimum(sizes, planned) / N
        server_eps = 0.0
        for a in np.unique(own[released & (sizes > 0)]):
            a = float(a)
            server_eps = max(server_eps, polya_difference_epsilon(a, r, int(sensitivity)) if a < 1 else eps)
    return eps_eff, server_eps


def _per_shard_total(
    ctx, client, key, value, size, shards, r, eps, sensitivity, clip_bits, committee, secure
) -> tuple[np.ndarray, int]:
    """Each shard's sum with its noise, wrapped modulo ``2^clip_bits``, then summed over the released shards;
    returns the total and the number of coordinates whose shard sum wrapped."""
    sizes, planned, surv, N, alpha, released, shard_of, alive = shards
    k = released.size
    noisy = eps is not None and math.isfinite(eps)
    overflowed = 0
    ok = alive[client] & released[shard_of[client]]
    flat = shard_of[client[ok]] * size + key[ok]
    w = None if value is None else value[ok].astype(np.float64)
    sig = np.rint(np.bincount(flat, weights=w, minlength=k * size)).astype(np.int64).reshape(k, size)
    if noisy:
        if secure:
            adders = planned if committee else sizes
            sig += _secure_shard_noise(ctx, adders, N, planned if committee else surv, released, size, eps, sensitivity)
        else:
            a = np.where(released, alpha, 0.0)
            sig += polya_difference(ctx.rng, a[:, None], r, (k, size))
    if clip_bits:
        wrapped = wrap_signed(sig, clip_bits)
        overflowed = int((wrapped != sig)[released].any(axis=0).sum())
        sig = wrapped
    total = sig[released].sum(axis=0)
    return total, overflowed


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
