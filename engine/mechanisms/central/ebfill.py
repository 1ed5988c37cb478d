"""Where the top-t default puts the mass of the cells it does not keep: an empirical-Bayes fill.

The default top-t release (:func:`.identity.topt_release`) keeps the cells whose noisy count stands
out of the Laplace noise and spreads the rest of the noisy total over the other cells. Spread
evenly, the map throws away what the noisy counts still say in bulk: on a dense city no single
cell passes at eps <= 1, yet Identity's map beats the uniform one. This module weighs the cells
not kept by posterior means computed from the noisy counts alone (post-processing: no budget):

* blocks (16 x 16 of them, the map's coarse shape): the sum of each block's cells not kept has
  Gaussian noise of variance ``2 K b^2`` (K cells, Laplace scale b); a prior on the block sums is
  fitted by maximum likelihood and each block gets its posterior mean;
* cells, pooled with the cells of blocks of about the same estimated density (8 classes): a prior
  on the counts is fitted to their noisy counts (Laplace scale b, observed below the top-t
  threshold) and each cell gets its posterior mean;
* a cell's weight is its block's posterior mean shared out in proportion to the cells' posterior
  means (without a block model, the cells' posterior means).

The priors are zero-inflated gammas, ``p0 delta_0 + (1 - p0) Gamma(k, theta)`` with k >= 1: an
empty share and a log-concave rest. Robbins' empirical Bayes with a parametric prior (the
g-modelling of Efron, "Two modeling strategies for empirical Bayes estimation", Statistical
Science 2014); the nonparametric maximum-likelihood prior (Kiefer-Wolfowitz) and gammas with
k < 1 were tried and rejected: on maps the noise swamps (Berlin at eps 0.1-0.3) they fit a few
rare large counts to the noise's extremes and then pour mass onto noise (up to 4.9x the uniform
map's MSE). A fitted prior is used only when it beats one common value for every cell (block) by
``LR_CRIT`` in twice the log-likelihood: on maps with no structure (simulated: 256 x 256 cells of
one true count, 0 to 3 Laplace scales; 256 blocks, the cells not kept or one eighth of them; 300 maps
each) that is exceeded in at most one map in 300 (block level: 99% quantile 3.8-5.1; cells: 99%
0.3-6.1; the statistic is negative where a gamma of k <= ``K_MAX`` cannot be as narrow as the
truth's point mass, e.g. blocks at 3 scales), ``scripts/topt_fill_calibration.py``; otherwise every
cell (block) gets the same weight, the even fill. BENCHMARKS.md, "defaults on data nobody tuned them
on", has the maps' figures.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

LR_CRIT = 8.0  # twice the log-likelihood ratio a fitted prior must reach over one common value
BLOCKS = 16  # blocks per side for the coarse shape
MIN_BLOCK_SIDE = 4  # cells per block side below which the block sums' noise is too far from Gaussian
CLASSES = 8  # groups of blocks by estimated density whose cells share a prior
K_MAX = 400.0  # gamma shapes up to a near point mass
BIN = 1.0 / 64  # noisy counts are binned to this fraction of the Laplace scale for the fit


def _atoms(scale: float, top: float) -> np.ndarray:
    """Support of the discretised prior: 0, a geometric ladder below scale/4 (small counts), then
    steps of scale/4 up to ``top``."""
    small = np.geomspace(1e-4 * scale, scale / 4, 40, endpoint=False)
    return np.concatenate([[0.0], small, np.arange(scale / 4, top + scale / 4, scale / 4)])


def _zig(theta, edges: np.ndarray) -> np.ndarray:
    """Masses on the atoms of p0 delta_0 + (1 - p0) Gamma(k, scale): theta = (logit p0, logit of k
    in [1, K_MAX], log scale); the gamma's mass on each atom is its mass between the edges around it."""
    p0 = special.expit(theta[0])
    k = 1.0 + (K_MAX - 1.0) * special.expit(theta[1])
    scale = math.exp(min(max(theta[2], -40.0), 40.0))
    return np.concatenate([[p0], (1 - p0) * np.diff(special.gammainc(k, edges / scale))])


