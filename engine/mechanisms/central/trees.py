"""Tree-based baselines: PrivTree (Zhang, Xiao, Xie, SIGMOD 2016) and the hierarchical histogram with
constrained inference (Hay et al., VLDB 2010), by default HB (Qardaji, Yang, Li, VLDB 2013), the
quadtree with the uniform or geometric budget (Cormode et al., ICDE 2012) as options."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.grid import downsample
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..common import (
    UNIT_PARAM,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
    laplace_counts,
)
from ..noise_model import NoiseModel, part
from .nonnegative import nonnegative_leaves
from .sizing import height_rule, merge_root, root_count


# ============================================== Hierarchical + consistency
def tree_height(m: int, b: int) -> int:
    """Height of the b-ary (per axis) tree over m x m leaves: the smallest h with b^h >= m."""
    h, side = 0, 1
    while side < m:
        side *= b
        h += 1
    return h


TREE_BUDGETS = ("optimal", "hb", "uniform", "geometric")


def level_weights(height: int, b: int, scheme: str) -> np.ndarray:
    """Relative budgets of the levels 0 (root) .. ``height`` of a tree with branching b per axis
    (0 = the level is not measured); see :func:`hierarchical_budget`."""
    d = np.arange(height + 1)
    if scheme in ("optimal", "geometric"):
        w = float(b) ** (d / 3.0)
    elif scheme in ("hb", "uniform"):
        w = np.ones(height + 1)
    else:
        raise ParamError(f"unknown budget scheme {scheme!r} ({', '.join(TREE_BUDGETS)})")
    if scheme in ("optimal", "hb") and height > 0:
        w[0] = 0.0  # the root (the total) is never used by a query smaller than the domain
    return w


def tree_error_model(m: int, b: int, scheme: str = "optimal") -> float:
    """The variance model of :class:`Hierarchical`: the mean squared error of a random
    rectangle query over m x m leaves, up to a factor common to every b and split,
    sum over d = 1..H of n_d / eps_d^2 with n_d = (b - 1) b^(d - H) (the relative number of
    depth-d nodes the query uses) and eps_d the level budgets for eps = 1."""
    H = tree_height(m, b)
    w = level_weights(H, b, scheme)
    e = w / w.sum()
    d = np.arange(1, H + 1)
    return float(((b - 1) * float(b) ** (d - H) / e[1:] ** 2).sum())


def hb_branching(m: int, scheme: str = "optimal") -> int:
    """HB's branching per axis for an m x m leaf grid: the b >= 2 minimising
    :func:`tree_error_model` under the budget split ``scheme`` (ties: the smaller b); 1 for a
    single leaf. With ``scheme = "hb"`` (equal budgets below the root) the model is
    b (1 - b^-H) H^2, Qardaji et al.'s b h^2 up to the padding term."""
    m = int(m)
    if m <= 1:
        return 1
    best, best_v = 2, math.inf
    for b in range(2, m + 1):
        v = tree_error_model(m, b, scheme)
        if v < best_v * (1 - 1e-12):
            best, best_v = b, v
    return best


def tree_levels(leaves: np.ndarray, b: int) -> list[np.ndarray]:
    """The counts of every node of the tree with branching b per axis over a square leaf grid,
    root first: ``levels[d]`` is b^d x b^d. The grid is padded to side b^H (H =
    :func:`tree_height`) with cells outside the domain, empty by construction."""
    m = leaves.shape[0]
    side = b ** tree_height(m, b)
    g = np.zeros((side, side))
    g[:m, :m] = leaves
    levels = [g]
    while levels[-1].shape[0] > 1:
        k = levels[-1].shape[0] // b
        levels.append(levels[-1].reshape(k, b, k, b).sum(axis=(1, 3)))
    return levels[::-1]


def _block_sum(a: np.ndarray, b: int) -> np.ndarray:
    k = a.shape[0] // b
    return a.reshape(k, b, k, b).sum(axis=(1, 3))


def spread_leaves(leaves: np.ndarray, f: int) -> np.ndarray:
    """Leaves of ``f`` x ``f`` output cells each, spread evenly over their cells."""
    return leaves if f == 1 else leaves.repeat(f, axis=0).repeat(f, axis=1) / (f * f)


