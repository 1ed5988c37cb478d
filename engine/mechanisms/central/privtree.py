"""PrivTree (Zhang, Xiao, Xie, "PrivTree: a differentially private algorithm for hierarchical
decompositions", SIGMOD 2016): a quadtree split where the noisy, biased counts say so, then one Laplace
count per leaf."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.grid import pyramid
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..common import (
    LAPLACE_SD,
    UNIT_PARAM,
    bound_contributions,
    cells_to_metres,
    curator_communication,
    curator_diagnostics,
    curator_view,
    noise_source,
    split_epsilon,
)
from ..noise_model import NoiseModel


def privtree_params(eps_tree: float, beta: int = 4) -> tuple[float, float]:
    """Zhang et al., PrivTree privacy theorem: lambda = (2 beta - 1) / ((beta - 1) eps), delta = lambda ln beta."""
    lam = (2.0 * beta - 1.0) / ((beta - 1.0) * eps_tree)
    return lam, lam * math.log(beta)


def privtree_decompose(
    levels: list[np.ndarray], lam: float, delta: float, theta: float, rng, max_depth: int | None = None
) -> list[np.ndarray]:
    """PrivTree's split rule (Zhang et al., Algorithm 2) over a quadtree of count grids.

    ``levels[d]`` holds the true counts of the 2^d x 2^d nodes at depth d (root = depth 0).
    A visited node v at depth d gets the biased count b(v) = max(c(v) - d delta, theta - delta)
    and is split iff b(v) + Lap(lambda) > theta; nodes at ``max_depth`` are never split.
    Returns ``leaf[d]``: boolean masks of the leaves at each depth 0..max_depth.
    Noise is drawn only for visited nodes, level by level in row-major order.
    """
    noise = noise_source(rng)
    L = len(levels) - 1 if max_depth is None else int(max_depth)
    leaves: list[np.ndarray] = []
    active = np.ones((1, 1), dtype=bool)
    for d in range(L + 1):
        if d == L:
            leaves.append(active)
            break
        idx = np.flatnonzero(active)
        split_mask = np.zeros(active.shape, dtype=bool)
        if idx.size:
            b = np.maximum(levels[d].ravel()[idx] - d * delta, theta - delta)
            split = noise.add_laplace(b, lam) > theta
            split_mask.ravel()[idx[split]] = True
        leaves.append(active & ~split_mask)
        active = split_mask.repeat(2, axis=0).repeat(2, axis=1)
    return leaves


@register
class PrivTree(Mechanism):
    """PrivTree (Zhang, Xiao, Xie, "PrivTree: a differentially private algorithm for
    hierarchical decompositions", SIGMOD 2016), Algorithm 2 on the quadtree of the
    domain (fanout beta = 4).

    Tree construction with budget eps_tree = split_share * eps: lambda = (2 beta - 1)
    / ((beta - 1) eps_tree), delta = lambda ln beta (its privacy theorem); a node v at depth
    d(v) (root = 0, its own depth) has biased count b(v) = max(c(v) - d(v) delta,
    theta - delta) and is split iff b(v) + Lap(lambda) > theta. Nodes at the
    domain's depth L (single output cells) are not split. The leaves (disjoint) are
    then released with Laplace(1/eps_count) counts, eps_count = (1 - split_share) eps
    (parallel composition); each leaf's count is spread uniformly over its output cells.

    Threat model: trusted curator; the public sees the tree and the noisy leaf counts.
    Guarantee: epsilon-DP: the tree is eps_tree-DP whatever its depth (the privacy theorem; the
    depth limit only removes nodes from the analysis), the leaf counts eps_count-DP,
    composed sequentially.

    Unit of privacy: ``user`` (default) uses ONE location per user, drawn with
    ``ctx.rng`` uniformly among the user's locations inside the domain
    (proportionally to weight when weighted), counted 1: the sampling variant, not
    the 1/k weighting of the other baselines, because the privacy theorem is proved
    for one record changing the counts along one root-to-leaf path, and a weighted
    user changes up to k paths (we have no proof for that). Each user's draw depends
    only on its own locations, so neighbouring datasets give samples differing by
    at most one record: user-level epsilon-DP. Without user ids each location is a
    user (no draws; weights clipped to [0, 1]: a change of at most 1 along one path,
    as in the theorem, whose biased counts already differ by between 0 and 1).
    ``record``: every location counts (its weight), a user with k locations is
    protected at k*epsilon.

    Departures: fanout fixed at 4 (quadtree over the 2^L grid, so leaves align with
    output cells) and a maximum depth L (the paper has no depth limit: its domain
    is continuous). Defaults split_share = 0.5 and theta = 0 follow the paper's
    spatial experiments as we recall them; the paper is not among the shared
    texts (section and theorem numbers are not cited for that reason), so both are
    parameters. Negative noisy leaf counts are kept. Under ``user`` the locations
    beyond each user's sampled one are not used.

    Noise model (``Release.noise``): the leaves are the released units, each of standard
    deviation sqrt(2)/eps_count (its Laplace count, spread uniformly over its output cells), given
    the released tree. Exact given the tree: the leaf counts' noise is drawn after the tree is built
    and independently of its split draws. The tree itself depends on the data (and its own noise),
    so over repeated runs a cell's value also moves with the tree; that part is not in the SE.
    """

    key = "privtree"
    margin = "closed form"
    margin_note = "Laplace(1/eps) per leaf, given the released tree"
    planner = "simulated"
    label = "PrivTree (Zhang et al.)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central; one sampled location per user) under add/remove user; add/remove record "
        "with unit = record"
    )
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the tree and the noisy leaf counts."
    summary = "Split quadtree nodes while a depth-biased noisy count exceeds a threshold; publish noisy leaf counts."
    paper = "Zhang, Xiao, Xie. PrivTree. SIGMOD 2016"
    equations = "Algorithm 2 (PrivTree); lambda = (2b-1)/((b-1)eps), delta = lambda ln b; biased count b(v) = max(c(v) - depth(v) delta, theta - delta)"
    params = (
        UNIT_PARAM,
        Param("split_share", "float", 0.5, "fraction of epsilon spent on building the tree", min=0.05, max=0.95),
        Param("theta", "float", 0.0, "split threshold theta", min=0.0, max=1e6),
        Param(
            "max_depth",
            "int",
            0,
            "deepest level of the tree (0 = the run's resolution)",
            min=0,
            max=10,
            label="max depth",
        ),
    )
    dp_outputs = ("leaves", "leaves_per_depth", "leaf_depth", "noise")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        noise = ctx.noise
        L = domain.depth if params["max_depth"] == 0 else min(int(params["max_depth"]), domain.depth)
        share = float(params["split_share"])
        eps_tree, eps_count = split_epsilon(eps, share)
        lam, delta = privtree_params(eps_tree, 4)
        theta = float(params["theta"])
        bounded = bound_contributions(data, domain, params["unit"], rng=ctx.rng, method="sample")
        truth = bounded.data.true_histogram(domain)
        levels = pyramid(truth)
        ledger = Ledger()
        leaves = privtree_decompose(levels, lam, delta, theta, noise, max_depth=L)
        ledger.spend(
            "tree construction",
            eps_tree,
            note=f"PrivTree split decisions, Lap(lambda), depth-biased counts; {bounded.short}",
        )
        ctx.progress(0.5, "adding noise to the leaf counts")
        ctx.check_cancelled()

        grid = np.zeros((1, 1))
        depth_grid = np.zeros((1, 1), dtype=np.int16)
        rects, n_leaves = [], []
        n = domain.n
        for d, mask in enumerate(leaves):
            if d:
                grid = grid.repeat(2, axis=0).repeat(2, axis=1) / 4.0
                depth_grid = depth_grid.repeat(2, axis=0).repeat(2, axis=1)
            iy, ix = np.nonzero(mask)
            n_leaves.append(int(iy.size))
            if iy.size:
                grid[iy, ix] = noise.add_laplace(levels[d][iy, ix], 1.0 / eps_count)
                depth_grid[iy, ix] = d
                f = n / (1 << d)
                rects.append(np.stack([ix * f, iy * f, (ix + 1) * f, (iy + 1) * f], axis=1))
        ledger.spend(
            "leaf counts",
            eps_count,
            composition="parallel",
            group="leaves",
            note=f"Laplace(1/eps) per leaf; {bounded.short}",
        )
        # leaves at depth < domain depth were spread as they went down; finish to the output grid
        f = n // grid.shape[0]
        if f > 1:
            grid = grid.repeat(f, axis=0).repeat(f, axis=1) / (f * f)
            depth_grid = depth_grid.repeat(f, axis=0).repeat(f, axis=1)
        rects_arr = np.concatenate(rects).astype(np.float64)
        leaf_cells = (n >> depth_grid.astype(np.int64)) ** 2  # output cells of each cell's leaf
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "lambda": lam,
                "delta": delta,
                "theta": theta,
                "beta": 4,
                "epsilon_tree": eps_tree,
                "epsilon_counts": eps_count,
                "max_depth": int(L),
                "leaves": int(sum(n_leaves)),
                "leaves_per_depth": n_leaves,
            }
        )
        basis = "Laplace(1/eps) per leaf count, spread over the leaf's cells, given the tree"
        return Release(
            density=grid,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the PrivTree partition and its noisy leaf counts"),
            partition=cells_to_metres(rects_arr, domain),
            diagnostics=diag,
            extras={"leaf_depth": depth_grid},
            noise=NoiseModel.of_blocks(grid, LAPLACE_SD / eps_count / leaf_cells, leaf_cells, basis),
        )
