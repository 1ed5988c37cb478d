"""Attribute mean by region: bit-pushing on the map (Cormode, Markov & Srinivas, EDBT 2024).

The domain is cut into regions (the cells of a coarse grid level ``k``, or any
partition given as rectangles, e.g. another mechanism's adaptive partition, via
:func:`region_mean_release`). Every client holds one value of the dataset's
numeric attribute (``value``: age for the synthetic cities, price for Berlin
Airbnb) and reports ONE bit of it (Algorithm 1 or 2 of the paper, per region);
the release is a map of regional means with standard errors. Regions with fewer
than ``min_cohort`` clients are suppressed: their clients are never contacted
(Section 4.3, "enforce a minimum cohort size for privacy").

Region membership is PUBLIC to the server. In the paper's deployment a query is
run on a cohort chosen by eligibility, e.g. "restricting eligibility to clients
in a particular geography" (Section 4.3): the server knows which cohort it asked.
So this family protects the attribute value only (at most ``b_send`` bits of it
per client; with randomized response, epsilon-LDP for the value), never the
location; the server view records each client's region and every bit it read,
and the region counts it saw in the clear are side information.

Helper functions (map-independent logic lives in :mod:`.bitpush`, the regions in
:mod:`.rect_regions`): :func:`region_mean_release`.

``Release.density`` is the private regional MEAN of the attribute painted on
every grid cell whose centre lies in the region (0 for suppressed regions and
for cells outside every region); it is not a count, so the engine's map-density
metrics (which compare it with the location histogram) are not meaningful for
this family: read ``Release.regional`` and the run's evaluation record instead. Values
computed from the true attribute (``region_true_mean``, ``nrmse_per_region``,
``nrmse_overall``, ``rmse_overall``, ``population_mean_true``,
``population_mean_nrmse``, ``values_clipped_fraction``, ``values_missing_dropped``,
``clients_outside_regions``) go to ``RunContext.evaluation`` (``RunResult.evaluation``),
never into the release.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import EngineError, ParamError
from ...core.grid import Domain
from ...core.params import Param
from ..base import Communication, Mechanism, Release, ServerView, register
from ..capabilities import VALUE, NoiseCase
from ..noise_model import ATTRIBUTE_MEAN, Measurements
from ..outputs import RegionalMeans
from . import bitpush as BP
from .baselines import BASELINES, baseline_mean
from .bits import Encoding, bit_probabilities
from .rect_regions import RegionCandidates, assign_regions, check_rects, grid_rects, paint_regions

PAPER = "G. Cormode, I. L. Markov, H. Srinivas. Private and Efficient Federated Numerical Aggregation. EDBT 2024."


def _one_value_per_user(data, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows used: one per user, drawn at random when a user has several (Section
    4.3: "we define the ground truth for data collection via sampling"). Returns
    ``(rows, user_of_row, n_users)`` with users indexed as in ``data.user_index()``."""
    inv, n_users = data.user_index()
    if data.user_id is None:
        return np.arange(len(data)), inv, n_users
    perm = rng.permutation(len(data))
    _, first = np.unique(inv[perm], return_index=True)
    rows = np.sort(perm[first])
    return rows, inv[rows], n_users


# ---------------------------------------------------------------- parameters
def _region_params(default_level: int = 3) -> tuple[Param, ...]:
    return (
        Param(
            "region_level",
            "int",
            default_level,
            "regions are the cells of a 2^k x 2^k grid over the map (k = this level; at most the resolution depth)",
            min=0,
            max=10,
            label="region grid level k",
        ),
        Param(
            "bits",
            "int",
            8,
            "bit depth b of the fixed-point value: values above the largest b-bit number are clipped (winsorised); "
            "choose it from domain knowledge (Section 4.3): 8 covers ages and nightly prices up to 255",
            min=1,
            max=32,
            label="bit depth b",
        ),
        Param(
            "frac_bits",
            "int",
            0,
            "bits after the binary point (values are rounded to multiples of 2^-frac_bits)",
            min=0,
            max=16,
            label="fractional bits",
        ),
        Param("signed", "bool", False, "two's complement (values may be negative; the top bit is the sign)"),
        Param(
            "min_cohort",
            "int",
            50,
            "regions with fewer clients are suppressed and their clients never contacted (Section 4.3)",
            min=1,
            max=1_000_000,
            log=True,
            label="minimum cohort size",
        ),
    )


