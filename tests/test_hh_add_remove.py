"""Adaptive HH under add/remove user: the plan (schedule, shard layout, Pólya
shares) comes from a private count or a public lower bound of the clients, never from the exact
number U, and nothing computed from U reaches the release (AdaptiveHH's docstring).

Statistical claims: the private count's lower bound exceeds U with probability at most
``count_failure`` per run (1e-6 by default), so the 20 seeded runs of
``test_private_count_is_booked_and_stays_below_the_true_count`` fail by chance with probability
below 2e-5. The other tests are exact (fixed seeds, equalities).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.errors import ParamError
from engine.core.grid import Domain
from engine.data.dataset import Dataset
from engine.mechanisms import RunContext, get, registry
from engine.mechanisms.federated_hh.secure_sum import secure_sum
from tests.support.datasets import CRS, SIDE, square_dataset

DOMAIN = Domain(0.0, 0.0, SIDE, 5)
ADD_REMOVE = {"relation": "add/remove"}
BOUND = {"relation": "add/remove", "clients_source": "public_bound", "clients_bound": 500}


def _data(n: int, seed: int = 0, user_id=None) -> Dataset:
    rng = np.random.default_rng(seed)
    xy = rng.normal(SIDE / 2, 3000, (n, 2)).clip(1, SIDE - 1)
    return square_dataset(xy, "t", CRS, user_id=user_id)


def _run(data, params, seed=3, eps=1.0, key="adaptive_hh", **ctx_kw):
    cls = get(key)
    ctx = RunContext(rng=np.random.default_rng(seed), **ctx_kw)
    rel = cls().run(data, DOMAIN, eps, cls.schema().resolve(params), ctx)
    return rel, ctx.evaluation


# ------------------------------------------------------------------ the relation
def test_the_relation_parameter_sets_the_neighbouring_relation():
    reg = registry()
    for key in ("adaptive_hh", "hh_fixed_eps", "hh_scheduled_fixed_t"):
        cls = reg[key]
        assert cls.neighbouring_for(cls.schema().resolve({})) == "zero-out user"
        assert cls.neighbouring_for(cls.schema().resolve(ADD_REMOVE)) == "add/remove user"
        assert cls.epsilon_add_remove(0.5, cls.schema().resolve(ADD_REMOVE)) == (0.5, "the same relation")
        assert cls.epsilon_add_remove(0.5, cls.schema().resolve({}))[0] is None
    assert "relation" not in {p.name for p in reg["hh_interactive_nonprivate"].params}  # no claim, no relation


# ------------------------------------------------------------------ never reads U
def test_committee_noise_does_not_depend_on_the_number_of_clients():
    """The secure sum's noise in committee mode: the same law (shape, r, effective epsilon) and,
    at one seed, the same draws for any number of clients; the zero-out layout's differ."""
    empty = np.zeros(0, dtype=np.int64)
    ctx = lambda: RunContext(rng=np.random.default_rng(11))  # noqa: E731
    kw = dict(secagg_shard=100, n_shards=5, committee=100)
    sums = [secure_sum(ctx(), empty, empty, None, n, 16, 0.5, 1, **kw) for n in (500, 700, 1000, 5000)]
    for ss in sums[1:]:
        assert np.array_equal(ss.total, sums[0].total)
        assert (ss.r, ss.alpha_total, ss.noise_std, ss.effective_epsilon) == (
            sums[0].r,
            sums[0].alpha_total,
            sums[0].noise_std,
            sums[0].effective_epsilon,
        )
        assert np.array_equal(ss.dp_shard_sizes, sums[0].dp_shard_sizes) and ss.committee == 100
    assert sums[0].alpha_total == 5.0 and sums[0].server_epsilon == pytest.approx(0.5)
    # the zero-out layout reads n: ceil(n / S_max) shards, so the total noise grows with the count
    zero_out = [secure_sum(ctx(), empty, empty, None, n, 16, 0.5, 1, secagg_shard=100) for n in (500, 1000)]
    assert zero_out[0].alpha_total == 5.0 and zero_out[1].alpha_total == 10.0


