"""The hierarchical histogram's default at eps = 0.1 against Identity and the uniform map on the
test cities (hot spots, sparse islands, streets; engine/bench/shapes.py) at 200 and 20,000 users
and the built-in cities.

Statistics as in test_defaults_topt.py: paired differences over 8 seeds, one-sided t at a
false-alarm rate of 1e-4 per check. What is checked: EMD no worse than the better of Identity
and the uniform map, MSE no worse than the uniform map's, and MSE no worse than Identity's except
where no height of the tree can be (streets and hot spots at 20,000 users: Identity's per-cell
noise is the smallest any unbiased map has, and coarser leaves blur single-cell hot spots and
streets one cell wide; BENCHMARKS.md, "defaults on data nobody tuned them on")."""

from __future__ import annotations

import numpy as np
import pytest

from engine.mechanisms.central.sizing import HEIGHT_COUNT_SHARE, height_rule
from engine.metrics import emd_m, mse
from tests.test_defaults_topt import BUILTIN, SEEDS, _city, _not_worse, _run

CITIES = BUILTIN + tuple(f"{s}_{n}" for s in ("hot_spots", "islands", "streets") for n in (200, 20000))
NO_HEIGHT_BEATS_IDENTITY_MSE = ("hot_spots_20000", "streets_20000")


def _errors(key, data, dom, truth, eps, **params):
    rels = [_run(key, data, dom, eps, s, **params) for s in range(SEEDS)]
    return np.array([mse(truth, r.density) for r in rels]), np.array(
        [emd_m(truth, r.density, dom.cell, 64)[0] for r in rels]
    )


@pytest.mark.parametrize("name", CITIES)
def test_hierarchical_default_at_eps_0_1_is_no_worse_than_identity_or_the_uniform_map(name):
    data, dom, truth = _city(name)
    flat = np.ones_like(truth)
    uni = mse(truth, flat), emd_m(truth, flat, dom.cell, 64)[0]
    h_mse, h_emd = _errors("hierarchical", data, dom, truth, 0.1)
    i_mse, i_emd = _errors("identity", data, dom, truth, 0.1)
    _not_worse(h_mse, uni[0], f"{name} MSE against the uniform map")
    better_emd = i_emd if i_emd.mean() < uni[1] else np.full(SEEDS, uni[1])
    _not_worse(h_emd - better_emd + uni[1], uni[1], f"{name} EMD against the better of Identity and uniform")
    if name not in NO_HEIGHT_BEATS_IDENTITY_MSE:
        _not_worse(h_mse - i_mse + uni[0], uni[0], f"{name} MSE against Identity")


def test_height_follows_guideline_1_from_the_noisy_root_count():
    # 20,000 users, eps 0.1: sure of 20,000 - 566; Guideline 1's m = 13.9, twice that 27.9 -> 32
    assert height_rule(20_000, 0.1, 8) == 5
    assert height_rule(10_000, 1.0, 8) == 6  # m = 31.5 -> 63 -> 64
    assert height_rule(10**6, 0.1, 8) == 8  # 195 -> 256, the output's
    assert height_rule(200, 0.1, 8) == 0  # the count's noise exceeds the users: the root alone, the uniform map
    data, dom, truth = _city("islands_20000")
    rel = _run("hierarchical", data, dom, 0.1, 0)
    d = rel.diagnostics
    assert d["height"] == height_rule(d["height_rule_total"], 0.1, dom.depth)
    assert abs(d["height_rule_total"] - truth.sum()) < 20 * 1.0 / (HEIGHT_COUNT_SHARE * 0.1)
    steps = [e.step for e in rel.ledger.entries]
    assert steps[0] == "root count (sets the height)" and rel.ledger.total() == pytest.approx(0.1)
    data, dom, _ = _city("streets_200")
    small = [_run("hierarchical", data, dom, 0.1, s) for s in range(6)]
    roots = [r for r in small if r.diagnostics["height"] == 0]  # a count under 791: P > 0.98 each
    assert len(roots) >= 5 and all(np.ptp(r.density) == pytest.approx(0, abs=1e-9) for r in roots)
