"""What DPBench's 2-D roster (privelet, quadtree, ahp, mwem, dpcube) shares with the central baselines: the unit of
privacy and its neighbouring relation, every user's mass of one without noise, secure mode's OpenDP noise with the
ledger adding to epsilon, and their place in ``bench dpbench``."""

from __future__ import annotations

import numpy as np
import pytest

from engine.bench.dpbench import METHODS
from engine.mechanisms import RunContext, get

ROSTER = ("privelet", "quadtree", "ahp", "mwem", "dpcube")


class _ZeroNoise:
    """No privacy noise (the selection's own draws still come from ``rng``)."""

    secure = False

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def add_laplace(self, x, scale):
        return np.asarray(x, dtype=np.float64).copy()


@pytest.fixture(scope="module")
def multi():
    """A synthetic city of 2,000 users with 5 locations each."""
    from engine.data.synthetic import generate

    ds = generate("polycentric", n=10_000, seed=5, locations_per_user=5)
    return ds, ds.public_domain(5)


@pytest.mark.parametrize("key", ROSTER)
def test_the_unit_parameter_sets_the_relation(key):
    cls = get(key)
    assert cls.family == "central" and cls.neighbouring == "add/remove user"
    assert cls.neighbouring_for(cls.schema().resolve({})) == "add/remove user"
    assert cls.neighbouring_for(cls.schema().resolve({"unit": "record"})) == "add/remove record"


@pytest.mark.parametrize("key", ROSTER)
@pytest.mark.parametrize("unit", ["user", "record"])
def test_without_noise_the_map_holds_one_per_user_or_per_location(multi, key, unit):
    """Noise off (and, for MWEM, the total public): the map's mass is the number of users inside the domain under
    ``user`` (each user's locations weighted to total 1), of locations under ``record``."""
    ds, dom = multi
    cls = get(key)
    params = {"unit": unit, **({"total": "public"} if key == "mwem" else {})}
    ctx = RunContext(rng=np.random.default_rng(1))
    ctx.__dict__["_noise"] = _ZeroNoise()
    rel = cls().run(ds, dom, 1.0, cls.schema().resolve(params), ctx)
    inside = dom.inside(ds.xy)
    expect = np.unique(ds.user_id[inside]).size if unit == "user" else int(inside.sum())
    assert expect > 1000 and rel.density.sum() == pytest.approx(expect, rel=1e-9)
    assert rel.diagnostics["unit"] == unit


@pytest.mark.parametrize("key", ROSTER)
def test_secure_mode_runs_on_opendp_noise_and_spends_epsilon(multi, key):
    ds, _ = multi
    dom = ds.public_domain(3)
    cls = get(key)
    rel = cls().run(ds, dom, 0.7, cls.schema().resolve({}), RunContext(rng=np.random.default_rng(2), secure=True))
    assert rel.ledger.total() == pytest.approx(0.7)
    assert "OpenDP" in rel.diagnostics["noise_source"]
    assert np.isfinite(rel.density).all() and rel.density.shape == (8, 8)


def test_bench_dpbench_runs_the_roster():
    assert set(ROSTER) <= set(METHODS)
