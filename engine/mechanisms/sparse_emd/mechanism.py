"""DP sparse EMD aggregation for heatmaps (Ghazi et al., 2023), its Laplace baselines
and its distributed (secure-aggregation) variant.

Paper: B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
N. Valliappan, "Differentially Private Heatmaps", AAAI 2023
(``papers/ghazi2023_dp_heatmaps_sparse_emd.md``). No official code is public; this
module is derived from the paper (the one unofficial implementation is wrong, see
REFERENCE_NOTES.md section 2).

What is implemented, by section:

* Section 2.3: the heatmap ``H_p^sigma`` (Gaussian filter, each source cell's kernel
  renormalised over the grid so no mass leaves the map): :func:`engine.metrics.gaussian_heatmap`.
* Section 3.1, Definition 3.1: the (scaled) pyramidal transform ``P = [P_0; P_1/2; ...;
  P_l/2^l]``, levels ``i = 0..l`` with ``2^i x 2^i`` cells.
* Algorithm 1 (DPSPARSEEMDAGG): ``s = sum_i p_i``; per level ``y'_i = (P_i s + nu_i)/2^i``,
  ``nu_i ~ Lap(1/eps_i)`` per cell; reconstruct; output ``s_hat / ||s_hat||_1``.
* Proof of Theorem 3.1 + Section 4: ``eps_i = gamma^|i-q| eps / Z`` with ``q =
  floor(log2 sqrt(w))`` and ``Z`` the sum of the weights over the measured levels, so the
  epsilons sum to ``eps`` (basic composition; one ledger entry per level). Section 4's
  ``gamma = 1/sqrt(2)`` and ``w = 20`` are the defaults.
* Section 4, "Implementation details": levels ``i < q`` are not measured (measurement
  starts at level ``q``, whose ``4^q <= w`` cells are all kept). ``pyramid="full"``
  runs Algorithm 1 as printed (levels ``0..l``, root kept by Algorithm 2 line 3).
* Algorithm 2 (RECONSTRUCT): ``T_i = children(S_{i-1})``; ``S_i`` = the ``min(w, |T_i|)``
  cells of ``T_i`` with the largest noisy values (only children of kept cells are ever
  looked at); ``y_hat = y'|_S``; ``s_hat = argmin_{s >= 0} ||y_hat - P s||_1``.
* Section 4: the LP has ``O(w l)`` variables: a cell of ``T_i \\ S_i`` ("left out") has
  ``y_hat = 0`` on its whole subtree, so the objective depends on the mass inside it
  only through its total ``x_c`` (cost ``sum_{j >= i} 2^-j x_c``); a kept cell ``c`` at
  level ``i`` contributes ``2^-i |y~(c) - m_c|`` with ``m_c`` the mass below it
  (``y~ = 2^i y'`` the noisy count). Variables: ``m_c`` per kept cell, ``u+_c, u-_c``
  for the absolute values, ``x_c`` per left-out cell; equalities ``m_c = sum of its
  children's m / x`` and ``m_c + u+_c - u-_c = y~(c)``. Solved with HiGHS
  (``scipy.optimize.linprog(method="highs")``) on sparse matrices.
* Appendix F / Sections 1.3, 5: the algorithm only needs a Laplace-like primitive;
  :class:`SparseEMDSecAgg` replaces each level's Laplace noise by secure-aggregation
  Polya noise (clients scale by ``B`` and round down, each adds
  ``Polya(1/n, r_i) - Polya(1/n, r_i)`` per coordinate; the sum is discrete Laplace).
* Section 4 "Baselines" ([LXD+19]): Laplace noise per cell of ``s``, negatives zeroed,
  optionally only the top ``t%`` cells kept, then the same Gaussian heatmap.

Standard error per cell (issue 16): the Laplace baselines with ``density = "estimate"`` carry
one in closed form (``extras["stderr"]``). Algorithm 1's release has none: which cells are kept
(top w per level) and the L1 reconstruction's solution are non-linear functions of the noise and
the data, so the dashboard estimates the spread from repeated seeded runs.

Noise: the Laplace measurements (Algorithm 1 and the baselines) are
``ctx.noise.add_laplace(counts, 1/eps_i)``: seeded numpy, or in secure mode the
requested counts themselves pass through OpenDP's Laplace measurement (engine.core.noise),
so OpenDP's floating-point-safe guarantee covers the measured values. The SecAgg
variant's discrete-Laplace part comes from OpenDP in secure mode and is added to
integer sums (exact).

Choices where the paper is silent (also listed in each mechanism's docstring):

* Where the mass of a left-out cell goes inside the cell is not determined by the LP
  (every placement has the same objective); ``fill="uniform"`` spreads it evenly over the
  cell (default: it claims nothing the measurements do not support), ``"centre"`` puts it
  on the cell's centre pixel (a sparse output).
* ``sigma`` (the heatmap filter width) is not stated in the paper; it is a parameter in
  units of the domain side (the paper's coordinates are ``[0, 1)^2``). Default 0.03: the
  saliency-map convention of the authors' other benchmark (fixations blurred by about one
  degree of visual angle, a few percent of the image width), about 600 m on a 20 km city.
  The metrics depend on it (KL most): see engine/bench/sparse_emd.py.
* Among the LP's minimisers (not unique) we return the one that splits the mass of a kept
  cell's left-out children evenly among them (``split="even"``): they lost the top-w
  contest, so their noisy counts are mostly noise; following them (``"noisy"``, the earlier
  default) or the solver's vertex (``"solver"``) concentrates mass where the truth has
  little (Figure 1 setting, ``python -m engine bench sparse_emd``: the comparisons lost went
  from 4 + 2 to 2 + 1 of 16, offline + check-in; BENCHMARKS.md), and
  spreads a left-out cell's mass uniformly over it (``fill``); both keep the objective.
* The release's ``density`` is ``s_hat`` itself: an estimate of ``sum_i p_i`` in user units
  whose total is a DP estimate of the number of users (so no private count is needed to
  scale ``a_hat``). ``density="heatmap"`` publishes ``H_{a_hat}^sigma * ||s_hat||_1`` instead.
* Non-power-of-two grids (the paper assumes ``Delta = 2^l``): :func:`pad_to_dyadic` pads
  with empty cells at the north and east edges; :func:`aggregate` runs the algorithm on
  the padded grid, crops, and renormalises. Padding leaves the true distribution
  unchanged but noise in the padded cells can win top-w slots and the LP can place mass
  there, which cropping discards (so slightly fewer slots serve the real region). The
  engine's own domains are always dyadic, so the registered mechanisms never pad.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ...core.accounting import Ledger
from ...core.errors import DataError, EngineError, ParamError
from ...core.grid import Domain, pyramid
from ...core.params import Param
from ...metrics import gaussian_heatmap
from ..base import Communication, Mechanism, Release, ServerView, aggregate_view, register
from ..central import TOPT_RULE_HELP, curator_communication

GAMMA_SECTION4 = 1.0 / math.sqrt(2.0)  # Section 4, footnote 5
W_DEFAULT = 20  # Section 4
N_PAPER = 200  # users per map in Section 4's experiments, for which w = 20
W_COUNT_SHARE = 0.05  # share of epsilon spent on the user count that sets w (w = 0, central mechanism)
SIGMA_DEFAULT = 0.03  # our choice (the paper does not state sigma), in units of the domain side
CHILD_DX = np.array([0, 1, 0, 1], dtype=np.int64)
CHILD_DY = np.array([0, 0, 1, 1], dtype=np.int64)
MAX_LP_VARIABLES = 2_000_000
SPLITS = ("even", "noisy", "solver")  # LP tie-breaks among left-out siblings (reconstruct)


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
    if not (isinstance(epsilon, (int, float, np.floating)) and math.isfinite(epsilon) and epsilon > 0):
        raise ParamError(f"epsilon must be a positive number (got {epsilon})")
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
    """The default ``w`` for ``n_users`` users (issue 22): ``max(20, round(20 n / 200))``, at most
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


