"""Empirical privacy audit: a statistical lower bound on a mechanism's epsilon.

A DP proof is an upper bound; an audit gives a lower bound that holds with high
probability, so a bound above the claim exposes a bug in the mechanism or in its stated
guarantee. Method (Jagielski, Ullman, Oprea, "Auditing differentially private machine
learning: how private is private SGD?", NeurIPS 2020; Nasr, Song, Thakurta, Papernot,
Carlini, "Adversary instantiation: lower bounds for differentially private machine
learning", IEEE S&P 2021), black box on the released map:

1. **Neighbours under the mechanism's own relation** (``Mechanism.neighbouring_for``), on
   a small public domain (16 x 16 cells of 1 km by default), where one person matters
   most: at an EMPTY cell, the target (every other person stands in a far "sink" cell).

   * add/remove user (or record; and "none", to show what a non-private release leaks):
     D0 = the others, D1 = the others plus the person at the target;
   * zero-out user: D1 = the others plus the person at the target; D0 = the same people
     with the person's contribution zeroed. The data model has no "zeroed" person for every
     mechanism, so by default the person moves into the sink instead (:data:`ZERO_OUT_SINK`):
     the number of clients U, the shards and the Pólya shapes are those of the zero-out
     neighbour, and the one-hot the zeroed person would not send lands in the sink cell, far
     from the target. The target's released value then has the zero-out neighbour's law:
     exactly for the non-adaptive encodings (flat, hierarchical and count-min one-hot, AG:
     the target's value reads only its own cells and their noise); for the interactive trees
     either exactly, with one other person (U = 2: the schedule's first epsilon is more than
     half the budget, so the first sub-query spends it all and the tree never changes:
     adaptive_hh, hh_scheduled_fixed_t), or, where the tree does change (hh_fixed_eps), with a
     sink of 1,000 people, whose count is more than 60 noise deviations above the split
     threshold at every level, so its nodes split alike with or without the person except
     with probability below 1e-30 per run. ``sparse_emd_secagg`` zeroes exactly (a weight-0
     client still counts in n);
   * replace user: the person moves from the sink to the target; for the attribute-mean
     family the person stays and its VALUE is replaced (lowest vs highest encodable value;
     its region is public); for geo-indistinguishability (a metric guarantee) the person's
     one location moves by ``move_km`` and the claim is epsilon x distance.

2. **Many runs** of the mechanism on each, in evaluation mode (seeded numpy noise, never
   the secure samplers), run i on dataset b with its own seed ``(seed, b, i)``.

3. **A statistic** of each release: the released density summed over the target cell (for
   geo-indistinguishability, over the half-plane past the midpoint of the two locations,
   a monotone function of the noisy location's coordinate along the move). Where the map is a
   smoothed or pruned function of what was noised, so that one person barely moves it, the
   statistic reads the release's own noisy DP output instead (still post-processing, so the
   bound stays valid; ``Mechanism.measured_at``): SNH's noisy grid at the target's cell (the
   network is trained on it), and the count-min sketches' estimate of the target cell at their
   finest level (the tree keeps only cells above a threshold, so the target's density is 0 either way).

4. **A threshold test.** If the mechanism is eps-DP for the relation, every set S of
   outputs has P1(S) <= e^eps P0(S) and P0(S) <= e^eps P1(S) (pure DP, delta = 0). With
   S = {statistic > c} deciding "D1", P1(S) = 1 - FNR and P0(S) = FPR, so
   eps >= log((1 - FNR) / FPR), and the complement gives eps >= log((1 - FPR) / FNR):
   Jagielski et al.'s bound with delta = 0. Replacing the numerator by its
   Clopper-Pearson lower bound and the denominator by its upper bound, each one-sided at
   level alpha / 2, gives a bound that is below the true epsilon with probability at
   least 1 - alpha (union bound over the two rates; alpha = 0.05: the "95% lower bound").

5. **No selection bias.** The threshold c, the side of the test and which ratio is used
   are chosen on the first half of the runs; the bound is then computed on the second half
   alone, for that one test chosen in advance, so the confidence statement holds as stated.
   The choice is the candidate with the largest bound on the first half at the level
   alpha / (number of candidate tests): at level alpha the best of thousands of candidates
   is a lucky tail holding a handful of runs, which the second half does not repeat.

6. **Parameters and relations.** ``params`` audits a parameter setting (Adaptive HH's
   ``relation = "add/remove"`` makes it add/remove user, so its neighbours are built under
   that relation); a mechanism declares its plan on its class (``Mechanism.audit_plan``,
   :class:`engine.mechanisms.capabilities.AuditPlan`) and may have one per relation
   (``relation_plans``: Adaptive HH under add/remove adds the person as the 11th client,
   one past a SecAgg shard boundary of 10). ``relation`` builds the neighbours under another
   relation than the one claimed, to show what a claim does not cover (the zero-out Adaptive
   HH audited under add/remove exceeds its claim; its add/remove variant does not).

This audits the *output values* (a statistic of the released map), as the papers'
guarantees are stated; it does not look for floating-point artefacts of the samplers or
for the seed, nor at the diagnostics a release carries besides its map.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.grid import Domain
from ...data.dataset import Dataset, DatasetMeta
from ...mechanisms import RunContext, get, registry
from ...mechanisms.base import RELATIONS, Mechanism
from ...mechanisms.capabilities import ZERO_OUT_NULL, AuditPlan

SIDE_M = 16_000.0  # the audit domain's side: 1 km cells at depth 4
AUDIT_CRS = "+proj=aeqd +lat_0=0 +lon_0=0 +datum=WGS84 +units=m +no_defs"
MAX_AUDIT_RUNS = 200_000  # per dataset
MIN_AUDIT_RUNS = 20  # per dataset: 10 to choose the test, 10 to bound it


def plan_for(mechanism: str | type[Mechanism], relation: str | None = None) -> AuditPlan:
    """How a mechanism is audited (its class's ``audit_plan``), under ``relation`` where it has a plan for that
    relation (``relation_plans``)."""
    cls = get(mechanism) if isinstance(mechanism, str) else mechanism
    if relation is not None and relation in cls.relation_plans:
        return cls.relation_plans[relation]
    return cls.audit_plan


def has_dp_claim(cls: type[Mechanism]) -> bool:
    """True for mechanisms that claim a privacy guarantee (not the non-private references)."""
    return bool(cls.uses_epsilon) and cls.neighbouring not in ("", "none")


# ------------------------------------------------------------------- datasets
def _dataset(xy: np.ndarray, weight=None, value=None) -> Dataset:
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    deg = 1.0 / 111_320.0  # lon/lat only label the points; the mechanisms work in metres
    meta = DatasetMeta(
        name="privacy audit",
        source="audit",
        synthetic=True,
        bbox=(0.0, 0.0, SIDE_M * deg, SIDE_M * deg),
        description="two neighbouring datasets built by engine.run.analysis._audit",
    )
    return Dataset(xy=xy, lonlat=xy * deg, crs=AUDIT_CRS, meta=meta, weight=weight, value=value)


@dataclass(frozen=True)
class Pair:
    d0: Dataset
    d1: Dataset
    domain: Domain
    mask: np.ndarray  # cells summed by the statistic
    distance_km: float | None  # metric privacy: how far the location moved
    description: str


def neighbours(plan: AuditPlan, relation: str) -> Pair:
    """D0 and D1 for the relation (see the module docstring)."""
    domain = Domain(0.0, 0.0, SIDE_M, plan.depth)
    n, cell = domain.n, domain.cell

    def centre(ix: int, iy: int) -> np.ndarray:
        return np.array([[(ix + 0.5) * cell, (iy + 0.5) * cell]])

    sink, target = centre(n // 8, n // 8), centre(n - 1 - n // 4, n - 1 - n // 4)
    t_ix = n - 1 - n // 4
    mask = np.zeros((n, n), dtype=bool)
    mask[t_ix, t_ix] = True
    base = np.repeat(sink, plan.base_users, axis=0)
    others = f"{plan.base_users} other(s) in cell ({n // 8}, {n // 8})" if plan.base_users else "nobody else"
    where = f"the empty cell ({t_ix}, {t_ix}) of a {n} x {n} map of {cell / 1000:g} km cells"
    if plan.move_km is not None:
        d = plan.move_km * 1000.0
        p0 = np.array([[SIDE_M / 2 - d / 2, SIDE_M / 2 + cell / 2]])
        mask = np.zeros((n, n), dtype=bool)
        mask[:, (domain.cell_centers()[0] > SIDE_M / 2)] = True
        return Pair(
            _dataset(np.vstack([base, p0])),
            _dataset(np.vstack([base, p0 + [d, 0.0]])),
            domain,
            mask,
            plan.move_km,
            f"one location moved {plan.move_km:g} km east across the middle of a {n} x {n} map; {others}; "
            "statistic: the released mass east of the midpoint",
        )
    if plan.value_pair is not None:
        lo, hi = plan.value_pair
        xy = np.vstack([base, target])
        v0 = np.full(len(xy), lo)
        v1 = v0.copy()
        v1[-1] = hi
        return Pair(
            _dataset(xy, value=v0),
            _dataset(xy, value=v1),
            domain,
            mask,
            None,
            f"one person at {where} with value {lo:g} or {hi:g} (its region is public); {others} (value {lo:g}); "
            "statistic: the released value at the target cell",
        )
    stat = "statistic: the released value at the target cell"
    if relation == "zero-out user":
        if plan.zero_out == ZERO_OUT_NULL:
            w1 = np.ones(plan.base_users + 1)
            w0 = w1.copy()
            w0[-1] = 0.0
            xy = np.vstack([base, target])
            return Pair(
                _dataset(xy, weight=w0),
                _dataset(xy, weight=w1),
                domain,
                mask,
                None,
                f"one person at {where}, contributing or zeroed (weight 0, still a client); {others}; {stat}",
            )
        return Pair(
            _dataset(np.vstack([base, sink])),
            _dataset(np.vstack([base, target])),
            domain,
            mask,
            None,
            f"one person at {where} or zeroed (emulated: moved into the sink cell, which {plan.base_users} others "
            f"fill); {stat}",
        )
    if relation in ("replace user", "replace record"):
        return Pair(
            _dataset(np.vstack([base, sink])),
            _dataset(np.vstack([base, target])),
            domain,
            mask,
            None,
            f"one person at {where} or in cell ({n // 8}, {n // 8}); {others}; {stat}",
        )
    if plan.base_users < 1:
        raise ParamError("an add/remove audit needs at least one other person (a dataset cannot be empty)")
    return Pair(
        _dataset(base),
        _dataset(np.vstack([base, target])),
        domain,
        mask,
        None,
        f"one person added at {where}; {others}; {stat}",
    )


def statistic(plan: AuditPlan, pair: Pair, release, cls: type[Mechanism]) -> float:
    """The audit's statistic of one release (see the module docstring, step 3)."""
    if plan.statistic in ("target", "half-plane"):
        return float(np.asarray(release.density, dtype=np.float64)[pair.mask].sum())
    if plan.statistic == "measurement":  # the release's own noisy measurement at the target cell's centre
        dom = pair.domain
        iy, ix = (int(v[0]) for v in np.nonzero(pair.mask))
        return float(cls.measured_at(release, dom.x0 + (ix + 0.5) * dom.cell, dom.y0 + (iy + 0.5) * dom.cell))
    raise ParamError(f"unknown audit statistic {plan.statistic!r}")


# ------------------------------------------------------------------- the bound
def cp_lower(k, n, a: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound at level ``a`` on a binomial rate (k of n)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        v = stats.beta.ppf(a, k, n - k + 1)
    return np.where(k <= 0, 0.0, v)


def cp_upper(k, n, a: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound at level ``a`` on a binomial rate (k of n)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        v = stats.beta.isf(a, k + 1, n - k)
    return np.where(k >= n, 1.0, v)


def log_ratio_bound(k_num, n_num, k_den, n_den, alpha: float) -> np.ndarray:
    """log(lower bound of k_num/n_num / upper bound of k_den/n_den), each one-sided at
    alpha/2: below log(p_num / p_den) with probability >= 1 - alpha."""
    lo = cp_lower(k_num, n_num, alpha / 2)
    hi = cp_upper(k_den, n_den, alpha / 2)
    with np.errstate(divide="ignore"):
        return np.log(lo) - np.log(hi)


# the four tests of one threshold c: (region of the statistic, which dataset's rate is the numerator)
TESTS = (("above", 1), ("above", 0), ("at or below", 1), ("at or below", 0))


def _counts(s0: np.ndarray, s1: np.ndarray, c) -> tuple[np.ndarray, np.ndarray]:
    """Per threshold: how many runs of each side fall above it."""
    a0 = s0.size - np.searchsorted(np.sort(s0), c, side="right")
    a1 = s1.size - np.searchsorted(np.sort(s1), c, side="right")
    return a0, a1


def _test_bounds(a0, a1, n0: int, n1: int, alpha: float) -> np.ndarray:
    """Bounds of the four :data:`TESTS` for thresholds with a0/a1 runs above them: (4, m)."""
    k = {("above", 0): a0, ("above", 1): a1, ("at or below", 0): n0 - a0, ("at or below", 1): n1 - a1}
    n = {0: n0, 1: n1}
    return np.stack([log_ratio_bound(k[(r, s)], n[s], k[(r, 1 - s)], n[1 - s], alpha) for r, s in TESTS])


def epsilon_lower_bound(s0, s1, alpha: float = 0.05, max_thresholds: int = 2048) -> dict:
    """The audit's bound from the statistics of the runs on D0 (``s0``) and D1 (``s1``):
    the test is chosen on the first half of each, the bound computed on the second half."""
    s0, s1 = np.asarray(s0, dtype=np.float64), np.asarray(s1, dtype=np.float64)
    if min(s0.size, s1.size) < MIN_AUDIT_RUNS:
        raise ParamError(f"the audit needs at least {MIN_AUDIT_RUNS} runs per dataset")
    h0, h1 = s0.size // 2, s1.size // 2
    sel0, sel1, ev0, ev1 = s0[:h0], s1[:h1], s0[h0:], s1[h1:]
    cands = np.unique(np.concatenate([sel0, sel1]))
    if cands.size > max_thresholds:  # thresholds at evenly spaced ranks are enough to find a good test
        cands = cands[np.linspace(0, cands.size - 1, max_thresholds).round().astype(int)]
    # choose as if every candidate's bound had to hold at once (Bonferroni over the 4 x m tests):
    # the best of thousands of bounds at level alpha is a lucky tail with a handful of runs in it,
    # which the second half does not repeat; the stricter level favours tests with enough runs
    b = _test_bounds(*_counts(sel0, sel1, cands), h0, h1, alpha / (len(TESTS) * cands.size))
    t, j = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(b), b, -np.inf))), b.shape)
    c = float(cands[j])
    region, side = TESTS[t]
    a0, a1 = _counts(ev0, ev1, np.array([c]))
    bound = float(_test_bounds(a0, a1, ev0.size, ev1.size, alpha)[t, 0])
    k = {0: int(a0[0]), 1: int(a1[0])}
    if region != "above":
        k = {0: ev0.size - k[0], 1: ev1.size - k[1]}
    n = {0: ev0.size, 1: ev1.size}
    p_num, p_den = k[side] / n[side], k[1 - side] / n[1 - side]
    point = math.log(p_num / p_den) if p_num > 0 and p_den > 0 else None  # None: a rate of 0 (unbounded)
    return {
        "eps_lb": max(bound, 0.0) if math.isfinite(bound) else 0.0,
        "point_estimate": point,
        "test": f"statistic {region} {c:.6g} decides D{side}",
        "threshold": c,
        "counts": {"D0": [k[0], n[0]], "D1": [k[1], n[1]]},
        "alpha": alpha,
    }


