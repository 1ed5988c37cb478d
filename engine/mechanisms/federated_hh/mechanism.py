"""Location heatmaps under distributed DP with secure aggregation (Bagdasaryan,
Kairouz, Mellem, Gascón, Bonawitz, Estrin, Gruteser. PoPETs 2022(4)), and the
baselines of its Table 1 and Table 3, all behind one protocol.

Registered mechanisms (family in brackets):

* ``adaptive_hh`` [distributed]: Algorithm 2, the adaptive hierarchical histogram
  with the epsilon schedule of Eqs. 5-9 and the adaptive threshold; multiple
  locations per user (Section 5.7), proportion estimation (Appendix B), dropouts,
  modular clipping and a verification mode running real pairwise-masked SecAgg.
* ``hh_fixed_eps`` / ``hh_scheduled_fixed_t`` [distributed] and
  ``hh_interactive_nonprivate`` [none]: the interactive variants of Table 3.
* ``nonprivate_level`` [none]: users report in the clear, one quadtree level (Section 6.2).
* ``flat_onehot``, ``hierarchical_onehot``, ``cms_hierarchical``, ``ag_polya``
  [distributed]: the non-interactive baselines of Section 5.1 / Table 1, with the
  same Pólya-share secure sum.
* ``ldp_grid`` [local]: k-ary randomized response or optimized unary encoding over
  grid cells at the same epsilon (the local-DP comparison of Figure 1).

Everything is vectorised (see :mod:`.tree`): per sub-query one gather of each
client's longest-prefix node through a look-up table over Morton codes, one
``bincount``, and one noise draw per coordinate (per shard and coordinate when
the shard sums matter: modular clipping, secure mode). The per-client path is
kept for the verification mode.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import EngineError, ParamError
from ...core.grid import Domain
from ...core.noise import rr_kary_unbias_counts, rr_keep_probability, unary_encoding_pq, unary_encoding_unbias
from ...core.params import Param
from ..base import Communication, Mechanism, Release, ServerView, aggregate_view, register
from .tree import (
    Clients,
    PrefixTree,
    dl_std,
    encode_multi,
    eps_for_std,
    make_ids,
    morton_of_pixels,
    node_level,
    node_rects,
    paint_lut,
    prepare_clients,
    proportion_ci,
    rebuild_density,
    schedule_epsilon,
    secure_sum,
    sigma_target,
)

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


# ===================================================================== params
def _secagg_params() -> tuple[Param, ...]:
    return (
        Param(
            "secagg_shard",
            "int",
            10_000,
            "S_max: most clients in one secure-aggregation shard; users are split into ceil(U/S_max) equal shards",
            min=10,
            max=1_000_000,
            log=True,
            label="SecAgg shard size S_max",
        ),
        Param(
            "planned_dropout",
            "float",
            0.0,
            "dropout rate the noise is planned for: the DP shard is N = floor((1 - rate) x shard size) "
            "(Algorithm 1, alpha = 1/((1 - delta_drop) S_max))",
            min=0.0,
            max=0.9,
        ),
        Param(
            "dp_shard",
            "int",
            0,
            "DP shard size N (each client adds Polya(1/N) shares); 0 = derived from the planned dropout",
            min=0,
            max=1_000_000,
            label="DP shard size N",
        ),
        Param(
            "dropout",
            "float",
            0.0,
            "actual fraction of each shard's clients that drop before sending; above the planned rate the "
            "shard's noise is weaker than discrete Laplace and the guarantee degrades (reported)",
            min=0.0,
            max=0.9,
        ),
        Param(
            "dropout_policy",
            "choice",
            "release",
            "when a shard keeps fewer clients than N: 'release' its sum anyway (the guarantee degrades) or "
            "'abort' (withhold it, as SecAgg with a survivor threshold N would)",
            choices=("release", "abort"),
        ),
        Param(
            "clip_bits",
            "int",
            0,
            "modular clipping to q bits: entries and shard sums wrap into [-2^(q-1), 2^(q-1)); 0 = no clipping",
            min=0,
            max=64,
            label="modular clipping q (bits)",
        ),
    )


def _schedule_params() -> tuple[Param, ...]:
    return (
        Param(
            "schedule",
            "choice",
            "reference",
            "epsilon per sub-query: 'reference' = the authors' code, sigma = c sqrt(S_max/U) U/T read as two "
            "standard deviations (reproduces the paper's Tables 1 and 3); 'paper' = Eq. 7 as printed, "
            "c U/T sqrt(ceil(S_max/U)); 'fixed' = epsilon/max_levels",
            choices=("paper", "reference", "fixed"),
        ),
        Param(
            "c",
            "float",
            0.1,
            "calibration c of Eq. 7: target noise as a fraction of the mean count per cell (paper: 0.1)",
            min=0.001,
            max=10.0,
            log=True,
        ),
        Param(
            "b",
            "float",
            2.0,
            "expansion parameter b of Eq. 9: the last sub-query spends all that is left once b x the planned "
            "epsilon exceeds the remainder (the reference code uses 2)",
            min=1.0,
            max=20.0,
        ),
        Param(
            "k",
            "float",
            2.0,
            "k of Eq. 6: split a node when its count exceeds k standard deviations of the noise (paper: 2)",
            min=0.1,
            max=50.0,
        ),
        Param(
            "threshold_rule",
            "choice",
            "adaptive",
            "'adaptive': Eq. 6, k x the standard deviation of the summed noise at the larger of this and the "
            "remaining budget; 'fixed': the constant below (Table 3's T = 10)",
            choices=("adaptive", "fixed"),
        ),
        Param(
            "fixed_threshold",
            "float",
            10.0,
            "split threshold in users when the threshold rule is 'fixed'",
            min=0.0,
            max=1e6,
        ),
        Param(
            "collapse_min",
            "float",
            0.0,
            "collapse a node when its count is at most max(this, threshold/4) (paper: threshold/4 only; the "
            "reference code uses 5)",
            min=0.0,
            max=1e4,
        ),
        Param(
            "max_levels",
            "int",
            10,
            "most sub-queries (interactive rounds); the last one spends the remaining budget",
            min=1,
            max=20,
        ),
        Param(
            "start_level",
            "int",
            1,
            "initial tree: every node down to this level (0 = the root alone, 1 = its four children as the "
            "reference code)",
            min=0,
            max=4,
        ),
    )


def _extension_params() -> tuple[Param, ...]:
    return (
        Param(
            "multi_location",
            "choice",
            "normalise",
            "users with several locations: 'normalise' = Section 5.7 (weighted L1 normalisation, scale by gamma, "
            "stochastic rounding, sensitivity gamma + d); 'most_visited' = each user's most visited cell only",
            choices=("normalise", "most_visited"),
        ),
        Param(
            "gamma",
            "int",
            10_000,
            "scaling gamma of Section 5.7 (multi-location only); noise blow-up is at most 1 + d/gamma",
            min=1,
            max=1_000_000_000,
            log=True,
        ),
        Param(
            "max_locations",
            "int",
            0,
            "public cap on locations per user (random subset kept): d = min(vector length, cap) in gamma + d; "
            "0 = no cap, d = vector length (the paper)",
            min=0,
            max=100_000,
        ),
        Param(
            "attribute",
            "choice",
            "none",
            "'flag': proportion estimation (Appendix B): each user reports (region, flag) one-hot over 2T "
            "coordinates; per-region rates with confidence intervals are released",
            choices=("none", "flag"),
        ),
        Param("ci_level", "float", 0.95, "confidence level of the rate intervals", min=0.5, max=0.999),
        Param(
            "split_on",
            "choice",
            "count",
            "proportion mode: split on the count only, or also require a confidence interval narrower than "
            "half the target width (and collapse regions wider than the target)",
            choices=("count", "ci_width"),
        ),
        Param(
            "max_ci_width",
            "float",
            0.2,
            "target confidence-interval width of a region's rate (proportion mode with split_on = ci_width)",
            min=0.001,
            max=1.0,
            log=True,
        ),
        Param(
            "verify_secagg",
            "bool",
            False,
            "verification mode: every client draws its own noise, clips and masks its vector with pairwise "
            "masks; the server's unmasked sum is checked against the plain sum (slow; small shards only)",
        ),
    )


RELATION_CHOICES = ("zero-out", "add/remove")


def _relation_params() -> tuple[Param, ...]:
    """Adaptive HH's neighbouring relation (issue 23 part 3) and, under add/remove, where the
    planned number of clients comes from (see AdaptiveHH's docstring, "Add/remove user")."""
    return (
        Param(
            "relation",
            "choice",
            "zero-out",
            "who the guarantee protects, and from what. 'zero-out' (the paper): a person's locations cannot be "
            "told from zeros, but whether they took part is public, as the exact number of clients plans the "
            "rounds, shards and noise. 'add/remove': whether a person took part at all is protected too; the plan "
            "is made from a lower bound on the number of clients (a private count or a public bound you give), "
            "never from the exact number",
            choices=RELATION_CHOICES,
            label="neighbouring relation",
        ),
        Param(
            "clients_source",
            "choice",
            "dp_count",
            "add/remove only: where the planned number of clients comes from. 'dp_count': a noisy count of the "
            "clients, lowered so that it stays below the true number with high probability (spends the share of "
            "epsilon below); 'public_bound': a lower bound you state (recorded as side information)",
            choices=("dp_count", "public_bound"),
            label="planned clients from",
        ),
        Param(
            "count_share",
            "float",
            0.05,
            "add/remove with a private count: the share of epsilon spent on counting the clients",
            min=0.001,
            max=0.5,
            log=True,
            label="share of epsilon for the client count",
        ),
        Param(
            "count_failure",
            "float",
            1e-6,
            "add/remove with a private count: how rarely the lowered count may exceed the true number of clients "
            "(then the server's own view of some shards has less noise than planned; the released map does not)",
            min=1e-12,
            max=0.1,
            log=True,
            label="chance the client count is too high",
        ),
        Param(
            "clients_bound",
            "int",
            1000,
            "add/remove with a public bound: at least this many clients take part (your statement, not read "
            "from the data)",
            min=1,
            max=1_000_000_000,
            log=True,
            label="public lower bound on clients",
        ),
    )


RELATION_PARAMS = tuple(p.name for p in _relation_params())


def _with_defaults(params: tuple[Param, ...], **defaults) -> tuple[Param, ...]:
    out = []
    for p in params:
        out.append(replace(p, default=defaults[p.name]) if p.name in defaults else p)
    return tuple(out)


def _check_eps(epsilon) -> float:
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ParamError(f"epsilon must be a positive number (got {epsilon})")
    return eps


def _check_secagg(p: dict, n_clients: int) -> None:
    q = int(p.get("clip_bits", 0))
    if q == 1:
        raise ParamError("modular clipping needs at least 2 bits (q = 1 leaves only the values -1 and 0)")
    if p.get("verify_secagg") and n_clients * min(n_clients, int(p["secagg_shard"])) > VERIFY_MAX_WORK:
        raise ParamError(
            f"verification mode masks every pair of clients in a shard: {n_clients:,} users with shards of "
            f"{min(n_clients, int(p['secagg_shard'])):,} is too much work; use at most "
            f"{VERIFY_MAX_WORK:,} for users x shard size (e.g. 2,000 users and shards of 500)"
        )


def _secagg_kwargs(p: dict) -> dict:
    return dict(
        secagg_shard=int(p["secagg_shard"]),
        dp_shard=int(p["dp_shard"]),
        planned_dropout=float(p["planned_dropout"]),
        dropout=float(p["dropout"]),
        excess=p["dropout_policy"],
        clip_bits=int(p["clip_bits"]),
        verify=bool(p.get("verify_secagg", False)),
    )


def _bits(p: dict) -> int:
    return int(p.get("clip_bits", 0)) or WORD_BITS_UNCLIPPED


def _last_share(spent: list[float], total: float) -> float:
    """What is left of ``total`` after ``spent``, never letting the float sum exceed it."""
    left = max(total - math.fsum(spent), 0.0)
    while left > 0 and math.fsum(spent + [left]) > total:
        left = math.nextafter(left, 0.0)
    return left


def _single_codes(clients: Clients) -> np.ndarray:
    if clients.multi:  # pragma: no cover - callers ask for most_visited
        raise EngineError("internal error: multi-location clients where one location was expected")
    return clients.code


def _note_clients(ledger: Ledger, uses: str = "") -> None:
    """U is read from the data: record it as side information (as ``sparse_emd_secagg``)."""
    ledger.note_side_information(
        "the number of participating clients U (known to the server in secure aggregation; it sets the shard "
        "sizes and the Pólya shape 1/N" + (f"; {uses}" if uses else "") + ")"
    )


def _degradation_warning(eff: float, eps: float) -> str | None:
    if eff > eps * (1 + 1e-9):
        return (
            f"some secure-aggregation shards summed fewer noise shares than the DP shard size N (dropout above "
            f"the planned rate, or N larger than the shards of an even split of the clients): their noise is "
            f"weaker than discrete Laplace, so the effective guarantee is epsilon = {eff:.4g} instead of {eps:.4g}"
        )
    return None


def _spend(ledger: Ledger, step: str, eps: float, ss, base: str) -> None:
    """Book a sharded sum. Under excess dropout its released shards carry weaker noise than
    planned, and the ledger books what was actually spent, the sub-query's effective epsilon
    (worst shard), keeping the planned epsilon beside it and flagging the note (issue 23)."""
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


def _shard_diag(ss) -> dict:
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


def _shard_diag_public(ss) -> tuple[dict, dict]:
    """Add/remove user: the shard facts fixed by the public plan (release) and those that follow
    from the exact number of clients (evaluation only)."""
    d = _shard_diag(ss)
    private_keys = ("shard_size_max", "survivors_min", "verified_shards")
    public = {k: v for k, v in d.items() if k not in private_keys}
    public["committee"] = int(ss.committee)
    public["alpha_min"] = float((ss.committee / ss.dp_shard_sizes).min())
    own = {k: d[k] for k in private_keys}
    own["server_view_epsilon"] = ss.server_epsilon
    return public, own


def _add_remove_plan(p: dict, U: int, eps_total: float, ctx, ledger: Ledger) -> tuple[dict, float]:
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


def _exact_sum(ss, p: dict) -> bool:
    """The released sum is the clients' sum plus the Pólya noise (see :func:`_stderr_extras`)."""
    return float(p.get("dropout", 0.0)) == 0 and not ss.overflowed


def _stderr_extras(ss, p: dict, sd: float, lut: np.ndarray, depth: int) -> dict:
    """``extras["stderr"]`` / ``["stderr_cells"]`` (issue 16; conventions in :mod:`.central`) of a
    release that spreads each node's noisy sum uniformly over the pixels ``lut`` gives it: ``sd``
    (the count's noise standard deviation, in users) over the node's pixels. The sum of the
    clients' Pólya shares over the released shards is ``Polya(A, r) - Polya(A, r)``, ``A`` the sum
    of survivors / N over them, with variance ``2 A r / (1 - r)^2`` (``ShardedSum.noise_std``;
    discrete Laplace's Eq. 5 when ``A = 1``): a function of epsilon, the sensitivity and the
    public shard sizes only. Exact when the released sum is the clients' sum plus that noise:
    not when a coordinate wrapped under modular clipping, nor with dropouts (which clients drop
    is random, so the summed signal itself varies); then no SE (empty dict)."""
    if not _exact_sum(ss, p):
        return {}
    area = np.bincount(lut, minlength=int(lut.max()) + 1)
    stderr = rebuild_density(lut, np.full(area.size, float(sd)), depth)
    return {"stderr": stderr, "stderr_cells": area[lut[morton_of_pixels(depth)]]}


# ============================================================ adaptive (Alg. 2)
@register
class AdaptiveHH(Mechanism):
    """Adaptive hierarchical histograms under distributed DP (Bagdasaryan et al. 2022,
    Algorithm 2, Sections 4-5 and Appendices A-B).

    Protocol. The server keeps a prefix tree over the quadtree of the public
    domain (Section 5.6; partially split and orphaned nodes allowed; node ids in
    :mod:`.tree`). In sub-query q every client encodes its location as a
    one-hot vector over the T nodes with fewer than four children, at its
    longest matching prefix, adds ``Polya(1/N, r) - Polya(1/N, r)`` to every
    coordinate (``r = exp(-eps_q/Δ)``, N the DP shard size), wraps it modulo 2^q
    and sends it through secure aggregation in shards of at most S_max clients;
    every full shard's sum carries discrete Laplace noise (Theorem 4.1, Eqs. 2-4).
    The server adds the shards (Algorithm 1), splits nodes whose noisy count
    exceeds the threshold t and collapses (deletes) nodes at or below t/4
    (UpdateTree), then plans the next sub-query.

    Schedule (Section 5.4). ``sigma~ = c U/T sqrt(ceil(S_max/U))`` (Eq. 7 as
    printed) or the reference code's ``c sqrt(S_max/U) U/T / 2`` (the default, see
    below); ``eps~ = phi(sigma~)`` (Eq. 8,
    inverting Eq. 5); ``eps_q = eps~`` if ``b eps~ <= eps_rem`` else ``eps_rem``
    (Eq. 9). The last sub-query spends everything left; it is also the last when
    ``max_levels`` is reached or when the previous update added no node (the
    tree is final: Section 5.3, "reports final counts for this partition").
    Threshold (Eq. 6): ``t = k sqrt(A) tau(max(eps_q, eps_rem), Δ)``, with ``tau``
    the discrete-Laplace standard deviation of Eq. 5 and ``A`` the number of
    full shards' worth of noise in the sum (the adaptive threshold of Table 3).
    The release is the last sub-query's counts on its tree; the heatmap spreads
    each node's count uniformly over the pixels it covers that no present
    descendant covers (Section 6.1).

    Release. ``density``: estimated user counts per pixel; ``partition``: the
    squares of the final tree's reporting nodes, coarse first (a partially split
    node's square contains its present children's squares: draw in order);
    ``extras['tree']``: every node id of the final tree, the reporting ids and
    their counts; ``extras['levels'][q]``: per sub-query node ids, levels, noisy
    counts, squares, threshold and epsilon (``level_density(release, q)``
    rebuilds that sub-query's heatmap for a level slider); ``diagnostics['levels']``:
    T, epsilon, threshold, splits, collapses, shard facts and the effective
    epsilon per sub-query; communication per sub-query and in total.

    Extensions. Several locations per user (Section 5.7): each user's vector
    over the nodes is its weighted location histogram normalised to L1 = 1,
    scaled by gamma and stochastically rounded; sensitivity ``gamma + d`` (d =
    vector length, or a public cap on locations); counts are divided by gamma.
    Proportion estimation (Appendix B): one-hot over (node, flag), 2T
    coordinates, sensitivity 1; per-node rates with confidence intervals (normal
    approximation with binomial and DP variance), optional split/collapse on the
    interval width. Dropouts (Section 4, Appendix A.3): a fraction of each shard
    drops before sending; with fewer survivors than N a shard's noise is weaker
    than discrete Laplace; the effective epsilon is computed and reported (or the
    shard withheld). Verification mode: real pairwise-masked secure aggregation
    (:mod:`engine.secagg`) on every shard with per-client noise.

    Threat model: see ``threat_model``; the server's view is the aggregate only.
    Guarantee: epsilon-DP for every user (the same users answer every
    sub-query: basic sequential composition over sub-queries; shards are
    disjoint, so a sub-query costs its epsilon however many shards it has),
    computational because it rests on SecAgg (Lemma 5.1); the ledger lists each
    sub-query. Neighbouring datasets (Theorem 4.1: a client's vector has L1 norm
    at most Δ) differ in one user's vector being replaced by zeros while the user
    still sends its noise shares ("zero-out"); under this relation the number of
    clients U, the shards and the Pólya shapes are public (U is recorded as side
    information). A user whose one-hot vector moves to another cell changes the
    sum by 2Δ, i.e. replace-one-user neighbours get 2 epsilon. Under excess
    dropout with policy 'release' the actual guarantee is the effective epsilon,
    which the ledger books as spent (the planned epsilon beside it, the note
    flagged); secure mode withholds such shards instead (engine.noise).

    Departures from the paper and from its public code (REFERENCE_NOTES 1):
    noise is sampled in float64/int64 (the reference uses float16); nodes at the
    maximum depth are kept (the reference drops them); a sub-query after which
    nothing was split spends the whole remainder on the final tree (the
    reference stops and leaves it unspent); the default schedule is the
    reference code's reading of Eq. 7 (``c sqrt(S_max/U) U/T`` as two standard
    deviations), because it is what produced the published results (it gives
    the communication of Table 1, 340 elements at 10k users and about 1,250 at
    100k, and Table 3's "first 4 levels, 0.76 left for the last") and because
    Eq. 7 as printed, ``sqrt(ceil(S_max/U))``, equals 1 whenever U >= S_max and so
    does not account for the noise accumulated over shards as its text says;
    ``schedule = 'paper'`` applies Eq. 7 as printed; the initial tree is
    the root's four children by default (as the reference; ``start_level = 0``
    starts from the root as Algorithm 2's init); the same sampled users answer
    every sub-query (as the reference; the budget composes sequentially);
    dropouts remove an exact fraction of each shard; without clipping the sum of
    the shards' noise is drawn at once (the same law); Eq. 6's sigma_rem includes
    the accumulation over shards and is taken at ``max(eps_q, eps_rem)`` (as the
    reference code); b = 2 by default (the reference code's value; the paper
    gives none). The proportion
    interval and the CI-width split rule are this workbench's reading of
    Appendix B, which leaves them open.

    Add/remove user (``relation = 'add/remove'``; issue 23 part 3; not in the paper).
    Under zero-out the exact client count U is public and read three times: by the
    schedule (Eq. 7, ``sigma~`` grows with U), by the shard layout (``ceil(U/S_max)``
    shards, Algorithm 1 line 7) and by the Pólya shapes (``1/N`` with N from each shard's
    size, Section 4 "Handling dropouts"). The audit measures eps >= 1.56 at a claimed 1
    under add/remove. This variant reads U nowhere that reaches the release:

    1. *Planned clients L.* Either the analyst's public lower bound (``clients_bound``,
       declared as side information), or a private count: ``U~ = U + Z``, Z discrete
       Laplace with ``r = e^-eps_c`` (Eq. 4 with Δ = 1: one person changes U by one),
       ``eps_c = count_share x epsilon``, booked in the ledger; ``L = max(1, U~ - s)`` with
       ``s = ceil(ln(1/beta)/eps_c)``, so ``P(L > U) = P(Z > s) = r^(s+1)/(1+r) < beta``
       (``count_failure``). The server knows how many clients report anyway (it runs
       secure aggregation with them), so the count's noise is added by the aggregator; it
       protects the release, not the server's view.
    2. *Plan from L only.* The schedule uses L for U in Eq. 7 (and the fixed schedule
       splits ``epsilon - eps_c``); ``k = ceil(L/S_max)`` shards; in each shard a random
       committee of ``n_c = floor(L/k)`` clients adds ``Polya(1/N) - Polya(1/N)`` shares
       (``N = dp_shard`` or ``floor((1 - planned_dropout) n_c)``); the other clients add none.
       Every shard's noise is ``Polya(n_c/N) - Polya(n_c/N)`` and the sub-query's released
       total carries ``Polya(A) - Polya(A)``, ``A = k n_c / N >= 1``: discrete Laplace(r_q)
       plus independent noise (Theorem 4.1, Eqs. 3-4; the law is infinitely divisible), a
       law fixed by L and the parameters. With U >= L clients every shard (an even split of
       the U clients into k shards) holds its committee; with fewer, the aggregator adds
       the absent members' shares before the release, so the released law is the same.
       Eq. 6's threshold reads the planned A, never the realised shard sizes.
    3. *Why it is DP.* For D' = D plus one person u, given L and the tree (functions of
       earlier DP outputs), sub-query q releases ``sum_i v_i + Z_q`` under D and
       ``sum_i v_i + v_u + Z_q`` under D', Z_q of the same law in both, ``|v_u|_1 <= Δ``
       (Δ = 1; gamma + d with several locations, Section 5.7): eps_q-DP by Eq. 4 and
       post-processing (adding the independent rest of Z_q). The count, then the
       sub-queries, compose sequentially (Section 5.5): ``eps_c + sum_q eps_q = epsilon``.
       Shards do not enter the argument: without clipping the released total does not
       depend on how the clients were split.

    Why not "every client adds shares sized for L": then D' carries one more share
    than D, and ``Polya(A + 1/N) - Polya(A + 1/N)`` has polynomially heavier tails than
    ``Polya(A)`` (pmf ~ ``k^(alpha-1) r^k``), so the privacy-loss ratio is unbounded: with
    one client in the sink (N = 1) a shift of 1 gives ``P1(> 3) / P0(> 3) = e^1.8`` at a
    claimed epsilon of 1. A fixed committee keeps the noise's law independent of U.

    What the server sees: the number of reports (hence U exactly), each shard's size and
    each shard's noisy sum. Under add/remove the guarantee is about the released map and
    everything published with it (the tree, the levels, the ledger); the server's own
    view is epsilon-DP only under zero-out, as in the paper (Lemma 5.1), because it sees
    who takes part; when L > U (probability < beta with a private count; a wrong public
    bound) the short shards it sees carry less noise (``server_view_epsilon`` in the
    evaluation). Exact U, shard sizes, the communication of all clients and the client
    notes (which depend on how many locations people have) go to the evaluation, not to
    the release; datasets with user ids always take the multi-location encoding
    (Section 5.7), so the encoding and its sensitivity follow from the columns, not from
    whether someone has a second location.
    Departures and limits: actual dropouts and modular clipping are refused under
    add/remove (a dropped committee member, or a per-shard wrap, would tie the release to
    who took part or to the split); S_max caps the planned clients per shard, so with
    U > L the shards hold ``U/k`` clients, a few percent over S_max when L is a private
    lower bound; the count costs ``eps_c`` and lowers L below U by about
    ``ln(1/beta)/eps_c`` clients (277 at epsilon 1 with the defaults), which plans the
    schedule for slightly fewer clients than there are.
    """

    key = "adaptive_hh"
    label = "Adaptive hierarchical histograms (distributed DP + SecAgg)"
    family = "distributed"
    guarantee = (
        "epsilon-DP under zero-out user, the number of clients U public (distributed: central-DP sum via Pólya "
        "shares and secure aggregation; computational); with relation = add/remove: epsilon-DP of the released map "
        "under add/remove user, planned from a private count or a public lower bound of the clients"
    )
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    summary = (
        "Interactive quadtree: each round users send a noisy one-hot vector over the current tree's cells through "
        "secure aggregation; cells with enough signal are split, noisy ones merged; the budget per round follows "
        "the noise the next split decision needs."
    )
    paper = PAPER
    equations = "Thm 4.1, Eqs. 2-9, Algorithms 1-2, Sections 5.6-5.7, 6.1, Appendices A-B"
    params = _schedule_params() + _secagg_params() + _relation_params() + _extension_params()
    private = True

    @classmethod
    def neighbouring_for(cls, params: dict | None = None) -> str:
        """``relation = 'add/remove'`` makes a private run add/remove user (see the class docstring)."""
        if cls.neighbouring == "zero-out user" and params and params.get("relation") == "add/remove":
            return "add/remove user"
        return super().neighbouring_for(params)

    # --------------------------------------------------------------------- run
    def run(self, data, domain, epsilon, params, ctx):
        p = params
        D = domain.depth
        private = self.private
        eps_total = _check_eps(epsilon) if private else math.inf
        prop = p["attribute"] == "flag"
        # add/remove user (class docstring): nothing that reaches the release reads the exact U
        addrem = private and p.get("relation", "zero-out") == "add/remove"
        clients = prepare_clients(
            data,
            domain,
            ctx.rng,
            multi_location=p["multi_location"],
            max_locations=int(p["max_locations"]),
            need_flag=prop,
            remote_ok=True,
            always_multi=addrem,
        )
        U = clients.n
        _check_secagg(p, U)
        gamma = int(p["gamma"]) if clients.multi else 1
        max_levels = int(p["max_levels"])
        schedule = p["schedule"]
        kw = _secagg_kwargs(p)
        warnings: list[str] = [] if addrem else list(clients.notes)
        if kw["dp_shard"] and kw["dp_shard"] > kw["secagg_shard"]:
            warnings.append("the DP shard size exceeds the SecAgg shard size: no shard can reach it")

        tree = PrefixTree.initial(D, int(p["start_level"]))
        ledger = Ledger()
        spent: list[float] = []
        plan = None
        planned_users = U  # the number of clients the schedule is planned for
        if addrem:
            plan, eps_count = _add_remove_plan(p, U, eps_total, ctx, ledger)
            planned_users = plan["lower_bound"]
            kw.update(n_shards=plan["shards"], committee=plan["committee"])
            if eps_count:
                spent.append(eps_count)
            if plan["dp_shard_size"] > plan["committee"]:
                warnings.append("the DP shard size exceeds the planned committee per shard: the noise is weaker")
            ctx.record_evaluation(users=U, clients_notes=list(clients.notes), lower_bound_held=U >= planned_users)
        elif private:
            _note_clients(ledger, "and, through Eq. 7, the epsilon schedule" if schedule != "fixed" else "")
        eps_rem = _last_share(spent, eps_total) if private else eps_total
        eps_sub = eps_rem  # what the sub-queries share (epsilon less the client count's)
        server_view_eps: list[float] = []
        shard_eval: list[dict] = []
        grew = True
        diag_levels: list[dict] = []
        extra_levels: list[dict] = []
        sizes: list[int] = []
        eff_total = math.fsum(spent)  # the client count's epsilon (add/remove), then each sub-query's
        final = None
        for q in range(max_levels):
            ctx.check_cancelled()
            ctx.progress(q / max_levels, f"clients answer sub-query {q + 1} of at most {max_levels}")
            rep = tree.reporting()
            T = int(rep.size)
            size = 2 * T if prop else T
            d = min(size, int(p["max_locations"])) if (clients.multi and p["max_locations"]) else size
            sens = gamma + d if clients.multi else 1
            forced_last = q == max_levels - 1 or not grew
            sig_t = None
            if private:
                if schedule == "fixed":
                    eps_tilde = eps_sub / max_levels
                else:
                    sig_t = sigma_target(schedule, float(p["c"]), planned_users, size, int(p["secagg_shard"]))
                    eps_tilde = eps_for_std(gamma * sig_t, sens)
                if forced_last:
                    last = True
                else:
                    _, last = schedule_epsilon(eps_rem, eps_tilde, float(p["b"]))
                eps_q = _last_share(spent, eps_total) if last else eps_tilde
                spent.append(eps_q)
                eps_rem = _last_share(spent, eps_total)
                if eps_q <= 0:
                    raise EngineError("the privacy budget ran out before the final sub-query (internal error)")
            else:
                eps_q, eps_tilde, last = None, math.inf, forced_last

            lut = paint_lut(rep, D)
            signal = None
            if clients.remote is not None:  # out of core: each partition's task sums its clients' vectors
                ent_c = ent_k = ent_v = None
                signal = clients.remote.signal(lut, size)
            elif clients.multi:
                ent_c, ent_k, ent_v = encode_multi(
                    ctx.rng, clients.row_client, lut[clients.row_code], clients.row_weight, size, gamma
                )
            else:
                ent_c = np.arange(U)
                ent_k = lut[clients.code].astype(np.int64)
                if prop:
                    ent_k = ent_k + T * clients.flag.astype(np.int64)
                ent_v = None
            ss = secure_sum(ctx, ent_c, ent_k, ent_v, U, size, eps_q, sens, signal=signal, **kw)
            values = ss.total.astype(np.float64) / gamma
            noise_sd = ss.noise_std / gamma  # per coordinate, in users
            if prop:
                n0, n1 = values[:T], values[T:]
                counts = n0 + n1
                count_sd = math.sqrt(2.0) * noise_sd
            else:
                n0 = n1 = None
                counts = values
                count_sd = noise_sd
            # Eq. 6 threshold
            if p["threshold_rule"] == "adaptive" and private:
                t = float(p["k"]) * math.sqrt(ss.alpha_total) * dl_std(max(eps_q, eps_rem), sens) / gamma
                if prop:
                    t *= math.sqrt(2.0)
            else:
                t = float(p["fixed_threshold"])
            t_collapse = max(float(p["collapse_min"]), t / 4.0)
            if private:
                eff_total += ss.effective_epsilon
                _spend(
                    ledger,
                    f"sub-query {q + 1}: counts of {size} cells",
                    eps_q,
                    ss,
                    f"discrete Laplace via Pólya shares, sensitivity {sens}, {ss.shard_sizes.size} disjoint "
                    f"SecAgg shard(s) (parallel within the sub-query)"
                    + (
                        f"; add/remove user: a committee of {ss.committee:,} clients per shard adds the shares"
                        if addrem
                        else ""
                    ),
                )
            ci = None
            if prop:
                ci = proportion_ci(n0, n1, noise_sd**2, float(p["ci_level"]))
            level_diag = {
                "subquery": q + 1,
                "T": T,
                "vector_length": size,
                "epsilon": None if eps_q is None else float(eps_q),
                "epsilon_planned": None if not math.isfinite(eps_tilde) else float(eps_tilde),
                "sigma_target": sig_t,
                "sensitivity": int(sens),
                "noise_std": float(count_sd),
                "threshold": float(t),
                "collapse_threshold": float(t_collapse),
                "max_node_level": int(node_level(rep).max()),
                "last": bool(last),
            }
            if addrem:  # what follows from the exact U goes to the evaluation
                public, own = _shard_diag_public(ss)
                level_diag.update(public)
                shard_eval.append(own)
                server_view_eps.append(ss.server_epsilon)
            else:
                level_diag.update(_shard_diag(ss))
            sizes.append(size)
            extra = {
                "node_ids": rep,
                "node_level": node_level(rep).astype(np.int8),
                "counts": counts,
                "rects": node_rects(rep, domain),
                "threshold": float(t),
                "epsilon": None if eps_q is None else float(eps_q),
            }
            if prop:
                extra["positive"] = n1
            if last:
                level_diag.update({"splits": 0, "collapses": 0, "added": 0})
                diag_levels.append(level_diag)
                extra_levels.append(extra)
                final = (tree, rep, lut, counts, ci, noise_sd, n1)
                break
            can_split = None
            force = None
            if prop and p["split_on"] == "ci_width":
                width = ci[2] - ci[1]
                can_split = width <= float(p["max_ci_width"]) / 2.0
                force = width > float(p["max_ci_width"])
            counts_for_update = counts if force is None else np.where(force, -np.inf, counts)
            tree, info = tree.update(rep, counts_for_update, t, t_collapse, can_split)
            grew = info["added"] > 0
            level_diag.update(info)
            diag_levels.append(level_diag)
            extra_levels.append(extra)
        ctx.progress(0.95, "rebuilding the heatmap")

        tree_q, rep, lut, counts, ci, noise_sd, n1 = final
        density = rebuild_density(lut, counts, D)
        bits = _bits(p)
        total_elems = int(sum(sizes))
        comm = Communication(
            float(total_elems),
            float(total_elems * bits),
            rounds=len(sizes),
            note=(
                f"vector lengths summed over {len(sizes)} sub-queries (Table 1): {', '.join(map(str, sizes))}; "
                f"{bits}-bit SecAgg words"
                + ("" if addrem else f"; all clients together upload {U * total_elems:,} elements")
            ),
        )
        diag = {
            "levels": diag_levels,
            "subqueries": len(sizes),
            "users": U,
            "final_cells": int(rep.size),
            "final_max_level": int(node_level(rep).max()),
            "communication_per_subquery": sizes,
            "communication_per_client": total_elems,
            "communication_all_clients": U * total_elems,
            "schedule": schedule,
            "threshold_rule": p["threshold_rule"],
            "multi_location": bool(clients.multi),
            "gamma": gamma,
        }
        if addrem:
            del diag["users"], diag["communication_all_clients"]
            diag["clients_plan"] = plan
            ctx.record_evaluation(
                communication_all_clients=U * total_elems,
                shards_by_subquery=shard_eval,
                # the server's own view of the sub-queries, composed (it knows the count exactly)
                server_view_epsilon=math.fsum(server_view_eps),
            )
        if private:
            diag["epsilon_spent"] = ledger.total()
            diag["effective_epsilon"] = eff_total
            w = _degradation_warning(eff_total, eps_total)
            if w:
                warnings.append(w)
        diag["warnings"] = warnings
        extras = {
            "levels": extra_levels,
            "tree": {
                "node_ids": tree_q.nodes,
                "reporting": rep,
                "counts": counts,
                "depth": D,
                "id_encoding": "(1 << 2*level) | quadtree path (x bit then y bit per level, MSB first)",
            },
        }
        # issue 16: the final counts carry fresh noise, drawn after the tree was fixed, so their SE given the
        # released tree is the Pólya sum's (ss: the last sub-query's sum). Not with several locations per user:
        # their stochastic rounding adds a data-dependent variance
        if private and not clients.multi:
            extras.update(_stderr_extras(ss, p, noise_sd * (math.sqrt(2.0) if prop else 1.0), lut, D))
            diag["stderr_basis"] = "the final sub-query's Pólya noise per node, spread over the node's cells"
        if ci is not None:
            rate, lo, hi, nn = ci
            extras["proportion"] = {
                "rate": rate,
                "ci_low": lo,
                "ci_high": hi,
                "n": nn,
                "positive": n1,
                "level": float(p["ci_level"]),
            }
            pix = lut[morton_of_pixels(D)]
            extras["rate_grid"] = rate[pix].astype(np.float32)
            extras["ci_width_grid"] = (hi - lo)[pix].astype(np.float32)
            diag["mean_ci_width"] = float(np.mean(hi - lo))
            diag["mean_ci_width_weighted"] = float(np.sum((hi - lo) * nn) / np.sum(nn))
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=comm,
            server_view=self._view(),
            partition=node_rects(rep, domain),
            diagnostics=diag,
            extras=extras,
        )

    dp_outputs = (
        "levels",
        "subqueries",
        "final_cells",
        "final_max_level",
        "communication_per_subquery",
        "communication_per_client",
        "tree",
        "proportion",
        "rate_grid",
        "ci_width_grid",
        "mean_ci_width",
        "mean_ci_width_weighted",
        "epsilon_spent",
        "ledger",
        "communication",
        "stderr",
        "stderr_cells",
        "clients_plan",
    )
    side_information_keys = ("users", "communication_all_clients", "effective_epsilon", "warnings")

    def _view(self) -> ServerView:
        return aggregate_view(VIEW_DISTRIBUTED)


