"""Classical central-DP baselines (DPBench / DPComp): the comparators every new
mechanism is measured against.

* ``identity`` / ``identity_topt``: Laplace per cell (Dwork et al. 2006), optionally
  with negatives clipped and the top-t% thresholding of Ghazi et al. (2023, Section 4).
* ``uniform``: the total spread evenly.
* ``ug`` / ``ag``: uniform and adaptive grids (Qardaji, Yang, Li, ICDE 2013), their grid
  sizes snapped to divisors of the output resolution.
* ``privtree``: PrivTree (Zhang, Xiao, Xie, SIGMOD 2016).
* ``hierarchical``: a tree of noisy counts with constrained inference (Hay et al., VLDB
  2010), by default HB (Qardaji, Yang, Li, VLDB 2013: branching and budget split from a
  range-query variance analysis); the quadtree with the uniform or the geometric budget
  (Cormode et al., ICDE 2012) remain options.

Common threat model: a trusted curator sees every location in the clear and
publishes only the release; the adversary sees the release.

Unit of privacy: the ``unit`` parameter of every mechanism here (said in every
release's diagnostics and ledger notes).

* ``unit = "user"`` (default): user-level epsilon-DP, neighbouring datasets differ
  by all the locations of one user (add/remove). Each user's contribution is
  bounded once, by :func:`bound_contributions`, before anything is counted:

  - *weighting* (identity, identity_topt, uniform, ug, ag, hierarchical): each of
    a user's k locations inside the (public) domain counts 1/k; with location
    weights, w_j / (sum of the user's weights), and a user whose weights sum to 0
    contributes nothing (this is ``Dataset.true_histogram(per_user_normalised=True)``
    on the in-domain data). Every count vector these mechanisms noise is the
    per-cell sum of these masses over a partition of the domain (the output grid,
    a UG grid, an AG level, a quadtree level, the whole domain), so one user moves
    each such vector by at most sum_j 1/k = 1 in L1: the sensitivity-1 Laplace
    scales and the compositions of the record-level proofs carry over unchanged
    (hierarchical: per level; AG: the second-level partition is post-processing
    of the noisy first level, so it is fixed when the second level is noised).
  - *sampling* (privtree): PrivTree's proof is about one record moving the counts
    along one root-to-leaf path (the depth bias makes the loss decay along that
    path); a 1/k-weighted user touches up to k paths and we have no proof for
    that. So each user contributes ONE location, drawn with ``ctx.rng`` uniformly
    among its locations inside the domain (with weights: proportionally to weight),
    counted 1. A user's draw depends on that user's locations only and is
    independent of the others', so (coupling the other users' draws) the samples
    of neighbouring datasets differ by at most one record of count 1, and PrivTree's
    record-level guarantee on the sample is user-level on the data.
  - Without user ids every location is its own user and ``user`` = ``record``
    (identical releases at the same seed); location weights are then clipped to
    [0, 1] under ``user`` (a weight above 1 would count one user more than once),
    as the sparse-EMD and federated mechanisms do.

  Released values are then in units of users (a cell estimates the sum over users
  of the fraction of their locations in it), as for the sparse-EMD and federated
  releases. No cap on locations per user is offered: after 1/k weighting the
  sensitivity is already 1, so keeping only m locations (each 1/m) would only
  discard data.
* ``unit = "record"``: one location record; every count has sensitivity 1, a
  user with k locations is protected at k*epsilon only (group privacy); counts are
  sums of weights and a record of weight w is protected at w*epsilon.

Outputs are estimated counts on the run's domain grid (``grid[iy, ix]``). Mechanisms
whose cells are coarser than the output cells (UG, AG, PrivTree) spread each cell's count
uniformly over the output cells it covers (the uniformity assumption the papers use to
answer range queries). UG and AG choose grid sizes that divide the output resolution
(``align = on``), so their cells are blocks of whole output cells, or use the papers' sizes
and spread cells straddling output cells in proportion to the overlap area (``off``); the
default, ``auto``, picks the one the papers' error model prefers at the output resolution
(:mod:`.alignment`).

The reusable :func:`laplace_baseline` is the baseline of Ghazi et al. used by the
sparse-EMD mechanism.

Noise: every Laplace draw (cell counts, noisy totals, PrivTree's split decisions and
leaf counts, quadtree levels) is ``ctx.noise.add_laplace(values, scale)``: from the
seeded numpy stream (``values + rng.laplace(0, scale, shape)``), or in secure mode
with the values themselves passed through OpenDP's Laplace measurement, so OpenDP's
floating-point-safe guarantee covers the released numbers (engine.core.noise). The one
non-noise draw, the sampled location per user of PrivTree under ``user``, stays on
``ctx.rng`` in both modes (not privacy noise: the guarantee holds conditionally on every draw).

Of these papers only Ghazi et al.'s text was at hand; the formulae of the others,
restated in each mechanism's docstring, follow DPBench and DPComp's descriptions
(Hay, Machanavajjhala, Miklau, Chen, Zhang, "Principled Evaluation of Differentially
Private Algorithms using DPBench", SIGMOD 2016); section numbers quoted for Qardaji et
al. and theorem numbers for Hay et al. are from memory and should be checked against
the papers. The text of Qardaji et al.'s
VLDB 2013 paper (HB) was not reachable either (the search tool holds its abstract only):
``hierarchical`` re-derives its variance analysis and says where its section number
comes from.

Layout: :mod:`.identity` (identity, identity_topt, uniform), :mod:`.grids` (UG, AG), :mod:`.privtree`,
:mod:`.trees` (hierarchical, its constrained inference and covariance) and :mod:`.laplace_regions` (Laplace
over regions), over the mechanisms' shared toolkit :mod:`engine.mechanisms.common` (contribution bounding,
the curator's view, geometry, Laplace counts, the division of epsilon). Importing the package registers the mechanisms.
"""

from . import grids, identity, laplace_regions, privtree, trees  # noqa: F401  (each registers its mechanisms)

CENTRAL_KEYS = ("identity", "identity_topt", "uniform", "ug", "ag", "privtree", "hierarchical")  # the baselines above