_BITPUSH_PARAMS = (
    Param(
        "method",
        "choice",
        "adaptive",
        "adaptive: two rounds (Algorithm 2); weighted: one round with p_j ~ 2^(alpha j); uniform: p_j = 1/b",
        choices=("adaptive", "weighted", "uniform"),
    ),
    Param(
        "alpha",
        "float",
        0.5,
        "exponent of the sampling weights (round 2 of adaptive: p_j ~ beta_j^alpha; weighted: p_j ~ 2^(alpha j))",
        min=0.0,
        max=2.0,
    ),
    Param("gamma", "float", 0.5, "round-1 weights of adaptive: p_j ~ (2^j)^gamma", min=0.0, max=2.0),
    Param(
        "delta", "float", 1.0 / 3.0, "fraction of each region's clients asked in round 1 (adaptive)", min=0.05, max=0.95
    ),
    Param("caching", "bool", True, "adaptive: pool the reports of both rounds (Section 3.2, 'caching')"),
    Param(
        "assignment",
        "choice",
        "central",
        "central: the server assigns bits (quasi-Monte-Carlo, exact counts); local: each client draws its bit",
        choices=("central", "local"),
    ),
    Param(
        "b_send",
        "int",
        1,
        "bits each client sends (Corollary 3.2); 1 is the paper's one-bit-per-value setting",
        min=1,
        max=32,
        label="bits per client",
    ),
    Param(
        "round1_floor",
        "int",
        32,
        "adaptive: minimum round-1 reports per bit (round-1 weights are mixed with uniform to reach it); "
        "without DP, a bit with fewer reports is never dropped from round 2",
        min=0,
        max=100_000,
        log=False,
        label="round-1 reports per bit (floor)",
    ),
)

_SQUASH_PARAMS = (
    Param(
        "squash",
        "choice",
        "top",
        "bit squashing (Section 3.3): top = zero the run of most significant bits whose mean is below the "
        "threshold; each = every such bit; off = none",
        choices=("top", "each", "off"),
    ),
    Param(
        "squash_threshold",
        "float",
        0.1,
        "absolute cap on the squashing threshold (Section 3.3; paper: 0.05-0.2): a bit is squashed only if its "
        "estimated mean is below this AND below c noise standard errors",
        min=0.0,
        max=0.5,
    ),
    Param(
        "squash_c",
        "float",
        0.0,
        "a bit is treated as noise only when its mean is below c standard errors of the DP noise of its reports, "
        "c x sqrt(e^eps/(e^eps-1)^2 / reports) (Section 4.2: a multiple of the expected DP noise); a bit no "
        "client uses survives with probability 1 - Phi(c). 0 = the default: c such that some unused bit of the "
        "b survives with probability 1% (Bonferroni; 3.02 for 8 bits). A used bit's squashing bias shrinks as "
        "epsilon or its reports grow",
        min=0.0,
        max=10.0,
        label="squashing threshold c (noise standard errors)",
    ),
)


# --------------------------------------------------------------------- release
class _Estimate(NamedTuple):
    estimate: np.ndarray
    stderr: np.ndarray
    log: object  # the server's reads (BP.ReadLog)
    b_send: int
    extras: dict
    elements: float
    comm_note: str
    rounds: int
    info: dict


def _cohorts(data, rects: np.ndarray, min_cohort: int, rng: np.random.Generator) -> tuple:
    """One value per user, the region of each, the region counts and the minimum-cohort rule (Section 4.3):
    ``(rows, user_of_row, n_users, values, dropped, region, inside, count, suppressed, group, true_mean)``;
    ``group`` is a row's region, or -1 when it is outside every region or in a suppressed one."""
    k = rects.shape[0]
    rows, user_of_row, n_users = _one_value_per_user(data, rng)
    vals = np.asarray(data.value, dtype=np.float64)[rows]
    finite = np.isfinite(vals)
    dropped = int((~finite).sum())
    rows, user_of_row, vals = rows[finite], user_of_row[finite], vals[finite]
    region = assign_regions(data.xy[rows], rects)
    inside = region >= 0
    count = np.bincount(region[inside], minlength=k)
    suppressed = count < min_cohort
    group = np.where(inside & ~suppressed[np.maximum(region, 0)], region, -1)
    true_sum = np.bincount(region[inside], weights=vals[inside], minlength=k)
    true_mean = np.divide(true_sum, count, out=np.full(k, np.nan), where=count > 0)
    if not (group >= 0).any():
        raise EngineError(
            f"every region has fewer than {min_cohort} clients (largest: {int(count.max(initial=0))}); "
            "lower the minimum cohort size or use coarser regions"
        )
    return rows, user_of_row, n_users, vals, dropped, region, inside, count, suppressed, group, true_mean