def level_density(release: Release, index: int) -> np.ndarray:
    """Heatmap of sub-query ``index`` from ``release.extras['levels']`` (for the
    dashboard's level slider): each node's count spread over its exclusive pixels."""
    lv = release.extras["levels"][index]
    D = release.domain.depth
    return rebuild_density(paint_lut(lv["node_ids"], D), lv["counts"], D)


@register
class HHFixedEpsilon(AdaptiveHH):
    """Table 3, row "Fixed epsilon, non-adaptive (T = 10)" (Bagdasaryan et al. 2022,
    Appendix A): the interactive algorithm with the budget split evenly over
    ``max_levels`` sub-queries and a fixed split threshold of 10 users. Same
    protocol, threat model and guarantee as ``adaptive_hh`` (see its docstring
    for departures); if the tree stops growing early, the final sub-query spends
    what is left."""

    key = "hh_fixed_eps"
    label = "Interactive HH, fixed epsilon per level, T = 10 (Table 3)"
    summary = "The interactive quadtree with epsilon/levels per round and a constant split threshold of 10."
    equations = "Appendix A, Table 3; Algorithms 1-2 without Eqs. 6-9"
    params = _with_defaults(AdaptiveHH.params, schedule="fixed", threshold_rule="fixed")


@register
class HHScheduledFixedThreshold(AdaptiveHH):
    """Table 3, row "Scheduled epsilon, non-adaptive (T = 10)" (Bagdasaryan et al.
    2022, Appendix A): the epsilon schedule of Eqs. 7-9 with a fixed split
    threshold of 10 users instead of Eq. 6. Otherwise as ``adaptive_hh``."""

    key = "hh_scheduled_fixed_t"
    label = "Interactive HH, scheduled epsilon, T = 10 (Table 3)"
    summary = "The interactive quadtree with the paper's epsilon schedule but a constant split threshold of 10."
    equations = "Appendix A, Table 3; Eqs. 7-9 without Eq. 6"
    params = _with_defaults(AdaptiveHH.params, threshold_rule="fixed")


