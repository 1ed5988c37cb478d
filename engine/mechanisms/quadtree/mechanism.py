"""The QuadTree mechanism: the full quadtree's noisy counts under the geometric budget, then least squares."""

from __future__ import annotations

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.grid import downsample
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..capabilities import AuditPlan
from ..central.trees import (
    TreeCovariance,
    constrained_inference,
    constrained_inference_variance,
    hierarchical_budget,
    tree_levels,
)
from ..common import (
    UNIT_PARAM,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
    laplace_counts,
)
from ..noise_model import NoiseModel

BUDGETS = ("geometric", "uniform")


def geometric_budget(h: int, eps: float) -> np.ndarray:
    """Cormode et al.'s geometric budget written as the paper writes it, level i counted from the leaves
    (i = 0) to the root (i = h): eps_i = 2^((h - i)/3) eps (2^(1/3) - 1) / (2^((h + 1)/3) - 1). Returned root
    first (index d = h - i), the order of :func:`engine.mechanisms.central.trees.hierarchical_budget`, which
    computes the same split (tests/test_quadtree.py checks the two agree)."""
    i = np.arange(h, -1, -1, dtype=np.float64)
    c = 2.0 ** (1.0 / 3.0)
    return 2.0 ** ((h - i) / 3.0) * eps * (c - 1.0) / (2.0 ** ((h + 1) / 3.0) - 1.0)


