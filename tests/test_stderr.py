"""Uncertainty on the map: per-cell standard errors in closed form.

A mechanism whose noise has a known law states its noise model (``Release.noise``): the released units and
their noise, from which each cell's standard deviation in the density's grid and unit follows
(``NoiseModel.cell_sd``). Checked here against repeated seeded runs on a small fixed dataset (its locations
are its users: no user ids):

* mechanisms whose structure does not depend on the data: the empirical variance of each cell over R runs,
  summed over cells, against the sum of SE^2 (mean over runs where the SE is a plug-in);
* mechanisms whose released structure (a tree, a grid size) depends on the data: the SE is exact *given*
  the structure, so each released unit's residual (its released minus its true count), in units of its
  SE, must have mean square 1.

Each comparison is a z-test on per-run sums (their mean and standard deviation over the runs: the
cells' correlations and the noise's kurtosis are in it) at |z| < 4.5: a false-alarm rate under 1e-5 per
check under the normal approximation; all at fixed seeds, so the outcome is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.grid import Domain, morton_of_pixels
from engine.data.dataset import Dataset
from engine.mechanisms import RunContext, registry
from engine.mechanisms.central.trees import constrained_inference, constrained_inference_variance, tree_levels
from engine.mechanisms.federated_hh.tree import paint_lut
from tests.support.datasets import CRS, SIDE, square_dataset

Z = 4.5  # two-sided false-alarm rate 6.8e-6 per check (normal approximation)
R = 300  # seeded runs per check


@pytest.fixture(scope="module")
def data():
    """D: 3,000 locations around the centre (about 75 in the densest 1 km cell, none in the corners);
    D': D plus one location in an empty corner."""
    rng = np.random.default_rng(7)
    xy = rng.normal(SIDE / 2, 2500, (3000, 2)).clip(1, SIDE - 1)
    corner = np.vstack([xy, [[SIDE * 0.97, SIDE * 0.03]]])
    return square_dataset(xy, "stderr", CRS), square_dataset(corner, "stderr", CRS)


def cell_sd(r) -> np.ndarray:
    """Each cell's noise standard deviation, from the release's noise model."""
    return r.noise.cell_sd(r.domain.n)


def release(key, ds, depth=4, eps=1.0, seed=0, **params):
    cls = registry()[key]
    p = cls.schema().resolve(params)
    return cls().run(ds, Domain(0.0, 0.0, SIDE, depth), eps, p, RunContext(rng=np.random.default_rng(seed)))


def runs(key, ds, n=R, **kw):
    return [release(key, ds, seed=s, **kw) for s in range(n)]


def assert_ratio_one(per_run: np.ndarray, expected: float, what: str, slack: float = 0.0) -> None:
    """mean(per_run) / expected = 1 within Z standard errors of the mean (plus ``slack``, relative)."""
    per_run = np.asarray(per_run, dtype=np.float64)
    ratio = per_run.mean() / expected
    se = per_run.std(ddof=1) / math.sqrt(per_run.size) / expected
    assert abs(ratio - 1.0) <= Z * se + slack, f"{what}: ratio {ratio:.4f}, its standard error {se:.4f}"


def assert_variance_matches(rels, what: str, cells=None, slack: float = 0.0) -> None:
    """Empirical per-cell variance over the runs (summed over ``cells``) against the mean of SE^2."""
    dens = np.stack([np.asarray(r.density, dtype=np.float64) for r in rels])
    se = np.stack([cell_sd(r) for r in rels])
    mask = np.ones(dens.shape[1:], dtype=bool) if cells is None else cells
    assert np.isfinite(se[:, mask]).all(), f"{what}: SE missing in a cell that is always released"
    dev2 = ((dens - dens.mean(axis=0)) ** 2)[:, mask].sum(axis=1) * len(rels) / (len(rels) - 1)
    assert_ratio_one(dev2, float((se[:, mask] ** 2).mean(axis=0).sum()), what, slack)