def _bitpush_estimate(codes, group, k: int, enc: Encoding, params: dict, epsilon, noise, rng) -> _Estimate:
    """Bit-pushing per region (Algorithm 1, or Algorithm 2 when ``method`` is adaptive)."""
    info: dict = {}
    kw = dict(
        codes=codes,
        groups=group,
        n_groups=k,
        assignment=params.get("assignment", "central"),
        b_send=int(params.get("b_send", 1)),
        epsilon=epsilon,
        noise=noise,
    )
    if int(params.get("b_send", 1)) > enc.bits:
        raise ParamError(f"bits per client ({params['b_send']}) cannot exceed the bit depth ({enc.bits})")
    if epsilon is not None:
        kw.update(
            squash=params.get("squash", "off"),
            squash_threshold=float(params.get("squash_threshold", 0.1)),
            squash_c=float(params.get("squash_c", 0.0)),
        )
    method = params.get("method", "adaptive")
    if method == "adaptive":
        res = BP.adaptive_bitpush(
            encoding=enc,
            rng=rng,
            alpha=float(params.get("alpha", 0.5)),
            gamma=float(params.get("gamma", 0.5)),
            delta=float(params.get("delta", 1.0 / 3.0)),
            caching=bool(params.get("caching", True)),
            round1_floor=int(params.get("round1_floor", 32)),
            **kw,
        )
        info["round1_floor_used"] = int(res.info["round1_floor"])
    else:
        p = bit_probabilities(enc.bits, method, float(params.get("alpha", 0.5)))
        res = BP.bitpush(encoding=enc, probabilities=p, rng=rng, **kw)
    comm_note = (
        f"each contacted client sends {res.b_send} bit(s) of its value"
        + (" after randomized response" if epsilon is not None else "")
        + "; the server chooses which bit (its index is public)"
    )
    extras = {"bit_means": res.bit_means, "squashed": res.squashed, "bit_counts": res.counts}
    return _Estimate(
        res.estimate, res.stderr, res.log, res.b_send, extras, float(res.b_send), comm_note, res.rounds, info
    )


def _baseline_estimate(vals, group, k: int, enc: Encoding, estimator: str, epsilon, noise, rng) -> _Estimate:
    """One of the LDP baselines of :data:`.baselines.BASELINES` per region."""
    res = baseline_mean(vals, estimator, enc.low, enc.high, rng, epsilon, groups=group, n_groups=k, noise=noise)
    one_bit = estimator in ("dithering", "rounding", "duchi")
    comm_note = (
        "each contacted client sends one "
        + ("bit" if one_bit else "perturbed real number")
        + (" (and its dither h)" if estimator == "dithering" else "")
    )
    return _Estimate(res.estimate, res.stderr, res.log, 1, {}, 1.0, comm_note, 1, {})


