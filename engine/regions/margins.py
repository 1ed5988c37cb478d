"""95 % margins of regional estimates from a release's DP outputs and public parameters only.

A release whose noise has a known law is, for this purpose, a set of **noise units** (a cell, a UG
cell, a PrivTree leaf, an Adaptive HH node, a region of Laplace over regions): unit k released the
count c_k + eta_k with independent noise of standard deviation sigma_k, and spread it evenly over
its cells (``S[cell, k]``, each column summing to 1). A region with area weights ``A``
(:mod:`engine.data.regions`) takes the share ``f = (A S)[r, k]`` of unit k, so its estimate is
``sum_k f_rk (c_k + eta_k)`` and its error has two parts:

* **noise**, exact: variance ``sum_k f_rk^2 sigma_k^2``: cells that share one draw move together,
  so their covariance is counted (the hierarchical tree's correlated leaves: through the
  constrained inference's least-squares covariance, :func:`_hierarchical_var`; HDMM's cells: through
  the Kronecker product of its two axes' least-squares covariances, :func:`_kron_var`);
* **spreading**: where the region takes only part of a unit (0 < f < 1), the even spread says
  f c_k of the unit's people are in the region, while the truth lies anywhere in [0, c_k] (people may
  be bunched in one corner of a leaf), and the release cannot tell where. At worst they all sit
  together, inside the region's part with chance f (bunched at a place that could be anywhere in the
  unit): a 95 % interval must then reach c_k ((1 - f) c_k above the estimate) unless that chance is
  under 5 %, and 0 (f c_k below) unless its chance, 1 - f, is (:func:`spread_share`). A region that
  cuts many units adds many such placements; their sum has variance at most
  ``sum f (1 - f) c_k^2`` (the Bhatia-Davis inequality, per unit), so 1.96 times its root covers it.
  The term is the larger of the two, with c_k the released count (at least 0). A region made of
  whole units has no such term: its margin is the exact noise margin. The term assumes nothing about
  where people sit, so on smooth data it covers more than 95 %; on bunched data a bunch inside a
  large unit can still fall outside a small region's margin (the benchmark reports coverage where
  people are, too: ``python -m engine bench regions``).

The margin is ``sqrt((2.118 noise sd)^2 + spreading^2)``: 2.118 standard deviations is a Laplace
draw's exact 95 % quantile (1.96 would cover 93.7 %), and more than a sum of draws needs; :data:`BASIS`
says so in the release. Where the noise has no closed form (AG, Sparse EMD, SNH, the kernel density estimates...) or a cell was set
to 0 after the noise (clipping, top-t: biased towards 0, not noisy around the truth), there is no
margin (NaN, ``null`` in files), and the reason is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054
# A single Laplace draw's 95 % quantile is ln(20) b = 2.118 standard deviations (1.96 covers 93.7 %); a
# weighted sum of independent draws is less heavy-tailed and tends to 1.96, so 2.118 covers at least 95 %
LAPLACE95 = math.log(20.0) / math.sqrt(2.0)
BASIS = (
    "95 % margin = sqrt((2.118 x noise sd)^2 + spreading^2). Noise: the mechanism's closed form (cells that share a "
    "noise draw counted together; 2.118 sd is a Laplace draw's 95 % quantile). Spreading: where a region takes only a "
    "share f of a released unit (cell, block, leaf, region), where the unit's people sit inside it is not in the "
    "release; the term is the larger of one unit's worst case ((1 - f) x its released count if all of its people "
    "could be in the region's part, f at least 5 %, else f x that count) and 1.96 x sqrt(sum of f (1 - f) x count^2) "
    "over the units cut (many placements adding up). A region made of whole units has the exact noise margin"
)
# trees of noisy counts made consistent by least squares (the tree's public parameters in the diagnostics)
TREE_KEYS = ("hierarchical", "quadtree")
NO_CLOSED_FORM = "no margin: the mechanism's noise has no closed form given its release (repeated runs only)"


@dataclass(frozen=True)
class Units:
    """The noise units of a release: ``S`` (cells x units, sparse, columns sum to 1), each unit's
    noise standard deviation ``sigma`` (NaN: no margin) and released count ``count``; ``var_of``:
    a function giving the noise variance of ``A S f`` when the units are correlated (else None)."""

    S: object
    sigma: np.ndarray
    count: np.ndarray
    basis: str
    var_of: object = None
    own: object = None  # the regions' area weights when the units are a region set (Laplace over regions)


def units_of(release, key: str) -> Units | str:
    """The release's noise units, or a sentence saying why it has no margin."""
    ex, diag = release.extras, release.diagnostics
    if release.quantity != "counts":
        return "no margin: the release is an attribute mean, not counts"
    if "region_counts" in ex and "region_weights" in ex:
        return _region_units(release)
    if "stderr" not in ex:
        return NO_CLOSED_FORM
    se = np.asarray(ex["stderr"], dtype=np.float64)
    n = release.domain.n
    if ex.get("noise_cov") is not None:  # cells correlated by a Kronecker covariance (HDMM)
        u = _labelled_units(release, se, np.arange(se.size), diag.get("stderr_basis", ""))
        return Units(u.S, u.sigma, u.count, u.basis, var_of=_kron_var(np.asarray(ex["noise_cov"], dtype=np.float64)))
    if isinstance(ex.get("tree"), dict) and "reporting" in ex["tree"] and ex.get("stderr_cells") is not None:
        return _tree_units(release, se, diag.get("stderr_basis", ""))
    if ex.get("stderr_cells") is not None:
        cells = np.broadcast_to(np.asarray(ex["stderr_cells"]), se.shape)
        return _block_units(release, se, cells, diag.get("stderr_basis", ""))
    if key in TREE_KEYS and diag.get("consistency", True) is False:
        f = n >> int(diag["height"])
        return _block_units(release, se, np.full(se.shape, f * f), diag.get("stderr_basis", ""))
    if key in TREE_KEYS:
        f = n >> int(diag["height"])
        u = _block_units(release, se, np.full(se.shape, f * f), diag.get("stderr_basis", ""))
        return Units(u.S, u.sigma, u.count, u.basis, var_of=_hierarchical_var(release))
    return "no margin: the release's cells have correlated noise of no simple form"


