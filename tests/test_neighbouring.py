"""Every mechanism states the neighbouring relation of its guarantee (engine side)."""

from __future__ import annotations

import pytest

from engine.mechanisms import registry
from engine.mechanisms.base import RELATIONS, Mechanism, epsilon_under

PRIVATE_FAMILIES = {"central", "distributed", "local"}


@pytest.mark.parametrize("key", sorted(registry()))
def test_every_mechanism_declares_a_valid_relation(key):
    cls = registry()[key]
    assert cls.neighbouring in RELATIONS, f"{key} declares {cls.neighbouring!r}"
    assert cls.describe()["neighbouring"] == cls.neighbouring
    if cls.neighbouring == "none":  # no claim: the guarantee says so
        assert not cls.uses_epsilon or cls.family == "none"
        assert cls.guarantee.lower().startswith(("none", "no dp")), cls.guarantee
    else:  # the guarantee text names the relation it is about
        assert cls.neighbouring in cls.guarantee, cls.guarantee
        assert cls.uses_epsilon
    if cls.family in PRIVATE_FAMILIES:
        assert cls.neighbouring != "none"


def test_the_base_class_states_no_relation():
    """A mechanism that forgets the attribute fails the test above instead of inheriting one."""
    assert Mechanism.neighbouring == ""


def test_relations_by_family():
    """The distributed mechanisms read the public client count U (shards, Pólya shapes, schedules):
    zero-out; the central baselines are add/remove user-level; local DP holds per report."""
    reg = registry()
    for key, cls in reg.items():
        if cls.family == "distributed":
            assert cls.neighbouring == "zero-out user", key
        if cls.family == "central":
            assert cls.neighbouring == "add/remove user", key
        if cls.family == "local":
            assert cls.neighbouring == "replace user", key


def test_unit_record_makes_central_baselines_record_level():
    reg = registry()
    for key in ("identity", "ug", "ag", "privtree", "hierarchical", "uniform", "snh", "identity_paramselect"):
        cls = reg[key]
        assert cls.neighbouring_for(cls.schema().resolve({})) == "add/remove user"
        assert cls.neighbouring_for(cls.schema().resolve({"unit": "record"})) == "add/remove record", key
    assert reg["flat_onehot"].neighbouring_for({"unit": "record"}) == "zero-out user"  # no such parameter there


@pytest.mark.parametrize(
    "relation, target, k, expected",
    [
        ("add/remove user", "add/remove user", None, 1.0),
        ("add/remove user", "replace user", None, 2.0),
        ("zero-out user", "replace user", None, 2.0),
        ("replace user", "replace user", None, 1.0),
        ("replace user", "add/remove user", None, None),
        ("zero-out user", "add/remove user", None, None),
        ("add/remove record", "add/remove user", None, None),
        ("add/remove record", "add/remove user", 5, 5.0),
        ("add/remove record", "replace user", 5, 10.0),
        ("replace record", "replace user", 3, 3.0),
        ("replace record", "add/remove user", 3, None),
        ("none", "add/remove user", None, None),
    ],
)
def test_epsilon_under_other_relations(relation, target, k, expected):
    eps, why = epsilon_under(1.0, relation, target, records_per_user=k)
    assert eps == expected and why


def test_epsilon_add_remove_per_mechanism():
    reg = registry()
    assert reg["identity"].epsilon_add_remove(0.5) == (0.5, "the same relation")
    eps, why = reg["adaptive_hh"].epsilon_add_remove(0.5)
    assert eps is None and "public" in why
    assert reg["identity"].epsilon_add_remove(0.5, {"unit": "record"}, records_per_user=4)[0] == 2.0
    with pytest.raises(Exception, match="unknown neighbouring relation"):
        epsilon_under(1.0, "swap", "add/remove user")
