"""The DAWA mechanism: Hilbert order, private partition (:mod:`.partition`), GreedyH (:mod:`.greedyh`)."""

from __future__ import annotations

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..capabilities import AuditPlan
from ..common import (
    LAPLACE_SD,
    UNIT_PARAM,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
)
from ..noise_model import Correlated, NoiseModel
from .greedyh import (
    all_ranges_sample,
    bucket_workload,
    build_tree,
    greedy_weights,
    least_squares,
    node_totals,
    node_weights,
)
from .hilbert import hilbert_order
from .partition import private_partition

WORKLOADS = ("all ranges", "squares")


def workload_rects(domain, params: dict) -> np.ndarray:
    """The workload GreedyH optimises for, as rectangles of whole cells ``(ix0, iy0, ix1, iy1)``: a
    sample of all ranges, or random squares as the Range queries page draws them (public parameters and
    a public seed; a square's partly covered cells count whole)."""
    rng = np.random.default_rng(int(params["workload_seed"]))
    count = int(params["workload_queries"])
    if params["workload"] == "all ranges":
        return all_ranges_sample(domain.n, count, rng)
    lo, hi = float(params["side_min_pct"]), float(params["side_max_pct"])
    if not 0 < lo <= hi <= 100:
        raise ParamError(f"square sides must satisfy 0 < min <= max <= 100 (% of the map's side); got {lo}, {hi}")
    cells = domain.rect_to_cells(domain.random_square_queries(rng, count, (lo / 100, hi / 100)))
    out = np.column_stack([np.floor(cells[:, :2]), np.ceil(cells[:, 2:])]).astype(np.int64)
    out[:, 2:] = np.maximum(out[:, 2:], out[:, :2] + 1)
    return np.clip(out, 0, domain.n)