def _block_units(release, se: np.ndarray, cells: np.ndarray, basis: str) -> Units:
    """Units that are dyadic squares of whole cells (the ``stderr_cells`` convention)."""
    n = release.domain.n
    k = np.rint(np.sqrt(cells)).astype(np.int64).ravel()
    iy, ix = np.divmod(np.arange(n * n), n)
    corner = (iy // k * k) * n + (ix // k * k)  # a block's south-west cell names it
    return _labelled_units(release, se, np.unique(corner, return_inverse=True)[1], basis)


def _tree_units(release, se: np.ndarray, basis: str) -> Units:
    """Adaptive HH's units: the released tree's reporting nodes (a node that split in part reports the
    rest of its square), each painted over its cells."""
    from ..core.grid import morton_of_pixels
    from ..mechanisms.federated_hh.tree import paint_lut

    depth = release.domain.depth
    lab = paint_lut(release.extras["tree"]["reporting"], depth)[morton_of_pixels(depth)].ravel()
    return _labelled_units(release, se, np.unique(lab, return_inverse=True)[1], basis)


def _labelled_units(release, se: np.ndarray, label: np.ndarray, basis: str) -> Units:
    """Units from a label per cell (row-major): each unit's count spread evenly over its cells."""
    from scipy import sparse

    n2 = label.size
    k = int(label.max()) + 1
    size = np.bincount(label, minlength=k).astype(np.float64)
    S = sparse.csr_matrix((1.0 / size[label], (np.arange(n2), label)), shape=(n2, k))
    count = np.bincount(label, weights=release.summed_map().ravel(), minlength=k)
    # a unit's sd is its cell's sd times its cells; NaN in any of its cells (post-processed) makes it NaN
    sigma = np.bincount(label, weights=se.ravel() * size[label], minlength=k) / size
    return Units(S, sigma, count, basis)


def _region_units(release) -> Units:
    from scipy import sparse

    ex = release.extras
    indptr, indices, data = (np.asarray(a) for a in ex["region_weights"])
    n2 = release.domain.n**2
    A = sparse.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, n2))
    w = np.asarray(A.sum(axis=1)).ravel()
    S = sparse.csr_matrix(A.multiply(1.0 / w[:, None]).T)
    counts = np.asarray(ex["region_counts"], dtype=np.float64)
    sigma = np.full(counts.size, float(ex["region_sd"]))
    return Units(S, sigma, counts, release.diagnostics.get("stderr_basis", ""), own=A)