def assert_units_residuals(rels, truth, labels_of, what: str) -> None:
    """Given each run's structure, every released unit's (released - true count) / SE has mean square 1.
    ``labels_of(release)``: an integer label per cell naming its unit (a leaf, a grid cell)."""
    per_run, units = [], 0
    for r in rels:
        lab = labels_of(r).ravel()
        k = int(lab.max()) + 1
        got = np.bincount(lab, weights=np.asarray(r.density).ravel(), minlength=k)
        true = np.bincount(lab, weights=truth.ravel(), minlength=k)
        sd = np.bincount(lab, weights=cell_sd(r).ravel(), minlength=k)  # SE / cell summed
        per_run.append((((got - true) / sd) ** 2).sum())
        units += k
    per_run = np.array(per_run)
    assert_ratio_one(per_run, units / len(rels), what)


def rect_labels(r) -> np.ndarray:
    """Label grid of a release whose partition (metres) is a set of disjoint rectangles of whole cells."""
    dom = r.domain
    c = np.rint((r.partition - [dom.x0, dom.y0, dom.x0, dom.y0]) / dom.cell).astype(int)
    lab = np.full((dom.n, dom.n), -1)
    for i, (x0, y0, x1, y1) in enumerate(c):
        lab[y0:y1, x0:x1] = i
    assert (lab >= 0).all()
    return lab


# ------------------------------------------------------------------ data-independent structure
@pytest.mark.parametrize(
    "key, params",
    [
        ("identity", {}),
        ("uniform", {}),
        ("ug", {"total": "public"}),
        ("ug", {"total": "public", "align": "off"}),
        ("hierarchical", {"nonnegative": False}),  # the least-squares leaves the closed form is exact for
        ("hierarchical", {"branching": 3, "budget": "geometric", "nonnegative": False}),
        ("hierarchical", {"consistency": False}),
        ("flat_onehot", {"secagg_shard": 700}),
        ("hierarchical_onehot", {"selection": "level", "level": 3}),
        ("identity_paramselect", {"rho_m": 700.0, "aux": "none", "clip_answers": False}),
        ("hdmm", {}),
        ("hdmm", {"workload": "squares", "workload_queries": 200}),
        ("privelet", {}),
        ("quadtree", {}),
        ("quadtree", {"budget": "uniform", "height": 3}),
        ("quadtree", {"post_processing": False}),
    ],
)
def test_closed_form_matches_the_spread_over_seeded_runs(data, key, params):
    d0, _ = data
    assert_variance_matches(runs(key, d0, **params), f"{key} {params}")