def test_schedule_and_shares_identical_for_any_count_above_the_bound():
    """Public bound L = 500: datasets of 500, 800 and 2,000 clients get the same plan, the same
    first sub-query (epsilon, Eq. 7 target, Eq. 6 threshold, noise shape and per-client Pólya
    shape 1/N) and the same side information; under zero-out the first sub-query's epsilon moves
    with U."""
    runs = [_run(_data(n), BOUND)[0] for n in (500, 800, 2000)]
    keys = ("epsilon", "epsilon_planned", "sigma_target", "threshold", "noise_alpha_total", "committee")
    keys += ("dp_shard_size", "shards", "alpha_min", "noise_std")
    first = [{k: r.diagnostics["levels"][0][k] for k in keys} for r in runs]
    assert first[0] == first[1] == first[2]
    assert first[0]["committee"] == 500 and first[0]["dp_shard_size"] == 500 and first[0]["shards"] == 1
    assert (
        runs[0].diagnostics["clients_plan"]
        == runs[1].diagnostics["clients_plan"]
        == runs[2].diagnostics["clients_plan"]
        == {"source": "public bound", "lower_bound": 500, "shards": 1, "committee": 500, "dp_shard_size": 500}
    )
    assert runs[0].ledger.side_information == runs[2].ledger.side_information
    zero = [_run(_data(n), {})[0].diagnostics["levels"][0]["epsilon"] for n in (500, 2000)]
    assert zero[0] != zero[1]


def test_fewer_clients_than_the_bound_keep_the_released_noise_and_weaken_the_server_view():
    """L = 500 with 200 clients: the aggregator tops up the absent committee's shares, so the
    release's noise is the planned one; the server's own view is weaker, in the evaluation only."""
    rel, ev = _run(_data(200), BOUND)
    full, ev_full = _run(_data(800), BOUND)
    lv, lv_full = rel.diagnostics["levels"][0], full.diagnostics["levels"][0]
    assert lv["noise_alpha_total"] == lv_full["noise_alpha_total"] == 1.0
    assert lv["effective_epsilon"] == lv["epsilon"]  # the released map: as planned
    assert ev["lower_bound_held"] is False and ev_full["lower_bound_held"] is True
    spent = math.fsum(lv["epsilon"] for lv in rel.diagnostics["levels"])
    assert ev["server_view_epsilon"] > 1.5 * spent  # 200 of 500 shares: a Pólya shape of 0.4
    assert ev_full["server_view_epsilon"] == pytest.approx(math.fsum(x["epsilon"] for x in full.diagnostics["levels"]))
    assert rel.warnings == full.warnings == ()


def test_the_release_holds_nothing_computed_from_the_exact_count():
    d = _data(600)
    rel, ev = _run(d, ADD_REMOVE)
    assert "users" not in rel.diagnostics and "communication_all_clients" not in rel.diagnostics
    assert ev["users"] == 600 and ev["communication_all_clients"] == 600 * rel.diagnostics["communication_per_client"]
    for lv in rel.diagnostics["levels"]:
        assert not {"shard_size_max", "survivors_min", "verified_shards"} & set(lv)
    assert "600" not in rel.communication.note and "all clients" not in rel.communication.note
    assert not any("number of participating clients U" in s for s in rel.ledger.side_information)
    zero, _ = _run(d, {})
    assert zero.diagnostics["users"] == 600  # zero-out: U is declared side information


def test_private_count_is_booked_and_stays_below_the_true_count():
    """The ledger books the count's share of epsilon and the total stays epsilon; the lower bound
    L = count - ceil(ln(1/beta)/eps_c) is below U (false alarm < 2e-5 over the 20 seeds)."""
    d = _data(3000)
    eps_c = 0.05 * 2.0
    shift = math.ceil(math.log(1e6) / eps_c)
    lows = []
    for seed in range(20):
        rel, _ = _run(d, ADD_REMOVE, seed=seed, eps=2.0)
        steps = [(e.step, e.epsilon) for e in rel.ledger.entries]
        assert steps[0] == ("DP count of clients", pytest.approx(eps_c))
        assert rel.ledger.total() == pytest.approx(2.0) and rel.ledger.total() <= 2.0
        plan = rel.diagnostics["clients_plan"]
        assert plan["shift"] == shift and plan["lower_bound"] == plan["dp_count"] - shift
        lows.append(plan["lower_bound"])
    assert max(lows) <= 3000
    assert min(lows) >= 3000 - shift - 200  # 200 = 20 noise scales (1/eps_c = 10 clients)
    assert len(set(lows)) > 1  # the count is noisy


