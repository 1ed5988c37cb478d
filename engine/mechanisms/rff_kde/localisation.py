"""The localisation attack of Zong et al. 2023, Section 4.2.2, on the server's view of each user:
per-user response surfaces (:func:`rff_user_surfaces`, :func:`kde_user_log_surfaces`), their grid maxima
(:func:`local_maxima`: plateaus handled, kept within a factor 1.1 of the global maximum), the candidates
(:func:`candidates_on_grid`), the privacy score of Eq. 16 (:func:`eq16_scores`) and the 0-feature
baseline (:func:`zero_feature_distance`).

Eq. 16 as printed is ``Z_i = (1/K_i) sum_j e'_j |g_j - d_i|`` with weights ``e'``
already normalised to sum 1. The extra ``1/K_i`` contradicts the paper's own reading
("Z_i is thus the expected error (in units of distance)") and its 0-feature baseline
(the mean distance to all grid points, which the literal formula would divide by the
number of grid points). We use the weighted mean (what
``engine.metrics.privacy_distance`` computes from ``server_view.candidates``) and
report the literal value beside it (``eq16_scores``).
"""

from __future__ import annotations

import math

import numpy as np

from ...core.grid import Domain

ATTACK_RATIO = 1.1  # Section 4.2.2: maxima kept when e >= e_max / 1.1
ATTACK_MAX_DEPTH = 8  # per-user surfaces for the attack on at most 256 x 256 points
PLATEAU_RTOL = 1e-9  # values within this fraction of the surface's scale count as equal


def attack_cells(domain: Domain) -> int:
    """Cells per side of the attacker's grid: the query grid, at most 256 per side."""
    return 1 << min(domain.depth, ATTACK_MAX_DEPTH)