# -------------------------------------------------------------- reconstruction
@dataclass
class Reconstruction:
    """Output of Algorithm 2 plus what the dashboard shows about it."""

    s_hat: np.ndarray  # (2^l, 2^l) estimated sum of the users' distributions (user units), >= 0
    levels: np.ndarray  # measured levels
    kept: list[np.ndarray]  # per measured level, (k, 2) int [ix, iy] of S_i at that level
    left_out: list[np.ndarray]  # per measured level, (r, 2) int [ix, iy] of T_i \ S_i
    kept_values: list[np.ndarray]  # noisy counts y~ = 2^i y' of the kept cells
    left_out_mass: list[np.ndarray]  # LP mass x_c of the left-out cells
    lp: dict = field(default_factory=dict)
    left_out_values: list[np.ndarray] = field(default_factory=list)  # their noisy counts


def reconstruct(measure, depth: int, start: int, w: int, fill: str = "uniform", split: str = "even") -> Reconstruction:
    """Algorithm 2 on noisy counts supplied level by level.

    ``measure(i, ix, iy)`` returns the noisy counts ``2^i y'_i`` of the cells ``(ix, iy)``
    of level ``i``; it is called once per level ``start..depth``, only on ``T_i``
    (the noise of cells never looked at cannot influence the output, so it is never drawn).

    The LP's minimisers are not unique: left-out siblings (children of the same kept
    cell) have the same cost and appear only in their parent's constraint, so any split of
    their total mass among them is optimal. ``split="even"`` returns the minimiser that
    shares it equally; ``"noisy"`` shares it in proportion to their positive noisy counts
    (evenly if none is positive); ``"solver"`` keeps the vertex HiGHS returns (typically
    all on one sibling).
    """
    if w < 1:
        raise ParamError(f"w must be at least 1 (got {w})")
    if not (0 <= start <= depth):
        raise ParamError(f"start level {start} outside 0..{depth}")
    if fill not in ("uniform", "centre"):
        raise ParamError(f"fill must be 'uniform' or 'centre' (got {fill!r})")
    if split not in SPLITS:
        raise ParamError(f"split must be one of {', '.join(SPLITS)} (got {split!r})")
    kept, left, kept_vals, kept_parent, left_parent, left_vals = [], [], [], [], [], []
    prev = None
    for i in range(start, depth + 1):
        if prev is None:  # T_start: every cell of the start level (S_{start-1} = everything)
            n_i = 1 << i
            iy, ix = np.divmod(np.arange(n_i * n_i, dtype=np.int64), n_i)
            parent = np.full(ix.size, -1, dtype=np.int64)
        else:  # T_i = children(S_{i-1}) and nothing else
            ix = (2 * prev[:, 0, None] + CHILD_DX).ravel()
            iy = (2 * prev[:, 1, None] + CHILD_DY).ravel()
            parent = np.repeat(np.arange(prev.shape[0], dtype=np.int64), 4)
        vals = np.asarray(measure(i, ix, iy), dtype=np.float64)
        if vals.shape != ix.shape or not np.isfinite(vals).all():
            raise EngineError(f"level {i}: measurements are missing or not finite")
        k = min(int(w), vals.size)
        order = np.argsort(-vals, kind="stable")  # ties: lower index first (deterministic)
        sel, rest = order[:k], order[k:]
        cur = np.stack([ix[sel], iy[sel]], axis=1)
        kept.append(cur)
        kept_vals.append(vals[sel])
        kept_parent.append(parent[sel])
        left.append(np.stack([ix[rest], iy[rest]], axis=1))
        left_parent.append(parent[rest])
        left_vals.append(vals[rest])
        prev = cur

    # weights of the sibling split: zeros share evenly (see _split_among_siblings); None keeps the vertex
    shares = {"noisy": left_vals, "even": [np.zeros_like(v) for v in left_vals], "solver": None}[split]
    s_hat, x_left, lp = _solve_lp(depth, start, kept, kept_vals, kept_parent, left, left_parent, shares, fill)
    levels = np.arange(start, depth + 1)
    return Reconstruction(s_hat, levels, kept, left, kept_vals, x_left, lp, left_vals)


