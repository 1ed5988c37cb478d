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
   bound stays valid): SNH's noisy grid at the target's cell (the network is trained on it),
   and the count-min sketches' estimate of the target cell at their finest level (the tree
   keeps only cells above a threshold, so the target's density is 0 either way).

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
   that relation); a (mechanism, relation) pair may have its own plan
   (:data:`RELATION_PLANS`: Adaptive HH under add/remove adds the person as the 11th client,
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
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats

from ..core.errors import ParamError
from ..core.grid import Domain
from ..data.dataset import Dataset, DatasetMeta
from ..mechanisms import RunContext, get, registry
from ..mechanisms.base import RELATIONS, Mechanism

SIDE_M = 16_000.0  # the audit domain's side: 1 km cells at depth 4
AUDIT_CRS = "+proj=aeqd +lat_0=0 +lon_0=0 +datum=WGS84 +units=m +no_defs"
ZERO_OUT_SINK = "sink"  # zero-out emulated by moving the person into the sink (see the module docstring)
ZERO_OUT_NULL = "null"  # the person stays with weight 0 (exact, for mechanisms that count weight-0 clients)
MAX_RUNS = 200_000  # per dataset
MIN_RUNS = 20  # per dataset: 10 to choose the test, 10 to bound it


@dataclass(frozen=True)
class Plan:
    """How one mechanism is audited. ``runs``: default runs per dataset (command line);
    ``test_runs``: the test suite's; ``params``: overrides of the mechanism's defaults,
    each explained in ``note``."""

    depth: int = 4
    base_users: int = 1  # people in the sink cell
    runs: int = 10_000
    test_runs: int = 1000
    params: dict = field(default_factory=dict)
    # "target" cell, "half-plane" past the midpoint of a move, or a noisy DP output: "noisy grid" (SNH),
    # "sketch" (count-min)
    statistic: str = "target"
    value_pair: tuple[float, float] | None = None  # replace the person's value (attribute-mean family)
    move_km: float | None = None  # metric privacy: one location moves this far east
    zero_out: str = ZERO_OUT_SINK
    note: str = ""


_ZERO_OUT = Plan(base_users=1000, note="1,000 people in the sink (zero-out emulation, see engine.run.audit)")
_VALUE = Plan(
    base_users=0,
    value_pair=(0.0, 255.0),
    params={"min_cohort": 1},
    note="min_cohort = 1: a region holding only the person (the cohort floor is a utility rule, not part of the "
    "LDP claim); values 0 and 255, the ends of the default 8-bit range",
)
_MOVE = Plan(
    base_users=0,
    move_km=1.0,
    statistic="half-plane",
    params={"attack_users": 0},
    note="attack_users = 0: the attack diagnostics do not change the release",
)
# SNH: one network of one hidden layer of 8 units, 5 training steps; each run still compiles its network
_SNH_NET = {"preset": "custom", "depth": 1, "width": 8, "epochs": 1, "max_steps": 5, "batch_size": 4096, "k": 1}
# runs per dataset: about 0.1 to 2 ms per run for most mechanisms; the slow ones get fewer
PLANS: dict[str, Plan] = {
    "adaptive_hh": replace(_ZERO_OUT, base_users=1, note="U = 2: one sub-query spends all of epsilon"),
    "hh_fixed_eps": replace(_ZERO_OUT, runs=3000, test_runs=300),
    "hh_scheduled_fixed_t": replace(_ZERO_OUT, base_users=1, note="U = 2: one sub-query spends all of epsilon"),
    "hh_interactive_nonprivate": replace(_ZERO_OUT, runs=1000),
    "flat_onehot": _ZERO_OUT,
    "hierarchical_onehot": replace(
        _ZERO_OUT,
        params={"first_level": 4},
        note=_ZERO_OUT.note + "; one level (the map's), so the person's whole epsilon is on its one-hot cell (with "
        "5 levels each carries epsilon / 5 and the threshold rule hides most of them)",
    ),
    "cms_hierarchical": replace(
        _ZERO_OUT,
        params={"depth": 1, "first_level": 4},
        statistic="sketch",
        note=_ZERO_OUT.note + "; one sketch row and one level (the map's), so the person's whole epsilon is on one "
        "counter, which the statistic reads (with 20 rows and 4 levels each counter carries epsilon / 80)",
    ),
    "ag_polya": _ZERO_OUT,
    "sparse_emd_secagg": Plan(
        runs=3000, test_runs=300, zero_out=ZERO_OUT_NULL, note="exact zero-out: a client of weight 0, counted in n"
    ),
    "sparse_emd": Plan(runs=3000, test_runs=300),
    "ldp_grid": Plan(
        depth=1,
        base_users=0,
        note="a 2 x 2 map: the report is one of K = 4 cells (the default level is capped at the map's depth), so "
        "the randomized response's probabilities are large and the test has power",
    ),
    "hdg": Plan(
        depth=1,
        base_users=2,
        note="a 2 x 2 map (both grids' granularities capped at 2) and 2 others in the sink cell: 3 users, one per "
        "group, so the person's report is its group's only one",
    ),
    "bitpush_mean_ldp": _VALUE,
    "ldp_mean_baseline": _VALUE,
    "bitpush_mean": replace(_VALUE, runs=1000),
    "geoind_kde": _MOVE,
    "federated_kde": replace(_MOVE, runs=1000),
    "federated_rff_kde": replace(_MOVE, runs=1000, test_runs=100),
    "snh": Plan(
        runs=200,
        test_runs=36,
        params=_SNH_NET,
        statistic="noisy grid",
        note="a network of one hidden layer of 8 units trained 5 steps (the release is post-processing of the "
        "noisy grid, which the statistic reads); each run compiles its network, about 0.1-0.4 s",
    ),
    "dawa": Plan(
        depth=1,
        base_users=3,
        note="a 2 x 2 map (4 cells along the Hilbert curve, buckets of 1, 2 or 4 cells) with 3 others in the sink "
        "cell: the partition has few choices, so the person's effect on it reaches the target's value",
    ),
    "hdmm": Plan(
        depth=5,
        note="a 32 x 32 map, the smallest whose optimised strategy is not the identity (p = 2 extra rows per axis; "
        "at 16 x 16 and below p = 1 and Θ = 0 is best): the target cell's estimate moves by exactly 1 with the "
        "person",
    ),
    "privelet": Plan(
        depth=1,
        note="a 2 x 2 map: the noise scale is (1 + depth)^2 / epsilon, 4 / epsilon here (25 / epsilon on 16 x 16, "
        "spread over the cells' shared coefficients, hides one person at a single cell from the test)",
    ),
    "quadtree": Plan(
        depth=1,
        note="a 2 x 2 map (two levels): on 16 x 16 the leaves get under a third of epsilon and the least squares "
        "spreads the person over the tree",
    ),
    "mwem": Plan(
        depth=1,
        params={"rounds": 1, "passes": 1, "rho": 0.5, "workload_queries": 10},
        note="a 2 x 2 map, one round and one update, half of epsilon on the noisy total, 10 rectangles: the person "
        "then moves the total and the one measurement that the target's value is made of (at the defaults, ten "
        "rounds of a twentieth each and a 5 % total drown one person)",
    ),
    "identity_paramselect": Plan(runs=2000, test_runs=150),  # ParamSelect's regressor: 12 ms per run
    # the top-t rule keeps an empty cell with probability 1/C and the person's cell about e^eps / C: rare events
    "identity_topt": Plan(runs=100_000),
    "laplace_topt_gauss": Plan(runs=100_000),
}


# plans for a mechanism audited under another relation than its default parameters' (a parameter
# such as Adaptive HH's ``relation``, or ``audit(relation=...)``): keyed by (mechanism, relation)
_SHARD_EDGE = Plan(
    base_users=10,
    params={"secagg_shard": 10},
    note="10 others and SecAgg shards of at most 10 clients: the person added is the 11th client, one past a "
    "shard boundary, where a plan read from the exact count changes (a second shard, and its Pólya noise, in the "
    "zero-out variant; the schedule of Eq. 7)",
)
RELATION_PLANS: dict[tuple[str, str], Plan] = {("adaptive_hh", "add/remove user"): _SHARD_EDGE}


def plan_for(key: str, relation: str | None = None) -> Plan:
    """The audit plan of a mechanism (a default plan for one without its own), under ``relation``
    where a plan for it exists (:data:`RELATION_PLANS`)."""
    if relation is not None and (key, relation) in RELATION_PLANS:
        return RELATION_PLANS[(key, relation)]
    return PLANS.get(key, Plan())


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
        description="two neighbouring datasets built by engine.run.audit",
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


def neighbours(plan: Plan, relation: str) -> Pair:
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


def statistic(plan: Plan, pair: Pair, release) -> float:
    """The audit's statistic of one release (see the module docstring, step 3)."""
    if plan.statistic in ("target", "half-plane"):
        return float(np.asarray(release.density, dtype=np.float64)[pair.mask].sum())
    dom = pair.domain
    iy, ix = (int(v[0]) for v in np.nonzero(pair.mask))
    if plan.statistic == "noisy grid":  # SNH's Q_D: cells of width rho from the domain's south-west corner
        noisy = np.asarray(release.extras["snh_noisy_grid"], dtype=np.float64)
        rho = float(release.diagnostics.get("rho_m") or dom.side / noisy.shape[0])
        x, y = (ix + 0.5) * dom.cell, (iy + 0.5) * dom.cell
        return float(noisy[min(int(y / rho), noisy.shape[0] - 1), min(int(x / rho), noisy.shape[1] - 1)])
    if plan.statistic == "sketch":
        from ..core.grid import interleave, prefix
        from ..mechanisms.federated_hh.baselines import cms_level_estimates

        level = max(release.extras["sketches"])
        code = prefix(interleave(np.array([ix]), np.array([iy]), dom.depth), dom.depth, level)
        return float(cms_level_estimates(release, level)[int(code[0])])
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
    if min(s0.size, s1.size) < MIN_RUNS:
        raise ParamError(f"the audit needs at least {MIN_RUNS} runs per dataset")
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
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ParamError(f"epsilon must be a positive number (got {epsilon})")
    if not 0 < alpha < 1:
        raise ParamError(f"alpha must be in (0, 1) (got {alpha})")
    if relation is not None and relation not in RELATIONS:
        raise ParamError(f"unknown neighbouring relation {relation!r}; known: {', '.join(RELATIONS)}")
    plan = plan_for(cls.key)
    claimed_relation = cls.neighbouring_for(cls.schema().resolve({**plan.params, **(params or {})}))
    relation = relation or claimed_relation
    plan = plan_for(cls.key, relation)
    chosen = {**plan.params, **(params or {})}
    params = cls.schema().resolve(chosen)
    n = int(runs if runs is not None else (plan.test_runs if test else plan.runs))
    if not MIN_RUNS <= n <= MAX_RUNS:
        raise ParamError(f"runs must be between {MIN_RUNS} and {MAX_RUNS:,} per dataset (got {n})")
    pair = neighbours(plan, relation)
    mech = cls()
    t0 = time.perf_counter()
    s = np.empty((2, n))
    for i in range(n):  # the two datasets alternate, so a stopped audit has used both alike
        for b, data in enumerate((pair.d0, pair.d1)):
            ctx = RunContext(rng=np.random.default_rng([seed, b, i]), cancel_cb=cancel)
            ctx.check_cancelled()
            s[b, i] = statistic(plan, pair, mech.run(data, pair.domain, eps, params, ctx))
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