def region_mean_release(
    data,
    domain: Domain,
    rects,
    epsilon: float | None,
    params: dict,
    ctx,
    *,
    estimator: str = "bitpush",
    mechanism_label: str = "",
) -> Release:
    """Run the regional-mean protocol on arbitrary regions ``rects`` (k, 4) metres.

    ``estimator``: ``"bitpush"`` (params as :class:`BitPushRegionMean`, plus the
    squash params with ``epsilon``) or a baseline name of
    :data:`.baselines.BASELINES` (needs ``epsilon``)."""
    if data.value is None:
        raise EngineError(f"{mechanism_label or 'this mechanism'} needs a numeric attribute ('value') in the dataset")
    rects = check_rects(rects)
    k = rects.shape[0]
    enc = Encoding(int(params.get("bits", 8)), int(params.get("frac_bits", 0)), bool(params.get("signed", False)))
    min_cohort = int(params.get("min_cohort", 50))
    ctx.progress(0.05, "assigning clients to regions")

    c = _cohorts(data, rects, min_cohort, ctx.rng)
    rows, user_of_row, n_users, vals, dropped, region, inside, count, suppressed, group, true_mean = c
    codes, clipped = enc.encode(vals)
    ctx.check_cancelled()
    ctx.progress(0.2, "clients report bits")

    ledger = Ledger()
    ledger.note_side_information(
        "each client's region is public to the server (cohort eligibility, Section 4.3) and the region counts "
        "are used in the clear for the minimum-cohort rule"
    )
    noise = getattr(ctx, "noise", None)
    secure = bool(getattr(ctx, "secure", False))
    if estimator == "bitpush":
        e = _bitpush_estimate(codes, group, k, enc, params, epsilon, noise, ctx.rng)
    else:
        e = _baseline_estimate(vals, group, k, enc, estimator, epsilon, noise, ctx.rng)
    est, se, log, b_send, extras_bits, elements, comm_note, rounds, info = e
    ctx.check_cancelled()
    ctx.progress(0.8, "building the map")

    released = ~suppressed & (count > 0)
    private_mean = np.where(released, est, np.nan)
    stderr = np.where(released, se, np.nan)
    err = private_mean - true_mean
    with np.errstate(divide="ignore", invalid="ignore"):
        nrmse_region = np.abs(err) / np.abs(true_mean)
    ok = released & np.isfinite(err)
    rmse = float(np.sqrt(np.mean(err[ok] ** 2))) if ok.any() else float("nan")
    scale = float(np.mean(np.abs(true_mean[ok]))) if ok.any() else float("nan")
    contacted = group >= 0
    pop_true = float(vals[contacted].mean())
    pop_priv = float(np.sum(count[ok] * private_mean[ok]) / max(count[ok].sum(), 1))

    if epsilon is not None:
        ledger.spend(
            "randomized response on the reported bit(s)" if estimator == "bitpush" else f"{estimator} report",
            float(epsilon),
            composition="parallel",
            group="clients",
            note=(
                "local DP for the value: each client answers once (one round), spending epsilon"
                + (f" split over its {b_send} bits" if b_send > 1 else "")
                + "; clients are disjoint, so the cost is epsilon"
            ),
        )
    max_reads = log.max_reads_per_client()
    user_region = np.full(n_users, -1, dtype=np.int64)
    user_region[user_of_row] = region
    dom_rect = np.array(domain.bounds, dtype=np.float64)
    view_desc = (
        f"The server knows every client's region (public cohort) and reads at most {b_send} bit(s) of each "
        f"contacted client's value (observed maximum: {max_reads})"
        + ("; every bit went through randomized response" if epsilon is not None and estimator == "bitpush" else "")
        + ("; each report is locally randomised" if estimator != "bitpush" else "")
        + f". Clients of the {int(suppressed.sum())} region(s) below the minimum cohort were not contacted. "
        "The location is not protected beyond its region."
    )
    density = paint_regions(domain, rects, np.where(released, private_mean, 0.0), fill=0.0)
    diagnostics = {
        "estimator": estimator if estimator != "bitpush" else f"bit-pushing ({params.get('method', 'adaptive')})",
        "n_regions": k,
        "n_suppressed": int(suppressed.sum()),
        "min_cohort": min_cohort,
        "clients_used": int(contacted.sum()),
        "bit_depth": enc.bits,
        "frac_bits": enc.frac_bits,
        "signed": enc.signed,
        "value_range": [enc.low, enc.high],
        "reports_read": len(log),
        "max_reports_per_client": max_reads,
        "population_mean_private": pop_priv,
        "density_is": "private regional mean painted per cell (0 where suppressed or outside every region)",
        "secure_mode": secure,
        "noise_source": _noise_source_note(estimator, epsilon, secure),
        **info,
    }
    # computed from the true values: the run's evaluation, never the release
    ctx.record_evaluation(
        region_true_mean=true_mean,
        nrmse_per_region=[None if not np.isfinite(v) else float(v) for v in np.where(ok, nrmse_region, np.nan)],
        nrmse_overall=rmse / scale if scale and np.isfinite(scale) and scale > 0 else None,
        rmse_overall=rmse,
        population_mean_true=pop_true,
        population_mean_nrmse=abs(pop_priv - pop_true) / abs(pop_true) if pop_true else None,
        values_clipped_fraction=float(clipped.mean()) if clipped.size else 0.0,
        values_missing_dropped=dropped,
        clients_outside_regions=int((~inside).sum()),
    )
    extras = {
        "value_name": getattr(data.meta, "value_name", "") or "value",
        "server_reads": {
            "user": user_of_row[log.client],
            "bit": log.bit,
            "round": log.round,
            "report": log.report,
            "region": log.group,
        },
        **extras_bits,
    }
    ctx.progress(1.0, "done")
    return Release(
        density=density,
        domain=domain,
        ledger=ledger,
        communication=Communication(elements, float(b_send) if estimator == "bitpush" else None, rounds, comm_note),
        server_view=ServerView(
            kind="per_user",
            description=view_desc,
            candidates=RegionCandidates(user_region, rects, dom_rect),
        ),
        partition=rects,
        diagnostics=diagnostics,
        extras=extras,
        quantity="attribute_mean",
        noise=ATTRIBUTE_MEAN,
        regional=RegionalMeans(rects, private_mean, stderr, count, suppressed),
        measurements=Measurements(reports=log.report) if epsilon is not None else None,
    )