def _split_among_siblings(x, parent, values, n_parents):
    """Re-split each parent's left-out mass among its left-out children in proportion to
    their positive noisy counts (evenly when none is positive); same objective value."""
    tot = np.bincount(parent, weights=x, minlength=n_parents)
    pos = np.clip(values, 0.0, None)
    wsum = np.bincount(parent, weights=pos, minlength=n_parents)
    cnt = np.bincount(parent, minlength=n_parents)
    share = np.where(wsum[parent] > 0, pos / np.where(wsum[parent] > 0, wsum[parent], 1.0), 1.0 / cnt[parent])
    return tot[parent] * share


def _solve_lp(depth, start, kept, kept_vals, kept_parent, left, left_parent, left_vals, fill):
    """``min ||y_hat - P s||_1, s >= 0`` with one variable per leaf of the kept tree."""
    nlev = len(kept)
    k_sizes = np.array([a.shape[0] for a in kept])
    r_sizes = np.array([a.shape[0] for a in left])
    k_off = np.concatenate([[0], np.cumsum(k_sizes)])
    r_off = np.concatenate([[0], np.cumsum(r_sizes)])
    K, R = int(k_off[-1]), int(r_off[-1])
    nvar = 3 * K + R  # [m (K) | u+ (K) | u- (K) | x (R)]
    if nvar > MAX_LP_VARIABLES:
        raise ParamError(f"the reconstruction LP would have {nvar:,} variables; lower w")
    lev_of_kept = np.repeat(np.arange(nlev), k_sizes) + start
    lev_of_left = np.repeat(np.arange(nlev), r_sizes) + start
    # objective in units of the finest cell (x 2^depth): kept 2^(l-i) |.|, left-out
    # sum_{j=i}^{l} 2^(l-j) = 2^(l-i+1) - 1
    wk = np.ldexp(1.0, (depth - lev_of_kept).astype(np.int64))
    wl = np.ldexp(1.0, (depth - lev_of_left + 1).astype(np.int64)) - 1.0
    c = np.concatenate([np.zeros(K), wk, wk, wl])

    rows, cols, data = [], [], []
    # (a) m_c + u+_c - u-_c = y~(c), one row per kept cell
    rk = np.arange(K)
    rows += [rk, rk, rk]
    cols += [rk, K + rk, 2 * K + rk]
    data += [np.ones(K), np.ones(K), -np.ones(K)]
    b = [np.concatenate(kept_vals) if K else np.zeros(0)]
    # (b) m_c - sum(children m) - sum(children x) = 0 for kept cells above the last level
    row0 = K
    n_inner = int(k_off[nlev - 1])  # kept cells of levels start..depth-1
    if n_inner:
        ri = np.arange(n_inner)
        rows.append(row0 + ri)
        cols.append(ri)
        data.append(np.ones(n_inner))
        for j in range(1, nlev):
            # children kept at level j: parent index into level j-1's kept list
            pk = kept_parent[j]
            rows.append(row0 + k_off[j - 1] + pk)
            cols.append(k_off[j] + np.arange(pk.size))
            data.append(-np.ones(pk.size))
            pl = left_parent[j]
            rows.append(row0 + k_off[j - 1] + pl)
            cols.append(3 * K + r_off[j] + np.arange(pl.size))
            data.append(-np.ones(pl.size))
        b.append(np.zeros(n_inner))
    nrows = K + n_inner
    A = sp.csr_matrix(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(nrows, nvar), dtype=np.float64
    )
    b_eq = np.concatenate(b)
    t0 = time.perf_counter()
    res = linprog(c, A_eq=A, b_eq=b_eq, bounds=(0, None), method="highs")
    t_lp = time.perf_counter() - t0
    if res.status != 0 or res.x is None:
        raise EngineError(f"the reconstruction linear program failed ({res.message})")
    xsol = np.clip(res.x, 0.0, None)  # HiGHS may return -1e-12 for 0

    n = 1 << depth
    s_hat = np.zeros((n, n), dtype=np.float64)
    # finest kept cells are pixels: their mass is m_c
    last = kept[-1]
    s_hat[last[:, 1], last[:, 0]] = xsol[k_off[nlev - 1] : K]
    x_left = []
    for j in range(nlev):
        lvl = start + j
        block = 1 << (depth - lvl)
        xl = xsol[3 * K + r_off[j] : 3 * K + r_off[j + 1]]
        if left_vals is not None and j > 0 and xl.size:
            xl = _split_among_siblings(xl, left_parent[j], left_vals[j], int(k_sizes[j - 1]))
        x_left.append(xl)
        for (cx, cy), mass in zip(left[j], xl):
            if mass <= 0:
                continue
            if fill == "uniform":
                s_hat[cy * block : (cy + 1) * block, cx * block : (cx + 1) * block] = mass / (block * block)
            else:
                s_hat[cy * block + block // 2, cx * block + block // 2] = mass
    lp = {
        "variables": int(nvar),
        "constraints": int(nrows),
        "nonzeros": int(A.nnz),
        "objective": float(res.fun) / float(1 << depth),  # in the paper's units ([0,1) coordinates)
        "status": res.message,
        "solve_s": t_lp,
    }
    return s_hat, x_left, lp


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


# ------------------------------------------------------------------ data access
def user_distribution_sum(data, domain: Domain) -> tuple[np.ndarray, list[str]]:
    """``s = sum_i p_i`` on the domain grid, every user's ``p_i`` having L1 norm <= 1.

    With user ids each user's locations share weight 1 (``per_user_normalised``); without
    them every location is its own user (a point mass; weights above 1 are clipped to 1 so
    the sensitivity stays 1)."""
    notes = []
    if data.user_id is not None:
        s = data.true_histogram(domain, per_user_normalised=True)
    elif data.weight is None:  # the plain histogram, all an out-of-core dataset offers (parquet_source)
        s = data.true_histogram(domain)
    else:
        inside = domain.inside(data.xy)
        wts = None
        if data.weight is not None:
            wts = np.clip(data.weight[inside].astype(np.float64), 0.0, 1.0)
            if (data.weight[inside] > 1).any():
                notes.append("location weights above 1 were clipped to 1 (each location is one user)")
        s = domain.histogram(data.xy[inside], wts)
    return s, notes


# ------------------------------------------------------------------ mechanisms
_COMMON_PARAMS = (
    Param(
        "w",
        "int",
        0,
        "cells kept per level (Algorithm 2): the w children of kept cells with the largest noisy "
        "values; governs the sparsity k the output can follow. Section 4 uses 20, for 200 users per map. "
        "0 (default): w grows with the users, max(20, 20 n / 200) (about 10 users per kept cell, as in the "
        "paper's setting), n from a Laplace count of the users spending 5% of epsilon (the number of "
        "clients, public, in the distributed variant); 100k users, eps 1: EMD 663 m at w = 20, 82 m at "
        "320, 41 m at 1280 (python -m engine bench sparse_emd)",
        min=0,
        max=4096,
    ),
    Param(
        "gamma",
        "float",
        GAMMA_SECTION4,
        "decay of the per-level budgets eps_i ~ gamma^|i - q| (Section 4: 1/sqrt(2); the proof of "
        "Theorem 3.1 uses 0.8; the error bound needs gamma > 0.5)",
        min=0.5,
        max=1.0,
    ),
    Param(
        "pyramid",
        "choice",
        "from_q",
        "from_q: measure levels q..l only, q = floor(log2 sqrt(w)) (Section 4, as in the paper's "
        "experiments); full: measure every level 0..l (Algorithm 1 as printed)",
        choices=("from_q", "full"),
    ),
    Param(
        "fill",
        "choice",
        "uniform",
        "where the LP's mass for a left-out cell goes (the LP is indifferent): spread uniformly "
        "over the cell, or on its centre pixel",
        choices=("uniform", "centre"),
    ),
    Param(
        "split",
        "choice",
        "even",
        "which of the LP's equally good solutions to return: the mass the LP gives to the left-out "
        "children of a kept cell is shared equally (even), in proportion to their noisy counts (noisy; "
        "mostly noise, they lost the top-w contest), or left as the solver returns it (solver; usually "
        "all on one child)",
        choices=SPLITS,
    ),
)
_SIGMA = Param(
    "sigma",
    "float",
    SIGMA_DEFAULT,
    "width of the heatmap's Gaussian filter (Section 2.3) as a fraction of the domain side "
    "(0 = no filter); not stated in the paper, 0.03 (about one degree of visual angle in saliency maps) "
    "is our default",
    min=0.0,
    max=0.25,
)
_DENSITY = Param(
    "density",
    "choice",
    "estimate",
    "what the release's density holds: the unfiltered estimate (counts in users) or the "
    "Gaussian-filtered heatmap scaled to the same total; both are always in the extras",
    choices=("estimate", "heatmap"),
)


def _heatmap_extras(estimate: np.ndarray, sigma: float, domain: Domain) -> tuple[np.ndarray, np.ndarray, bool]:
    dist, ok = normalised(estimate)
    heat = gaussian_heatmap(dist, sigma * domain.n)
    return dist, heat / heat.sum() if heat.sum() > 0 else dist, ok


class _SparseEMDBase(Mechanism):
    def _run_core(self, domain, epsilon, params, ctx, measure_factory):
        w = params["w"]
        levels, eps = level_epsilons(epsilon, domain.depth, w, params["gamma"], params["pyramid"] == "full")
        ctx.progress(0.1, "adding noise to the pyramid and keeping its largest cells")
        measure = measure_factory(levels, eps)
        ctx.check_cancelled()
        t0 = time.perf_counter()
        recon = reconstruct(measure, domain.depth, int(levels[0]), w, params["fill"], params["split"])
        t_rec = time.perf_counter() - t0
        ctx.check_cancelled()
        ctx.progress(0.8, "drawing the heatmap")
        dist, heat, ok = _heatmap_extras(recon.s_hat, params["sigma"], domain)
        total = float(recon.s_hat.sum())
        density = recon.s_hat if params["density"] == "estimate" else heat * total
        ledger = Ledger()
        for lvl, e in zip(levels, eps):
            ledger.spend(
                f"level {int(lvl)} ({1 << int(lvl)}x{1 << int(lvl)} cells)",
                float(e),
                composition="sequential",
                note=f"eps_{int(lvl)} = gamma^|{int(lvl)} - q| eps / Z; each user's level vector has L1 norm <= 1",
            )
        diagnostics = {
            "q": start_level(w),
            "levels": [int(v) for v in levels],
            "level_epsilons": [float(e) for e in eps],
            "kept_per_level": [int(a.shape[0]) for a in recon.kept],
            "left_out_per_level": [int(a.shape[0]) for a in recon.left_out],
            "lp": recon.lp,
            "reconstruct_s": t_rec,
            "estimated_total": total,
            "empty_reconstruction": not ok,
            "sigma_cells": params["sigma"] * domain.n,
            "noise_source": getattr(ctx.noise, "description", "custom"),
        }
        extras = {
            "distribution": dist,
            "sparse_reconstruction": recon.s_hat,
            "heatmap": heat,
            "kept_cells": dict(zip((int(v) for v in levels), recon.kept)),
            "left_out_cells": dict(zip((int(v) for v in levels), recon.left_out)),
            "kept_values": dict(zip((int(v) for v in levels), recon.kept_values)),
            # Explore's level slider: S_i and its noisy counts per measured level. They are the
            # eps_i-DP measurements themselves, so showing them spends no further budget.
            "levels": [
                {
                    "level": int(lv),
                    "rects": _cell_rects(kept, int(lv), domain),
                    "counts": vals,
                    "epsilon": float(e),
                    "considered": int(kept.shape[0] + left.shape[0]),  # |T_i|
                }
                for lv, e, kept, vals, left in zip(levels, eps, recon.kept, recon.kept_values, recon.left_out)
            ],
        }
        return density, ledger, diagnostics, extras, recon


@register
class SparseEMD(_SparseEMDBase):
    """DP sparse EMD aggregation (Ghazi et al. 2023, Algorithms 1-2, Theorem 3.1, Section 4).

    Each user holds a distribution ``p_i`` over the grid (several check-ins share weight 1;
    a single location is a point mass), so every user's level vector ``P_i p_i`` has L1
    norm at most 1. Per measured level ``i`` the curator adds ``Lap(1/eps_i)`` to every
    cell count, with ``eps_i = gamma^|i-q| eps / Z`` (proof of Theorem 3.1; Section 4:
    ``gamma = 1/sqrt(2)``, ``w = 20``, measurement starting at ``q = floor(log2 sqrt(w))``).
    Algorithm 2 keeps the ``w`` children of kept cells with the largest noisy counts per
    level and solves ``min ||y_hat - P s||_1, s >= 0`` as a sparse LP with one variable per
    leaf of the kept tree (``O(w l)``, Section 4) using HiGHS. Output: ``a_hat = s_hat /
    ||s_hat||_1`` and its Gaussian heatmap (Section 2.3).

    Threat model: a trusted curator sees every user's locations; the public (and any
    analyst) sees only the released map. Guarantee: epsilon-DP (central, add/remove one
    user), basic composition of one Laplace mechanism per level (the reconstruction is
    post-processing).

    Departures / choices: noise is drawn only for the cells Algorithm 2 looks at (``T_i``);
    the others cannot affect the output, so the output law is unchanged. The LP's minimiser
    is not unique; we return the one that shares the mass given to a kept cell's left-out
    children equally (``split``) and spreads a
    left-out cell's mass uniformly over it (``fill``). ``sigma`` is ours (not stated in the
    paper; default 0.03 of the side), and the heatmap kernel is untruncated as in Sec. 2.3. ``density`` is ``s_hat`` (user units; its total is a DP estimate
    of the number of users), not ``a_hat`` times the private true count. If ``s_hat`` is
    identically zero the output distribution is uniform (flagged in the diagnostics).
    Locations without user ids are one user each (weights clipped to 1).
    """

    key = "sparse_emd"
    label = "Sparse EMD aggregation (Ghazi et al.)"
    family = "central"
    guarantee = "epsilon-DP (central, per user, under add/remove user; basic composition over pyramid levels)"
    neighbouring = "add/remove user"
    threat_model = (
        "A trusted curator sees every user's locations; the public sees only the released heatmap "
        "(reconstructed from Laplace-noised pyramid counts)."
    )
    summary = (
        "Noisy counts on a quadtree pyramid with more budget near level log2 sqrt(w); keep the w "
        "heaviest children of kept cells per level; an L1 linear program rebuilds a sparse map that is "
        "close in Earth Mover's Distance."
    )
    paper = (
        "Ghazi, He, Kohlhoff, Kumar, Manurangsi, Navalpakkam, Valliappan. Differentially Private Heatmaps. AAAI 2023"
    )
    equations = "Sec. 2.3 (heatmap), Def. 3.1 (pyramidal transform), Alg. 1-2, proof of Thm 3.1 (eps_i), Sec. 4"
    params = _COMMON_PARAMS + (_SIGMA, _DENSITY)
    dp_outputs = (
        "w",  # from the Laplace count of users (its own ledger entry)
        "w_rule_users",
        "kept_per_level",
        "left_out_per_level",
        "kept_cells",
        "lp",
        "reconstruct_s",
        "estimated_total",
        "empty_reconstruction",
        "distribution",
        "sparse_reconstruction",
        "heatmap",
        "left_out_cells",
        "kept_values",
        "levels",
    )

    def run(self, data, domain, epsilon, params, ctx):
        ctx.progress(0.0, "building each user's distribution")
        s, notes = user_distribution_sum(data, domain)
        pyr = pyramid(s)
        eps_levels, n_hat = float(epsilon), None
        if int(params["w"]) == 0:  # w from a DP count of the users (w_rule); the levels get the rest
            eps_n = W_COUNT_SHARE * float(epsilon)
            eps_levels -= eps_n
            n_hat = float(ctx.noise.add_laplace(np.array([s.sum()]), 1.0 / eps_n)[0])
            params = {**params, "w": w_rule(n_hat, domain.depth)}
        density, ledger, diag, extras, _ = self._run_core(
            domain, eps_levels, params, ctx, lambda lv, ep: laplace_measure(pyr, lv, ep, ctx.noise)
        )
        diag["w"] = int(params["w"])
        if n_hat is not None:
            diag["w_rule_users"] = n_hat
            ledger.spend(
                "user count (sets w)",
                float(epsilon) - eps_levels,
                composition="sequential",
                note=f"Laplace count of the users (sensitivity 1), {W_COUNT_SHARE:.0%} of epsilon; "
                "w = max(20, 20 n / 200) (w_rule)",
            )
        for note in notes:
            ledger.note_side_information(note)
        ctx.progress(1.0, "done")
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view(
                "The curator sees every location in the clear; the public sees only the released "
                "sparse reconstruction / heatmap."
            ),
            partition=_leaf_rects_from(extras, domain),
            diagnostics=diag,
            extras=extras,
        )