@register
class HHInteractiveNonPrivate(AdaptiveHH):
    """Table 3, row "No noise (T = 10, epsilon = inf)" (Bagdasaryan et al. 2022,
    Appendix A): the interactive tree refinement with exact counts (no noise,
    no budget) and a split threshold of 10 users; it stops when nothing splits
    or after ``max_levels`` rounds. NOT private: clients still send one-hot
    vectors through secure aggregation, so the server learns the exact counts
    of the tree's cells."""

    key = "hh_interactive_nonprivate"
    label = "Interactive HH without noise, T = 10 (Table 3)"
    family = "none"
    guarantee = "none (exact aggregate counts)"
    neighbouring = "none"
    threat_model = "The server sees exact counts per tree cell (secure aggregation hides individual vectors)."
    summary = "The interactive quadtree with exact counts: the communication and error floor of the method."
    equations = "Appendix A, Table 3"
    uses_epsilon = False
    private = False
    params = tuple(
        p
        for p in _with_defaults(AdaptiveHH.params, threshold_rule="fixed")
        if p.name
        not in ("schedule", "c", "b", "k", "threshold_rule", "planned_dropout", "dp_shard", "dropout_policy")
        + RELATION_PARAMS
    )

    def run(self, data, domain, epsilon, params, ctx):
        full = {
            "schedule": "fixed",
            "c": 0.1,
            "b": 2.0,
            "k": 2.0,
            "threshold_rule": "fixed",
            "planned_dropout": 0.0,
            "dp_shard": 0,
            "dropout_policy": "release",
        }
        full.update(params)
        return super().run(data, domain, epsilon, full, ctx)

    def _view(self) -> ServerView:
        return aggregate_view("The server sees exact (noise-free) counts per tree cell; no differential privacy.")