def test_hierarchical_variance_is_the_least_squares_one():
    """The top-down variance recursion equals the diagonal of (X' W X)^-1, the covariance of the weighted
    least-squares estimate that constrained inference computes, on small padded trees with every budget."""
    for m, b, var in [(4, 2, [np.inf, 3.0, 1.0]), (5, 3, [2.0, 0.5, 1.5]), (6, 2, [1.0, 4.0, 2.0, 1.0])]:
        levels = tree_levels(np.zeros((m, m)), b)
        H = len(levels) - 1
        assert len(var) == H + 1
        inside = [-(-m // b ** (H - d)) for d in range(H + 1)]
        # X: one row per measured node meeting the domain, one column per leaf inside the domain
        rows, w = [], []
        for d in range(H + 1):
            if not math.isfinite(var[d]):
                continue
            s = b ** (H - d)
            for j in range(inside[d]):
                for i in range(inside[d]):
                    x = np.zeros((m, m))
                    x[j * s : (j + 1) * s, i * s : (i + 1) * s] = 1.0
                    rows.append(x.ravel())
                    w.append(1.0 / var[d])
        X = np.array(rows)
        cov = np.linalg.inv(X.T @ (np.array(w)[:, None] * X))
        got = constrained_inference_variance([g.shape[0] for g in levels], var, b, inside)[H][:m, :m]
        assert np.allclose(got.ravel(), np.diag(cov), rtol=1e-10), (m, b)
        # and the estimate it describes is that least-squares estimate
        y = np.random.default_rng(m).normal(size=len(w))
        noisy, k = [np.zeros(g.shape) for g in levels], 0
        for d in range(H + 1):
            if math.isfinite(var[d]):
                noisy[d][: inside[d], : inside[d]] = y[k : k + inside[d] ** 2].reshape(inside[d], inside[d])
                k += inside[d] ** 2
        gls = cov @ X.T @ (np.array(w) * y)
        assert np.allclose(constrained_inference(noisy, var, b, inside)[H][:m, :m].ravel(), gls, atol=1e-9)


def test_ldp_grid_plug_in_is_exact_law_and_conservative(data):
    """Randomised response: the released plug-in (estimate clipped at 0 as the count) against the spread
    over runs; it is conservative for near-empty cells, by less than 5 % in total here."""
    d0, _ = data
    for enc, eps in (("krr", 2.0), ("oue", 1.0)):
        rels = runs("ldp_grid", d0, level=2, encoding=enc, eps=eps)
        dens = np.stack([r.density for r in rels])
        se2 = np.stack([cell_sd(r) for r in rels]) ** 2
        dev2 = ((dens - dens.mean(axis=0)) ** 2).sum(axis=(1, 2)) * R / (R - 1)
        ratio = dev2.mean() / se2.mean(axis=0).sum()
        # the mean SE^2 overstates the variance by at most 5 %; the test allows that bias one way only
        assert_ratio_one(dev2, se2.mean(axis=0).sum(), f"ldp {enc}", slack=0.05)
        assert ratio < 1.0 + Z * dev2.std(ddof=1) / math.sqrt(R) / dev2.mean()


# ------------------------------------------------------------------ structure from the data: SE given it
def test_privtree_and_adaptive_hh_are_exact_given_their_tree(data):
    d0, _ = data
    dom = Domain(0.0, 0.0, SIDE, 4)
    truth = d0.true_histogram(dom)
    assert_units_residuals(runs("privtree", d0), truth, rect_labels, "privtree")

    def node_labels(r):
        return paint_lut(r.extras["tree"]["reporting"], dom.depth)[morton_of_pixels(dom.depth)]

    assert_units_residuals(runs("adaptive_hh", d0, n=150), truth, node_labels, "adaptive_hh")
    assert_units_residuals(
        runs("ag_polya", d0, n=150, consistency=False, m1=4), truth, rect_labels, "ag_polya without consistency"
    )
    assert_units_residuals(runs("ug", d0), truth, rect_labels, "ug with a noisy total (m from it)")


def test_dawa_is_exact_given_its_partition(data):
    """DAWA's buckets come from the partition's own noise, independent of GreedyH's: given them, each
    bucket's least-squares residual in units of its closed-form SE has mean square 1 (z-test as above),
    with the default ratio and with most of the budget on the partition (fewer, larger buckets)."""
    d0, _ = data
    truth = d0.true_histogram(Domain(0.0, 0.0, SIDE, 4))
    for params in ({}, {"ratio": 0.8}):
        assert_units_residuals(runs("dawa", d0, **params), truth, lambda r: r.extras["buckets"], f"dawa {params}")


def test_ahp_and_dpcube_are_exact_given_their_clusters_or_partition(data):
    """AHP's clusters come from the first share's noisy counts, its cluster totals from fresh noise: given the
    clusters, each cluster's residual in units of its SE has mean square 1. DPCube without its consistency step
    likewise given its kd-tree partition (with it, the released totals reuse the noisy cells that chose the
    partition, and no SE is given)."""
    d0, _ = data
    truth = d0.true_histogram(Domain(0.0, 0.0, SIDE, 4))
    for params in ({}, {"ratio": 0.5}):
        assert_units_residuals(runs("ahp", d0, **params), truth, lambda r: r.extras["clusters"], f"ahp {params}")
    assert_units_residuals(runs("dpcube", d0, consistency=False), truth, rect_labels, "dpcube without consistency")
    assert isinstance(release("dpcube", d0).noise, str)


def test_kept_cells_have_the_noise_sd_and_zeroed_cells_none(data):
    """Clipping and top-t: a cell set to 0 after the noise has no SE (NaN); the cells dense enough to be
    kept in every run spread as the Laplace noise says."""
    d0, _ = data
    dom = Domain(0.0, 0.0, SIDE, 4)
    dense = d0.true_histogram(dom) >= 20  # 20 Laplace(1) scales above any threshold used here
    assert dense.sum() >= 20
    for key, params in [
        ("identity_topt", {}),
        ("identity", {"clip_negatives": True}),
        ("laplace_gauss", {}),
        ("laplace_topt_gauss", {}),
    ]:
        rels = runs(key, d0, **params)
        for r in rels:
            se, dens = cell_sd(r), r.density
            assert np.array_equal(np.isnan(se), dens == 0), key  # no margin exactly where zeroed
        assert_variance_matches(rels, key, cells=dense)


# ------------------------------------------------------------------ contracts of the key
STDERR_KEYS = (
    "identity",
    "identity_topt",
    "uniform",
    "ug",
    "privtree",
    "hierarchical",
    "flat_onehot",
    "adaptive_hh",
    "hh_fixed_eps",
    "hh_scheduled_fixed_t",
    "ldp_grid",
    "laplace_gauss",
    "laplace_topt_gauss",
    "identity_paramselect",
    "dawa",
    "hdmm",
    "privelet",
    "quadtree",
    "ahp",
)
NO_CLOSED_FORM = (
    "ag",
    "ag_polya",
    "hierarchical_onehot",
    "cms_hierarchical",
    "sparse_emd",
    "federated_rff_kde",
    "hdg",
    "mwem",
    "dpcube",
)


@pytest.mark.parametrize("key", STDERR_KEYS)
def test_stderr_has_the_grid_shape_and_is_finite_where_released(data, key):
    d0, _ = data
    r = release(key, d0, depth=5, **({"rho_m": 700.0, "aux": "none"} if key == "identity_paramselect" else {}))
    se = cell_sd(r)
    assert se.shape == np.shape(r.density) == (32, 32)
    assert (se[np.isfinite(se)] >= 0).all()
    assert np.isfinite(se[np.asarray(r.density) != 0]).all()  # every released non-zero cell has one
    model = r.noise
    assert model.sd.shape == model.count.shape == (model.units,) and model.units >= 1
    if model.blank is None:  # nothing changed after the noise: the units' counts make the map
        assert np.isclose(model.count.sum(), np.asarray(r.density).sum())
    assert model.basis


@pytest.mark.parametrize("key", NO_CLOSED_FORM)
def test_mechanisms_without_a_closed_form_leave_it_to_repeated_runs(data, key):
    d0, _ = data
    assert isinstance(release(key, d0, depth=4).noise, str)


@pytest.mark.parametrize(
    "key, params",
    [
        ("identity", {}),
        ("hierarchical", {}),
        ("quadtree", {}),
        ("privelet", {}),
        ("ug", {"total": "public"}),
        ("flat_onehot", {}),
        ("hierarchical_onehot", {"selection": "level"}),
        ("hdmm", {}),
    ],
)
def test_data_independent_noise_gives_a_data_independent_stderr(data, key, params):
    """Neighbouring datasets and different seeds: the same SE (it is the noise's scale, nothing else).
    UG with a public total has the same grid size on both (the one location does not move N's grid)."""
    d0, d1 = data
    a = cell_sd(release(key, d0, seed=1, **params))
    b = cell_sd(release(key, d1, seed=2, **params))
    assert np.array_equal(a, b)


def test_data_dependent_stderr_is_a_function_of_the_release(data):
    """Where the SE depends on the data it is through DP outputs only: PrivTree's from its released tree,
    the LDP grid's from its released estimate and the public p, q, U."""
    d0, _ = data
    r = release("privtree", d0, depth=5)
    cells = (32 >> r.extras["leaf_depth"].astype(int)) ** 2
    assert np.allclose(cell_sd(r), math.sqrt(2) / r.diagnostics["epsilon_counts"] / cells)
    r = release("ldp_grid", d0, depth=5, level=3)
    p, q, U = r.diagnostics["p"], r.diagnostics["q"], r.diagnostics["users"]
    est = r.density * 16  # a report cell covers 4 x 4 output cells
    var = U * q * (1 - q) / (p - q) ** 2 + np.clip(est, 0, None) * (1 - p - q) / (p - q)
    assert np.allclose(cell_sd(r), np.sqrt(var) / 16)


def test_dropouts_and_wrapped_sums_have_no_closed_form(data):
    d0, _ = data
    assert isinstance(release("flat_onehot", d0, dropout=0.1).noise, str)
    assert isinstance(release("flat_onehot", d0, clip_bits=3).noise, str)  # counts of up to 75 wrap at 3 bits


# ------------------------------------------------------------------ the display
def test_hover_block_margins_follow_the_cells_that_share_noise(data):
    """The hover sums cells into blocks: its margin must be the block sum's, for independent cells (identity)
    and for cells moving together: UG cells of 4 x 4 output cells (m = 16) in blocks of 2 x 2 (inside one UG
    cell) and 8 x 8 (four whole UG cells), UG cells of 16 x 16 (m = 4) in blocks of 8 x 8."""
    from engine.regions.margins import block_margins
    from ui.maps import block_sums

    d0, _ = data
    for key, params, k, m in [
        ("identity", {}, 4, None),
        ("ug", {"total": "public"}, 2, 16),
        ("ug", {"total": "public"}, 8, 16),
        ("ug", {"total": "public", "c": 300.0}, 8, 4),
    ]:
        rels = runs(key, d0, n=200, depth=6, **params)
        if key == "ug":
            assert {r.diagnostics["m"] for r in rels} == {m}
        blocks = np.stack([block_sums(r.density, k) for r in rels])
        se = block_margins(rels[0], CRS, k).noise_sd
        dev2 = ((blocks - blocks.mean(axis=0)) ** 2).sum(axis=(1, 2)) * 200 / 199
        assert_ratio_one(dev2, float((se**2).sum()), f"hover blocks {key} k={k}")


def test_quadtree_block_margins_use_the_trees_covariance(data):
    """QuadTree's least squares correlates its leaves, so a block's margin needs the tree's covariance (the
    hierarchical baseline's path): the spread of block sums over seeded runs matches it, with leaves at the output
    cells (blocks of 4 x 4), coarser leaves (height 4 on a 32 x 32 map, blocks of 8 x 8) and the raw leaves."""
    from engine.regions.margins import block_margins
    from ui.maps import block_sums

    d0, _ = data
    for params, k in [({}, 4), ({"height": 4}, 8), ({"post_processing": False}, 2)]:
        rels = runs("quadtree", d0, n=200, depth=5, **params)
        blocks = np.stack([block_sums(r.density, k) for r in rels])
        se = block_margins(rels[0], CRS, k).noise_sd
        assert np.isfinite(se).all()
        dev2 = ((blocks - blocks.mean(axis=0)) ** 2).sum(axis=(1, 2)) * 200 / 199
        assert_ratio_one(dev2, float((se**2).sum()), f"quadtree blocks {params} k={k}")


def test_hover_shows_the_margin_and_skips_zeroed_cells():
    from ui.maps import Frame, hover_layer

    dom = Domain(0.0, 0.0, SIDE, 3)
    private = np.zeros((8, 8))
    private[2, 3], private[5, 5] = 4.0, 2.0
    margin = np.full((8, 8), np.nan)
    margin[2, 3] = 0.98
    layer, tip = hover_layer(np.ones((8, 8)), private, margin, Frame(dom, CRS), "t", "people")
    rows = layer.data
    assert any(row["e"] == " ± 0.98" for row in rows)
    assert all(row["e"] in ("", " ± 0.98") for row in rows)  # NaN: no margin, not "nan"
    assert "{e}" in tip["html"]


def test_hover_gives_the_margin_with_the_estimate_it_is_for(data):
    """The hierarchical default draws its non-negative map, but its margins are for the sums of its least-squares
    leaves: on a 128 x 128 map (hover blocks of 2 x 2 cells) the hover shows those sums beside the margin."""
    from engine.regions.margins import block_margins
    from ui.maps import Frame, block_sums, hover_block, hover_layer

    d0, _ = data
    rel = runs("hierarchical", d0, n=1, depth=7)[0]
    k = hover_block(rel.domain.n)
    ls = block_sums(rel.summed_map(), k)
    assert k == 2 and not np.allclose(ls, block_sums(rel.density, k))
    margin = block_margins(rel, CRS, k).margin95
    layer, _ = hover_layer(
        np.ones_like(rel.density), rel.density, margin, Frame(rel.domain, CRS), "t", "people", rel.summed_map()
    )
    shown = [row["e"] for row in layer.data]
    jj, ii = np.nonzero((block_sums(np.ones_like(rel.density), k) != 0) | (block_sums(rel.density, k) != 0))
    expected = [
        f"; its unbiased estimate {s:.3g} ± {m:.2g}" for s, m in zip(ls[jj, ii], margin.reshape(ls.shape)[jj, ii])
    ]
    assert shown == expected * 2  # the true and the private square


def test_explore_says_closed_form_for_identity():
    """Explore's margin of error for Identity comes from the noise's scale: no extra runs offered."""
    from tests.support.app import charts, click_run, open_app, texts

    at = open_app(mech="identity", baselines="0", eps="1", seed="0")
    click_run(at, "explore")
    body = texts(at)
    assert "closed form" in body and "sqrt(2)/eps" in body
    assert "explore_moe_heat" in charts(at)
    assert "Estimate from 10 runs" not in [b.label for b in at.button]


def test_explore_names_the_margins_under_the_colour_floor():
    """PrivTree on Berlin: its large leaves spread a leaf's noise over many cells, so many margins fall under
    the shared scale's floor; the page says so (they are drawn empty, as the maps' faint cells are)."""
    import re

    from tests.support.app import click_run, open_app, texts

    at = open_app(ds="berlin_airbnb", mech="privtree", baselines="0", eps="1", seed="0")
    click_run(at, "explore")
    found = re.search(r"([\d,]+) cells have a margin under the scale's floor", texts(at))
    assert found and int(found.group(1).replace(",", "")) > 0


def _bunched() -> Dataset:
    """About 3,000 locations in 30 tight clusters (60 m): the people of a UG cell, leaf or node sit unevenly."""
    rng = np.random.default_rng(11)
    centres = rng.uniform(1000, SIDE - 1000, (30, 2))
    sizes = np.maximum(1, (rng.pareto(1.5, 30) + 1) * 40).astype(int)
    xy = np.vstack([rng.normal(c, 60, (s, 2)) for c, s in zip(centres, sizes)]).clip(1, SIDE - 1)
    return square_dataset(xy, "stderr", CRS)


@pytest.mark.parametrize("key", ["identity", "ug", "hierarchical", "privtree", "adaptive_hh", "hdmm"])
def test_hover_block_margins_cover_the_true_block_counts(data, key):
    """The linked map's hover sums 2 x 2 cells and shows ± its 95 % margin (noise and spreading, from the
    release alone). Over 100 seeded runs at 64 x 64 cells, on smooth and on bunched data, the interval holds the
    block's true count for 90-99 % of the (block, run) pairs (measured 0.95-0.98; a noise-only margin
    covers 0.61-0.63 for UG, PrivTree and Adaptive HH on the smooth data, 0.78-0.90 on the bunched)."""
    from engine.regions.margins import block_margins
    from ui.maps import block_sums

    for ds in (data[0], _bunched()):
        truth = block_sums(Domain(0.0, 0.0, SIDE, 6).histogram(ds.xy), 2)
        hits = []
        for seed in range(100):
            r = release(key, ds, depth=6, seed=seed)
            m = block_margins(r, CRS, 2)
            inside = np.abs(m.estimate - truth.ravel()) <= m.margin95
            hits.append(inside[np.isfinite(m.margin95)].mean())
        assert 0.90 <= np.mean(hits) <= 0.99, f"{key}: coverage {np.mean(hits):.3f}"


@pytest.mark.parametrize("branching,depth,k", [(6, 6, 2), (2, 6, 4), (4, 7, 2), (4, 7, 8), (2, 7, 32), (6, 6, 4)])
def test_hierarchical_block_variances_from_the_tree_equal_one_inference_per_block(data, branching, depth, k):
    """Blocks inside one leaf, equal to a leaf, or equal to a node higher up: the per-node variances of the
    constrained inference give each block's noise variance in one pass, equal to solving one inference for
    the block (the general path). A block that is no node (2 leaves a side under 6 x 6 branching) takes the
    general path."""
    from engine.data.region_geometry import block_regions

    r = release("hierarchical", data[0], depth=depth, seed=3, height=5, branching=branching)
    regions = block_regions(r.domain, CRS, k)
    cov = r.noise.covariance
    fast = cov.block_variance(k)
    f = r.domain.n >> 5  # cells a leaf side
    span = k // f
    if k > f and round(math.log(span, branching)) != math.log(span, branching):
        assert fast is None
        return
    assert fast is not None and fast.shape == (len(regions),)
    some = np.random.default_rng(0).choice(len(regions), min(12, len(regions)), replace=False)
    slow = np.array([cov.variance(regions.weights.getrow(i).toarray().ravel()) for i in some])
    assert np.allclose(fast[some], slow, rtol=1e-9), (fast[some], slow)
