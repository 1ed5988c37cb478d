"""What the distributed mechanisms of Bagdasaryan et al. 2022 share: the paper's citation, threat model
and server view, the checks of epsilon and of the secure-aggregation settings, ledger entries and
shard diagnostics, the add/remove-user plan (a lower bound on the clients and a fixed committee of
noise-adding clients per shard) and the closed-form standard errors."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import EngineError, ParamError
from ...core.grid import morton_of_pixels
from ..noise_model import NoiseModel
from .tree import Clients

PAPER = (
    "Bagdasaryan, Kairouz, Mellem, Gascón, Bonawitz, Estrin, Gruteser. Towards Sparse Federated Analytics: "
    "Location Heatmaps under Distributed Differential Privacy with Secure Aggregation. PoPETs 2022(4)"
)
WORD_BITS_UNCLIPPED = 32  # bits per vector element assumed when no modular clipping is configured
VERIFY_MAX_WORK = 2_000_000  # clients x shard size allowed in verification mode

THREAT_DISTRIBUTED = (
    "Honest-but-curious server plus a minority of compromised clients (Section 3). Clients add Pólya noise "
    "shares and send masked vectors through secure aggregation: the server sees only each shard's noisy sum "
    "(modulo 2^q) and the intermediate prefix trees, which are themselves differentially private."
)
VIEW_DISTRIBUTED = (
    "The server sees only the noisy sum of each secure-aggregation shard; an attacker's belief about any user is "
    "what the released aggregate implies."
)


def check_secagg(p: dict, n_clients: int) -> None:
    q = int(p.get("clip_bits", 0))
    if q == 1:
        raise ParamError("modular clipping needs at least 2 bits (q = 1 leaves only the values -1 and 0)")
    if p.get("verify_secagg") and n_clients * min(n_clients, int(p["secagg_shard"])) > VERIFY_MAX_WORK:
        raise ParamError(
            f"verification mode masks every pair of clients in a shard: {n_clients:,} users with shards of "
            f"{min(n_clients, int(p['secagg_shard'])):,} is too much work; use at most "
            f"{VERIFY_MAX_WORK:,} for users x shard size (e.g. 2,000 users and shards of 500)"
        )


def secagg_kwargs(p: dict) -> dict:
    return dict(
        secagg_shard=int(p["secagg_shard"]),
        dp_shard=int(p["dp_shard"]),
        planned_dropout=float(p["planned_dropout"]),
        dropout=float(p["dropout"]),
        excess=p["dropout_policy"],
        clip_bits=int(p["clip_bits"]),
        verify=bool(p.get("verify_secagg", False)),
    )


def word_bits(p: dict) -> int:
    return int(p.get("clip_bits", 0)) or WORD_BITS_UNCLIPPED


def last_share(spent: list[float], total: float) -> float:
    """What is left of ``total`` after ``spent``, never letting the float sum exceed it."""
    left = max(total - math.fsum(spent), 0.0)
    while left > 0 and math.fsum(spent + [left]) > total:
        left = math.nextafter(left, 0.0)
    return left


def single_codes(clients: Clients) -> np.ndarray:
    if clients.multi:  # pragma: no cover - callers ask for most_visited
        raise EngineError("internal error: multi-location clients where one location was expected")
    return clients.code


def note_clients(ledger: Ledger, uses: str = "") -> None:
    """U is read from the data: record it as side information (as ``sparse_emd_secagg``)."""
    ledger.note_side_information(
        "the number of participating clients U (known to the server in secure aggregation; it sets the shard "
        "sizes and the Pólya shape 1/N" + (f"; {uses}" if uses else "") + ")"
    )


def degradation_warning(eff: float, eps: float) -> str | None:
    if eff > eps * (1 + 1e-9):
        return (
            f"some secure-aggregation shards summed fewer noise shares than the DP shard size N (dropout above "
            f"the planned rate, or N larger than the shards of an even split of the clients): their noise is "
            f"weaker than discrete Laplace, so the effective guarantee is epsilon = {eff:.4g} instead of {eps:.4g}"
        )
    return None


def spend_sharded(ledger: Ledger, step: str, eps: float, ss, base: str) -> None:
    """Book a sharded sum. Under excess dropout its released shards carry weaker noise than
    planned, and the ledger books what was actually spent, the sub-query's effective epsilon
    (worst shard), keeping the planned epsilon beside it and flagging the note."""
    eff = ss.effective_epsilon
    if eff > eps * (1 + 1e-9):
        ledger.spend(
            step,
            eff,
            planned_epsilon=eps,
            note=f"{base}; WEAKER THAN PLANNED: some shards kept fewer than N clients, epsilon {eff:.4g} spent "
            f"instead of the planned {eps:.4g}",
        )
    else:
        ledger.spend(step, eps, note=base)


def shard_diagnostics(ss) -> dict:
    return {
        "shards": int(ss.shard_sizes.size),
        "shard_size_max": int(ss.shard_sizes.max()),
        "dp_shard_size": int(ss.dp_shard_sizes.min()),
        "survivors_min": int(ss.survivors.min()),
        "alpha_min": float((ss.survivors / ss.dp_shard_sizes).min()),
        "shards_withheld": int((~ss.released).sum()),
        "noise_alpha_total": float(ss.alpha_total),
        "effective_epsilon": float(ss.effective_epsilon),
        "overflowed_coordinates": int(ss.overflowed),
        "verified_shards": int(ss.verified_shards),
        "aggregation_path": ss.path,
    }


def shard_diagnostics_public(ss) -> tuple[dict, dict]:
    """Add/remove user: the shard facts fixed by the public plan (release) and those that follow
    from the exact number of clients (evaluation only)."""
    d = shard_diagnostics(ss)
    private_keys = ("shard_size_max", "survivors_min", "verified_shards")
    public = {k: v for k, v in d.items() if k not in private_keys}
    public["committee"] = int(ss.committee)
    public["alpha_min"] = float((ss.committee / ss.dp_shard_sizes).min())
    own = {k: d[k] for k in private_keys}
    own["server_view_epsilon"] = ss.server_epsilon
    return public, own


def add_remove_plan(p: dict, U: int, eps_total: float, ctx, ledger: Ledger) -> tuple[dict, float]:
    """The public plan of an add/remove run (AdaptiveHH docstring, "Add/remove user"): a lower
    bound L on the number of clients, from a discrete-Laplace count (booked in the ledger) or
    the analyst's public bound (declared as side information); ``k = ceil(L / S_max)`` shards
    and a committee of ``floor(L / k)`` noise-adding clients per shard. Returns the plan (DP
    outputs and public parameters only) and the epsilon the count spent."""
    S = int(p["secagg_shard"])
    if p["clients_source"] == "public_bound":
        L = int(p["clients_bound"])
        eps_count = 0.0
        plan = {"source": "public bound", "lower_bound": L}
    elif p["clients_source"] == "dp_count":
        eps_count = float(p["count_share"]) * eps_total
        beta = float(p["count_failure"])
        # P(Z >= s + 1) = r^(s+1) / (1 + r) < r^s = e^(-eps_c s) <= beta for Z ~ DLap(r = e^-eps_c)
        shift = math.ceil(math.log(1.0 / beta) / eps_count)
        noisy = int(U + int(np.asarray(ctx.noise.discrete_laplace(1.0 / eps_count, 1)).ravel()[0]))
        L = max(1, noisy - shift)
        plan = {
            "source": "DP count",
            "dp_count": noisy,
            "count_epsilon": eps_count,
            "shift": shift,
            "failure_probability": beta,
            "lower_bound": L,
        }
    else:
        raise ParamError(f"unknown source of the planned number of clients {p['clients_source']!r}")
    k = max(1, -(-L // S))
    committee = L // k
    N = int(p["dp_shard"]) or max(int(math.floor((1.0 - float(p["planned_dropout"])) * committee + 1e-9)), 1)
    plan.update({"shards": k, "committee": committee, "dp_shard_size": N})
    how = (
        f"a public lower bound of {L:,} participating clients, declared by the analyst (not read from the data)"
        if eps_count == 0
        else f"a lower bound L = {L:,} on the number of clients, from a private count"
    )
    ledger.note_side_information(
        "add/remove user: the exact number of clients is never read; "
        + how
        + f" plans the epsilon schedule (Eq. 7), {k} SecAgg shard(s) and a committee of {committee:,} clients per "
        f"shard adding Pólya shares of shape 1/{N:,}"
    )
    if eps_count:
        ledger.spend(
            "DP count of clients",
            eps_count,
            note=f"discrete Laplace of scale 1/epsilon, sensitivity 1 under add/remove user: {noisy:,} clients; "
            f"lowered by {shift:,} to L = {L:,}, above the true number with probability at most {beta:g}",
        )
    return plan, eps_count


POLYA_BASIS = "the Pólya sum's noise per released cell, spread over its pixels"
NOT_EXACT = (
    "no margin: with dropouts or a wrapped coordinate the released sum is not the clients' sum plus the planned "
    "noise (repeated runs only)"
)


def exact_sum(ss, p: dict) -> bool:
    """The released sum is the clients' sum plus the Pólya noise (see :func:`polya_noise_model`)."""
    return float(p.get("dropout", 0.0)) == 0 and not ss.overflowed


def polya_noise_model(ss, p: dict, sd: float, lut: np.ndarray, density, basis: str = POLYA_BASIS) -> NoiseModel | str:
    """The noise model of a release that spreads each node's noisy sum uniformly over the pixels ``lut`` gives it:
    the nodes are its units, each of standard deviation ``sd`` (the count's, in users). The sum of the clients'
    Pólya shares over the released shards is ``Polya(A, r) - Polya(A, r)``, ``A`` the sum of survivors / N over
    them, with variance ``2 A r / (1 - r)^2`` (``ShardedSum.noise_std``; discrete Laplace's Eq. 5 when
    ``A = 1``): a function of epsilon, the sensitivity and the public shard sizes only. Exact when the released
    sum is the clients' sum plus that noise: not when a coordinate wrapped under modular clipping, nor with
    dropouts (which clients drop is random, so the summed signal itself varies); then the reason instead."""
    if not exact_sum(ss, p):
        return NOT_EXACT
    depth = int(np.shape(density)[0]).bit_length() - 1
    label = lut[morton_of_pixels(depth)]
    area = np.bincount(lut, minlength=int(lut.max()) + 1)
    return NoiseModel.of_cells(density, float(sd) / area[label], basis, label=label)