# ------------------------------------------------------------------- the audit
@dataclass
class AuditResult:
    mechanism: str
    relation: str
    epsilon: float
    eps_claimed: float | None  # None: no privacy claim
    eps_lb: float
    runs: int  # per dataset
    seconds: float
    details: dict

    def to_dict(self) -> dict:
        return {
            "mechanism": self.mechanism,
            "relation": self.relation,
            "epsilon": self.epsilon,
            "eps_claimed": self.eps_claimed,
            "eps_lb": self.eps_lb,
            "runs": self.runs,
            "seconds": self.seconds,
            **self.details,
        }


def audit(
    mechanism: str | type[Mechanism],
    epsilon: float = 1.0,
    runs: int | None = None,
    *,
    params: dict | None = None,
    relation: str | None = None,
    seed: int = 0,
    alpha: float = 0.05,
    test: bool = False,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> AuditResult:
    """Audit a mechanism (registry key or class) at ``epsilon``: ``runs`` per dataset (default:
    its plan's ``runs``, or ``test_runs`` with ``test``). ``params``: parameters over the plan's
    (e.g. ``{"relation": "add/remove"}`` for Adaptive HH's add/remove variant, whose neighbours
    then follow ``neighbouring_for``). ``relation``: build the neighbours under this relation
    instead of the stated one, to show what a claim does NOT cover (the result's ``relation`` is
    the audited one, ``claimed_relation`` the stated one; a bound above the claim is then no bug).
    Raises ParamError on bad input and ``Cancelled`` when ``cancel()`` turns true."""
    cls = get(mechanism) if isinstance(mechanism, str) else mechanism
    if cls.neighbouring not in RELATIONS:
        raise ParamError(f"{cls.key or cls.__name__} does not state its neighbouring relation")
    eps = check_epsilon(epsilon)
    if not 0 < alpha < 1:
        raise ParamError(f"alpha must be in (0, 1) (got {alpha})")
    if relation is not None and relation not in RELATIONS:
        raise ParamError(f"unknown neighbouring relation {relation!r}; known: {', '.join(RELATIONS)}")
    plan = plan_for(cls)
    claimed_relation = cls.neighbouring_for(cls.schema().resolve({**plan.params, **(params or {})}))
    relation = relation or claimed_relation
    plan = plan_for(cls, relation)
    chosen = {**plan.params, **(params or {})}
    params = cls.schema().resolve(chosen)
    n = int(runs if runs is not None else (plan.test_runs if test else plan.runs))
    if not MIN_AUDIT_RUNS <= n <= MAX_AUDIT_RUNS:
        raise ParamError(f"runs must be between {MIN_AUDIT_RUNS} and {MAX_AUDIT_RUNS:,} per dataset (got {n})")
    pair = neighbours(plan, relation)
    mech = cls()
    t0 = time.perf_counter()
    s = np.empty((2, n))
    for i in range(n):  # the two datasets alternate, so a stopped audit has used both alike
        for b, data in enumerate((pair.d0, pair.d1)):
            ctx = RunContext(rng=np.random.default_rng([seed, b, i]), cancel_cb=cancel)
            ctx.check_cancelled()
            s[b, i] = statistic(plan, pair, mech.run(data, pair.domain, eps, params, ctx), cls)
        if progress is not None and (i % 50 == 0 or i == n - 1):
            progress((i + 1) / n, f"{i + 1:,} of {n:,} runs per dataset")
    bound = epsilon_lower_bound(s[0], s[1], alpha)
    seconds = time.perf_counter() - t0
    claimed = None
    if has_dp_claim(cls):
        claimed = eps * pair.distance_km if pair.distance_km is not None else eps
    details = {
        **bound,
        "datasets": pair.description,
        "params": chosen,
        "claimed_relation": claimed_relation,
        "plan_note": plan.note,
        "seed": seed,
        "statistic_mean": {"D0": float(s[0].mean()), "D1": float(s[1].mean())},
    }
    return AuditResult(cls.key or cls.__name__, relation, eps, claimed, bound["eps_lb"], n, seconds, details)


def auditable() -> list[str]:
    """Registry keys of the mechanisms with a privacy claim (what the audit tests cover)."""
    return sorted(k for k, c in registry().items() if has_dp_claim(c))