def _noise_source_note(estimator: str, epsilon, secure: bool) -> str:
    """Where the privacy noise came from (diagnostics)."""
    if epsilon is None:
        return "no privacy noise (no DP); bit choices from the seeded numpy Generator"
    if not secure:
        return "seeded numpy Generator"
    if estimator == "duchi":
        return "secure mode: Duchi's coin an exact Bernoulli on OS entropy"
    if estimator == "laplace":
        return "secure mode: Laplace via OpenDP (the clipped value passes through make_laplace)"
    other = {"bitpush": "bit choices", "dithering": "dither h", "rounding": "rounding coins"}.get(estimator, "")
    return "secure mode: randomized response via OpenDP (make_randomized_response_bitvec); " + (
        f"{other} from numpy" if other else ""
    )


# ------------------------------------------------------------------ mechanisms
# Release keys (Mechanism.dp_outputs / side_information_keys): the private means and what the
# server read (its reports), and what follows from the public regions' client counts
_DP_KEYS = ("population_mean_private", "regional.mean", "regional.stderr", "bit_means", "squashed", "server_reads")
_DP_KEYS += ("measurements",)
_SIDE_KEYS = (
    "n_suppressed",
    "clients_used",
    "reports_read",
    "max_reports_per_client",
    "round1_floor_used",
    "regional.count",
    "regional.suppressed",
    "bit_counts",
    "server_reads",
    "server_view",
)

_COMMON_DOC = """
    Paper: Cormode, Markov & Srinivas, EDBT 2024: Algorithm 1 (Section 3.1,
    Lemma 3.1, Corollary 3.2), Algorithm 2 (Section 3.2, caching), Section 4.3
    (clipping to b bits, minimum cohort size).

    Threat model: an honest-but-curious server chooses which bit(s) each client
    sends, sees every report and knows every client's region (cohort
    eligibility by geography, Section 4.3): the location is protected only up
    to the region, the value by data minimisation (at most b_send bits read)
    and, in the LDP variants, by epsilon-LDP. The region counts (used for the
    minimum cohort) are side information. One value per
    client (a random row per user, Section 4.3's sampling); each region runs
    its own protocol. Secure mode (RunConfig.secure): randomized response and
    the Laplace baseline draw from OpenDP, Duchi's coin is an exact Bernoulli on
    OS entropy, and the piecewise baseline (no floating-point-safe sampler) is
    refused (the diagnostics' ``noise_source`` says which); which bit a client
    reports is chosen with ctx.rng in every mode. Departures: see :mod:`.bitpush` (QMC counts by
    systematic rounding, round-1 floor, per-report-variance round-2 weights,
    "top" squashing, unsampled bits) and this module (regions from a grid or
    rectangles; density = painted regional means).
"""


@register
class BitPushRegionMean(Mechanism):
    key = "bitpush_mean"
    audit_plan = replace(VALUE, runs=1000)
    label = "Bit-pushing: attribute mean by region"
    family = "none"
    guarantee = "none (no DP): each client reveals one bit of its value (b_send bits with Corollary 3.2)"
    neighbouring = "none"
    threat_model = (
        "The server picks which bit each client sends and sees the bit in the clear (secure aggregation would hide "
        "it among the region's sums); it knows every client's region. Nothing is randomised: privacy is data "
        "minimisation only."
    )
    summary = (
        "Each client sends one binary digit of its value; the server weights the bit means by 2^j and adds them up, "
        "per region. Two rounds (adaptive) find which bits matter."
    )
    paper = PAPER
    equations = "Alg. 1, Lemma 3.1, Cor. 3.2, Lemma 3.3, Alg. 2, Sec. 4.3"
    uses_epsilon = False
    needs = ("value",)
    dp_outputs = _DP_KEYS
    side_information_keys = _SIDE_KEYS
    params = _region_params() + _BITPUSH_PARAMS
    __doc__ = (
        "Attribute mean by region with bit-pushing, no differential privacy. Guarantee: none in the DP sense; the "
        "paper's no-DP setting promises only that at most b_send bits of a value are ever read. epsilon is ignored and the ledger stays "
        "empty." + _COMMON_DOC
    )

    def run(self, data, domain, epsilon, params, ctx):
        rects = grid_rects(domain, int(params["region_level"]))
        return region_mean_release(data, domain, rects, None, params, ctx, mechanism_label=self.label)