@register
class QuadTree(Mechanism):
    """QuadTree (Cormode, Procopiuc, Srivastava, Shen, Yu, "Differentially private spatial decompositions",
    ICDE 2012): the data-independent full quadtree, noisy counts on every level with the paper's geometric
    budget, and its ordinary-least-squares post-processing.

    1. The tree: the root is the domain; every node splits into four equal quadrants down to leaves of one
       cell of a 2^h x 2^h grid (h = ``height``, by default the run's depth: the full quadtree over the output
       cells, as DPBench runs it on its 256 x 256 domain). Each location lies in one node per level, so the
       levels compose sequentially and the nodes of one level in parallel.
    2. Budget (the paper's Section on budget allocation, "geometric budget"): a query's canonical nodes
       number about 2^(h-i) per side at level i (counted up from the leaves), so its variance is
       proportional to sum_i 2^(h-i) / eps_i^2 (the paper bounds the level-i nodes a query touches by a constant
       times 2^(h-i)); minimising it under
       sum_i eps_i = epsilon gives eps_i proportional to 2^((h-i)/3): eps_i = 2^((h-i)/3) epsilon
       (2^(1/3) - 1) / (2^((h+1)/3) - 1), the leaves getting the most (:func:`geometric_budget`).
       ``budget = uniform``: epsilon / (h + 1) per level, the paper's baseline.
    3. Post-processing (the paper's "optimized post-processing"): the estimate of the true counts that is
       consistent (each node equals the sum of its children) and minimises sum_v eps_(level of v)^2
       (Y_v - beta_v)^2 over the noisy counts Y, i.e. ordinary least squares once every count is scaled by its
       level's epsilon (the weights make the noise of every equation equal). The paper computes it in linear
       time in three passes over the tree; the same estimate comes out of the two-pass constrained inference of
       Hay et al. with per-level variances 2/eps_i^2 (:func:`engine.mechanisms.central.trees.constrained_inference`,
       the weighted least-squares solution of the same system), which is what runs here: tests check it
       against a dense least-squares solve. ``post_processing`` off releases the raw noisy leaves.

    Threat model: a trusted curator sees every location and publishes the noisy counts of every node (and
    the map, their consistent estimate); the adversary sees the release. Guarantee: epsilon-DP (central) under
    add/remove user (add/remove record with ``unit = record``): level i's counts are a partition's counts
    (L1 sensitivity 1) with Laplace(1/eps_i), sum_i eps_i = epsilon; least squares is post-processing. Unit
    ``user`` weights each of a user's k locations 1/k, so each level's count vector moves by at most 1 in L1.

    Departures: none in the algorithm. The paper also studies data-dependent splits (kd-trees, Hilbert R-trees)
    and a pruning of nodes with small noisy counts; neither is part of the data-independent quadtree run here.
    Its section numbers are not quoted: its text was not reachable from this machine (the search tool holds its
    abstract), so the equations above are restated from the paper as we know it; the budget formula is the
    paper's own (and DPBench's ``QuadTree``). DPBench's code replaces the least squares by a
    two-step approximation (a weighted average of each node with its children's sum using the children's level
    budget only, then mean consistency), which is not the least-squares estimate when the children are
    themselves averages.

    Standard error: exact and data-independent: the estimate is linear in the noisy counts, so each leaf's
    variance follows from the levels' 2/eps_i^2 through the inference
    (:func:`engine.mechanisms.central.trees.constrained_inference_variance`; the raw leaf's sqrt(2)/eps_0 without
    post-processing), spread over a leaf's output cells when leaves are coarser (``Release.noise``: the leaves
    are the released units). Siblings' errors are correlated after the least squares: the noise model carries
    the tree's covariance (:class:`engine.mechanisms.central.trees.TreeCovariance`), as ``hierarchical``'s does.
    """

    key = "quadtree"
    data_independent = True
    margin = "closed form"
    margin_note = "the least squares' covariance, from the public tree and budgets"
    planner = "exact"
    audit_plan = AuditPlan(
        depth=1,
        note="a 2 x 2 map (two levels): on 16 x 16 the leaves get under a third of epsilon and the least squares "
        "spreads the person over the tree",
    )
    label = "QuadTree (Cormode et al., geometric budget + least squares)"
    family = "central"
    guarantee = "epsilon-DP (central) under add/remove user (add/remove record with unit = record)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy counts of every quadtree node."
    summary = (
        "Noisy counts on every level of the full quadtree, with more of the budget towards the leaves (geometric), "
        "made consistent by least squares."
    )
    paper = "Cormode, Procopiuc, Srivastava, Shen, Yu. Differentially private spatial decompositions. ICDE 2012"
    equations = (
        "geometric budget eps_i = 2^((h-i)/3) eps (2^(1/3)-1)/(2^((h+1)/3)-1), i from the leaves; ordinary least "
        "squares over the tree (counts scaled by their level's eps)"
    )
    params = (
        UNIT_PARAM,
        Param(
            "height",
            "int",
            0,
            "the leaves are a 2^height x 2^height grid (at most the run's); 0 = the run's resolution (the full quadtree)",
            min=0,
            max=10,
        ),
        Param(
            "budget",
            "choice",
            "geometric",
            "split of epsilon over the levels: 'geometric' proportional to 2^((h-i)/3), level i counted from the leaves "
            "(the paper's); 'uniform' equal on every level (the paper's baseline)",
            choices=BUDGETS,
        ),
        Param("post_processing", "bool", True, "ordinary least squares over the tree (off: the raw noisy leaves)"),
    )
    dp_outputs = ("raw_leaves", "noise")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        truth = bounded.data.true_histogram(domain)
        h = min(int(params["height"]), domain.depth) or domain.depth
        f = domain.n >> h
        levels = tree_levels(downsample(truth, f) if f > 1 else truth, 2)
        eps_levels = hierarchical_budget(h + 1, eps, params["budget"], 2)
        ledger = Ledger()
        noisy = []
        for d, (grid, e) in enumerate(zip(levels, eps_levels)):
            step, note = f"level {d} counts", f"Laplace(1/eps_{d}) per quadtree node"
            noisy.append(laplace_counts(grid, float(e), ctx.noise, ledger, step, f"level {d}", note, bounded))
        ctx.check_cancelled()
        variances = [2.0 / float(e) ** 2 for e in eps_levels]
        ols = bool(params["post_processing"])
        est = constrained_inference(noisy, variances, 2)[h] if ols else noisy[h]
        if ols:
            var = constrained_inference_variance([g.shape[0] for g in levels], variances, 2)[h]
        else:
            var = np.full(est.shape, variances[h])
        spread = np.ones((f, f)) / (f * f)
        density = np.kron(est, spread) if f > 1 else est
        stderr = np.kron(np.sqrt(var), spread) if f > 1 else np.sqrt(var)
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "height": int(h),
                "branching": 2,
                "levels": int(h + 1),
                "budget": params["budget"],
                "epsilon_per_level": [float(e) for e in eps_levels],
                "consistency": ols,
            }
        )
        basis = "Laplace(1/eps_i) per node, through the (linear) least squares"
        cov = TreeCovariance(domain.n, h, 2, tuple(variances)) if ols else None
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the noisy counts of every quadtree node"),
            diagnostics=diag,
            extras={"raw_leaves": noisy[h]},
            noise=NoiseModel.of_blocks(density, stderr, f * f, basis, covariance=cov),
        )
