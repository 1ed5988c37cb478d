"""The audit has power on every mechanism with a claim: a deliberately weakened variant, whose noise is a
quarter of its scale (it runs at 4 epsilon while claiming epsilon), gets a lower bound above its claim.

Each weakened variant is audited once at a fixed seed; the bound is a 95% lower bound on its true
epsilon (4), so a bound above 1 is expected unless the statistic cannot see the person. The false alarm
of the opposite check (a correct mechanism above its claim) is tests/test_audit.py's.
"""

from __future__ import annotations

import pytest

from engine.mechanisms import get, load_all
from engine.run.analysis._audit import audit, auditable

load_all()
SLOW = {
    "snh": 120,
    "identity_paramselect": 600,
    "sparse_emd": 1000,
    # the top-t rule keeps a lone person's cell rarely (about 2e-3 at 4 epsilon): the plan's full runs see it
    "identity_topt": 100_000,
    "laplace_topt_gauss": 100_000,
}  # runs where the plan's test runs are too few for a bound above 1


def weakened(key: str):
    """The mechanism with its noise at a quarter of its scale: it runs at 4 epsilon and claims epsilon."""
    cls = get(key)

    def run(self, data, domain, epsilon, params, ctx):
        return cls.run(self, data, domain, 4.0 * epsilon, params, ctx)

    return type(f"Weakened{cls.__name__}", (cls,), {"key": key, "run": run})


@pytest.mark.parametrize("key", auditable())
def test_a_weakened_variant_is_flagged(key):
    res = audit(weakened(key), 1.0, SLOW.get(key), test=True, alpha=0.05, seed=7)
    assert res.eps_claimed == 1.0
    assert res.eps_lb > res.eps_claimed, res.to_dict()