# ============================================================ non-private level
def _level_lut(depth: int, level: int) -> np.ndarray:
    """``paint_lut`` of the complete raster at ``level``: each full-depth Morton code's cell there."""
    return (np.arange(4**depth, dtype=np.int64) >> (2 * (depth - level))).astype(np.int32)


def _pixel_codes_at(depth: int, level: int) -> np.ndarray:
    return morton_of_pixels(depth) >> (2 * (depth - level))


def _clients_weighted(data, domain, rng) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(codes, weights, users): per-user normalised weights when users have several rows."""
    c = prepare_clients(data, domain, rng, multi_location="normalise")
    if c.multi:
        return c.row_code, c.row_weight, c.n
    return c.code, None, c.n


@register
class NonPrivateLevel(Mechanism):
    """Non-private baseline of Bagdasaryan et al. 2022, Section 6.2 (Table 1,
    "Non-private"): users report their locations in the clear (2 coordinates)
    and the server builds the histogram of one quadtree level, spread uniformly
    over the pixels of each cell. The paper picks the level with the best error
    against the ground truth (an oracle); ``level = 0`` here picks it by 2-fold
    cross-validation on the reports (the level whose half-sample map best
    predicts the other half's full-resolution map, normalised, squared error),
    which needs no ground truth; the benchmark also reports the oracle choice
    by sweeping ``level``. Users with several locations count with total weight
    one each. Threat model: the server sees every location (no privacy)."""

    key = "nonprivate_level"
    label = "Non-private, best quadtree level (Table 1)"
    family = "none"
    guarantee = "none"
    neighbouring = "none"
    threat_model = "The server sees every user's location in the clear."
    summary = "Exact histogram at the quadtree level that best trades resolution against sampling error."
    paper = PAPER
    equations = "Section 6.2 (non-interactive non-private baseline)"
    uses_epsilon = False
    params = (
        Param(
            "level",
            "int",
            0,
            "quadtree level of the histogram (2^l cells per side); 0 = choose by 2-fold cross-validation",
            min=0,
            max=10,
        ),
    )
    dp_outputs = ("level", "cv_error_by_level", "users")

    def run(self, data, domain, epsilon, params, ctx):
        D = domain.depth
        codes, w, U = _clients_weighted(data, domain, ctx.rng)
        counts_d = np.bincount(codes, weights=w, minlength=4**D).astype(np.float64)
        level = int(params["level"])
        cv = None
        if level == 0:
            level, cv = self.cross_validate(codes, w, D, ctx.rng)
        level = min(level, D)
        block = 4 ** (D - level)
        counts_l = counts_d.reshape(-1, block).sum(axis=1)
        density = counts_l[_pixel_codes_at(D, level)] / block
        ids = make_ids(np.arange(4**level), level)
        diag = {"level": level, "users": U, "level_choice": "cross-validation" if cv is not None else "given"}
        if cv is not None:
            diag["cv_error_by_level"] = cv
        return Release(
            density=density,
            domain=domain,
            ledger=Ledger(),
            communication=Communication(2.0, 64.0, note="each user sends its location (2 x 32-bit coordinates)"),
            server_view=ServerView("clear", "The server sees every user's location in the clear."),
            partition=node_rects(ids, domain) if level <= 7 else None,
            diagnostics=diag,
        )

    @staticmethod
    def cross_validate(codes, w, D, rng) -> tuple[int, list[float]]:
        half = rng.random(codes.size) < 0.5
        a = np.bincount(codes[half], weights=None if w is None else w[half], minlength=4**D).astype(np.float64)
        b = np.bincount(codes[~half], weights=None if w is None else w[~half], minlength=4**D).astype(np.float64)
        if a.sum() <= 0 or b.sum() <= 0:
            return D, []
        a /= a.sum()
        b /= b.sum()
        errs = []
        for lv in range(D + 1):
            block = 4 ** (D - lv)
            up = np.repeat(a.reshape(-1, block).sum(axis=1) / block, block)
            errs.append(float(np.sum((up - b) ** 2)))
        return int(np.argmin(errs)), errs


# ================================================================ flat one-hot
def _distributed_params(extra: tuple[Param, ...] = ()) -> tuple[Param, ...]:
    return extra + _secagg_params()


def _single_location_codes(data, domain, rng) -> tuple[np.ndarray, int, list[str]]:
    c = prepare_clients(data, domain, rng, multi_location="most_visited")
    return _single_codes(c), c.n, c.notes


def _distributed_release(
    density, domain, ledger, elements, p, rounds, note, diag, partition=None, extras=None, warnings=()
) -> Release:
    bits = _bits(p)
    diag = dict(diag)
    diag["warnings"] = list(warnings)
    if "stderr" in (extras or {}):  # issue 16
        diag.setdefault("stderr_basis", "the Pólya sum's noise per released cell, spread over its pixels")
    return Release(
        density=density,
        domain=domain,
        ledger=ledger,
        communication=Communication(float(elements), float(elements * bits), rounds=rounds, note=note),
        server_view=aggregate_view(VIEW_DISTRIBUTED),
        partition=partition,
        diagnostics=diag,
        extras=extras or {},
    )


@register
class FlatOneHot(Mechanism):
    """Flat one-hot encoding (Bagdasaryan et al. 2022, Section 5.1; Table 1 "Flat"):
    Algorithm 1 applied once to a uniform raster (by default the full resolution,
    4^D coordinates). Each client sends its one-hot cell plus Pólya shares
    through SecAgg shards; one sub-query with the whole budget, sensitivity 1.
    Threat model and guarantee as ``adaptive_hh`` (aggregate-only server,
    epsilon-DP). Users with several locations report their most visited cell.
    Standard error (issue 16): the Pólya sum's standard deviation per raster cell over its
    pixels, exact and data-independent (``_stderr_extras``; none with dropouts or wrapping)."""

    key = "flat_onehot"
    label = "Flat one-hot (distributed DP, Table 1)"
    family = "distributed"
    guarantee = "epsilon-DP under zero-out user, the number of clients U public (distributed, Pólya shares + SecAgg)"
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    summary = "Every user sends a noisy one-hot vector over all cells of a fixed grid."
    paper = PAPER
    equations = "Section 5.1 (flat one-hot), Algorithm 1, Theorem 4.1"
    params = _distributed_params(
        (Param("level", "int", 0, "raster level (2^l cells per side); 0 = full resolution", min=0, max=10),)
    )
    dp_outputs = ("overflowed_coordinates", "stderr", "stderr_cells")
    side_information_keys = (
        "stderr",
        "shards",
        "shard_size_max",
        "dp_shard_size",
        "survivors_min",
        "alpha_min",
        "shards_withheld",
        "noise_alpha_total",
        "effective_epsilon",
        "verified_shards",
        "aggregation_path",
        "warnings",
        "users",
        "communication",
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        D = domain.depth
        level = int(params["level"]) or D
        level = min(level, D)
        codes, U, notes = _single_location_codes(data, domain, ctx.rng)
        _check_secagg(params, U)
        keys = codes >> (2 * (D - level))
        ss = secure_sum(ctx, np.arange(U), keys, None, U, 4**level, eps, 1, **_secagg_kwargs(params))
        block = 4 ** (D - level)
        density = ss.total.astype(np.float64)[_pixel_codes_at(D, level)] / block
        ledger = Ledger()
        _note_clients(ledger)
        _spend(ledger, "one-hot counts", eps, ss, "discrete Laplace via Pólya shares, sensitivity 1")
        diag = {"level": level, "users": U}
        diag.update(_shard_diag(ss))
        w = _degradation_warning(ss.effective_epsilon, eps)
        return _distributed_release(
            density,
            domain,
            ledger,
            4**level,
            params,
            1,
            f"one vector of 4^{level} = {4**level:,} elements",
            diag,
            extras=_stderr_extras(ss, params, ss.noise_std, _level_lut(D, level), D),
            warnings=notes + ([w] if w else []),
        )


# ============================================================ hierarchical ones
def _selection_params() -> tuple[Param, ...]:
    return (
        Param(
            "selection",
            "choice",
            "threshold",
            "how the server picks a resolution per region: 'threshold' = descend into a cell's children while its "
            "noisy count exceeds the threshold (post-processing); 'level' = use one level everywhere",
            choices=("threshold", "level"),
        ),
        Param("level", "int", 0, "level used when selection = 'level' (0 = the deepest)", min=0, max=10),
        Param(
            "threshold",
            "float",
            0.0,
            "split threshold in users for the selection; 0 = k x the noise standard deviation",
            min=0.0,
            max=1e6,
        ),
        Param(
            "k",
            "float",
            4.0,
            "k of the automatic threshold (noise standard deviations); large k limits refinements caused by noise "
            "alone among the many deep cells",
            min=0.1,
            max=50.0,
        ),
        Param("first_level", "int", 1, "coarsest level reported (the paper: 1, i.e. 2x2)", min=0, max=10),
    )


def _select_top_down(level_counts: dict, first: int, D: int, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Leaves of a complete quadtree chosen top-down: a cell is replaced by its four
    children while its noisy count exceeds ``t``. ``level_counts[l](codes)`` returns
    the level-l estimates. Returns (node ids, values)."""
    ids, vals = [], []
    cur = np.arange(4**first, dtype=np.int64)
    for lv in range(first, D + 1):
        c = level_counts[lv](cur)
        refine = (c > t) & (lv < D)
        ids.append(make_ids(cur[~refine], lv))
        vals.append(c[~refine])
        cur = ((cur[refine][:, None] << 2) | np.arange(4, dtype=np.int64)).ravel()
        if cur.size == 0:
            break
    return np.concatenate(ids), np.concatenate(vals)


def _leaves_release_density(ids, vals, D):
    order = np.argsort(ids)
    ids, vals = ids[order], vals[order]
    lut = paint_lut(ids, D)
    return rebuild_density(lut, vals, D), ids


class _HierarchicalBase(Mechanism):
    family = "distributed"
    guarantee = (
        "epsilon-DP under zero-out user, the number of clients U public (distributed, Pólya shares + SecAgg; "
        "epsilon split evenly over levels)"
    )
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    paper = PAPER
    dp_outputs = ("threshold", "cells", "level_counts", "sketches", "stderr", "stderr_cells")
    side_information_keys = ("users", "effective_epsilon", "warnings", "noise_std", "threshold", "stderr")

    def _levels(self, params, D):
        first = min(int(params["first_level"]), D)
        return first, list(range(first, D + 1))

    def _choose(self, params, D, first, estimators, noise_sd):
        if params["selection"] == "level":
            lv = int(params["level"]) or D
            lv = min(max(lv, first), D)
            codes = np.arange(4**lv, dtype=np.int64)
            return make_ids(codes, lv), estimators[lv](codes), None
        t = float(params["threshold"]) or float(params["k"]) * noise_sd
        ids, vals = _select_top_down(estimators, first, D, t)
        return ids, vals, t


@register
class HierarchicalOneHot(_HierarchicalBase):
    """Hierarchical one-hot encoding (Bagdasaryan et al. 2022, Section 5.1; Table 1
    "Hierarchical"): every client reports a one-hot vector at every level
    ``first_level..D`` (2x2 up to 2^D x 2^D: 1,398,100 elements for D = 10) with
    epsilon/L per level (L levels, sequential composition), through the same
    Pólya-share SecAgg. The server picks a resolution per region: the paper uses
    the split with the lowest error against the ground truth (an oracle, which
    the benchmark reproduces by sweeping ``selection = level``); the default here
    is a DP post-processing rule, descending into a cell's children while its
    noisy count exceeds k noise standard deviations. Each level is simulated as
    its own secure sum (the same law as one appended vector).

    Standard error (issue 16): with ``selection = 'level'`` the Pólya sum's standard deviation
    of that level's cells over their pixels, exact (``_stderr_extras``). None with the
    threshold rule: a coarse cell is released because its own noisy count fell below the
    threshold, so given the chosen leaves its noise is a truncated draw, not the Pólya law."""

    key = "hierarchical_onehot"
    label = "Hierarchical one-hot (distributed DP, Table 1)"
    summary = "One noisy one-hot vector per quadtree level (epsilon split evenly); the server picks resolutions."
    equations = "Section 5.1 (hierarchical one-hot), Algorithm 1"
    params = _selection_params() + _secagg_params()

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        D = domain.depth
        first, levels = self._levels(params, D)
        codes, U, notes = _single_location_codes(data, domain, ctx.rng)
        _check_secagg(params, U)
        L = len(levels)
        eps_l = eps / L
        ledger = Ledger()
        _note_clients(ledger)
        noisy: dict[int, np.ndarray] = {}
        sums = {}
        eff = 0.0
        sd = 0.0
        for i, lv in enumerate(levels):
            ctx.check_cancelled()
            ctx.progress(i / L, f"clients report tree level {lv} ({i + 1} of {L})")
            ss = secure_sum(
                ctx, np.arange(U), codes >> (2 * (D - lv)), None, U, 4**lv, eps_l, 1, **_secagg_kwargs(params)
            )
            noisy[lv] = ss.total.astype(np.float64)
            sums[lv] = ss
            eff += ss.effective_epsilon
            sd = ss.noise_std
            _spend(ledger, f"level {lv} one-hot", eps_l, ss, "discrete Laplace via Pólya shares, sensitivity 1")
        est = {lv: (lambda c, v=noisy[lv]: v[c]) for lv in levels}
        ids, vals, t = self._choose(params, D, first, est, sd)
        density, ids = _leaves_release_density(ids, vals, D)
        extras = {"level_counts": noisy}  # noisy counts per level, Morton order (for oracle sweeps)
        if params["selection"] == "level":  # issue 16: one level, released whatever its values
            lv = int(node_level(ids[:1])[0])
            extras.update(_stderr_extras(sums[lv], params, sums[lv].noise_std, _level_lut(D, lv), D))
        elements = sum(4**lv for lv in levels)
        diag = {"levels": levels, "users": U, "threshold": t, "cells": int(ids.size), "noise_std": sd}
        diag["effective_epsilon"] = eff
        w = _degradation_warning(eff, eps)
        return _distributed_release(
            density,
            domain,
            ledger,
            elements,
            params,
            1,
            f"one-hot vectors of every level {first}..{D} appended: {elements:,} elements",
            diag,
            partition=node_rects(ids, domain) if ids.size <= 200_000 else None,
            extras=extras,
            warnings=notes + ([w] if w else []),
        )


_MERSENNE31 = (1 << 31) - 1


@register
class CountMinHierarchical(_HierarchicalBase):
    """Count-min sketch hierarchical encoding (Bagdasaryan et al. 2022, Section 5.1;
    Table 1 "CM-sketch based"): per level a count-min sketch of ``depth`` rows and
    ``width`` columns (Cormode-Muthukrishnan; pairwise-independent hashes
    ``((a x + b) mod (2^31 - 1)) mod width`` drawn from the run's seed, public)
    replaces the one-hot vector; a client adds 1 in every row, so the level's L1
    sensitivity is ``depth``; epsilon/L per level; Pólya-share SecAgg as the
    other baselines. Cell estimates are the median (default) or the minimum over
    rows; resolutions are chosen as in ``hierarchical_onehot``. The public
    reference code for this baseline is broken (REFERENCE_NOTES 1); this is
    re-derived from the paper's description (depth 20, width 2,000).

    Estimator (the paper does not name one): the minimum over rows is count-min's
    estimate for counters that only grow, where every row over-counts (Cormode &
    Muthukrishnan 2005, Section 4.1, Theorem 1). DP noise moves every counter down as
    well as up, and the minimum of ``depth`` noisy rows is then biased by the expected
    minimum of the noise, about -2 noise standard deviations for 20 rows, in every
    cell. The deep cells that the split threshold opens at large epsilon lose their
    mass, and the normalised map piles onto the few hot cells, so the error rose with
    epsilon (issue 22: street grid with hot venues, 20k users, 256²: 0.99x, 1.7x, 4.2x
    a uniform map's MSE at eps 1, 3, 10; at eps 10 the released cells summed to -500
    for 20,000 users, 5,950 positive and -6,451 negative, and the 10 hottest cells got
    2.65x their share). Hash collisions at width 2,000 are not the cause: with the same
    sketches the median gives 0.99x, 0.23x, 0.017x. For counters that can decrease the
    same paper estimates by the median of the rows (Section 4.1, Theorem 2, the general
    case), which the symmetric noise leaves unbiased up to the collisions' median; it is
    the default. ``estimator = 'min'`` keeps the former default."""

    key = "cms_hierarchical"
    label = "Count-min sketch hierarchical (distributed DP, Table 1)"
    summary = "One noisy count-min sketch per quadtree level instead of a one-hot vector."
    equations = "Section 5.1 (CM sketch hierarchical encoding), Algorithm 1"
    params = (
        (
            Param("depth", "int", 20, "count-min rows (hash functions); the L1 sensitivity per level", min=1, max=64),
            Param("width", "int", 2000, "count-min columns per row", min=16, max=1_000_000, log=True),
            Param(
                "estimator",
                "choice",
                "median",
                "cell estimate from the rows: 'median' (unbiased under the symmetric DP noise: count-min's estimate "
                "when counters can decrease) or 'min' (count-min for growing counters; biased down by about 2 noise "
                "standard deviations per cell under DP, so its error can rise with epsilon)",
                choices=("min", "median"),
            ),
        )
        + _selection_params()
        + _secagg_params()
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        D = domain.depth
        first, levels = self._levels(params, D)
        codes, U, notes = _single_location_codes(data, domain, ctx.rng)
        _check_secagg(params, U)
        dep, wid = int(params["depth"]), int(params["width"])
        L = len(levels)
        eps_l = eps / L
        ledger = Ledger()
        _note_clients(ledger)
        sketches: dict[int, np.ndarray] = {}
        hashes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        eff, sd = 0.0, 0.0
        rows = np.arange(dep, dtype=np.int64)
        for i, lv in enumerate(levels):
            ctx.check_cancelled()
            ctx.progress(i / L, f"clients report tree level {lv} ({i + 1} of {L})")
            a = ctx.rng.integers(1, _MERSENNE31, dep, dtype=np.int64)
            b = ctx.rng.integers(0, _MERSENNE31, dep, dtype=np.int64)
            hashes[lv] = (a, b)
            ids = make_ids(codes >> (2 * (D - lv)), lv)  # < 2^21, so a*x < 2^52
            col = ((a[None, :] * ids[:, None] + b[None, :]) % _MERSENNE31) % wid
            key = (rows[None, :] * wid + col).ravel()
            client = np.repeat(np.arange(U), dep)
            ss = secure_sum(ctx, client, key, None, U, dep * wid, eps_l, dep, **_secagg_kwargs(params))
            sketches[lv] = ss.total.astype(np.float64).reshape(dep, wid)
            eff += ss.effective_epsilon
            sd = ss.noise_std
            _spend(ledger, f"level {lv} count-min sketch", eps_l, ss, f"discrete Laplace, sensitivity {dep} (rows)")
        reduce = np.min if params["estimator"] == "min" else np.median

        def estimator(lv):
            def f(c):
                a, b = hashes[lv]
                ids = make_ids(c, lv)
                out = np.empty(c.size)
                for s in range(0, c.size, 65536):  # bounded memory for the deepest levels
                    x = ids[s : s + 65536]
                    col = ((a[None, :] * x[:, None] + b[None, :]) % _MERSENNE31) % wid
                    out[s : s + 65536] = reduce(sketches[lv][rows[None, :], col], axis=1)
                return out

            return f

        est = {lv: estimator(lv) for lv in levels}
        ids, vals, t = self._choose(params, D, first, est, sd)
        density, ids = _leaves_release_density(ids, vals, D)
        elements = L * dep * wid
        diag = {"levels": levels, "users": U, "threshold": t, "cells": int(ids.size), "noise_std": sd}
        diag["effective_epsilon"] = eff
        w = _degradation_warning(eff, eps)
        return _distributed_release(
            density,
            domain,
            ledger,
            elements,
            params,
            1,
            f"{L} count-min sketches of {dep} x {wid}: {elements:,} elements",
            diag,
            partition=node_rects(ids, domain) if ids.size <= 200_000 else None,
            extras={"sketches": sketches, "hashes": hashes, "estimator": params["estimator"]},
            warnings=notes + ([w] if w else []),
        )


def cms_level_estimates(release: Release, level: int) -> np.ndarray:
    """Estimates of every cell of ``level`` (Morton order) from a ``cms_hierarchical``
    release's sketches (post-processing; used for oracle level sweeps)."""
    sk = release.extras["sketches"][level]
    a, b = release.extras["hashes"][level]
    reduce = np.min if release.extras["estimator"] == "min" else np.median
    dep, wid = sk.shape
    rows = np.arange(dep)
    codes = np.arange(4**level, dtype=np.int64)
    out = np.empty(codes.size)
    for s in range(0, codes.size, 65536):
        x = make_ids(codes[s : s + 65536], level)
        col = ((a[None, :] * x[:, None] + b[None, :]) % _MERSENNE31) % wid
        out[s : s + 65536] = reduce(sk[rows[None, :], col], axis=1)
    return out


# ============================================================ adaptive grid (AG)
@register
class AdaptiveGridPolya(Mechanism):
    """Adaptive grid of Qardaji, Yang, Li (ICDE 2013) run under the distributed
    Pólya mechanism (Bagdasaryan et al. 2022, Section 6.2, Table 1 "Adaptive-grid"):
    a first query on an ``m1 x m1`` grid (the paper: 10 x 10) with ``alpha eps``;
    each first-level cell with noisy count N' is split into ``m2 x m2`` with
    ``m2 = ceil(sqrt(N' (1 - alpha) eps / c2))`` (the paper: alpha = 0.5, c2 = 10)
    and the second query, a one-hot vector over all sub-cells, uses the rest.
    Both queries use Pólya shares and SecAgg shards (sensitivity 1). Optional
    constrained inference between the levels (Qardaji et al. Section IV-B) with
    the two levels' actual noise variances. Communication: m1^2 + sum m2^2 elements.
    Threat model and guarantee as ``adaptive_hh``; departures: the first-level size is
    fixed (or Qardaji's rule with the public number of users); m1 and every m2 are
    snapped to the power of two nearest in ratio that divides the output resolution
    (``central.snap_to_divisor``: the paper's m1 = 10 and the minimum 10 of Qardaji's rule
    become 8, within a factor sqrt 2 as every snapped size), so every cell is a block of
    whole output pixels and its count lands exactly on them (spreading cells that
    straddle pixels by area smeared single-pixel
    hot spots into their neighbours, as for the central ``ag``); m2 is capped so
    sub-cells are no finer than output pixels; N' <= 0 gives m2 = 1.

    Standard error (issue 16): with ``consistency`` off, the second query's Pólya standard
    deviation per sub-cell over its pixels, exact given the released sub-grid (its noise is
    drawn after m2 is fixed; ``_stderr_extras``). None with consistency (the default): m2 is
    chosen from the first-level count the inference reuses (see the central ``ag``)."""

    key = "ag_polya"
    label = "Adaptive grid (Qardaji et al.) with Pólya noise (Table 1)"
    family = "distributed"
    guarantee = "epsilon-DP under zero-out user, the number of clients U public (distributed, Pólya shares + SecAgg)"
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    summary = "Two rounds: a coarse noisy grid, then each cell split according to its noisy count."
    paper = PAPER + "; Qardaji, Yang, Li. Differentially private grids for geospatial data. ICDE 2013"
    equations = "Section 6.2 (adaptive grid baseline); Qardaji et al. Section IV"
    params = (
        Param(
            "m1",
            "int",
            10,
            "first-level grid side (the paper: 10), snapped to the nearest power of two dividing the resolution; "
            "0 = Qardaji's max(10, sqrt(U eps / c)/4)",
            min=0,
            max=1024,
        ),
        Param("alpha", "float", 0.5, "share of epsilon spent on the first level", min=0.05, max=0.95),
        Param("c", "float", 10.0, "constant c of Qardaji's first-level rule (m1 = 0)", min=0.1, max=1000.0, log=True),
        Param("c2", "float", 10.0, "constant c2 of the second level (the paper: 10)", min=0.1, max=1000.0, log=True),
        Param("consistency", "bool", True, "constrained inference between the two levels"),
    ) + _secagg_params()
    dp_outputs = ("m2_min", "m2_max", "second_level_cells", "stderr", "stderr_cells")
    side_information_keys = ("m1", "users", "effective_epsilon", "warnings", "stderr", "stderr_cells")

    def run(self, data, domain, epsilon, params, ctx):
        from ..central import ag_level1_size, ag_level2_sizes, ag_subcell_rects, snap_to_divisor, spread_rects

        eps = _check_eps(epsilon)
        alpha = float(params["alpha"])
        eps1 = alpha * eps
        eps2 = eps - eps1
        while eps1 + eps2 > eps:
            eps2 = math.nextafter(eps2, 0.0)
        c = prepare_clients(data, domain, ctx.rng, multi_location="most_visited")
        U = c.n
        _check_secagg(params, U)
        xy = self._client_points(c, domain)
        n = domain.n
        if int(params["m1"]):
            m1 = snap_to_divisor(int(params["m1"]), n)
        else:
            m1 = snap_to_divisor(ag_level1_size(U, eps, float(params["c"]), n), n)
        kw = _secagg_kwargs(params)
        s1 = m1 / domain.side
        fx = (xy[:, 0] - domain.x0) * s1
        fy = (xy[:, 1] - domain.y0) * s1
        ix1 = np.clip(fx.astype(np.int64), 0, m1 - 1)
        iy1 = np.clip(fy.astype(np.int64), 0, m1 - 1)
        cell = iy1 * m1 + ix1
        ss1 = secure_sum(ctx, np.arange(U), cell, None, U, m1 * m1, eps1, 1, **kw)
        noisy1 = ss1.total.astype(np.float64)
        m2 = ag_level2_sizes(noisy1, eps2, float(params["c2"]), n // m1, snap=True)
        sizes = m2 * m2
        total_cells = int(sizes.sum())
        offsets = np.zeros(m1 * m1, dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        m2p = m2[cell]
        sx = np.minimum(((fx - ix1) * m2p).astype(np.int64), m2p - 1)
        sy = np.minimum(((fy - iy1) * m2p).astype(np.int64), m2p - 1)
        sub = offsets[cell] + sy * m2p + sx
        ss2 = secure_sum(ctx, np.arange(U), sub, None, U, total_cells, eps2, 1, **kw)
        noisy2 = ss2.total.astype(np.float64)
        owner = np.repeat(np.arange(m1 * m1), sizes)
        est2 = noisy2
        if params["consistency"]:
            v1, v2 = ss1.noise_std**2, ss2.noise_std**2
            u = np.bincount(owner, weights=noisy2, minlength=m1 * m1)
            kv2 = sizes * v2
            v_star = (noisy1 * kv2 + u * v1) / np.maximum(kv2 + v1, 1e-300)
            est2 = noisy2 + ((v_star - u) / sizes)[owner]
        rects = ag_subcell_rects(owner, offsets, m2, m1, n)
        density = spread_rects(rects, est2, n)
        extras = {}
        if not params["consistency"] and _exact_sum(ss2, params):  # issue 16 (sub-cells: blocks of whole pixels)
            inv_cells = spread_rects(rects, np.ones(total_cells), n)  # 1 / the pixels of each pixel's sub-cell
            extras = {"stderr": ss2.noise_std * inv_cells, "stderr_cells": np.rint(1.0 / inv_cells).astype(np.int64)}
        ledger = Ledger()
        _note_clients(
            ledger, "" if int(params["m1"]) else "and Qardaji's first-level size m1 = max(10, sqrt(U eps/c)/4)"
        )
        _spend(ledger, "first-level grid", eps1, ss1, "discrete Laplace via Pólya shares, sensitivity 1")
        _spend(ledger, "second-level grid", eps2, ss2, "discrete Laplace via Pólya shares, sensitivity 1")
        metres = rects * domain.cell
        metres[:, [0, 2]] += domain.x0
        metres[:, [1, 3]] += domain.y0
        eff = ss1.effective_epsilon + ss2.effective_epsilon
        diag = {
            "m1": m1,
            "m2_min": int(m2.min()),
            "m2_max": int(m2.max()),
            "second_level_cells": total_cells,
            "users": U,
            "effective_epsilon": eff,
        }
        w = _degradation_warning(eff, eps)
        return _distributed_release(
            density,
            domain,
            ledger,
            m1 * m1 + total_cells,
            params,
            2,
            f"two sub-queries: {m1 * m1} + {total_cells:,} elements",
            diag,
            partition=metres,
            extras=extras,
            warnings=c.notes + ([w] if w else []),
        )

    @staticmethod
    def _client_points(c: Clients, domain: Domain) -> np.ndarray:
        """Cell centres of the clients' full-depth cells (what the clients encode)."""
        from ...core.grid import deinterleave

        ix, iy = deinterleave(c.code.astype(np.uint64), domain.depth)
        return np.column_stack([domain.x0 + (ix + 0.5) * domain.cell, domain.y0 + (iy + 0.5) * domain.cell])


# ==================================================================== local DP
class _LDPPosterior:
    """The attacker's posterior over grid cells for each user, from that user's
    local report alone (Bayes with a prior: the released estimate or uniform).
    A picklable callable for ``ServerView.candidates``."""

    MAX_CANDIDATES = 4096

    def __init__(self, encoding, centres, prior, p, q, reports=None, cells=None, seed=0):
        self.encoding = encoding
        self.centres = centres
        self.prior = prior
        self.p, self.q = p, q
        self.reports = reports
        self.cells = cells
        self.seed = seed

    def __call__(self, user_idx):
        out = []
        K = self.prior.size
        for u in np.atleast_1d(np.asarray(user_idx, dtype=np.int64)):
            if self.encoding == "krr":
                like = np.full(K, self.q)
                like[self.reports[u]] = self.p
            else:  # OUE: regenerate this user's bit vector from its own seed
                g = np.random.default_rng([self.seed, int(u)])
                bits = g.random(K) < self.q
                bits[self.cells[u]] = g.random() < self.p
                ratio = self.p * (1 - self.q) / (self.q * (1 - self.p))
                like = np.where(bits, ratio, 1.0)
            post = self.prior * like
            s = post.sum()
            post = post / s if s > 0 else np.full(K, 1.0 / K)
            if K > self.MAX_CANDIDATES:
                keep = np.argpartition(post, -self.MAX_CANDIDATES)[-self.MAX_CANDIDATES :]
                out.append((self.centres[keep], post[keep] / post[keep].sum()))
            else:
                out.append((self.centres, post))
        return out


@register
class LocalGridRR(Mechanism):
    """Local-DP comparison (Bagdasaryan et al. 2022, Section 2.2 and Figure 1):
    every user randomises its own grid cell at level ``level`` before sending it,
    with the same epsilon. Encodings: k-ary randomized response (direct
    encoding; keep probability e^eps/(e^eps + K - 1)) or optimized unary
    encoding (Wang et al., USENIX Security 2017; p = 1/2, q = 1/(e^eps + 1)); the
    server unbiases the report counts, ``(c - U q)/(p - q)``. Threat model: the
    server (the attacker) sees every user's report; its view is per user, with
    ``candidates`` giving the Bayesian posterior over cells from one report
    (prior: the released estimate, clipped and normalised, or uniform; at most
    4,096 most likely cells). Guarantee: epsilon-LDP per report. OUE's aggregate
    is drawn exactly as binomial counts; the per-user report shown to the
    attacker is drawn from the same law from a per-user seed. Users with
    several locations report their most visited cell. Secure mode: both
    encodings are drawn exactly on OS entropy (``ctx.noise``; engine.noise).

    Standard error (issue 16): a cell with c of the U users gets ``Bin(c, p) + Bin(U - c, q)``
    reports (one per user for k-RR; for OUE each user's bit of the cell), so the unbiased
    estimate has variance ``U q (1 - q)/(p - q)^2 + c (1 - p - q)/(p - q)``. It depends on the
    true c; ``extras["stderr"]`` plugs in the released estimate clipped at 0 (post-processing of
    the DP output, nothing private read), over the cell's pixels: exact in expectation where the
    estimate is positive, conservative for near-empty cells (by (1 - p - q)/(p - q) x the mean
    of the estimate's negative part, relatively about 0.4 (1 - p - q)/sqrt(U q (1 - q)) for an
    empty cell). ``stderr_cells`` = the pixels of a report cell; k-RR's cells are also slightly
    negatively correlated (one report per user: covariance of order U q^2/(p - q)^2), which a
    sum of cells' variances ignores; OUE's cells are independent."""

    key = "ldp_grid"
    label = "Local DP grid (randomized response / unary encoding)"
    family = "local"
    guarantee = "epsilon-LDP (each report is private on its own): replace user, the number of reports public"
    neighbouring = "replace user"
    dp_outputs = ("stderr",)
    side_information_keys = ("users",)
    threat_model = "Untrusted server: it sees every user's randomised report; no secure aggregation."
    summary = "Each user randomises its own cell before sending it; the server unbiases the counts."
    paper = PAPER + "; Wang, Blocki, Li, Jha. Locally differentially private protocols for frequency estimation. 2017"
    equations = "Section 2.2, Figure 1 (local-DP comparison)"
    params = (
        Param("level", "int", 6, "grid level of the reports (2^l cells per side)", min=1, max=10),
        Param(
            "encoding",
            "choice",
            "krr",
            "'krr': k-ary randomized response (one cell index per user); 'oue': optimized unary encoding "
            "(one bit per cell per user)",
            choices=("krr", "oue"),
        ),
        Param(
            "attacker_prior",
            "choice",
            "release",
            "prior of the attacker's per-user posterior: the released map or uniform over cells",
            choices=("release", "uniform"),
        ),
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        D = domain.depth
        lv = min(int(params["level"]), D)
        K = 4**lv
        codes, U, notes = _single_location_codes(data, domain, ctx.rng)
        cells = codes >> (2 * (D - lv))
        reports = None
        if params["encoding"] == "krr":
            reports = ctx.noise.randomized_response_kary(cells, K, eps)
            est = rr_kary_unbias_counts(np.bincount(reports, minlength=K), U, K, eps)
            p = rr_keep_probability(eps, K)
            q = (1 - p) / (K - 1)
            comm = Communication(1.0, float(2 * lv), note=f"one cell index of {2 * lv} bits")
        else:
            true = np.bincount(cells, minlength=K)
            est = unary_encoding_unbias(ctx.noise.unary_encoding_counts(true, U, eps), U, eps)
            p, q = unary_encoding_pq(eps)
            comm = Communication(float(K), float(K), note=f"one bit per cell: {K:,} bits")
        block = 4 ** (D - lv)
        density = est[_pixel_codes_at(D, lv)] / block
        var = U * q * (1 - q) / (p - q) ** 2 + np.clip(est, 0.0, None) * (1 - p - q) / (p - q)
        stderr = np.sqrt(var)[_pixel_codes_at(D, lv)] / block  # issue 16: plug-in, see the docstring
        ledger = Ledger()
        ledger.spend(
            "local reports", eps, composition="parallel", group="users", note="each user randomises its own report"
        )
        ledger.note_side_information("the number of reports U (the server receives each one; it unbiases the counts)")
        from ...core.grid import deinterleave

        ix, iy = deinterleave(np.arange(K, dtype=np.uint64), lv)
        s = domain.side / (1 << lv)
        centres = np.column_stack([domain.x0 + (ix + 0.5) * s, domain.y0 + (iy + 0.5) * s])
        if params["attacker_prior"] == "release":
            prior = np.clip(est, 0, None)
            prior = prior / prior.sum() if prior.sum() > 0 else np.full(K, 1.0 / K)
        else:
            prior = np.full(K, 1.0 / K)
        seed = int(ctx.rng.integers(0, 2**62))
        post = _LDPPosterior(params["encoding"], centres, prior, p, q, reports=reports, cells=cells, seed=seed)
        view = ServerView(
            "per_user",
            "The server sees each user's randomised report, from which it can tell which cells the user most likely "
            "was in.",
            candidates=post,
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=comm,
            server_view=view,
            partition=None,
            diagnostics={
                "level": lv,
                "cells": K,
                "users": U,
                "p": p,
                "q": q,
                "warnings": notes,
                "stderr_basis": "binomial variance of the unbiased report count, the released estimate (>= 0) "
                "as the cell's count",
            },
            extras={"stderr": stderr, "stderr_cells": block},
        )
