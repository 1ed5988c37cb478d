"""Algorithm 1 of Ghazi et al. 2023 (DPSPARSEEMDAGG) and its parameters: the start level ``q`` and the
per-level epsilons (proof of Theorem 3.1, Section 4), the rule for ``w``, padding to a dyadic grid,
the Laplace measurement of the pyramid, :func:`sparse_emd` and :func:`aggregate`. What departs from
the paper is listed in :mod:`.mechanism`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.epsilon import check_epsilon
from ...core.errors import DataError, ParamError
from ...core.grid import pyramid
from .reconstruct import Reconstruction, reconstruct

GAMMA_SECTION4 = 1.0 / math.sqrt(2.0)  # Section 4, footnote 5
W_DEFAULT = 20  # Section 4
N_PAPER = 200  # users per map in Section 4's experiments, for which w = 20


# ------------------------------------------------------------------ parameters
def start_level(w: int) -> int:
    """``q = floor(log2 sqrt(w))``: the largest ``q`` with ``4^q <= w`` (exact in integers)."""
    if int(w) < 1:
        raise ParamError(f"w must be at least 1 (got {w})")
    return (int(w).bit_length() - 1) // 2


def level_epsilons(
    epsilon: float, depth: int, w: int = W_DEFAULT, gamma: float = GAMMA_SECTION4, full_pyramid: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Measured levels and their budgets ``eps_i = gamma^|i - q| eps / Z`` (proof of Theorem 3.1).

    ``Z`` sums the weights of the measured levels only, so ``sum eps_i = eps``. Without
    ``full_pyramid`` measurement starts at ``min(q, depth)`` (Section 4)."""
    epsilon = check_epsilon(epsilon)
    if not (0.0 < gamma <= 1.0):
        raise ParamError(f"gamma must be in (0, 1] (got {gamma}); the analysis needs gamma > 0.5")
    if int(depth) < 0:
        raise ParamError(f"depth must be non-negative (got {depth})")
    q = start_level(w)
    first = 0 if full_pyramid else min(q, int(depth))
    levels = np.arange(first, int(depth) + 1)
    weights = gamma ** np.abs(levels - q).astype(np.float64)
    eps = weights / weights.sum() * float(epsilon)
    return levels, eps


def w_rule(n_users: float, depth: int) -> int:
    """The default ``w`` for ``n_users`` users: ``max(20, round(20 n / 200))``, at most
    every cell of the finest level. Section 4 runs w = 20 for n = 200 users, i.e. about 10 users
    per kept cell; the rule keeps that ratio, so the w kept cells of a level carry counts the
    level's Laplace noise does not swamp, as they do in the paper's setting. With a fixed w
    the sparsity k the output can follow (Lemma 3.3: ``w = O(k / eta^2)``) stays at the
    paper's while the data's grows with the users: at 20,000 users on a street grid with hot
    venues (engine/bench/unseen.py, 256 x 256) w = 20 leaves 190-210 m EMD at every eps and
    loses EMD to the Laplace baseline at eps 1 and 10; w = 2,000 (the rule) gives 51, 31 and
    9 m at eps 0.5, 1, 10 against the baseline's 200, 159, 33 m (BENCHMARKS.md, sparse_emd).
    Never below the paper's 20, so its own setting (n <= 200) is unchanged."""
    w = max(W_DEFAULT, int(round(W_DEFAULT * max(float(n_users), 0.0) / N_PAPER)))
    return int(min(w, 4 ** int(depth)))


# --------------------------------------------------------------------- heatmap
def normalised(grid: np.ndarray) -> tuple[np.ndarray, bool]:
    """``grid / sum``; a uniform map (and ``False``) when the grid has no positive mass."""
    g = np.asarray(grid, dtype=np.float64)
    s = float(g.sum())
    if s > 0 and np.isfinite(s):
        return g / s, True
    return np.full(g.shape, 1.0 / g.size), False


