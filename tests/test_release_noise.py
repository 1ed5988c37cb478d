"""Floating-point-safe, unseeded noise in secure mode.

The raw-output distinguishers of :mod:`engine.run.analysis.noise_audit` run on neighbouring datasets
(the others; the others plus one person in an empty cell) in evaluation mode (seeded numpy)
and in secure mode (OpenDP and the exact samplers on OS entropy):

* Mironov's floating-point test (a released value numpy's sampler cannot produce for the
  count without the target) on identity and UG (Laplace) and geo-indistinguishability
  (planar Laplace): it never fires on numpy's own outputs without the target (P0 = 0, which
  also checks the test's inversion of numpy's samplers) and gives a large eps_lb; in secure
  mode it fires as often on either side and eps_lb <= eps.
* Seed replay (the attacker recomputes the release on D0 with the recorded seed) on one
  mechanism per sampler: Laplace (identity, UG, SNH's grid), Pólya shares / discrete
  Laplace (flat one-hot), k-ary randomized response and unary encoding (the LDP grid),
  binary randomized response (bit-pushing), planar Laplace (geo-indistinguishability).

eps_lb is a 95% Clopper-Pearson lower bound: in secure mode the two sides' rates are
equal in law, so eps_lb > eps would be a 2.5% event at worst (and the bound is 0 unless the
observed rates differ by many standard errors). Evaluation mode is seeded, so its figures are
deterministic; secure mode is not seeded.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.run.analysis import noise_audit as A

EPS = 1.0


FLOAT = sorted(n for n, c in A.cases().items() if c.float_attack)


def test_the_float_test_covers_laplace_grids_and_planar_laplace():
    assert FLOAT == ["geoind_kde", "identity", "ug"]


@pytest.mark.parametrize("name", FLOAT)
def test_float_structure_attack_breaks_numpy_and_not_secure_mode(name):
    runs = 300 if name == "geoind_kde" else 600
    seeded = A.float_attack(name, runs, secure=False, eps=EPS)
    assert seeded.fired0 == 0  # numpy's own outputs are always recognised as producible
    assert seeded.eps_lb > 3 * EPS, seeded.row()
    secure = A.float_attack(name, runs, secure=True, eps=EPS)
    assert secure.eps_lb <= EPS, secure.row()


@pytest.mark.parametrize("name", sorted(A.cases()))
def test_seed_replay_identifies_seeded_releases_and_not_secure_ones(name):
    seeded = A.replay_attack(name, 60, secure=False, eps=EPS)
    assert seeded.fired0 == 0 and seeded.eps_lb > 2 * EPS, seeded.row()
    secure = A.replay_attack(name, 60, secure=True, eps=EPS)
    assert secure.eps_lb <= EPS, secure.row()


@pytest.mark.parametrize("name", sorted(A.cases()))
def test_secure_runs_differ_and_seeded_runs_repeat(name):
    case = A.cases()[name]
    _, d1, dom = A.neighbours(case)
    seeded = [A._released(case, A._run(case, d1, dom, EPS, 7, False)) for _ in range(2)]
    assert np.array_equal(*seeded)
    secure = [A._released(case, A._run(case, d1, dom, EPS, 7, True)) for _ in range(3)]
    # three draws of fresh entropy: all equal only by chance (below 1e-6 for every case here)
    assert not (np.array_equal(secure[0], secure[1]) and np.array_equal(secure[1], secure[2]))


def test_numpy_laplace_inversion_recognises_its_own_draws_and_rejects_shifted_ones():
    rng = np.random.default_rng(3)
    y = 1.0 + rng.laplace(0.0, 2.5, 400)
    assert A.numpy_laplace_producible(y, 1.0, 2.5).all()
    assert A.numpy_laplace_producible(y + 1.0, 1.0, 2.5).mean() < 0.7
    assert A.eps_lower_bound(0, 100, 0, 100) == 0.0
    q = 0.025 ** (1 / 100)  # one-sided Clopper-Pearson bounds at 2.5% for 100/100 and 0/100
    assert A.eps_lower_bound(100, 100, 0, 100) == pytest.approx(np.log(q / (1 - q)))