@register
class Dawa(Mechanism):
    """DAWA, the data- and workload-aware algorithm (Li, Hay, Miklau, Wang, "A data- and workload-aware
    algorithm for range queries under differential privacy", PVLDB 7(8), 2014), with GreedyH.

    The paper's text was not at hand: what follows restates the algorithm as its public implementations run
    it (ektelo's ``Dawa`` plan and ``greedyH``, DPBench's ``dawa2D_engine``, read to understand, not
    copied). The section numbers below (Section 3: the
    partition, Section 4: GreedyH, the 2-D extension through a Hilbert curve) are from memory of the paper
    and should be checked against it; no equation numbers are quoted for that reason.

    1. The 2^L x 2^L cells are read along a Hilbert curve into a vector x of n = 4^L counts.
    2. Stage 1 (Section 3), eps1 = ``ratio`` x epsilon: a partition of x into contiguous buckets of
       least total noisy cost, a bucket B costing dev(B) + 1/eps2 (dev(B) = sum |x_k - mean_B|) plus
       Laplace((2 - 1/|B| - 1/n)/eps1) for |B| > 1, clamped below at 1/eps2; dynamic programming over
       prefixes. ``partition = approx`` (default, DPBench's 2-D setting) considers buckets of
       power-of-two length at any start (O(n log^2 n) here), ``exact`` every length (small maps).
    3. Stage 2 (Section 4), eps2 = the rest: GreedyH over a binary tree on the buckets, each node's
       share between its own interval and its children's subtrees chosen by a 100-step grid search
       minimising the workload's expected error; weights along every root-to-leaf path sum to 1, so the
       weighted node totals have L1 sensitivity 1 and get Laplace(1/eps2) each; the bucket totals are
       their least-squares estimate, each spread evenly over its bucket's cells, and the Hilbert order
       undone.

    Workload: ``all ranges`` (default) is a sample of ``workload_queries`` rectangles uniform over all
    ranges of the grid; ``squares`` draws them as the Range queries page does (side between
    ``side_min_pct`` and ``side_max_pct`` of the map's side). Either way from ``workload_seed``, public.

    Threat model: a trusted curator sees every location and publishes the released map (and the
    partition it implies); the adversary sees the release. Guarantee: epsilon-DP (central) under
    add/remove user (add/remove record with ``unit = record``), by sequential composition of eps1 for the
    partition (the paper's theorem on the noisy costs; its proof is not in the corpora, so the project's
    privacy audit, ``python -m engine audit dawa``, is the check) and eps2 for GreedyH (Laplace on
    queries of L1 sensitivity 1). Unit ``user`` weights each of a user's k locations 1/k: one user moves
    x by at most 1 in L1, so each bucket's dev by at most 2(1 - 1/|B|) and the bucket totals by at most 1
    in L1, the per-bucket bounds the record-level argument uses (our extension: the paper is record-level).
    The audit's plan is a 2 x 2 map (its ``audit_plan`` below), where the partition's few choices reach the
    person's cell; it also catches a copy whose partition noise is at a quarter of the scale
    (tests/test_audit.py).

    GreedyH's grid search at depth d discounts the node's own query by 2^(-d/2) (``depth_decay``, on by
    default), as the authors' code does (their standalone DAWA, then ektelo and DPBench; the paper's text
    was not at hand to check whether it states it): without it the node-by-node search is myopic and, on
    DPBench's data at 10^6 points, its strategy's exact error was about twice DPBench's on the same
    buckets (BENCHMARKS.md). The weights, the least squares and the reported error stay exact.

    Departures: the authors' code hands GreedyH the Gram matrix Q^T Q where it reads a workload matrix,
    so it minimises trace((Q^T Q)^2 M) rather than the expected error trace(Q^T Q M); the project uses
    Q (DPBench's GreedyH fed either on the same buckets: exact errors within 1% at 10^4 points, 2-8% at
    10^6; BENCHMARKS.md). Their search also stops splitting a node whose buckets no query tells apart
    and measures it once; the project's splits down to the buckets. The tree over the buckets is binary,
    halving each interval, whatever m. The
    workload is a sample of rectangles rather than the full Gram matrix of all ranges (which is dense in
    the buckets); a square's partly covered cells count whole. Every bucket's own total is added to the
    workload as a query of weight ``point_weight`` (default 1): a sample of 1,000 rectangles leaves most
    boundaries between buckets uncut, and GreedyH then gives the children of such nodes the least share of
    the grid (p = 0.01, compounding down the tree), so a later query that does cut there is answered with
    enormous noise (DPBench's twitter data at 10^5 points and epsilon 10: 15x Identity's scaled L1 without
    the point queries, 0.48x with them; 0.1 to 10 gave about the same). The budget split ``ratio`` = 0.25 is
    DPBench's 2-D default and the authors' standalone code's (DPBench's 1-D engine uses 0.5).

    Noise model (``Release.noise``): the buckets are the released units. Given the released
    partition (and the public workload, so the weights), each bucket's least-squares estimate has the
    variance of the tree's generalised least squares (``2 / eps2^2`` per measurement over the squared
    weight), exact in closed form; a cell's is its bucket's divided by its size. The spread of a
    bucket's total over its cells is a bias, not noise (the margin's spreading term covers it). Buckets
    are correlated through the tree in a way the release does not state (:class:`Correlated`): a region
    inside one bucket has its exact margin, a region over several has none.
    """

    key = "dawa"
    margin = "closed form"
    margin_note = "the least-squares variance of each bucket, given the partition (regions over several buckets: none)"
    planner = "simulated"
    audit_plan = AuditPlan(
        depth=1,
        base_users=3,
        note="a 2 x 2 map (4 cells along the Hilbert curve, buckets of 1, 2 or 4 cells) with 3 others in the sink "
        "cell: the partition has few choices, so the person's effect on it reaches the target's value",
    )
    label = "DAWA (Li et al., data- and workload-aware)"
    family = "central"
    guarantee = "epsilon-DP (central) under add/remove user (add/remove record with unit = record)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the released map and its buckets."
    summary = (
        "Cells in Hilbert order are grouped privately into near-uniform intervals, whose totals are measured "
        "through a tree of queries weighted for the range workload and estimated by least squares."
    )
    paper = (
        "Li, Hay, Miklau, Wang. A data- and workload-aware algorithm for range queries under differential "
        "privacy. PVLDB 7(8), 2014"
    )
    equations = "Section 3 (private partition, noisy bucket costs), Section 4 (GreedyH); 2-D by a Hilbert order"
    params = (
        UNIT_PARAM,
        Param(
            "ratio",
            "float",
            0.25,
            "share of epsilon spent on the partition (DPBench's 2-D default)",
            min=0.01,
            max=0.99,
        ),
        Param(
            "partition",
            "choice",
            "approx",
            "'approx': buckets of power-of-two length only (fast); 'exact': every length (maps of at most 32 x 32)",
            choices=("approx", "exact"),
        ),
        Param(
            "workload",
            "choice",
            "all ranges",
            "the range queries GreedyH is tuned for: a sample of all rectangles, or squares as on the Range "
            "queries page",
            choices=WORKLOADS,
        ),
        Param("workload_queries", "int", 1000, "rectangles in the workload sample", min=10, max=20_000, log=True),
        Param(
            "side_min_pct",
            "float",
            1.0,
            "smallest square side, % of the map's side",
            min=0.1,
            max=100.0,
            shown_if=(("workload", "squares"),),
        ),
        Param(
            "side_max_pct",
            "float",
            10.0,
            "largest square side, % of the map's side",
            min=0.1,
            max=100.0,
            shown_if=(("workload", "squares"),),
        ),
        Param("workload_seed", "int", 0, "seed of the (public) workload sample", min=0, max=2**31 - 1),
        Param(
            "point_weight",
            "float",
            1.0,
            "weight of every bucket's own total as an extra workload query (0: the sampled rectangles alone, which "
            "leave most bucket boundaries uncut, so GreedyH starves those subtrees)",
            min=0.0,
            max=100.0,
        ),
        Param(
            "depth_decay",
            "bool",
            True,
            "GreedyH discounts a node's own query by 2^(-depth/2) in its search, as the authors' code does "
            "(off: the node-by-node search minimises the exact error and is myopic)",
        ),
    )
    dp_outputs = ("buckets", "measured_queries", "bucket_estimates", "noise", "greedyh_error")
    side_information_keys = ()
    partition_noise = 1.0  # multiplies the partition's noise scale (the audit's weakened copy lowers it)

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        ratio = float(params["ratio"])
        eps1, eps2 = ratio * eps, (1.0 - ratio) * eps
        bounded = bound_contributions(data, domain, params["unit"])
        order = hilbert_order(domain.depth)
        x = bounded.data.true_histogram(domain).ravel()[order]
        ledger = Ledger()
        ctx.progress(0.1, "choosing the partition")
        starts = private_partition(x, eps1, eps2, ctx.noise, params["partition"], self.partition_noise)
        ledger.spend(
            "partition", eps1, note=f"noisy bucket costs, Laplace((2 - 1/|B| - 1/n)/eps1) each; {bounded.short}"
        )
        ctx.check_cancelled()
        m = starts.size
        sizes = np.diff(np.append(starts, x.size))
        label_vec = np.repeat(np.arange(m), sizes)
        labels = np.empty(x.size, dtype=np.int64)
        labels[order] = label_vec
        labels = labels.reshape(domain.n, domain.n)
        ctx.progress(0.4, f"GreedyH on {m} buckets")
        tree = build_tree(m)
        Q = bucket_workload(workload_rects(domain, params), labels, sizes)
        shares, err = greedy_weights(tree, Q, float(params["point_weight"]), bool(params["depth_decay"]))
        w = node_weights(tree, shares)
        measured = np.flatnonzero(w > 0)
        totals = np.add.reduceat(x, starts)
        y = np.zeros(w.size)
        y[measured] = ctx.noise.add_laplace(w[measured] * node_totals(tree, totals)[measured], 1.0 / eps2)
        ledger.spend("GreedyH queries", eps2, note=f"Laplace(1/eps2) on weighted interval totals; {bounded.short}")
        est, var = least_squares(tree, w, y, (LAPLACE_SD / eps2) ** 2)
        vec = np.repeat(est / sizes, sizes)
        sd_vec = np.repeat(np.sqrt(var) / sizes, sizes)
        density = np.empty(x.size)
        density[order] = vec
        stderr = np.empty(x.size)
        stderr[order] = sd_vec
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "epsilon_partition": eps1,
                "epsilon_measure": eps2,
                "ratio": ratio,
                "partition": params["partition"],
                "buckets": int(m),
                "measured_queries": int(measured.size),
                "workload": params["workload"],
                "greedyh_error": err * (LAPLACE_SD / eps2) ** 2,
            }
        )
        density = density.reshape(domain.n, domain.n)
        noise = NoiseModel.of_cells(
            density,
            stderr.reshape(domain.n, domain.n),
            "the least-squares variance of each bucket given the partition, over its cells",
            label=labels,
            covariance=Correlated("the buckets' estimates share the noise of the measured tree's queries"),
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the map and its buckets"),
            diagnostics=diag,
            extras={"buckets": labels, "bucket_estimates": est},
            noise=noise,
        )