def _cell_rects(cells, level: int, domain) -> np.ndarray:
    """(k, 4) rectangles ``(x0, y0, x1, y1)`` in metres of level-``level`` cells ``[ix, iy]``."""
    c = np.asarray(cells, dtype=np.float64).reshape(-1, 2)
    size = domain.side / (1 << level)
    x0, y0 = domain.x0 + c[:, 0] * size, domain.y0 + c[:, 1] * size
    return np.stack([x0, y0, x0 + size, y0 + size], axis=1)


def _leaf_rects_from(extras, domain):
    """The reconstruction's leaves: every left-out cell and the kept cells of the last level."""
    parts = [_cell_rects(cells, lvl, domain) for lvl, cells in extras["left_out_cells"].items()]
    last = max(extras["kept_cells"])
    parts.append(_cell_rects(extras["kept_cells"][last], last, domain))
    return np.concatenate(parts)


# ------------------------------------------------------------ distributed variant
def secagg_level_sums(data, domain: Domain, levels, B: int) -> dict[int, np.ndarray]:
    """``Z_i = sum_j floor(B P_i p_j)`` per measured level (Appendix F, "Scale & round"):
    each client scales its level vector by ``B`` and rounds every coordinate down."""
    inside = domain.inside(data.xy)
    xy = data.xy[inside]
    ix, iy = domain.cell_index(xy)
    L = domain.depth
    if data.user_id is not None:
        inv_all, u = data.user_index()
        inv = inv_all[inside]
        counts = np.bincount(inv_all, minlength=u).astype(np.float64)
        wts = 1.0 / counts[inv]
        if data.weight is not None:
            wall = data.weight.astype(np.float64)
            tot = np.bincount(inv_all, weights=wall, minlength=u)
            wts = np.divide(wall[inside], tot[inv], out=np.zeros(inv.size), where=tot[inv] > 0)
    else:
        inv = np.arange(xy.shape[0], dtype=np.int64)
        wts = np.ones(xy.shape[0]) if data.weight is None else np.clip(data.weight[inside].astype(np.float64), 0, 1)
    single = data.user_id is None or len(data) == data.n_users
    out = {}
    for lvl in (int(v) for v in levels):
        shift = L - lvl
        n_i = 1 << lvl
        cell = (iy >> shift) * n_i + (ix >> shift)
        if single:  # one location per client: floor(B w) at that cell
            z = np.bincount(cell, weights=np.floor(B * wts + 1e-9), minlength=n_i * n_i)
        else:
            key = inv.astype(np.int64) * (n_i * n_i) + cell
            uk, pos = np.unique(key, return_inverse=True)
            mass = np.bincount(pos, weights=wts, minlength=uk.size)
            z = np.bincount(uk % (n_i * n_i), weights=np.floor(B * mass + 1e-9), minlength=n_i * n_i)
        out[lvl] = z.reshape(n_i, n_i)
    return out