def hierarchical_budget(n_levels: int, eps: float, scheme: str = "uniform", b: int = 2) -> np.ndarray:
    """Per-level budgets, index 0 = root, summing to eps (0 = the level is not measured).

    * ``optimal``: eps_d proportional to b^(d/3) on the levels below the root, the root not
      measured: the split minimising :func:`tree_error_model` (Lagrange: eps_d proportional to
      n_d^(1/3), n_d proportional to b^d);
    * ``hb``: eps / (levels - 1) on every level below the root, the root not measured (DPComp's
      HB);
    * ``uniform``: eps / levels on every level (Hay et al.);
    * ``geometric``: eps_d proportional to b^(d/3) on every level including the root (Cormode et
      al. ICDE 2012 derive 2^(d/3) for the quadtree, b = 2).

    A single-level tree measures its root with all of eps."""
    w = level_weights(n_levels - 1, b, scheme)
    out = w / w.sum() * eps
    out[-1] = max(eps - sum(out[:-1].tolist()), 0.0)
    for _ in range(8):  # never spend more than eps, even by one rounding
        if sum(out.tolist()) <= eps:
            break
        out[-1] = np.nextafter(out[-1], 0.0)
    return out


def constrained_inference(noisy: list[np.ndarray], variances, b: int = 2, inside=None) -> list[np.ndarray]:
    """Hay et al. (VLDB 2010, hierarchical/universal histograms, Theorem 3) two-pass consistency
    for a tree with branching b per axis (b^2 children per node) whose level d is a b^d x b^d
    grid (``noisy[0]`` is the root).

    ``variances[d]``: the noise variance of level d's counts (``inf``: the level is not
    measured). ``inside[d]``: level d's nodes per axis that meet the domain (the top-left
    block); the others cover padding only and are known to be 0 (None: all meet it).

    Bottom-up, each measured node's noisy count y (variance s^2) and the sum S of its
    children's estimates (variance V) are combined with inverse-variance weights,
    z = (y / s^2 + S / V) / (1 / s^2 + 1 / V); an unmeasured node takes z = S. Top-down, each
    child gets z_child + (parent - sum of its siblings' z) * V_child / (sum of the siblings'
    V), the weighted least-squares share (the padding nodes, V = 0, get none). With equal
    variances on every level this is exactly Hay's z[v] = (k^l - k^(l-1)) / (k^l - 1) y +
    (k^(l-1) - 1) / (k^l - 1) S and the child's share (parent - S) / k, k = b^2; with per-level
    variances (geometric budgets) it is the weighted least-squares estimate (as for the
    non-uniform budgets of Cormode et al. 2012; checked against an explicit weighted
    least-squares solve in the tests). The result is consistent: every parent equals the sum of
    its children.
    """
    h = len(noisy) - 1
    var = [float(v) for v in variances]
    k = [a.shape[0] for a in noisy] if inside is None else [int(i) for i in inside]
    if not math.isfinite(var[h]):
        raise ValueError("the leaves must be measured")

    def known(d, a):  # zero outside the nodes that meet the domain
        out = np.zeros(noisy[d].shape)
        out[: k[d], : k[d]] = a[: k[d], : k[d]]
        return out

    z, vz = [None] * (h + 1), [None] * (h + 1)
    z[h] = known(h, np.asarray(noisy[h], dtype=np.float64))
    vz[h] = known(h, np.full(noisy[h].shape, var[h]))
    for d in range(h - 1, -1, -1):
        s, vs = _block_sum(z[d + 1], b), _block_sum(vz[d + 1], b)
        if not math.isfinite(var[d]):
            z[d], vz[d] = s, vs
            continue
        wy = 1.0 / var[d]
        ws = np.divide(1.0, vs, out=np.zeros_like(vs), where=vs > 0)
        z[d] = known(d, (wy * np.asarray(noisy[d], dtype=np.float64) + ws * s) / (wy + ws))
        vz[d] = known(d, 1.0 / (wy + ws))
    out = [z[0]]
    for d in range(1, h + 1):
        vs = _block_sum(vz[d], b)
        share = np.divide(out[d - 1] - _block_sum(z[d], b), vs, out=np.zeros_like(vs), where=vs > 0)
        out.append(z[d] + share.repeat(b, axis=0).repeat(b, axis=1) * vz[d])
    return out


