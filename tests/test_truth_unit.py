"""Every metric's truth is counted in the release's unit of privacy."""

from dataclasses import replace

import numpy as np
import pytest

from engine.data.synthetic import generate
from engine.metrics import range_query_errors
from engine.run import RunConfig
from engine.run.execution._runner import release_truth, run

LOCS_PER_USER = 5  # record and user units differ by this factor


@pytest.fixture(scope="module")
def checkins():
    """800 users with 5 check-ins each (a multi-location dataset)."""
    ds = generate("polycentric", n=800 * LOCS_PER_USER, seed=5)
    return replace(ds, user_id=np.repeat(np.arange(800, dtype=np.int64), LOCS_PER_USER))


@pytest.mark.parametrize("mech, params", [("ug", {}), ("identity_paramselect", {"rho_m": 400.0})])
@pytest.mark.parametrize("unit", ["user", "record"])
def test_range_error_is_scored_against_the_release_unit(checkins, mech, params, unit):
    """At eps = 100 the release is near noiseless: its range error against the truth in its own unit
    is small, and about 1 - 1/5 = 0.8 (user release) or 4 (record release) against the other unit:
    scored against a truth always per user, the record-unit release would score ~4."""
    cfg = RunConfig(dataset="test", mechanism=mech, epsilon=100.0, params={**params, "unit": unit}, depth=6)
    res = run(cfg, dataset=checkins, use_cache=False)
    ds, dom = checkins.in_domain(checkins.public_domain(6)), checkins.public_domain(6)
    assert np.allclose(res.truth, release_truth(ds, dom, {"unit": unit}))
    assert res.truth.sum() == pytest.approx(len(ds) if unit == "record" else len(ds) / LOCS_PER_USER)
    assert res.metrics["range_rel_error"] < 0.2
    other = release_truth(ds, dom, {"unit": "user" if unit == "record" else "record"})
    wrong = range_query_errors(other, res.release, dom, np.random.default_rng(0))["range_rel_error"]
    assert wrong > 0.6


@pytest.mark.parametrize("grid", [{"depth": 4}, {"resolution": "auto", "count_share": 0.1}])
@pytest.mark.parametrize("n_users", [None, 300])
@pytest.mark.parametrize("unit", ["user", "record"])
def test_the_true_map_shown_before_a_run_is_the_one_the_run_scores_against(unit, n_users, grid):
    """The dashboard's sample and true map before a run (ui.views.prepared, the runner's own preparation) are
    the run's, for a person-level and a record-level release, with everyone or a sample of users, on a fixed
    grid or one a DP count chose."""
    from engine.run import prepared
    from ui import views

    cfg = RunConfig(
        dataset="synthetic:polycentric",
        dataset_options={"n": 800 * LOCS_PER_USER, "locations_per_user": LOCS_PER_USER},
        mechanism="ug",
        params={"unit": unit},
        n_users=n_users,
        seed=7,
        **grid,
    )
    res = run(cfg, use_cache=False)
    ds, domain, truth = views.prepared(cfg)
    assert np.array_equal(truth, res.truth) and (domain.bounds, domain.n) == (
        res.release.domain.bounds,
        res.release.domain.n,
    )
    assert (len(ds), ds.n_users) == (res.n_points, res.n_users) == (len(ds), n_users or 800)
    # one entry per sample and unit: another mechanism or epsilon counting the same unit shares it, unless a DP
    # count chose the grid (it draws with a share of epsilon)
    other = prepared(replace(cfg, mechanism="identity", epsilon=3.0, params={"unit": unit}))[2]
    assert (other is truth) == (not cfg.budgeted_share)