def test_fixed_schedule_splits_what_the_count_left():
    rel, _ = _run(_data(2000), {**ADD_REMOVE, "schedule": "fixed", "max_levels": 4, "threshold_rule": "fixed"}, eps=1)
    eps = [lv["epsilon"] for lv in rel.diagnostics["levels"]]
    assert eps[0] == pytest.approx(0.95 / 4)
    assert rel.ledger.total() == pytest.approx(1.0)


def test_encoding_follows_the_columns_not_the_locations_per_person():
    """With user ids, add/remove always takes the multi-location encoding (Section 5.7): a second
    location of one person must not switch the encoding and its sensitivity."""
    d = _data(400, user_id=np.arange(400))  # every person has one location
    zero, _ = _run(d, {})
    addrem, _ = _run(d, ADD_REMOVE)
    assert zero.diagnostics["multi_location"] is False
    assert addrem.diagnostics["multi_location"] is True
    assert addrem.diagnostics["levels"][0]["sensitivity"] > 1  # gamma + d


@pytest.mark.parametrize(
    "extra, message", [({"dropout": 0.1}, "dropout"), ({"clip_bits": 16}, "clipping")], ids=["dropout", "clip"]
)
def test_what_add_remove_refuses(extra, message):
    with pytest.raises(ParamError, match=message):
        _run(_data(300), {**ADD_REMOVE, **extra})


def test_verified_secure_aggregation_and_secure_mode_under_add_remove():
    """Verification mode (every client's shares masked by real SecAgg) and secure mode (OpenDP) run
    the committee layout; 3 shards of 100 planned from L = 300, 350 clients."""
    d = _data(350)
    params = {**BOUND, "clients_bound": 300, "secagg_shard": 100, "verify_secagg": True, "max_levels": 2}
    rel, ev = _run(d, params)
    assert all(lv["shards"] == 3 and lv["committee"] == 100 for lv in rel.diagnostics["levels"])
    assert all(s["verified_shards"] == 3 for s in ev["shards_by_subquery"])
    params.pop("verify_secagg")
    sec, _ = _run(d, params, secure=True)
    assert sec.diagnostics["levels"][0]["aggregation_path"] == "per-shard"
    assert sec.ledger.total() == pytest.approx(1.0)


@pytest.mark.parametrize("params", [ADD_REMOVE, BOUND], ids=["dp_count", "public_bound"])
def test_one_more_person_changes_only_dp_outputs(params):
    """tests/test_release_contents.py's check, stricter: D and D' = D plus one person, the same seed;
    under add/remove nothing but the declared DP outputs may differ, not even the keys that zero-out
    declares as following from side information (the exact number of clients)."""
    from tests.support.releases import differences

    rng = np.random.default_rng(1)
    xy = rng.normal(SIDE / 2, 2500, (400, 2)).clip(1, SIDE / 2 + 3000)
    uid = rng.integers(0, 150, 400)
    new = np.array([[SIDE * 0.9, SIDE * 0.9], [SIDE * 0.92, SIDE * 0.85]])
    d0 = square_dataset(xy, "neighbours", CRS, user_id=uid, value=None)
    d1 = square_dataset(np.vstack([xy, new]), "neighbours", CRS, user_id=np.append(uid, [999, 999]), value=None)
    cls = get("adaptive_hh")
    a, b = (
        cls().run(
            d, Domain(0.0, 0.0, SIDE, 4), 1.0, cls.schema().resolve(params), RunContext(rng=np.random.default_rng(5))
        )
        for d in (d0, d1)
    )
    allowed = set(cls.dp_outputs)  # the ledger's steps and the communication follow the (noisy) tree
    diffs: list[str] = []
    for field in ("diagnostics", "extras"):
        da, db = getattr(a, field), getattr(b, field)
        for k in sorted(set(da) | set(db)):
            if k not in allowed:
                differences(da.get(k), db.get(k), f"{field}.{k}", diffs)
    if params is BOUND:  # no count: the side information is public
        differences(a.ledger.side_information, b.ledger.side_information, "side information", diffs)
    assert not diffs, diffs
    assert a.diagnostics["multi_location"] and b.diagnostics["multi_location"]