def constrained_inference_variance(shapes, variances, b: int = 2, inside=None) -> list[np.ndarray]:
    """The variance of every node's estimate after :func:`constrained_inference` (same arguments,
    ``shapes[d]`` the side of level d's grid instead of the noisy counts), a function of the
    noise variances and the public tree only.

    Bottom-up, ``vz`` is the variance of a node's subtree estimate z (the pass's own
    ``1 / (1/s^2 + 1/V)``). Top-down, a child c of p with siblings' variances summing to V gets
    ``F_c = z_c + (F_p - S) vz_c / V`` (S the sum of the siblings' z); its error variance is

        VF_c = vz_c - (vz_c / V)^2 (V - VF_p),

    because the estimate is the weighted least-squares one (Gauss-Markov): F_p is uncorrelated
    with the unbiased statistic F_p - S, so Cov(F_p, S) = VF_p; F_p sees the children only
    through S, so Cov(F_p, z_c) = VF_p vz_c / V; the siblings' z are independent (disjoint
    subtrees). The root's VF is its vz. Checked against the explicit least-squares covariance and
    against repeated runs (tests/test_stderr.py)."""
    h = len(shapes) - 1
    var = [float(v) for v in variances]
    side = [int(x) for x in shapes]
    k = side if inside is None else [int(i) for i in inside]

    def known(d, a):
        out = np.zeros((side[d], side[d]))
        out[: k[d], : k[d]] = a[: k[d], : k[d]]
        return out

    vz = [None] * (h + 1)
    vz[h] = known(h, np.full((side[h], side[h]), var[h]))
    for d in range(h - 1, -1, -1):
        vs = _block_sum(vz[d + 1], b)
        if not math.isfinite(var[d]):
            vz[d] = vs
            continue
        ws = np.divide(1.0, vs, out=np.zeros_like(vs), where=vs > 0)
        vz[d] = known(d, 1.0 / (1.0 / var[d] + ws))
    out = [vz[0]]
    for d in range(1, h + 1):
        V = _block_sum(vz[d], b).repeat(b, axis=0).repeat(b, axis=1)
        vf_p = out[d - 1].repeat(b, axis=0).repeat(b, axis=1)
        ratio = np.divide(vz[d], V, out=np.zeros_like(V), where=V > 0)
        out.append(np.maximum(vz[d] - ratio**2 * (V - vf_p), 0.0))
    return out


