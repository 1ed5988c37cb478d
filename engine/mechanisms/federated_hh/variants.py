"""The Table 3 variants of Adaptive HH (Bagdasaryan et al. 2022, Appendix A): the interactive algorithm of
:class:`.mechanism.AdaptiveHH` with a fixed epsilon per level, a fixed split threshold, or no noise."""

from __future__ import annotations

from dataclasses import replace

from ..base import ServerView, aggregate_view, register
from ..capabilities import ZERO_OUT
from .mechanism import AdaptiveHH
from .mechanism import level_density as level_density  # the dashboard's per-level view of these mechanisms too
from .param_groups import RELATION_PARAMS, with_defaults


@register
class HHFixedEpsilon(AdaptiveHH):
    """Table 3, row "Fixed epsilon, non-adaptive (T = 10)" (Bagdasaryan et al. 2022,
    Appendix A): the interactive algorithm with the budget split evenly over
    ``max_levels`` sub-queries and a fixed split threshold of 10 users. Same
    protocol, threat model and guarantee as ``adaptive_hh`` (see its docstring
    for departures); if the tree stops growing early, the final sub-query spends
    what is left."""

    key = "hh_fixed_eps"
    planner = "none"
    audit_plan = replace(ZERO_OUT, runs=3000, test_runs=300)
    relation_plans = {}
    label = "Interactive HH, fixed epsilon per level, T = 10 (Table 3)"
    summary = "The interactive quadtree with epsilon/levels per round and a constant split threshold of 10."
    equations = "Appendix A, Table 3; Algorithms 1-2 without Eqs. 6-9"
    params = with_defaults(AdaptiveHH.params, schedule="fixed", threshold_rule="fixed")


@register
class HHScheduledFixedThreshold(AdaptiveHH):
    """Table 3, row "Scheduled epsilon, non-adaptive (T = 10)" (Bagdasaryan et al.
    2022, Appendix A): the epsilon schedule of Eqs. 7-9 with a fixed split
    threshold of 10 users instead of Eq. 6. Otherwise as ``adaptive_hh``."""

    key = "hh_scheduled_fixed_t"
    relation_plans = {}
    label = "Interactive HH, scheduled epsilon, T = 10 (Table 3)"
    summary = "The interactive quadtree with the paper's epsilon schedule but a constant split threshold of 10."
    equations = "Appendix A, Table 3; Eqs. 7-9 without Eq. 6"
    params = with_defaults(AdaptiveHH.params, threshold_rule="fixed")


@register
class HHInteractiveNonPrivate(AdaptiveHH):
    """Table 3, row "No noise (T = 10, epsilon = inf)" (Bagdasaryan et al. 2022,
    Appendix A): the interactive tree refinement with exact counts (no noise,
    no budget) and a split threshold of 10 users; it stops when nothing splits
    or after ``max_levels`` rounds. NOT private: clients still send one-hot
    vectors through secure aggregation, so the server learns the exact counts
    of the tree's cells."""

    key = "hh_interactive_nonprivate"
    margin = "repeats"
    margin_note = "no privacy noise; the map varies with the clients' sampling: estimated from repeats"
    planner = "none"
    audit_plan = replace(ZERO_OUT, runs=1000)
    relation_plans = {}
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
        for p in with_defaults(AdaptiveHH.params, threshold_rule="fixed")
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
