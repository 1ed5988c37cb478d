"""The parameters of the federated heavy-hitter mechanisms (Bagdasaryan et al. 2022): secure
aggregation (shards, dropouts, modular clipping, verification mode), the epsilon schedule of
Eqs. 5-9 and the adaptive threshold, the extensions (several locations per user, proportion
estimation) and the neighbouring relation (zero-out or add/remove user)."""

from __future__ import annotations

from dataclasses import replace

from ...core.params import Param


# ===================================================================== params
def secagg_params() -> tuple[Param, ...]:
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


def schedule_params() -> tuple[Param, ...]:
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


def extension_params() -> tuple[Param, ...]:
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


def relation_params() -> tuple[Param, ...]:
    """Adaptive HH's neighbouring relation and, under add/remove, where the
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
            shown_if=(("relation", "add/remove"),),
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
            shown_if=(("relation", "add/remove"), ("clients_source", "dp_count")),
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
            shown_if=(("relation", "add/remove"), ("clients_source", "dp_count")),
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
            shown_if=(("relation", "add/remove"), ("clients_source", "public_bound")),
        ),
    )


RELATION_PARAMS = tuple(p.name for p in relation_params())


def with_defaults(params: tuple[Param, ...], **defaults) -> tuple[Param, ...]:
    out = []
    for p in params:
        out.append(replace(p, default=defaults[p.name]) if p.name in defaults else p)
    return tuple(out)