# ========================================================= per-user surfaces
def rff_user_surfaces(xy: np.ndarray, omega: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """What each user sends (Eq. 7 / B): ``(1/B) sum_b cos(omega_b . (g - d))``,
    shape ``(U, ny, nx)``. ``B = 0`` (the 0-feature baseline) answers the constant 1."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    om = np.asarray(omega, dtype=np.float64)
    u, b = om.shape[0], om.shape[1]
    if b == 0:
        return np.ones((u, len(ys), len(xs)))
    ax = om[:, :, 0, None] * (np.asarray(xs)[None, None, :] - xy[:, 0, None, None])  # (U, B, nx)
    ay = om[:, :, 1, None] * (np.asarray(ys)[None, None, :] - xy[:, 1, None, None])  # (U, B, ny)
    cyt = np.cos(ay).transpose(0, 2, 1)
    syt = np.sin(ay).transpose(0, 2, 1)
    return (np.matmul(cyt, np.cos(ax)) - np.matmul(syt, np.sin(ax))) / b


def kde_user_log_surfaces(xy: np.ndarray, h: float, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Natural log of what each user sends in Algorithm 1 (Eq. 5): ``-|g - d|^2 / (2 h^2)``,
    shape ``(U, ny, nx)`` (logs, so kernels far from the grid do not underflow)."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    inv = 1.0 / (2.0 * float(h) ** 2)
    lx = -((np.asarray(xs)[None, :] - xy[:, 0, None]) ** 2) * inv
    ly = -((np.asarray(ys)[None, :] - xy[:, 1, None]) ** 2) * inv
    return ly[:, :, None] + lx[:, None, :]


# ================================================================ the attack
_SHIFTS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]


def _maxima_numpy(s: np.ndarray, tol: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Vectorised plateau-aware local maxima (the reference for the numba kernel)."""
    from scipy import ndimage

    u, ny, nx = s.shape
    tol3 = tol[:, None, None]
    pad = np.pad(s, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    views = [pad[:, 1 + dy : 1 + dy + ny, 1 + dx : 1 + dx + nx] for dy, dx in _SHIFTS]
    nbmax = views[0].copy()
    for v in views[1:]:
        np.maximum(nbmax, v, out=nbmax)
    weak = s >= nbmax - tol3  # no neighbour higher by more than tol
    padw = np.pad(weak, ((0, 0), (1, 1), (1, 1)), constant_values=False)
    leaky = np.zeros_like(weak)
    for (dy, dx), v in zip(_SHIFTS, views):
        w = padw[:, 1 + dy : 1 + dy + ny, 1 + dx : 1 + dx + nx]
        leaky |= weak & ~w & (np.abs(v - s) <= tol3)  # same plateau, but that neighbour sees higher ground
    struct = np.zeros((3, 3, 3), dtype=bool)
    struct[1] = True  # 8-connectivity inside each surface, none across surfaces
    lab, nlab = ndimage.label(weak, structure=struct)
    bad = np.zeros(nlab + 1, dtype=bool)
    bad[0] = True
    bad[lab[leaky]] = True
    return ~bad[lab] & (s >= thr[:, None, None] - tol3)


try:  # numba: the local-maxima scan in one compiled pass
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in requirements
    HAVE_NUMBA = False

if HAVE_NUMBA:

    @numba.njit(cache=True, nogil=True)
    def _maxima_nb(s, tol, thr, keep):  # pragma: no cover - compiled
        nu, ny, nx = s.shape
        weak = np.empty((ny, nx), dtype=np.bool_)
        seen = np.empty((ny, nx), dtype=np.bool_)
        stack = np.empty(ny * nx, dtype=np.int64)
        comp = np.empty(ny * nx, dtype=np.int64)
        for u in range(nu):
            t = tol[u]
            for iy in range(ny):
                y0 = max(iy - 1, 0)
                y1 = min(iy + 2, ny)
                for ix in range(nx):
                    v = s[u, iy, ix] + t
                    x0 = max(ix - 1, 0)
                    x1 = min(ix + 2, nx)
                    ok = True
                    jy = y0
                    while ok and jy < y1:
                        jx = x0
                        while jx < x1:
                            if s[u, jy, jx] > v:
                                ok = False
                                break
                            jx += 1
                        jy += 1
                    weak[iy, ix] = ok
                    seen[iy, ix] = False
            for iy in range(ny):
                for ix in range(nx):
                    if not weak[iy, ix] or seen[iy, ix]:
                        continue
                    # flood-fill the plateau of weak maxima; leaky if an equal neighbour sees higher ground
                    seen[iy, ix] = True
                    stack[0] = iy * nx + ix
                    top = 1
                    nc = 0
                    leaky = False
                    while top > 0:
                        top -= 1
                        c = stack[top]
                        comp[nc] = c
                        nc += 1
                        cy = c // nx
                        cx = c - cy * nx
                        v = s[u, cy, cx]
                        for jy in range(max(cy - 1, 0), min(cy + 2, ny)):
                            for jx in range(max(cx - 1, 0), min(cx + 2, nx)):
                                if weak[jy, jx]:
                                    if not seen[jy, jx]:
                                        seen[jy, jx] = True
                                        stack[top] = jy * nx + jx
                                        top += 1
                                elif abs(s[u, jy, jx] - v) <= t:
                                    leaky = True
                    if not leaky:
                        for k in range(nc):
                            c = comp[k]
                            cy = c // nx
                            cx = c - cy * nx
                            if s[u, cy, cx] >= thr[u] - t:
                                keep[u, cy, cx] = True


def local_maxima(
    surfaces: np.ndarray, ratio: float = ATTACK_RATIO, log: bool = False, rtol: float = PLATEAU_RTOL
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The attacker's candidate grid points on each surface (Section 4.2.2).

    A grid point is a local maximum when no 8-neighbour is higher. Plateaus (connected
    sets of equal values, equality within ``rtol`` times the surface's largest
    magnitude) are handled as wholes: every point of a plateau is a maximum iff no
    point of the plateau has a higher neighbour, so a flat shelf on a slope is not a
    maximum and a flat top is (all its points, the equivalence class of Lemma 2 on the
    grid: the 0-feature surface is one plateau covering the grid). Maxima are kept when
    their height ``e >= e_max / ratio``. Border points compare with their in-grid
    neighbours only.

    ``log=True``: the surfaces are natural logs of positive heights (exact kernels);
    the filter is ``log e >= log e_max - log ratio`` and weights are ``e / e_max``.
    Linear surfaces with ``e_max <= 0`` (never for the mechanisms here) keep maxima
    within ``|e_max| (1 - 1/ratio)`` of the top, with equal weights.

    Returns per surface ``(iy, ix, weight)``, weights proportional to the heights
    (normalised by the caller, Eq. 16).
    """
    s = np.ascontiguousarray(surfaces, dtype=np.float64)
    if s.ndim == 2:
        s = s[None]
    u = s.shape[0]
    flat = s.reshape(u, -1)
    top = flat.max(axis=1)
    scale = np.maximum(np.abs(top), np.abs(flat.min(axis=1)))
    tol = rtol * np.where(scale > 0, scale, 1.0)
    if log:
        thr = top - math.log(ratio)
    else:
        thr = np.where(top > 0, top / ratio, top - np.abs(top) * (1 - 1 / ratio))
    if HAVE_NUMBA:
        keep = np.zeros(s.shape, dtype=np.bool_)
        _maxima_nb(s, tol, thr, keep)
    else:
        keep = _maxima_numpy(s, tol, thr)
    out = []
    for i in range(u):
        k = keep[i]
        if not k.any():  # tolerance chains only: fall back to the global maximum
            k = s[i] >= top[i] - tol[i]
        iy, ix = np.nonzero(k)
        e = s[i, iy, ix]
        if log:
            wts = np.exp(e - top[i])
        elif top[i] > 0:
            wts = e
        else:
            wts = np.ones(e.size)
        out.append((iy, ix, wts))
    return out


def candidates_on_grid(
    surfaces: np.ndarray, xs: np.ndarray, ys: np.ndarray, ratio: float = ATTACK_RATIO, log: bool = False
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`local_maxima` as ``(points (k, 2) metres, weights (k,) summing to 1)``."""
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    out = []
    for iy, ix, w in local_maxima(surfaces, ratio, log):
        pts = np.column_stack([xs[ix], ys[iy]])
        tot = w.sum()
        out.append((pts, w / tot if tot > 0 else np.full(w.size, 1.0 / w.size)))
    return out


def eq16_scores(cands: list[tuple[np.ndarray, np.ndarray]], true_xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 16 per user: ``Z_i = sum_j e'_j |g_j - d_i|`` (normalised weights, the
    expected error of the attacker; this is what ``metrics.privacy_distance`` computes)
    and the literal printed form with the extra ``1/K_i``. Users without candidates: NaN."""
    true_xy = np.asarray(true_xy, dtype=np.float64).reshape(-1, 2)
    z = np.full(len(cands), np.nan)
    lit = np.full(len(cands), np.nan)
    for i, (pts, w) in enumerate(cands):
        pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        if pts.shape[0] == 0:
            continue
        w = np.asarray(w, dtype=np.float64)
        w = w / w.sum() if w.sum() > 0 else np.full(w.size, 1.0 / w.size)
        d = np.hypot(pts[:, 0] - true_xy[i, 0], pts[:, 1] - true_xy[i, 1])
        z[i] = float(w @ d)
        lit[i] = z[i] / pts.shape[0]
    return z, lit


def zero_feature_distance(true_xy: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The 0-feature baseline of Section 4.2.3 per user: the mean distance from the
    user's location to every grid point."""
    p = np.asarray(true_xy, dtype=np.float64).reshape(-1, 2)
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    out = np.empty(len(p))
    step = max(1, 4_000_000 // (xs.size * ys.size))
    for s in range(0, len(p), step):
        q = p[s : s + step]
        dx2 = (xs[None, None, :] - q[:, 0, None, None]) ** 2
        dy2 = (ys[None, :, None] - q[:, 1, None, None]) ** 2
        out[s : s + step] = np.sqrt(dx2 + dy2).mean(axis=(1, 2))
    return out