def _edges(atoms: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], 0.5 * (atoms[1:-1] + atoms[2:]), [np.inf]])


def _best_fit(nll, mean: float) -> tuple[np.ndarray, float]:
    """Nelder-Mead from a spread prior and from a near point mass; the better optimum."""
    best = None
    for start in ([0.0, -3.0, math.log(mean)], [3.0, 3.0, math.log(mean / 20)]):
        r = optimize.minimize(nll, start, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-2, "maxiter": 600})
        if best is None or r.fun < best.fun:
            best = r
    return best.x, float(best.fun)


class _LaplaceMixture:
    """``sum_k h_k exp(-|y - a_k| / b)`` at every y for any weights h on the sorted atoms a, exactly,
    by cumulative sums (the kernel factors as exp(-y/b) exp(a/b) for a <= y)."""

    def __init__(self, y: np.ndarray, atoms: np.ndarray, b: float):
        self.pos = np.searchsorted(atoms, y, side="right")
        self.up, self.down = np.exp(atoms / b), np.exp(-atoms / b)
        self.ey_down, self.ey_up = np.exp(-y / b), np.exp(y / b)

    def __call__(self, h: np.ndarray) -> np.ndarray:
        below = np.concatenate([[0.0], np.cumsum(h * self.up)])
        above = np.concatenate([np.cumsum((h * self.down)[::-1])[::-1], [0.0]])
        return self.ey_down * below[self.pos] + self.ey_up * above[self.pos]


def _laplace_below(top: float, a: np.ndarray, b: float) -> np.ndarray:
    """P(a + Laplace(b) <= top) for every a."""
    z = (top - np.asarray(a, dtype=np.float64)) / b
    return np.where(z >= 0, 1 - 0.5 * np.exp(-np.maximum(z, 0)), 0.5 * np.exp(np.minimum(z, 0)))


def cell_posterior(y: np.ndarray, b: float, top: float) -> tuple[np.ndarray | None, float]:
    """Posterior means of the counts x behind ``y = x + Laplace(b)``, all observed at or below
    ``top`` (the cells top-t did not keep), under the zero-inflated gamma prior fitted by maximum
    likelihood (truncated at ``top``); None when that prior does not beat one common value for
    every cell by ``LR_CRIT``. Returns (means or None, twice the log-likelihood ratio)."""
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    idx = np.floor(y / (BIN * b)).astype(np.int64)
    uniq, inv, cnt = np.unique(idx, return_inverse=True, return_counts=True)
    c, w = (uniq + 0.5) * BIN * b, cnt.astype(np.float64)
    atoms = _atoms(b, top + 10 * b)
    edges = _edges(atoms)
    mix = _LaplaceMixture(c, atoms, b)
    below = _laplace_below(top, atoms, b)

    def nll(theta):
        g = _zig(theta, edges)
        return -(w @ np.log(np.maximum(mix(g), 1e-300))) + n * math.log(max(float(below @ g), 1e-300))

    def nll_common(mu):  # one value mu for every cell (the same constant 1/(2b) dropped as in nll)
        return (w @ np.abs(c - mu)) / b + n * math.log(float(_laplace_below(top, mu, b)))

    med = max(float(np.median(y)), 0.0)
    common = optimize.minimize_scalar(nll_common, bounds=(0.0, 4 * med + b), method="bounded")
    theta, fitted = _best_fit(nll, max(float(y.mean()), b / 10))
    lr = 2.0 * (float(common.fun) - fitted)
    if lr < LR_CRIT:
        return None, lr
    g = _zig(theta, edges)
    return np.maximum(mix(g * atoms) / np.maximum(mix(g), 1e-300), 0.0)[inv], lr