def secagg_modulus_bits(B: int, n_clients: int, eps_min: float) -> int:
    """Bits of the secure-aggregation modulus ``M = 2^b``: the noisy sums lie in
    ``[-M/2, M/2)`` unless the discrete-Laplace noise exceeds 40 scales (probability
    below ``e^-40`` per coordinate), so the modular wrap-around never changes a sum."""
    span = B * max(n_clients, 1) + 40.0 * B / eps_min
    return int(math.ceil(math.log2(2.0 * span + 2.0)))


def shuffle_bits_per_user(eps: float, delta: float, m: int, n: int, B: int) -> dict:
    """Appendix F's communication in the shuffle model: ``q = Bn``, ``r`` messages per
    coordinate, ``r m`` messages of ``ceil(log2(m q))`` bits each."""
    if n < 2:
        return {"messages_per_coordinate": None, "bits_per_user": None}
    q = B * n
    r = math.ceil((2 * math.log(math.exp(eps) + 1) + 2 * math.log(m / delta) + math.log(q)) / math.log(n) + 1)
    return {
        "messages_per_coordinate": int(r),
        "bits_per_user": float(r * m * math.ceil(math.log2(m * q))),
        "delta": delta,
    }


def secagg_measure(Z: dict, levels, epsilons, B: int, n: int, bits: int, noise, wrapped: list | None = None):
    """``measure`` for the distributed variant: ``(Z_i + sum of the clients' Pólya shares
    mod 2^bits, centred) / B`` on the requested cells. The shares of the n clients sum to
    discrete Laplace with scale ``B/eps_i`` (``noise.polya_difference_sum``, one shard of
    all n clients, drawn in its exact law). ``wrapped[0]`` counts sums changed by the
    modular wrap-around."""
    eps_of = dict(zip((int(v) for v in levels), (float(e) for e in epsilons)))
    M = 1 << int(bits)

    def measure(i, ix, iy):
        shard = noise.polya_difference_sum(n, ix.size, B / eps_of[i], n, sensitivity=B)
        raw = Z[i][iy, ix].astype(np.int64) + shard.noise[0]
        mod = np.mod(raw, M)  # what secure aggregation reveals
        cen = np.where(mod >= M // 2, mod - M, mod)  # decoded as a signed sum
        if wrapped is not None:
            wrapped[0] += int((cen != raw).sum())
        return cen / B

    return measure


@register
class SparseEMDSecAgg(_SparseEMDBase):
    """Sparse EMD aggregation with distributed noise by secure aggregation
    (Ghazi et al. 2023, Sections 1.3 and 5, Appendix F; noise as in Bagdasaryan et al. 2022).

    Every client computes its pyramid vector ``[P_q p_j, ..., P_l p_j]`` (the measured
    levels), scales it by ``B`` and rounds down (Appendix F, ``z^j = floor(B y^j)``), and
    adds ``Polya(1/n, r_i) - Polya(1/n, r_i)`` to each level-``i`` coordinate with
    ``r_i = exp(-eps_i / B)``. Secure aggregation reveals only the modular sum; the sum of
    the n clients' shares is exactly discrete Laplace(``r_i``), so level ``i`` is
    ``eps_i``-DP (a client's scaled level vector has L1 norm <= B). The server divides by
    ``B`` and runs Algorithm 2 unchanged. As ``B`` grows this converges to the central
    mechanism (Appendix F).

    Threat model: an honest-but-curious server sees only the securely aggregated noisy
    sums (no client's report); clients are honest and all n of them report (no dropouts).
    Guarantee: epsilon-DP against the server and the public (distributed DP), basic
    composition over levels, for "zero-out" neighbours: one client's pyramid replaced
    by zeros while it still adds its Pólya shares (so n, the Pólya shape 1/n, is public).
    If a client and its shares are removed altogether, the other n - 1 shares sum to
    ``Polya((n-1)/n)`` differences, slightly weaker than discrete Laplace (see
    ``engine.core.noise.polya_difference_epsilon``: for B = 256 and per-level epsilons 0.05-1,
    about +5-8% at n = 200 and +22-37% at n = 50).

    Departures / choices: Appendix F writes ``Polya(1/n, e^-eps_i)``; with the scaling by
    ``B`` the sensitivity is ``B``, so the parameter must be ``e^(-eps_i/B)`` (used here).
    Appendix F's shuffle protocol sums modulo ``q = Bn``, which would wrap a noisy sum that
    falls below 0; we simulate SecAgg with a power-of-two modulus large enough that no sum
    wraps except with negligible probability (:func:`secagg_modulus_bits`); the shuffle
    model's cost is reported in the diagnostics. The clients' shares are summed in their
    exact law (``noise.polya_difference_sum``: shapes of Pólya laws add), and only for the
    coordinates Algorithm 2 reads (the others cannot affect the output). Rounding down
    biases multi-location users' cells low by less than 1/B each.
    """

    key = "sparse_emd_secagg"
    label = "Sparse EMD aggregation, distributed (SecAgg + Pólya noise)"
    family = "distributed"
    guarantee = (
        "epsilon-DP under zero-out user, the number of clients n public (distributed: discrete Laplace assembled "
        "by secure aggregation of Pólya shares)"
    )
    neighbouring = "zero-out user"
    threat_model = (
        "Each client sends its scaled, rounded, Pólya-noised pyramid through secure aggregation; the server "
        "sees only the noisy sum over all clients."
    )
    summary = (
        "The sparse EMD algorithm with each level's Laplace noise replaced by discrete Laplace noise that "
        "the clients add in Pólya shares under secure aggregation."
    )
    paper = SparseEMD.paper
    equations = "Alg. 1-2, proof of Thm 3.1, Sec. 4, App. F (scale by B, round down, Pólya noise)"
    params = _COMMON_PARAMS + (
        Param(
            "B",
            "int",
            256,
            "scaling factor before rounding (Appendix F): larger B means less rounding error and more bits "
            "per coordinate; the paper finds utility saturates by B = 256",
            min=1,
            max=1 << 20,
            log=True,
        ),
        _SIGMA,
        _DENSITY,
    )
    dp_outputs = (
        "kept_per_level",
        "left_out_per_level",
        "kept_cells",
        "lp",
        "reconstruct_s",
        "estimated_total",
        "empty_reconstruction",
        "distribution",
        "sparse_reconstruction",
        "heatmap",
        "left_out_cells",
        "kept_values",
        "levels",
    )
    side_information_keys = ("users", "clients")

    def run(self, data, domain, epsilon, params, ctx):
        B = int(params["B"])
        n = int(data.n_users)
        if n < 1:
            raise DataError("the distributed variant needs at least one client")
        if int(params["w"]) == 0:  # n is public here (the Pólya shape 1/n): w_rule spends nothing
            params = {**params, "w": w_rule(n, domain.depth)}
        levels, eps = level_epsilons(epsilon, domain.depth, params["w"], params["gamma"], params["pyramid"] == "full")
        ctx.progress(0.0, "clients scale and round their pyramids")
        Z = secagg_level_sums(data, domain, levels, B)
        bits = secagg_modulus_bits(B, n, float(eps.min()))
        wrapped = [0]

        def factory(lv, ep):
            return secagg_measure(Z, lv, ep, B, n, bits, ctx.noise, wrapped)

        density, ledger, diag, extras, _ = self._run_core(domain, epsilon, params, ctx, factory)
        m = int(sum(4 ** int(v) for v in levels))
        diag.update(
            {
                "B": B,
                "modulus_bits": bits,
                "coordinates_per_client": m,
                "wrapped_sums": int(wrapped[0]),
                "shuffle_model": shuffle_bits_per_user(float(epsilon), 1e-5, m, n, B),
            }
        )
        ledger.note_side_information(
            "the number of participating clients n (known to the server in secure aggregation; sets the Pólya shape 1/n)"
        )
        ctx.progress(1.0, "done")
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=Communication(
                float(m),
                float(m * bits),
                rounds=1,
                note=f"one {bits}-bit secure-aggregation element per pyramid cell of levels "
                f"{int(levels[0])}..{int(levels[-1])} (SecAgg's own key-agreement overhead not counted)",
            ),
            server_view=ServerView(
                kind="aggregate",
                description="The server sees only the secure-aggregation sum of all clients' noisy, scaled "
                "pyramids (discrete-Laplace noise per cell), and the public sees the reconstruction.",
            ),
            partition=_leaf_rects_from(extras, domain),
            diagnostics=diag,
            extras=extras,
        )


