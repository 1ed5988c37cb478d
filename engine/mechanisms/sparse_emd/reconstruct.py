"""The reconstruction of Algorithm 1 (Ghazi et al. 2023, Section 3): from the noisy pyramid, the
top-``w`` cells kept per level below the start level, and the linear program whose solution is the
estimate ``s_hat``. The tie-breaks among left-out siblings (``SPLITS``) are discussed in
:mod:`.mechanism`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ...core.errors import EngineError, ParamError

CHILD_DX = np.array([0, 1, 0, 1], dtype=np.int64)
CHILD_DY = np.array([0, 0, 1, 1], dtype=np.int64)
MAX_LP_VARIABLES = 2_000_000
SPLITS = ("even", "noisy", "solver")  # LP tie-breaks among left-out siblings (reconstruct)


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