@part
@dataclass(frozen=True)
class TreeCovariance:
    """The covariance of the hierarchical release's leaves, which only its public tree fixes: a map of ``n`` cells
    a side, leaves a ``2^height`` grid, branching ``b`` per axis and the levels' noise ``variances`` (root first,
    the root's after its count merged in; inf: a level not measured). The constrained inference's estimate is
    the weighted least-squares one, of covariance (X'WX)^-1 over the leaves."""

    n: int
    height: int
    b: int
    variances: tuple[float, ...]

    def _tree(self):
        m = 1 << self.height
        shapes = [g.shape[0] for g in tree_levels(np.zeros((m, m)), self.b)]
        H = len(shapes) - 1
        return m, self.n >> self.height, shapes, H, [-(-m // self.b ** (H - d)) for d in range(H + 1)]

    def variance(self, cell_weights: np.ndarray) -> float:
        """The noise variance of ``a . density`` for weights ``a`` over the cells: ``(X'WX)^-1 a`` is the
        constrained inference of noisy counts ``a x var_leaf`` at the leaves and 0 elsewhere, so the variance
        is ``a . CI(that)``."""
        m, f, shapes, H, inside = self._tree()
        a = np.asarray(cell_weights, dtype=np.float64).reshape(self.n, self.n)
        a = downsample(a, f) / (f * f) if f > 1 else a
        y = [np.zeros((s, s)) for s in shapes]
        y[H][:m, :m] = a * self.variances[H]
        sa = constrained_inference(y, list(self.variances), self.b, inside)[H][:m, :m]
        return float((a * sa).sum())

    def block_variance(self, k: int) -> np.ndarray | None:
        """The noise variance of every block of ``k`` x ``k`` cells (row-major) when each block is one node of the
        tree or lies inside one leaf (a share of it), in one pass (:func:`constrained_inference_variance`); None
        when the blocks are not the tree's nodes."""
        m, f, shapes, H, inside = self._tree()
        vf = constrained_inference_variance(shapes, list(self.variances), self.b, inside)
        per = self.n // k  # blocks per side
        if k <= f:  # inside one leaf: (k^2 / f^2) of the leaf's estimate
            leaf = vf[H][:m, :m].repeat(f // k, axis=0).repeat(f // k, axis=1)
            return (leaf[:per, :per] * (k * k / (f * f)) ** 2).ravel()
        j, span = 0, k // f  # leaves per block side: a node j levels up when span = b^j
        while self.b**j < span:
            j += 1
        if self.b**j != span or k % f:
            return None
        return vf[H - j][:per, :per].ravel().copy()


@register
class Hierarchical(Mechanism):
    """Hierarchical histogram with constrained inference, by default HB (Qardaji, Yang, Li,
    "Understanding hierarchical methods for differentially private histograms", VLDB 2013):
    the branching factor and the budget split chosen by a variance analysis of range
    queries, noisy counts on every level, then the constrained inference of Hay, Rastogi,
    Miklau, Suciu ("Boosting the accuracy of differentially private histograms through
    consistency", VLDB 2010).

    The tree: leaves are an m x m grid (m = 2^height; default from a noisy root count n, 5% of
    epsilon: Guideline 1's sqrt(n eps / 10) per side, see :mod:`.sizing`, the root alone, i.e. the
    uniform map, below 1.5; the count is the root's measurement in the consistency step);
    each node has b x b children (branching b per axis); the grid is padded to side b^H,
    H = ceil(log_b m) (the smallest H with b^H >= m), with cells outside the domain, public
    and empty: nodes covering only padding are not measured and are known to be 0. Level d
    (root = 0) gets Laplace(1/eps_d) counts; each location is in one node per level, so
    level d is eps_d-DP and the levels compose sequentially (sum eps_d = eps). Then the
    two-pass constrained inference (Hay et al. Theorem 3, per-node variances:
    :func:`constrained_inference`) makes the tree consistent; by default (``nonnegative``) the
    leaves are then made non-negative top-down (:mod:`.nonnegative`: each node's value shared among
    its children in proportion to their clipped estimates), so an empty region's noise does not
    become mass spread where there are no data (without it the default's EMD grew with epsilon on
    sparse data: BENCHMARKS.md, "defaults on data nobody tuned them on"). That map is biased, so the
    release also carries the least-squares leaves (``extras["least_squares"]``, the same noisy counts)
    and answers ranges and regions from them (``Release.summed_map``): the map's sums had 1.02-1.83x
    their range error in 14 of the 16 settings of ``bench central``.

    The variance analysis (HB's approach, re-derived here for the 2-D tree). A rectangle
    query is answered by its canonical nodes: the largest nodes inside it whose parent is
    not. At depth d they lie in a band one parent wide along the query's border: up to
    b - 1 rows of nodes of side s_d = b^(H-d) along each side, so about n_d = (b - 1) P / s_d
    nodes for a query of perimeter P (in leaves). Each has noise variance 2 / eps_d^2, so
    the query's mean squared error is proportional to sum_d (b - 1) b^(d-H) / eps_d^2, the
    factor depending only on the query distribution (:func:`tree_error_model`).

    * With equal budgets eps / H on the H levels below the root this is
      b (1 - b^-H) H^2 / eps^2: minimising b H^2 over b is HB's branching rule
      (``budget = hb``; m = 64, 128, 256, 512, 1024 give b = 8, 12, 7, 8, 6; the quadtree,
      b = 2, scores 128 at m = 256 against 63 for b = 7).
    * Minimising the same sum over the split as well (Lagrange, sum eps_d = eps) gives
      eps_d proportional to n_d^(1/3), i.e. to b^(d/3), the split Cormode et al. derived for
      the quadtree; the model then scores (b - 1) b^-H (sum_d b^(d/3))^3, minimised at
      m = 64, 256 by b = 8, 7 (34.8 at m = 256 against 73.5 for the geometric quadtree).
      This is the default (``budget = optimal``, branching 0): it measured 0.72x the error of
      the geometric quadtree, 0.67x that of ``hb`` and 0.41x that of the uniform
      quadtree on 2,000 random rectangles at 256 x 256 (BENCHMARKS.md, central).
    * The root, the total, is not measured under either (a query smaller than the domain
      never uses it), beyond the default height's 5% count.

    Source: the text of Qardaji et al. was not reachable from this machine (only its
    abstract), so the analysis is re-derived above. DPComp's implementation of HB for 2-D
    (dpcomp_core, algorithm/HB2D.py; read, not copied) minimises the same expression as
    ``hb``, b (n - 1) h^2 with n the side, which it attributes to Section 5.1 of the paper,
    with eps / h per level and an unmeasured root; that section number is its attribution,
    unchecked against the paper. Optimising the split as well is our step, in the paper's
    spirit (its title question: which branching and which budget split), not a claim about
    its text.

    Options kept: ``branching`` fixes b (0: the rule above for the chosen split);
    ``budget = uniform`` spends eps / (H + 1) on every level including the root (Hay et al.),
    ``budget = geometric`` eps_d proportional to b^(d/3) including the root (Cormode et al.
    ICDE 2012: 2^(d/3) for the quadtree). ``branching = 2`` with ``budget = uniform`` and ``nonnegative``
    off is the plain quadtree of Hay et al. with a uniform budget, the comparison the default is measured against.

    Threat model: trusted curator; the public sees all the noisy node counts.
    Guarantee: epsilon-DP (central); consistency is post-processing.

    Unit of privacy: ``user`` (default) weights each of a user's k locations 1/k;
    every level is a partition of the domain, so one user moves each level's count
    vector by at most 1 in L1 and level d stays eps_d-DP (user-level), composed
    sequentially over levels as for records. ``record``: location counts, a user
    with k locations protected at k*epsilon.

    Departures: the domain is padded to b^H with empty public cells when m is not a power of
    b (DPComp pads likewise, but also measures the padding); leaves coarser than the output
    cells (``height`` below the run's depth) are spread uniformly; the geometric split for
    b > 2 is our generalisation of Cormode et al.'s.

    Noise model (``Release.noise``): the leaves are the released units, each with its standard
    deviation after constrained inference, from the levels' Laplace variances 2/eps_d^2 and the public
    tree alone (:func:`constrained_inference_variance`; the raw leaf's sqrt(2)/eps_H without
    consistency), spread over its output cells when leaves are coarser: exact for the least-squares
    leaves, which answer ranges and regions (the units' counts), since the tree does not depend on the
    data and that estimate is linear in the noisy counts. For a cell of the non-negative map it is not
    the exact spread (on tests/test_stderr.py's city the map's variance over seeded runs was 0.53 of it:
    the share-out removes the empty cells' noise). Consistency makes neighbouring leaves' errors
    correlated (siblings negatively), so the SE of a sum of leaves is not the sum of theirs:
    :class:`TreeCovariance` gives the variance of any sum of cells.
    """

    key = "hierarchical"
    margin = "closed form"
    margin_note = "the constrained inference's covariance, from the public tree and budgets"
    planner = "exact"
    label = "Hierarchical histogram + consistency (HB: Qardaji et al.; Hay et al.)"
    family = "central"
    guarantee = "user-level epsilon-DP (central) under add/remove user; add/remove record with unit = record"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy counts of every tree node."
    summary = "Noisy counts at every level of a tree whose branching minimises range-query error, made consistent."
    paper = (
        "Qardaji, Yang, Li. VLDB 2013 (HB); Hay, Rastogi, Miklau, Suciu. VLDB 2010; geometric budget: "
        "Cormode et al. ICDE 2012"
    )
    equations = (
        "b = argmin of the range-query variance model sum_d (b-1) b^(d-H) / eps_d^2, eps_d proportional to b^(d/3) "
        "below the root (budget = hb: eps/H, b = argmin b H^2); Hay et al. Theorem 3 (constrained inference)"
    )
    params = (
        UNIT_PARAM,
        Param(
            "height",
            "int",
            0,
            "the leaves are a 2^height x 2^height grid (at most the run's); 0 = from a noisy count n of the root "
            "(5% of epsilon): sqrt(n epsilon / 10) leaves per side (Qardaji et al.'s Guideline 1), a power of two",
            min=0,
            max=10,
        ),
        Param(
            "branching",
            "int",
            0,
            "children per node along each axis (b x b children); 0 = the b minimising the range-query variance model "
            "for the chosen budget split (HB's rule)",
            min=0,
            max=1024,
        ),
        Param(
            "budget",
            "choice",
            "optimal",
            "split of epsilon over levels: 'optimal' proportional to b^(d/3) below the root, the split that minimises "
            "range-query variance (root not measured); 'hb' equal over the levels below the root (DPComp's HB); "
            "'uniform' equal over all levels (Hay et al.); 'geometric' proportional to b^(d/3) incl. the root "
            "(Cormode et al.)",
            choices=TREE_BUDGETS,
        ),
        Param("consistency", "bool", True, "apply constrained inference (off: the raw noisy leaves)"),
        Param(
            "nonnegative",
            "bool",
            True,
            "with consistency: share each node's value among its children in proportion to their estimates clipped "
            "at 0, top-down, so empty regions get no noise mass (off: the map is the least-squares leaves, negatives "
            "included; range queries and regions are answered from those leaves either way: unbiased)",
        ),
    )
    dp_outputs = ("raw_leaves", "height", "branching", "tree_height", "padded_side", "levels", "height_rule_total")
    dp_outputs += ("epsilon_per_level", "noise", "least_squares")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        noise = ctx.noise
        bounded = bound_contributions(data, domain, params["unit"])
        truth = bounded.data.true_histogram(domain)
        n_hat, eps_count = root_count(truth.sum(), eps, noise) if params["height"] == 0 else (None, 0.0)
        depth = min(int(params["height"]), domain.depth) or height_rule(n_hat, eps, domain.depth)
        m = 1 << depth
        b = hb_branching(m, params["budget"]) if params["branching"] == 0 else int(params["branching"])
        if b < 2 and m > 1:
            raise ParamError(f"branching must be at least 2, or 0 for HB's rule (got {b})")
        f = domain.n >> depth
        leaves = downsample(truth, f) if f > 1 else truth
        levels = tree_levels(leaves, b)
        H = len(levels) - 1
        eps_levels = hierarchical_budget(H + 1, eps - eps_count, params["budget"], b)
        inside = [-(-m // b ** (H - d)) for d in range(H + 1)]  # nodes per axis meeting the domain
        ledger = Ledger()
        if n_hat is not None:
            ledger.spend("root count (sets the height)", eps_count, note=f"Laplace count; {bounded.short}")
        noisy = []
        for d, (grid, e) in enumerate(zip(levels, eps_levels)):
            out = np.zeros(grid.shape)
            if e > 0:
                k = inside[d]
                step, note = f"level {d} counts", f"Laplace(1/eps_{d}) per node"
                out[:k, :k] = laplace_counts(grid[:k, :k], float(e), noise, ledger, step, f"level {d}", note, bounded)
            noisy.append(out)
        ctx.check_cancelled()
        variances = [2.0 / e**2 if e > 0 else math.inf for e in eps_levels]
        if n_hat is not None:
            noisy[0], variances[0] = merge_root(noisy[0], variances[0], n_hat, eps_count)
        nonneg = bool(params["consistency"] and params["nonnegative"])
        tree = constrained_inference(noisy, variances, b, inside) if params["consistency"] else noisy
        least_squares = spread_leaves(tree[H][:m, :m], f)
        density = spread_leaves(nonnegative_leaves(tree, b, inside)[:m, :m], f) if nonneg else least_squares
        if params["consistency"]:
            var = constrained_inference_variance([g.shape[0] for g in levels], variances, b, inside)[H][:m, :m]
        else:
            var = np.full((m, m), variances[H])
        stderr = spread_leaves(np.sqrt(var), f)
        # the leaves are the released units; consistency makes them share draws (siblings negatively)
        cov = TreeCovariance(domain.n, depth, b, tuple(float(v) for v in variances))
        shared = params["consistency"] and math.isfinite(variances[H])
        basis = "Laplace(1/eps_d) per node, through the (linear) constrained inference"
        noise_model = NoiseModel.of_blocks(least_squares, stderr, f * f, basis, covariance=cov if shared else None)
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "height": int(depth),
                "branching": int(b),
                "branching_rule": "variance model (HB)" if params["branching"] == 0 else "fixed",
                "tree_height": int(H),
                "padded_side": int(b**H),
                "levels": int(H + 1),
                "budget": params["budget"],
                "root_measured": bool(eps_levels[0] > 0 or n_hat is not None),
                "height_rule_total": n_hat,
                "epsilon_per_level": [float(e) for e in eps_levels],
                "consistency": bool(params["consistency"]),
                "nonnegative": nonneg,
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the noisy counts of every tree node"),
            diagnostics=diag,
            extras={"raw_leaves": noisy[H][:m, :m]} | ({"least_squares": least_squares} if nonneg else {}),
            noise=noise_model,
        )
