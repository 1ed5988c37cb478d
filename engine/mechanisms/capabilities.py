"""What the workbench may do with a mechanism, declared on its class (as scikit-learn's estimators declare tags):
how its margin is known, what the planner may predict, how it is audited. The names and the data classes the
class attributes take are here; :class:`engine.mechanisms.base.Mechanism` documents the attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# how a release's 95 % margin is known: from its noise model ("closed form"; a release whose noise has no
# closed form says why), estimated from releases with the next seeds ("repeats"), or not at all ("none")
MARGINS = ("closed form", "repeats", "none")
# what the release planner may do: predict the margin from one proxy run ("exact": fixed by epsilon, the grid
# and the user count), simulate it over proxy draws ("simulated": it depends on where people are), or neither
PLANNING = ("exact", "simulated", "none")
NOT_PLANNED = "the planner does not predict this mechanism's margin (not calibrated: python -m engine bench plan)"

ZERO_OUT_SINK = "sink"  # zero-out emulated by moving the person into the sink (engine.run.analysis._audit)
ZERO_OUT_NULL = "null"  # the person stays with weight 0 (exact, for mechanisms that count weight-0 clients)


@dataclass(frozen=True)
class AuditPlan:
    """How a mechanism is audited (:mod:`engine.run.analysis._audit`). ``runs``: default runs per dataset (command line);
    ``test_runs``: the test suite's; ``params``: overrides of the mechanism's defaults, each explained in
    ``note``."""

    depth: int = 4
    base_users: int = 1  # people in the sink cell
    runs: int = 10_000
    test_runs: int = 1000
    params: dict = field(default_factory=dict)
    # "target" cell, "half-plane" past the midpoint of a move, or "measurement": the release's own noisy
    # measurement at the target (``Mechanism.measured_at``: SNH's noisy grid, a count-min sketch's estimate)
    statistic: str = "target"
    value_pair: tuple[float, float] | None = None  # replace the person's value (attribute-mean family)
    move_km: float | None = None  # metric privacy: one location moves this far east
    zero_out: str = ZERO_OUT_SINK
    note: str = ""


# the plans several mechanisms share
ZERO_OUT = AuditPlan(
    base_users=1000, note="1,000 people in the sink (zero-out emulation, see engine.run.analysis._audit)"
)
ONE_OTHER = replace(ZERO_OUT, base_users=1, note="U = 2: one sub-query spends all of epsilon")
VALUE = AuditPlan(
    base_users=0,
    value_pair=(0.0, 255.0),
    params={"min_cohort": 1},
    note="min_cohort = 1: a region holding only the person (the cohort floor is a utility rule, not part of the "
    "LDP claim); values 0 and 255, the ends of the default 8-bit range",
)
MOVE = AuditPlan(
    base_users=0,
    move_km=1.0,
    statistic="half-plane",
    params={"attack_users": 0},
    note="attack_users = 0: the attack diagnostics do not change the release",
)


@dataclass(frozen=True)
class NoiseCase:
    """One neighbouring pair of the raw-output noise audit (:mod:`engine.run.analysis.noise_audit`): its ``name``, the
    mechanism's ``params``, the map's ``depth``, the people in the sink cell; ``metric_move_m``: for a metric
    guarantee, one location moves this far; ``float_attack``: Mironov's floating-point test applies (the
    release measures a grid of single Laplace draws, or noisy locations); ``key`` is set by the registry."""

    name: str
    params: dict = field(default_factory=dict)
    depth: int = 2
    base_users: int = 1
    metric_move_m: float | None = None
    float_attack: bool = False
    key: str = ""
