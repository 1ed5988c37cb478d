"""Distributed discrete Laplace: Pólya noise shares summed by secure aggregation
(Bagdasaryan et al. 2022, Section 4 and Appendix A.3), and the pure-DP epsilon of a
shard that kept fewer clients than planned. See :mod:`engine.core.noise`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ParamError
from .samplers import check_positive, check_probability, dl_r, polya_difference, polya_success

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

    r = check_probability("Pólya parameter r", r)
    p = polya_success(r, one_minus_r)
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
    t = check_positive("discrete Laplace scale", t)
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