# --------------------------------------------------------------------- baselines
def _laplace_baseline(s, eps, rng, top_t=None) -> tuple[np.ndarray, int]:
    """The shared Laplace baseline of the central module, negatives zeroed. ``top_t``: None
    keeps every cell, > 0 the top t%, 0 the default rule (:func:`.central.topt_rule_count`).
    Returns (noisy counts, cells kept)."""
    from ..central import keep_top, laplace_baseline, top_t_count, topt_rule_count

    noisy = laplace_baseline(s, eps, rng, clip=False)
    if top_t is None:
        kept = int(noisy.size)
    elif top_t > 0:
        kept = top_t_count(noisy.size, float(top_t))
    else:
        kept = topt_rule_count(noisy, eps)
    return np.clip(keep_top(noisy, kept), 0.0, None), kept


class _LaplaceGaussBase(Mechanism):
    family = "central"
    guarantee = "epsilon-DP (central, per user, under add/remove user: each user's distribution has L1 norm <= 1)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees every user's locations; the public sees the noisy heatmap."
    paper = "Liu, Xia, Duchowski, Bailey, Holmqvist, Jain (ETRA 2019), as the baseline of Ghazi et al. 2023 (Sec. 4)"
    equations = "Ghazi et al. 2023 Sec. 4 (Baselines), Sec. 2.3 (heatmap)"
    dp_outputs = (
        "nonzero_cells",
        "empty",
        "cells_kept",
        "top_t_percent",
        "distribution",
        "heatmap",
        "noisy_counts",
        "stderr",
    )

    def _release(self, data, domain, epsilon, params, ctx, top_t):
        """Standard error (issue 16), with ``density = "estimate"``: sqrt(2)/epsilon in every cell
        that kept its noisy count, NaN in the cells zeroed (negative, or outside the top t), as for
        ``identity`` with clipping. None for the filtered heatmap: the filter averages the zeroed
        (clipped) counts, whose spread has no closed form; the dashboard estimates it from runs."""
        s, notes = user_distribution_sum(data, domain)
        noisy, kept = _laplace_baseline(s, epsilon, ctx.noise, top_t)
        dist, heat, ok = _heatmap_extras(noisy, params["sigma"], domain)
        total = float(noisy.sum())
        density = noisy if params["density"] == "estimate" else heat * total
        extras = {"distribution": dist, "heatmap": heat, "noisy_counts": noisy}
        if params["density"] == "estimate":  # a kept cell is its noisy count; a zeroed one is 0 by choice
            extras["stderr"] = np.where(noisy > 0, math.sqrt(2.0) / float(epsilon), np.nan)
            extras["stderr_cells"] = 1
        ledger = Ledger()
        ledger.spend(
            "cell counts",
            float(epsilon),
            note="Laplace(1/eps) on every cell of s = sum of user distributions (L1 sensitivity 1)",
        )
        for note in notes:
            ledger.note_side_information(note)
        diag = {
            "sigma_cells": params["sigma"] * domain.n,
            "nonzero_cells": int((noisy > 0).sum()),
            "empty": not ok,
            "noise_source": getattr(ctx.noise, "description", "custom"),
            "cells_kept": kept,  # by the top-t thresholding (all cells without it)
        }
        if top_t is not None:
            diag["top_t_percent"] = 100.0 * kept / noisy.size
        if "stderr" in extras:
            diag["stderr_basis"] = "Laplace(1/eps) per cell: sqrt(2)/eps; cells set to 0 after the noise have none"
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view(
                "The curator sees every location in the clear; the public sees only the noisy heatmap."
            ),
            diagnostics=diag,
            extras=extras,
        )


