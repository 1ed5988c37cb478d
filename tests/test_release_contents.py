"""Releases hold only DP outputs.

Every registered mechanism runs on a dataset D and on D' = D plus one person, with the same
seed. Every field of the two releases must then be identical, except the declared DP outputs
(``density``, ``partition``, ``range_answerer``, the ledger's epsilons, the server view's
per-user callables, and the diagnostics/extras keys a mechanism lists in ``dp_outputs``) and
what follows from declared side information (``side_information_keys``, allowed only when
the ledger declares side information). A value computed from the truth (a true mean, an
exact count, an error against the true data) left in a release shows up as a difference.
The values that moved out are checked to arrive in ``RunResult.evaluation`` instead.
"""

from __future__ import annotations

from dataclasses import asdict, fields, is_dataclass

import numpy as np
import pytest

from engine.core.grid import Domain
from engine.mechanisms import RunContext, registry
from engine.run import RunConfig, run
from tests.support.datasets import CRS, SIDE, square_dataset
from tests.support.releases import differences

SMALL = {  # small sizes: every mechanism runs in about a second
    "snh": {"preset": "custom", "depth": 1, "width": 8, "epochs": 1, "max_steps": 5, "batch_size": 4096, "k": 1},
    "bitpush_mean": {"region_level": 1, "min_cohort": 5},
    "bitpush_mean_ldp": {"region_level": 1, "min_cohort": 5},
    "ldp_mean_baseline": {"region_level": 1, "min_cohort": 5},
    "cms_hierarchical": {"width": 200, "depth": 5},
    "federated_kde": {"attack_users": 20},
    "federated_rff_kde": {"attack_users": 20},
    "geoind_kde": {"attack_users": 20, "locations_per_person": 2},
}
# values the mechanisms computed from the truth: evaluation, never release
MOVED = {
    "bitpush_mean_ldp": (
        "region_true_mean",
        "nrmse_per_region",
        "nrmse_overall",
        "rmse_overall",
        "population_mean_true",
        "population_mean_nrmse",
        "values_clipped_fraction",
    ),
    "geoind_kde": ("users", "mean_displacement_m", "utility_spearman_vs_full_kde", "privacy_eq16_m"),
    "federated_kde": ("users", "utility_spearman_vs_full_kde", "privacy_eq16_m"),
    "federated_rff_kde": ("users", "utility_spearman_vs_full_kde", "privacy_eq16_m"),
}


@pytest.fixture(scope="module")
def neighbours():
    """D: 150 people with 1-5 locations each (ages 0-99); D': D plus one person with two
    locations in an otherwise empty corner and the largest encodable value."""
    rng = np.random.default_rng(1)
    n = 400
    xy = rng.normal(SIDE / 2, 2500, (n, 2)).clip(1, SIDE / 2 + 3000)
    uid = rng.integers(0, 150, n)
    val = rng.integers(0, 100, n).astype(np.float64)
    new = np.array([[SIDE * 0.9, SIDE * 0.9], [SIDE * 0.92, SIDE * 0.85]])
    d0 = square_dataset(xy, "neighbours", CRS, user_id=uid, value=val)
    d1 = square_dataset(
        np.vstack([xy, new]),
        "neighbours",
        CRS,
        user_id=np.append(uid, [999, 999]),
        value=np.append(val, [255.0, 255.0]),
    )
    return d0, d1, Domain(0.0, 0.0, SIDE, 4)


# a release's typed parts (engine.mechanisms.base.Release): compared like the extras, by name or by field
PARTS = ("noise", "measurements", "levels", "heat", "regional", "proportion", "warnings", "regions_counted")


def _plain(x):
    """A typed part as plain data: a dataclass as the dict of its fields, a tuple element by element."""
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, tuple):
        return [_plain(v) for v in x]
    return x


def _release(cls, data, domain, ctx=None):
    params = cls.schema().resolve(SMALL.get(cls.key, {}))
    ctx = ctx or RunContext(rng=np.random.default_rng(5))
    return cls().run(data, domain, 1.0, params, ctx)


