"""The hierarchical histogram's default at eps = 0.1 against Identity and the uniform map on the
test cities (hot spots, sparse islands, streets; engine/bench/shapes.py) at 200 and 20,000 users
and the built-in cities.

Statistics as in test_defaults_topt.py: paired differences over 8 seeds, one-sided t at a
false-alarm rate of 1e-4 per check. What is checked: EMD no worse than the better of Identity
and the uniform map, MSE no worse than the uniform map's, and MSE no worse than Identity's except
where no height of the tree can be (streets and hot spots at 20,000 users: Identity's per-cell
noise is the smallest any unbiased map has, and coarser leaves blur single-cell hot spots and
streets one cell wide; BENCHMARKS.md, "defaults on data nobody tuned them on").

And the default's EMD does not grow with eps (check-ins, Berlin, the polycentric city: the least-squares
leaves' did, 1,038 m at eps 0.1 to 2,162 m at 10 on the check-ins), with the top-down non-negative map
no worse in MSE than the least-squares leaves it comes from."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.bench.shapes import checkin_city
from engine.mechanisms.central.nonnegative import nonnegative_leaves
from engine.mechanisms.central.sizing import HEIGHT_COUNT_SHARE, height_rule
from engine.mechanisms.central.trees import tree_height, tree_levels
from engine.metrics import emd_m, mse
from tests.support.defaults import CITIES, SEEDS, city, not_worse, run

NO_HEIGHT_BEATS_IDENTITY_MSE = ("hot_spots_20000", "streets_20000")


def _errors(key, data, dom, truth, eps, **params):
    rels = [run(key, data, dom, eps, s, **params) for s in range(SEEDS)]
    return np.array([mse(truth, r.density) for r in rels]), np.array(
        [emd_m(truth, r.density, dom.cell, 64)[0] for r in rels]
    )


@pytest.mark.parametrize("name", CITIES)
def test_hierarchical_default_at_eps_0_1_is_no_worse_than_identity_or_the_uniform_map(name):
    data, dom, truth = city(name)
    flat = np.ones_like(truth)
    uni = mse(truth, flat), emd_m(truth, flat, dom.cell, 64)[0]
    h_mse, h_emd = _errors("hierarchical", data, dom, truth, 0.1)
    i_mse, i_emd = _errors("identity", data, dom, truth, 0.1)
    not_worse(h_mse, uni[0], f"{name} MSE against the uniform map")
    better_emd = i_emd if i_emd.mean() < uni[1] else np.full(SEEDS, uni[1])
    not_worse(h_emd - better_emd + uni[1], uni[1], f"{name} EMD against the better of Identity and uniform")
    if name not in NO_HEIGHT_BEATS_IDENTITY_MSE:
        not_worse(h_mse - i_mse + uni[0], uni[0], f"{name} MSE against Identity")


def test_height_follows_guideline_1_from_the_noisy_root_count():
    # 20,000 users, eps 0.1: sure of 20,000 - 566; Guideline 1's m = 13.9, twice that 27.9 -> 32
    assert height_rule(20_000, 0.1, 8) == 5
    assert height_rule(10_000, 1.0, 8) == 6  # m = 31.5 -> 63 -> 64
    assert height_rule(10**6, 0.1, 8) == 8  # 195 -> 256, the output's
    assert height_rule(200, 0.1, 8) == 0  # the count's noise exceeds the users: the root alone, the uniform map
    data, dom, truth = city("islands_20000")
    rel = run("hierarchical", data, dom, 0.1, 0)
    d = rel.diagnostics
    assert d["height"] == height_rule(d["height_rule_total"], 0.1, dom.depth)
    assert abs(d["height_rule_total"] - truth.sum()) < 20 * 1.0 / (HEIGHT_COUNT_SHARE * 0.1)
    steps = [e.step for e in rel.ledger.entries]
    assert steps[0] == "root count (sets the height)" and rel.ledger.total() == pytest.approx(0.1)
    data, dom, _ = city("streets_200")
    small = [run("hierarchical", data, dom, 0.1, s) for s in range(6)]
    roots = [r for r in small if r.diagnostics["height"] == 0]  # a count under 791: P > 0.98 each
    assert len(roots) >= 5 and all(np.ptp(r.density) == pytest.approx(0, abs=1e-9) for r in roots)


EPS = (0.1, 0.3, 1.0, 3.0, 10.0)


def _place(name):
    if name != "checkins":
        return city(name)
    d = checkin_city()
    dom = d.public_domain(8)
    d = d.in_domain(dom)
    return d, dom, d.true_histogram(dom, per_user_normalised=True)


@pytest.mark.parametrize("name", ["checkins", "berlin_airbnb", "synthetic:polycentric"])
def test_hierarchical_default_emd_does_not_grow_with_eps(name):
    """Each step up in eps (0.1, 0.3, 1, 3, 10): the EMD over 8 seeds, paired by seed, is not larger
    (one-sided paired t at 1e-4 per step). The least-squares leaves' grew at every step on the
    check-ins and on Berlin, and from 0.1 to 1 on the polycentric city."""
    data, dom, truth = _place(name)
    emd = [
        [emd_m(truth, run("hierarchical", data, dom, e, s).density, dom.cell, 64)[0] for s in range(SEEDS)] for e in EPS
    ]
    for (e0, a), (e1, b) in itertools.pairwise(zip(EPS, emd)):
        not_worse(b, np.array(a), f"{name}: EMD at eps {e1} against eps {e0}")


@pytest.mark.parametrize("name", ["checkins", "synthetic:polycentric"])
def test_nonnegative_map_is_no_worse_in_mse_than_the_least_squares_leaves(name):
    """Same seeds, same noise draws: the non-negative step is post-processing of the same tree."""
    data, dom, truth = _place(name)
    for e in EPS:
        nonneg = [mse(truth, run("hierarchical", data, dom, e, s).density) for s in range(SEEDS)]
        ls = [mse(truth, run("hierarchical", data, dom, e, s, nonnegative=False).density) for s in range(SEEDS)]
        not_worse(nonneg, np.array(ls), f"{name} eps {e}: MSE of the non-negative map against the least-squares one")


@pytest.mark.parametrize("eps", [0.1, 1.0, 10.0])
def test_default_answers_ranges_from_its_least_squares_leaves(eps):
    """On the check-ins (sparse: many leaves estimated below 0), the default's range answers are the sums of the
    least-squares leaves of the same run (the ``nonnegative = False`` run on the same seed: same noise), not of
    its map, which stays non-negative."""
    from engine.core.grid import range_counts

    data, dom, _ = _place("checkins")
    rects = dom.random_square_queries(np.random.default_rng(3), 300, (0.02, 0.5))
    for s in range(3):
        default = run("hierarchical", data, dom, eps, s)
        leaves = run("hierarchical", data, dom, eps, s, nonnegative=False).density
        assert default.density.min() >= 0 and leaves.min() < 0
        ls = range_counts(leaves, dom, rects)
        assert np.allclose(default.answer_range(rects), ls, rtol=1e-12, atol=1e-9)
        assert not np.allclose(range_counts(default.density, dom, rects), ls, rtol=1e-3, atol=1e-3)


def _reference(levels, b, inside):
    """The rule node by node: a node's value shared among its children meeting the domain in
    proportion to their estimates clipped at 0, evenly when none is positive."""
    H = len(levels) - 1
    out = np.zeros(levels[H].shape)

    def walk(d, i, j, value):
        if d == H:
            out[i, j] = value
            return
        kids = [(i * b + u, j * b + v) for u in range(b) for v in range(b)]
        kids = [(y, x) for y, x in kids if y < inside[d + 1] and x < inside[d + 1]]
        pos = [max(levels[d + 1][y, x], 0.0) for y, x in kids]
        for (y, x), p in zip(kids, pos):
            walk(d + 1, y, x, value * p / sum(pos) if sum(pos) > 0 else value / len(kids))

    walk(0, 0, 0, max(levels[0][0, 0], 0.0))
    return out


@pytest.mark.parametrize("m,b", [(8, 2), (6, 3), (5, 2), (9, 3)])
def test_nonnegative_leaves_follow_the_rule_node_by_node(m, b):
    rng = np.random.default_rng(m * 10 + b)
    for _ in range(5):
        leaves = rng.normal(0.5, 2.0, (m, m)) * (rng.random((m, m)) < 0.6)
        levels = tree_levels(leaves, b)  # consistent: every node the sum of its children; padding empty
        inside = [-(-m // b ** (tree_height(m, b) - d)) for d in range(len(levels))]
        got = nonnegative_leaves(levels, b, inside)
        assert np.allclose(got, _reference(levels, b, inside), rtol=0, atol=1e-12)
        assert (got >= 0).all() and np.all(got[m:, :] == 0) and np.all(got[:, m:] == 0)
        assert got.sum() == pytest.approx(max(leaves.sum(), 0.0))
    positive = tree_levels(rng.random((m, m)), b)
    inside = [-(-m // b ** (tree_height(m, b) - d)) for d in range(len(positive))]
    assert np.allclose(nonnegative_leaves(positive, b, inside)[:m, :m], positive[-1][:m, :m], rtol=0, atol=1e-12)