# --------------------------------------------------------------------- padding
def pad_to_dyadic(grid: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """Pad an ``H x W`` grid with zeros (north and east) to a ``2^l x 2^l`` square.

    Returns the padded grid and the original shape (to crop with ``[:H, :W]``)."""
    g = np.asarray(grid, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] < 1 or g.shape[1] < 1:
        raise DataError(f"expected a non-empty 2-D grid (got shape {g.shape})")
    side = max(g.shape)
    n = 1 << (side - 1).bit_length() if side > 1 else 1
    out = np.zeros((n, n), dtype=np.float64)
    out[: g.shape[0], : g.shape[1]] = g
    return out, (int(g.shape[0]), int(g.shape[1]))


# ------------------------------------------------------------------ algorithm 1
@dataclass
class SparseEMDResult:
    distribution: np.ndarray  # a_hat = s_hat / ||s_hat||_1
    recon: Reconstruction
    levels: np.ndarray
    epsilons: np.ndarray
    q: int
    empty: bool  # True when s_hat == 0 (the output is then uniform)


def laplace_measure(pyr: list[np.ndarray], levels, epsilons, rng):
    """``measure`` for Algorithm 1: true level counts plus ``Lap(1/eps_i)`` per cell.
    ``rng``: a numpy Generator (seeded: ``counts + rng.laplace(0, 1/eps_i, k)``) or an
    engine NoiseSource, whose ``add_laplace`` in secure mode passes the requested counts
    themselves through OpenDP's Laplace measurement."""
    from ...core.noise import NoiseSource

    eps_of = dict(zip((int(v) for v in levels), (float(e) for e in epsilons)))
    noise = NoiseSource(rng) if isinstance(rng, np.random.Generator) else rng

    def measure(i, ix, iy):
        return noise.add_laplace(pyr[i][iy, ix], 1.0 / eps_of[i])

    return measure


def sparse_emd(
    s: np.ndarray,
    epsilon: float,
    rng: np.random.Generator | None = None,
    *,
    w: int = W_DEFAULT,
    gamma: float = GAMMA_SECTION4,
    full_pyramid: bool = False,
    fill: str = "uniform",
    split: str = "even",
    measure=None,
    noiseless: bool = False,
) -> SparseEMDResult:
    """Algorithm 1 on a ``2^l x 2^l`` grid ``s`` (the sum of the users' distributions).

    ``measure`` overrides the noisy measurement (see :func:`reconstruct`);
    ``noiseless=True`` measures the exact counts (NOT private: for tests and for showing
    what the reconstruction alone does)."""
    s = np.asarray(s, dtype=np.float64)
    n = s.shape[0]
    if s.ndim != 2 or s.shape[0] != s.shape[1] or n & (n - 1):
        raise DataError(f"the grid must be 2^l x 2^l (got {s.shape}); use aggregate() to pad")
    depth = n.bit_length() - 1
    w = int(w)
    levels, eps = level_epsilons(epsilon, depth, w, gamma, full_pyramid)
    if measure is None and noiseless:
        pyr = pyramid(s)

        def measure(i, ix, iy):
            return pyr[i][iy, ix]

    elif measure is None:
        if rng is None:
            raise ValueError("an rng is needed for the noise")
        measure = laplace_measure(pyramid(s), levels, eps, rng)
    recon = reconstruct(measure, depth, int(levels[0]), w, fill, split)
    a_hat, ok = normalised(recon.s_hat)
    return SparseEMDResult(a_hat, recon, levels, eps, start_level(w), not ok)


def aggregate(s: np.ndarray, epsilon: float, rng: np.random.Generator | None = None, **kw) -> np.ndarray:
    """Algorithm 1 on any ``H x W`` grid: pad to ``2^l x 2^l`` (see the module docstring),
    run, crop, renormalise. Returns the estimated distribution on the ``H x W`` grid."""
    padded, (h, wd) = pad_to_dyadic(s)
    res = sparse_emd(padded, epsilon, rng, **kw)
    out = res.recon.s_hat[:h, :wd]
    return normalised(out)[0]
