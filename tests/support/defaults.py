"""What the checks of the mechanisms' defaults share (tests/test_defaults_*.py): the cities nobody tuned them on,
the seeded runs, and the paired one-sided t check that a default is not worse than a reference.

Statistics: per (city, eps, metric) the paired differences d_s = error(default) - error(reference) over
``SEEDS`` seeds; the check fails when their mean exceeds t(0.9999, SEEDS - 1) standard errors (one-sided), a
false-alarm rate of 1e-4 per check under a default that is no worse."""

from __future__ import annotations

import numpy as np
from scipy import stats

from engine.bench.shapes import BUILTIN_CITIES, shape_cities
from engine.mechanisms import RunContext, get
from engine.run import load_dataset

SEEDS = 8
T_CRIT = stats.t.ppf(1 - 1e-4, SEEDS - 1)
CITIES = BUILTIN_CITIES + tuple(f"{s}_{n}" for s in ("hot_spots", "islands", "streets") for n in (200, 20000))


def city(name):
    if name in BUILTIN_CITIES:
        d = load_dataset(name, {})
    else:
        shape, n = name.rsplit("_", 1)
        d = shape_cities(int(n), 0)[shape]
    dom = d.public_domain(8)
    d = d.in_domain(dom)
    return d, dom, d.true_histogram(dom, per_user_normalised=True)


def run(key, data, dom, eps, seed, **params):
    cls = get(key)
    return cls().run(data, dom, eps, cls.schema().resolve(params), RunContext(rng=np.random.default_rng(seed)))


def not_worse(errs, base, what):
    d = np.asarray(errs) - base
    if np.all(d <= 0):
        return
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert d.mean() <= T_CRIT * se, f"{what}: {np.mean(errs):.4g} against {np.mean(base):.4g}"
