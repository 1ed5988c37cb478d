"""The top-t baselines' default holds on data nobody tuned it on: never worse than the uniform map
(MSE and EMD of the normalised maps) at any eps from 0.1 to 10, on the built-in cities and on test
cities with hot spots, sparse islands and streets (engine/bench/shapes.py) at 200 and 20,000 users.

Statistics: per (city, eps, metric) the paired differences d_s = error(top-t) - error(uniform) over
8 seeds; the check fails when their mean exceeds t(0.9999, 7) standard errors (one-sided), a
false-alarm rate of 1e-4 per check under a default that is no worse, about 1% over the 100 checks.
Where no cell stands out the release is exactly the uniform map (every d_s = 0)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.bench.shapes import shape_cities
from engine.mechanisms import RunContext, get
from engine.mechanisms.central.identity import TOPT_TOTAL_SHARE, topt_threshold
from engine.metrics import emd_m, mse
from engine.run.runner import load_dataset

EPS = (0.1, 0.3, 1.0, 3.0, 10.0)
SEEDS = 8
T_CRIT = stats.t.ppf(1 - 1e-4, SEEDS - 1)
BUILTIN = (
    "berlin_airbnb",
    "snow_cholera",
    "synthetic:monocentric",
    "synthetic:polycentric",
    "synthetic:coastal",
    "synthetic:sprawl",
)


def _city(name):
    if name in BUILTIN:
        d = load_dataset(name, {})
    else:
        shape, n = name.rsplit("_", 1)
        d = shape_cities(int(n), 0)[shape]
    dom = d.public_domain(8)
    d = d.in_domain(dom)
    return d, dom, d.true_histogram(dom, per_user_normalised=True)


def _run(key, data, dom, eps, seed, **params):
    cls = get(key)
    return cls().run(data, dom, eps, cls.schema().resolve(params), RunContext(rng=np.random.default_rng(seed)))


def _not_worse(errs, base, what):
    d = np.asarray(errs) - base
    if np.all(d <= 0):
        return
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert d.mean() <= T_CRIT * se, f"{what}: {np.mean(errs):.4g} against the uniform map's {base:.4g}"


CITIES = BUILTIN + tuple(f"{s}_{n}" for s in ("hot_spots", "islands", "streets") for n in (200, 20000))


@pytest.mark.parametrize("name", CITIES)
def test_identity_topt_default_is_never_worse_than_the_uniform_map(name):
    data, dom, truth = _city(name)
    flat = np.ones_like(truth)
    base_mse, base_emd = mse(truth, flat), emd_m(truth, flat, dom.cell, 64)[0]
    for eps in EPS:
        rels = [_run("identity_topt", data, dom, eps, s) for s in range(SEEDS)]
        _not_worse([mse(truth, r.density) for r in rels], base_mse, f"{name} eps {eps} MSE")
        _not_worse([emd_m(truth, r.density, dom.cell, 64)[0] for r in rels], base_emd, f"{name} eps {eps} EMD")


@pytest.mark.parametrize("name", ["snow_cholera", "hot_spots_200", "streets_20000"])
def test_laplace_topt_gauss_default_is_never_worse_than_the_uniform_map(name):
    data, dom, truth = _city(name)
    flat = np.ones_like(truth)
    base_mse, base_emd = mse(truth, flat), emd_m(truth, flat, dom.cell, 64)[0]
    for eps in (0.3, 1.0, 3.0):
        rels = [_run("laplace_topt_gauss", data, dom, eps, s) for s in range(SEEDS)]
        _not_worse([mse(truth, r.density) for r in rels], base_mse, f"{name} eps {eps} MSE")
        _not_worse([emd_m(truth, r.density, dom.cell, 64)[0] for r in rels], base_emd, f"{name} eps {eps} EMD")


def test_topt_default_keeps_the_cells_above_the_noise_and_fills_the_rest():
    """The release's parts follow the rule: the kept cells are those above the threshold at the
    cells' share of eps, the others hold the noisy total's remainder evenly, and the ledger books
    the total and the cells."""
    data, dom, truth = _city("streets_20000")
    rel = _run("identity_topt", data, dom, 1.0, 0)
    eps_cells = (1 - TOPT_TOTAL_SHARE) * 1.0
    tau = topt_threshold(truth.size, eps_cells)
    kept = rel.density > tau
    assert rel.diagnostics["cells_kept"] == int(kept.sum()) > 5
    assert rel.diagnostics["threshold"] == pytest.approx(tau)
    rest = rel.density[~kept]
    assert np.all(rest == rest[0]) and rest[0] == pytest.approx(rel.diagnostics["fill"]) and rest[0] > 0
    assert rel.density.sum() == pytest.approx(truth.sum(), rel=0.05)  # the noisy total, within its noise
    steps = {e.step: e.epsilon for e in rel.ledger.entries}
    assert steps == pytest.approx({"total count": TOPT_TOTAL_SHARE, "cell counts": eps_cells})
    assert rel.ledger.total() == pytest.approx(1.0)
    rest = rel.noise.label[~kept.ravel()]  # the cells not kept share one draw: one unit
    assert np.all(rest == rest[0]) and not np.isin(rest[0], rel.noise.label[kept.ravel()])


def test_topt_default_is_the_uniform_map_where_nothing_stands_out():
    data, dom, truth = _city("islands_200")
    rel = _run("identity_topt", data, dom, 0.1, 3)
    assert rel.diagnostics["cells_kept"] == 0
    assert np.ptp(rel.density) == 0
