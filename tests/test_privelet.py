"""Privelet (engine/mechanisms/privelet): the Haar wavelet transform against the explicit matrix of the paper's
definition, its weights and generalized sensitivity by brute force, the per-cell variance against the explicit
inverse, and the mechanism's noise scales and reconstruction with the noise switched off."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core.grid import Domain
from engine.mechanisms import RunContext, get
from engine.mechanisms.privelet import haar
from tests.support.datasets import SIDE, square_dataset
from tests.support.noise import ZeroNoise


def haar_matrix(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The paper's HWT as a matrix, node by node: row 0 the base coefficient (the mean of all entries); then, per
    internal node of the decomposition tree in breadth-first order (root first, each depth left to right), the
    coefficient (mean of the left child's entries - mean of the right child's) / 2. Also each row's weight
    under W_Haar: m for the base, the entries under the node otherwise."""
    rows, w = [np.full(m, 1.0 / m)], [float(m)]
    span = m
    while span > 1:
        for start in range(0, m, span):
            r = np.zeros(m)
            half = span // 2
            r[start : start + half] = 0.5 / half
            r[start + half : start + span] = -0.5 / half
            rows.append(r)
            w.append(float(span))
        span //= 2
    return np.array(rows), np.array(w)


@pytest.mark.parametrize("m", [1, 2, 4, 8, 32])
def test_transform_is_the_papers_matrix(m):
    H, W = haar_matrix(m)
    rng = np.random.default_rng(m)
    v = rng.normal(size=m)
    assert np.allclose(haar.forward(v), H @ v)
    assert np.allclose(haar.weights(m), W)
    assert np.allclose(haar.inverse(H @ v), v)
    X = rng.normal(size=(m, m))
    assert np.allclose(haar.forward2d(X), H @ X @ H.T)  # rows then columns: the standard decomposition
    assert np.allclose(haar.inverse2d(H @ X @ H.T), X)
    assert np.allclose(haar.weights2d(m), np.outer(W, W))


@pytest.mark.parametrize("m", [2, 4, 16, 64])
def test_generalized_sensitivity_by_brute_force(m):
    """max over entries of sum_c W(c) |change of c| when the entry moves by 1: 1 + log2 m per axis (every entry
    reaches it), (1 + log2 m)^2 in 2-D."""
    H, W = haar_matrix(m)
    per_entry = (W[:, None] * np.abs(H)).sum(axis=0)
    assert np.allclose(per_entry, 1 + math.log2(m))
    assert haar.sensitivity(m) == pytest.approx(per_entry.max())
    H2, W2 = np.kron(H, H), np.kron(W, W)
    assert haar.sensitivity2d(m) == pytest.approx((W2[:, None] * np.abs(H2)).sum(axis=0).max())


@pytest.mark.parametrize("m", [1, 2, 8, 32])
def test_entry_variance_factor_from_the_explicit_inverse(m):
    """sum over c of (H^-1[i, c] / W(c))^2, the variance of an entry per unit 2 lambda^2 of Laplace(lambda / W)
    noise, is the same for every entry and equals (m^2 + 2) / (3 m^2)."""
    H, W = haar_matrix(m)
    per_entry = ((np.linalg.inv(H) / W[None, :]) ** 2).sum(axis=1)
    assert np.allclose(per_entry, haar.entry_variance_factor(m))


def test_the_mechanism_noises_the_weighted_coefficients_and_rebuilds_the_map_exactly():
    """With the noise switched off the inverse gives back the true histogram (the reconstruction is consistent),
    and the one Laplace scale asked for is rho / epsilon on the weighted coefficients."""
    rng = np.random.default_rng(4)
    xy = rng.uniform(0, SIDE, (500, 2))
    dom = Domain(0.0, 0.0, SIDE, 4)
    cls = get("privelet")
    ctx = RunContext(rng=np.random.default_rng(0))
    zero = ZeroNoise()
    ctx.__dict__["_noise"] = zero
    rel = cls().run(square_dataset(xy, "privelet"), dom, 0.5, cls.schema().resolve({}), ctx)
    assert np.allclose(rel.density, dom.histogram(xy))
    assert zero.scales == [pytest.approx(25 / 0.5)]  # rho = (1 + 4)^2
    assert rel.diagnostics["generalized_sensitivity"] == 25
    assert rel.ledger.total() == pytest.approx(0.5)
    assert np.allclose(rel.noise.cell_sd(16), math.sqrt(2) * 50 * haar.entry_variance_factor(16))


def test_the_noise_of_a_coefficient_is_inverse_to_its_weight():
    """Coefficient errors over seeded runs: Laplace(lambda / W), so W x error has the same spread for every
    coefficient (the mean absolute deviation of Laplace(lambda) is lambda). Checked per weight class, 400 runs:
    the class means of |W error| / lambda have standard error below 1/sqrt(400 x 4); the bound 0.2 is over 8 of
    them (false alarm below 1e-9 per class)."""
    rng = np.random.default_rng(5)
    xy = rng.uniform(0, SIDE, (300, 2))
    dom = Domain(0.0, 0.0, SIDE, 3)
    cls = get("privelet")
    truth = haar.forward2d(dom.histogram(xy))
    W = haar.weights2d(8)
    lam = haar.sensitivity2d(8) / 1.0
    errs = np.stack(
        [
            haar.forward2d(
                cls()
                .run(
                    square_dataset(xy, "privelet"),
                    dom,
                    1.0,
                    cls.schema().resolve({}),
                    RunContext(np.random.default_rng(s)),
                )
                .density
            )
            - truth
            for s in range(400)
        ]
    )
    scaled = np.abs(errs * W) / lam
    for w in np.unique(W):
        assert abs(scaled[:, W == w].mean() - 1.0) < 0.2, w