@pytest.mark.parametrize("key", sorted(registry()))
def test_release_fields_other_than_dp_outputs_and_side_information_do_not_depend_on_one_person(neighbours, key):
    d0, d1, domain = neighbours
    cls = registry()[key]
    a, b = _release(cls, d0, domain), _release(cls, d1, domain)
    allowed = set(cls.dp_outputs) | set(cls.side_information_keys)
    diffs: list[str] = []
    for field in ("diagnostics", "extras"):
        da, db = getattr(a, field), getattr(b, field)
        for k in sorted(set(da) | set(db), key=str):
            if k not in allowed:
                differences(da.get(k), db.get(k), f"{field}.{k}", diffs)
    for name in PARTS:  # the typed parts, or each field of one (``part.field``)
        pa, pb = _plain(getattr(a, name)), _plain(getattr(b, name))
        if name in allowed:
            continue
        if isinstance(pa, dict) and isinstance(pb, dict):
            for f in sorted(set(pa) | set(pb)):
                if f"{name}.{f}" not in allowed:
                    differences(pa.get(f), pb.get(f), f"{name}.{f}", diffs)
        else:
            differences(pa, pb, name, diffs)
    if "ledger" not in allowed:
        entries = [[(e.step, e.composition, e.group, e.note, e.delta) for e in r.ledger.entries] for r in (a, b)]
        differences(*entries, "ledger", diffs)
    if "communication" not in allowed:
        differences(asdict(a.communication), asdict(b.communication), "communication", diffs)
    if "server_view" not in allowed:
        differences(a.server_view.description, b.server_view.description, "server_view.description", diffs)
    differences(a.server_view.kind, b.server_view.kind, "server_view.kind", diffs)
    differences(a.quantity, b.quantity, "quantity", diffs)
    differences(a.domain, b.domain, "domain", diffs)
    assert not diffs, f"{key}: release fields that depend on the added person but are not declared: {diffs}"
    # a key that follows from side information needs the ledger to declare it
    side_diffs: list[str] = []
    for field in ("diagnostics", "extras"):
        da, db = getattr(a, field), getattr(b, field)
        for k in set(cls.side_information_keys) - set(cls.dp_outputs):
            if k in da or k in db:
                differences(da.get(k), db.get(k), f"{field}.{k}", side_diffs)
    for k in set(cls.side_information_keys) - set(cls.dp_outputs):
        name, _, f = k.partition(".")
        if name in PARTS:
            pa, pb = _plain(getattr(a, name)), _plain(getattr(b, name))
            if f and isinstance(pa, dict) and isinstance(pb, dict):
                pa, pb = pa.get(f), pb.get(f)
            differences(pa, pb, k, side_diffs)
    if side_diffs and cls.neighbouring != "none":  # a mechanism without a privacy claim declares nothing
        assert a.ledger.side_information and b.ledger.side_information, f"{key}: {side_diffs} but no side information"
    for k in MOVED.get(key, ()):
        assert k not in a.diagnostics and k not in a.extras, f"{key}: {k} is computed from the truth"
        assert all(
            k not in (_plain(getattr(a, name)) or {}) for name in PARTS if isinstance(_plain(getattr(a, name)), dict)
        )


@pytest.mark.parametrize("key", sorted(MOVED))
def test_values_computed_from_the_truth_go_to_the_evaluation(neighbours, key):
    d0, _, domain = neighbours
    ctx = RunContext(rng=np.random.default_rng(5))
    _release(registry()[key], d0, domain, ctx)
    assert set(MOVED[key]) <= set(ctx.evaluation)
    quiet = RunContext(rng=np.random.default_rng(5), evaluation=None)  # a release records nothing
    _release(registry()[key], d0, domain, quiet)
    assert quiet.evaluation is None


def test_run_result_carries_the_evaluation_and_metrics_read_it():
    cfg = RunConfig(
        dataset="synthetic:polycentric",
        dataset_options={"n": 4000},
        mechanism="bitpush_mean_ldp",
        params={"region_level": 1},
        epsilon=2.0,
        depth=5,
        seed=3,
    )
    res = run(cfg, use_cache=False)
    ev = res.evaluation
    assert ev["region_true_mean"].shape == res.release.regional.mean.shape
    assert res.metrics["nrmse_regions"] == ev["nrmse_overall"] > 0
    assert "population_mean_true" not in res.release.diagnostics