@dataclass(frozen=True)
class _Tree:
    """The hierarchical release's public tree: ``m`` leaves a side of ``f`` cells, branching ``b`` per axis,
    levels' sides ``shapes`` (root first, ``H`` the leaves' level), noise ``variances`` and the nodes meeting
    the domain per level (``inside``)."""

    n: int
    m: int
    f: int
    b: int
    shapes: list
    variances: list
    H: int
    inside: list

    @classmethod
    def of(cls, release) -> _Tree | None:
        from ..mechanisms.central.trees import tree_levels

        diag = release.diagnostics
        n, height, b = release.domain.n, int(diag["height"]), int(diag["branching"])
        m = 1 << height
        variances = [2.0 / e**2 if e > 0 else math.inf for e in diag["epsilon_per_level"]]
        shapes = [g.shape[0] for g in tree_levels(np.zeros((m, m)), b)]
        H = len(shapes) - 1
        if not math.isfinite(variances[H]):
            return None
        return cls(n, m, n >> height, b, shapes, variances, H, [-(-m // b ** (H - d)) for d in range(H + 1)])


def _hierarchical_var(release):
    """The noise variance of ``a . density`` for weights ``a`` over cells, exact for the constrained
    inference: its estimate is the weighted least-squares one, of covariance (X'WX)^-1 over the
    leaves, and ``(X'WX)^-1 a`` is the constrained inference of noisy counts ``a x var_leaf`` at the
    leaves and 0 elsewhere, so the variance is ``a . CI(that)`` (public tree and budgets only)."""
    from ..core.grid import downsample
    from ..mechanisms.central.trees import constrained_inference

    t = _Tree.of(release)
    if t is None:
        return None
    n, m, f, b, shapes, variances, H, inside = t.n, t.m, t.f, t.b, t.shapes, t.variances, t.H, t.inside

    def var(a_cells: np.ndarray) -> float:
        a = np.asarray(a_cells, dtype=np.float64).reshape(n, n)
        a = downsample(a, f) / (f * f) if f > 1 else a
        y = [np.zeros((s, s)) for s in shapes]
        y[H][:m, :m] = a * variances[H]
        sa = constrained_inference(y, variances, b, inside)[H][:m, :m]
        return float((a * sa).sum())

    return var


def _kron_var(cov: np.ndarray):
    """The noise variance of ``a . density`` when the cells' covariance is ``cov[0] (x) cov[1]`` (rows by
    columns of the grid): ``sum(a o (cov_y a cov_x))``, over the rows and columns ``a`` touches only."""

    def var(a_cells: np.ndarray) -> float:
        n = cov.shape[1]
        a = np.asarray(a_cells, dtype=np.float64).reshape(n, n)
        rows, cols = np.flatnonzero(a.any(axis=1)), np.flatnonzero(a.any(axis=0))
        sub = a[np.ix_(rows, cols)]
        return float(np.sum(sub * (cov[0][np.ix_(rows, rows)] @ sub @ cov[1][np.ix_(cols, cols)])))

    return var


@dataclass(frozen=True)
class Margins:
    """Per region: the estimate, its 95 % margin (NaN: none), and what it rests on."""

    estimate: np.ndarray
    margin95: np.ndarray
    noise_sd: np.ndarray
    spread_sd: np.ndarray  # the spreading term's 95 % half-width
    basis: str


def region_margins(release, key: str, regions) -> Margins:
    """Estimates and 95 % margins of ``regions`` (:class:`engine.data.regions.Regions` over the release's
    domain) from the release alone (see the module docstring)."""
    units = units_of(release, key)
    est = regions.aggregate(release.summed_map())  # the hierarchical tree's least-squares leaves, not its map
    R = len(regions)
    if isinstance(units, str):
        nan = np.full(R, np.nan)
        return Margins(est, nan, nan, nan, units)
    if units.own is not None and _same(units.own, regions.weights):
        return Margins(units.count.copy(), LAPLACE95 * units.sigma, units.sigma.copy(), np.zeros(R), units.basis)
    F = (regions.weights @ units.S).tocsr()  # share of each unit in each region
    sig = units.sigma
    node_var = _block_var(release, regions) if units.var_of is not None else None
    if units.var_of is None or regions.kind == "grid":  # one cell's variance is its own, correlated or not
        noise = np.asarray(F.multiply(F) @ np.nan_to_num(sig**2, nan=0.0)).ravel()
    elif node_var is not None:
        noise = node_var
    else:
        noise = np.array([_row_var(regions, units, r) for r in range(R)])
    touched_nan = np.asarray((F != 0).astype(np.float64) @ np.isnan(sig).astype(np.float64)).ravel() > 0
    c = np.clip(units.count, 0.0, None)
    Fc = F.copy()
    Fc.data = np.clip(Fc.data, 0.0, 1.0)
    Fc.data = Fc.data * (1.0 - Fc.data)
    clt = Z95 * np.sqrt(np.asarray(Fc @ c**2).ravel())  # many cut units: their placements add up
    Fw = F.copy()
    Fw.data = spread_share(Fw.data)
    worst = np.asarray(Fw.multiply(c[None, :]).max(axis=1).todense()).ravel()  # one unit's worst placement
    spread = np.maximum(clt, worst)
    margin = np.sqrt(LAPLACE95**2 * noise + spread**2)
    margin[touched_nan] = np.nan
    basis = f"{BASIS}. Noise: {units.basis}" if units.basis else BASIS
    return Margins(est, margin, np.sqrt(noise), spread, basis)


def spread_share(f: np.ndarray) -> np.ndarray:
    """The 95 % half-width of a share f of a unit's count, in units of the count, when where the unit's people
    sit inside it is unknown: at worst all of them sit together, inside the share with probability f, so
    the interval must reach the far end (1 - f above, f below) unless that end has chance under 5 %."""
    f = np.clip(np.asarray(f, dtype=np.float64), 0.0, 1.0)
    up = np.where(f >= 0.05, 1.0 - f, 0.0)  # all of them inside the share: truth c, estimate f c
    down = np.where(f <= 0.95, f, 0.0)  # none inside: truth 0
    out = np.maximum(up, down)
    return np.where((f == 0.0) | (f == 1.0), 0.0, out)


def _block_var(release, regions) -> np.ndarray | None:
    """Every block's noise variance in one pass where the release's form allows it (a hierarchical tree whose
    nodes are the blocks, HDMM's Kronecker covariance), else None (one computation per region)."""
    cov = release.extras.get("noise_cov")
    if cov is None:
        return _tree_block_var(release, regions)
    if regions.kind != "blocks":
        return None
    cov = np.asarray(cov, dtype=np.float64)
    k = int(regions.spec.split(":")[1])
    sums = np.kron(np.eye(cov.shape[1] // k), np.ones(k))  # block-sum operator along one axis
    per_axis = [np.einsum("bi,ij,bj->b", sums, c, sums) for c in cov]  # 1^T cov_block 1 per block row or column
    return np.outer(per_axis[0], per_axis[1]).ravel()  # block (by, bx), row-major as the blocks are


def _tree_block_var(release, regions) -> np.ndarray | None:
    """The noise variance of every block of ``k`` x ``k`` cells when each block is one node of the
    hierarchical tree (or lies inside one leaf, which it then takes a share of): the constrained inference's
    per-node variance (:func:`constrained_inference_variance`) in one pass. None when the blocks are not
    the tree's nodes (the general path solves one inference per region)."""
    from ..mechanisms.central.trees import constrained_inference_variance

    diag = release.diagnostics
    t = _Tree.of(release) if regions.kind == "blocks" and "epsilon_per_level" in diag else None
    if t is None:
        return None
    k, n, m, f, b, H = int(regions.spec.split(":")[1]), t.n, t.m, t.f, t.b, t.H
    vf = constrained_inference_variance(t.shapes, t.variances, b, t.inside)
    per = n // k  # blocks per side
    if k <= f:  # inside one leaf: (k^2 / f^2) of the leaf's estimate
        leaf = vf[H][:m, :m].repeat(f // k, axis=0).repeat(f // k, axis=1)
        return (leaf[:per, :per] * (k * k / (f * f)) ** 2).ravel()
    j, span = 0, k // f  # leaves per block side: a node j levels up when span = b^j
    while b**j < span:
        j += 1
    if b**j != span or k % f:
        return None
    return vf[H - j][:per, :per].ravel().copy()


def _row_var(regions, units, r: int) -> float:
    dense = np.zeros(regions.weights.shape[1])
    a = regions.weights.getrow(r)
    dense[a.indices] = a.data
    return units.var_of(dense)


def _same(a, b) -> bool:
    return a.shape == b.shape and (a != b).nnz == 0


def block_margins(release, key: str, crs: str, k: int) -> Margins:
    """The 95 % margin of every square of ``k`` x ``k`` cells (row-major blocks), as a map's hover sums them."""
    from ..data.regions import block_regions

    return region_margins(release, key, block_regions(release.domain, crs, k))


def cell_margins(release, key: str, crs: str = "") -> Margins:
    """The 95 % margin of every cell of the release's grid (row-major), spreading bound included: a cell
    inside a larger unit (a UG cell, a leaf) carries the bound of its share of that unit's count."""
    from ..data.regions import grid_regions

    return region_margins(release, key, grid_regions(release.domain, crs))