@register
class BitPushRegionMeanLDP(Mechanism):
    key = "bitpush_mean_ldp"
    audit_plan = VALUE
    noise_cases = (NoiseCase("bitpush_mean_ldp", {"region_level": 0, "min_cohort": 1, "squash": "off"}, base_users=30),)
    label = "Bit-pushing + randomized response (LDP): attribute mean by region"
    family = "local"
    guarantee = (
        "epsilon-LDP for each client's value (randomized response on its one bit): replace user (its value); "
        "region public"
    )
    neighbouring = "replace user"
    threat_model = (
        "The server picks which bit each client sends and sees the randomised bit; it knows every client's "
        "region. Each client's value is protected by epsilon-local DP, its location only up to its region."
    )
    summary = (
        "Each client flips its one reported bit with probability 1/(1+e^eps); the server unbiases the bit means, "
        "squashes bits that look like pure noise, and adds them up per region."
    )
    paper = PAPER
    equations = "Alg. 1-2, Sec. 3.3 (randomized response, bit squashing), Sec. 4.2"
    needs = ("value",)
    dp_outputs = _DP_KEYS
    side_information_keys = _SIDE_KEYS
    params = _region_params() + _BITPUSH_PARAMS + _SQUASH_PARAMS
    __doc__ = (
        "Attribute mean by region with bit-pushing under local DP (Section 3.3). Guarantee: epsilon-LDP for each "
        "client's value. Randomized response with "
        "p = e^eps/(1+e^eps) on the reported bit, unbiased as (r - (1-p))/(2p-1); bit squashing of the bits whose "
        "mean is below both an absolute threshold (Section 3.3) and c standard errors of their DP noise (Section "
        "4.2; see engine.mechanisms.bit_pushing.rounds.squashed_bits). Each client answers once, so the ledger has "
        "one parallel entry (epsilon per client)." + _COMMON_DOC
    )

    def run(self, data, domain, epsilon, params, ctx):
        rects = grid_rects(domain, int(params["region_level"]))
        return region_mean_release(data, domain, rects, float(epsilon), params, ctx, mechanism_label=self.label)


@register
class LdpRegionMeanBaseline(Mechanism):
    key = "ldp_mean_baseline"
    audit_plan = VALUE
    label = "LDP mean baselines (dithering, piecewise, Duchi, ...): attribute mean by region"
    family = "local"
    guarantee = "epsilon-LDP for each client's value (one randomised report): replace user (its value); region public"
    neighbouring = "replace user"
    threat_model = (
        "Each client sends one locally randomised report of its value clipped to the public range of the b-bit "
        "encoding; the server knows every client's region."
    )
    summary = "The classical one-report LDP mean estimators the paper compares against, on the same regions."
    paper = PAPER + " Baselines: Ben-Basat et al. 2020; Wang et al. ICDE 2019; Duchi et al. JASA 2018."
    equations = "Sec. 2 and 4.2 (baselines); the piecewise mechanism of Wang et al. ICDE 2019"
    needs = ("value",)
    dp_outputs = _DP_KEYS
    side_information_keys = _SIDE_KEYS
    params = _region_params() + (
        Param(
            "baseline",
            "choice",
            "piecewise",
            "dithering: subtractive dithering + randomized response; rounding: randomized rounding + randomized "
            "response; duchi: Duchi et al.'s one-bit mechanism; piecewise: Wang et al.; laplace: Laplace on the "
            "clipped value",
            choices=BASELINES,
        ),
    )
    __doc__ = (
        "Attribute mean by region with a classical LDP mean estimator. Guarantee: epsilon-LDP for each client's "
        "value. The public range is that of the b-bit "
        "encoding ([0, 2^b - 1] / 2^frac_bits, or the two's complement range when signed). Departure: Duchi et "
        "al.'s 1-D mechanism and randomized rounding + randomized response have the same output law up to "
        "scaling; both are offered because the paper lists both." + _COMMON_DOC
    )

    def run(self, data, domain, epsilon, params, ctx):
        rects = grid_rects(domain, int(params["region_level"]))
        return region_mean_release(
            data, domain, rects, float(epsilon), params, ctx, estimator=params["baseline"], mechanism_label=self.label
        )