def block_posterior(sums: np.ndarray, var: np.ndarray) -> tuple[np.ndarray | None, float]:
    """Posterior means of block totals observed as ``sums`` with Gaussian noise of variance ``var``
    (one per block), under the zero-inflated gamma prior fitted by maximum likelihood; None when it
    does not beat one common total for every block by ``LR_CRIT``. Returns (means or None, 2 x LLR)."""
    sums, var = np.asarray(sums, dtype=np.float64), np.asarray(var, dtype=np.float64)
    sd = math.sqrt(float(var.max()))
    atoms = _atoms(sd, max(float(sums.max()), 0.0) + 3 * sd)
    edges = _edges(atoms)
    ll = -0.5 * (sums[:, None] - atoms[None, :]) ** 2 / var[:, None]
    shift = ll.max(axis=1, keepdims=True)
    lik = np.exp(ll - shift)

    def nll(theta):
        return -float(np.log(np.maximum(lik @ _zig(theta, edges), 1e-300)).sum())

    mu = max(float((sums / var).sum() / (1 / var).sum()), 0.0)
    common = float((0.5 * (sums - mu) ** 2 / var).sum())
    theta, fitted = _best_fit(nll, max(float(sums.mean()), sd / 10))
    lr = 2.0 * (common - (fitted - float(shift.sum())))
    if lr < LR_CRIT:
        return None, lr
    g = _zig(theta, edges)
    return np.maximum((lik @ (g * atoms)) / np.maximum(lik @ g, 1e-300), 0.0), lr


def fill_weights(raw: np.ndarray, kept: np.ndarray, b: float, top: float) -> tuple[np.ndarray, str]:
    """Weights >= 0 of the cells not kept (0 on kept cells) for sharing out the rest of the total,
    from the noisy counts ``raw`` (Laplace scale ``b``; the cells not kept are at or below ``top``),
    and which models passed: "even", "blocks", "cells" or "blocks and cells" (module docstring)."""
    n = raw.shape[0]
    free = ~np.asarray(kept, dtype=bool)
    nb = min(BLOCKS, n)
    side = n // nb
    block = ((np.arange(n)[:, None] // side) * nb + np.arange(n)[None, :] // side).ravel()
    free_flat = free.ravel()
    k_free = np.bincount(block, weights=free_flat, minlength=nb * nb)
    x_block = None
    if side >= MIN_BLOCK_SIDE:
        sums = np.bincount(block, weights=np.where(free_flat, raw.ravel(), 0.0), minlength=nb * nb)
        x_block, _ = block_posterior(sums, 2 * b * b * np.maximum(k_free, 1))
    if x_block is not None:
        x_block = np.where(k_free > 0, x_block, 0.0)
        density = x_block / np.maximum(k_free, 1)
        rank = np.empty(density.size, dtype=np.int64)
        rank[np.argsort(density, kind="stable")] = np.arange(density.size)
        group = (rank * CLASSES // density.size)[block]
    else:
        group = np.zeros(block.size, dtype=np.int64)
    e = np.ones(raw.size)
    cells_fitted = False
    for c in np.unique(group[free_flat]):
        sel = free_flat & (group == c)
        if np.count_nonzero(sel) > 1:
            post, _ = cell_posterior(raw.ravel()[sel], b, top)
            if post is not None:
                e[sel], cells_fitted = post, True
    e = np.where(free_flat, e, 0.0)
    if x_block is not None:
        share = np.bincount(block, weights=e, minlength=nb * nb)
        even = np.where(free_flat, 1.0 / np.maximum(k_free[block], 1), 0.0)
        within = np.where(share[block] > 0, e / np.where(share[block] > 0, share[block], 1.0), even)
        w = x_block[block] * within
    else:
        w = e
    model = {(False, False): "even", (True, False): "blocks", (False, True): "cells", (True, True): "blocks and cells"}
    if not w.sum() > 0:
        w, x_block, cells_fitted = free_flat.astype(np.float64), None, False
    return w.reshape(raw.shape), model[(x_block is not None, cells_fitted)]