@register
class LaplaceGauss(_LaplaceGaussBase):
    """Laplace baseline of Ghazi et al. (2023, Section 4; from [LXD+19]) on the heatmap pipeline.

    ``s = sum_i p_i`` (each user's distribution has L1 norm <= 1), ``Lap(1/eps)`` added to
    every cell, negative cells set to zero, then the Gaussian heatmap of Section 2.3.
    Threat model: trusted curator; the public sees the heatmap. Guarantee: epsilon-DP per
    user (one Laplace mechanism of L1 sensitivity 1; zeroing and filtering are
    post-processing). Departure: ``sigma`` is ours (the paper does not state it).
    """

    key = "laplace_gauss"
    label = "Laplace per cell + Gaussian heatmap (baseline)"
    summary = "Laplace noise on every cell of the per-user-normalised histogram, negatives zeroed, Gaussian filter."
    params = (_SIGMA, _DENSITY)

    def run(self, data, domain, epsilon, params, ctx):
        return self._release(data, domain, epsilon, params, ctx, None)


@register
class LaplaceTopTGauss(_LaplaceGaussBase):
    """Top-t% thresholding variant of the Laplace baseline (Ghazi et al. 2023, Section 4).

    As :class:`LaplaceGauss`, but only the largest noisy cells are kept, the rest are
    zeroed; then the Gaussian heatmap. ``t > 0`` keeps ``ceil(t% of the cells)`` (at least
    one); the paper used t = 0.01% and 0.001%, chosen for 256 x 256 cells and 200 users.
    Default (``t = 0``, departure): t follows the noise (:func:`.central.topt_rule_count`):
    every cell whose noisy count exceeds ``ln(C/2)/epsilon`` is kept (about one empty cell
    of the C passes on noise alone), and at least the paper's 0.01%. The fixed 0.01% kept
    7 of 65,536 cells whatever the users: 130-1,700x a uniform map's MSE at eps = 10 with
    20,000 users (issue 22); on check-in data like the paper's the rule keeps about the
    paper's 7 cells at eps = 5. ``diagnostics["cells_kept"]`` holds the number kept.
    Guarantee and threat model as the baseline (the choice of t is post-processing of the
    noisy counts). Departure: the rounding of t% of the cells to a count is ours (the paper
    does not say).
    """

    key = "laplace_topt_gauss"
    label = "Laplace top-t% + Gaussian heatmap (baseline)"
    summary = "The Laplace baseline keeping only the top t% noisy cells, then a Gaussian filter."
    params = (
        Param("t", "float", 0.0, TOPT_RULE_HELP, min=0.0, max=100.0, label="top t (%)"),
        _SIGMA,
        _DENSITY,
    )

    def run(self, data, domain, epsilon, params, ctx):
        return self._release(data, domain, epsilon, params, ctx, float(params["t"]))
