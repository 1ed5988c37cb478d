"""Numerics of federated kernel density estimation with random Fourier features
(Zong, Yang, Ley, Butts, Markopoulou, PoPETs 2023(1), "Privacy by Projection").

Everything is in metres. The Gaussian kernel is ``k_h(x, y) = exp(-|x - y|^2 / (2 h^2))``
(Section 2.2, unnormalised: ``k_h(x, x) = 1``); its Fourier density is
``omega ~ N(0, I / h^2)`` (Section 2.3), and one feature's contribution at grid point
``g`` for a user at ``d`` is ``phi(g, d) = cos(omega . (g - d))`` (Eq. 4: the inner
product of ``[cos w.g, sin w.g]`` and ``[cos w.d, sin w.d]``). A user with ``B``
features returns ``(1/B) sum_b cos(omega_b . (g - d))`` on the server's grid (Eq. 7,
scaled by 1/B as in Eq. 6 and Lemma 1).

Contents:

* grids: :func:`axes` (cell centres of the public domain at any resolution);
* server sums over all users: :func:`kde_grid_sum` (Algorithm 1; the separable
  kernel interpolated in the user's coordinates on panels one bandwidth wide) and
  :func:`rff_grid_sum` (Algorithm 2). Each user has its own
  frequencies, so the sum over users is a non-uniform discrete Fourier transform.
  Because the grid is regular, ``exp(i omega.(g - g_c)) = exp(i theta_x t_x)
  exp(i theta_y t_y)`` with integer-spaced offsets ``t`` and ``theta = omega *
  cell``; we interpolate ``exp(i theta t)`` in ``theta`` with Chebyshev polynomials on
  short panels (``|delta t| <= 2``, 14 nodes: error about 1e-13 per term), which
  turns the sum into one small dense "core" matrix per run, independent of the grid
  size (:func:`rff_grid_sum_direct` is the plain reference, tested against it);
* per-user response surfaces for the attack: :func:`rff_user_surfaces`,
  :func:`kde_user_log_surfaces`;
* the localisation attack of Section 4.2.2: :func:`local_maxima` (grid maxima with
  plateaus handled, kept within a factor 1.1 of the global maximum),
  :func:`candidates_on_grid`, the privacy score of Eq. 16 (:func:`eq16_scores`) and
  the 0-feature baseline (:func:`zero_feature_distance`);
* bandwidth rules: :func:`knn_bandwidth` (Section 4.2.4), the Lemma 3 bound, the
  Lemma 4 / Algorithm 3 rescaling;
* the synthetic mixtures (a) and (b) of Section 4.1.1 (:func:`mixture_dataset`);
* :func:`spearman_raw` and :func:`privacy_utility_curve` (Figures 10-13).

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

from ...core.errors import DataError, ParamError
from ...core.grid import Domain

ATTACK_RATIO = 1.1  # Section 4.2.2: maxima kept when e >= e_max / 1.1
ATTACK_MAX_DEPTH = 8  # per-user surfaces for the attack on at most 256 x 256 points
PLATEAU_RTOL = 1e-9  # values within this fraction of the surface's scale count as equal
CHEB_C = 4.0  # Chebyshev panel width in theta times max|t|: |delta * t| <= CHEB_C / 2
CHEB_R = 14  # Chebyshev nodes per panel (interpolation error ~1e-13 for |delta t| <= 2)
MAX_CORE = 4_000_000  # largest Chebyshev core (entries) before falling back to direct sums
CHUNK = 65_536  # features per chunk


# ================================================================ grids
def axes(domain: Domain, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cell-centre x and y coordinates of the domain cut in ``n`` cells per side
    (default: the domain's own grid)."""
    n = domain.n if n is None else int(n)
    if n < 1:
        raise ParamError("a grid needs at least one cell per side")
    c = (np.arange(n) + 0.5) * (domain.side / n)
    return domain.x0 + c, domain.y0 + c


def attack_cells(domain: Domain) -> int:
    """Cells per side of the attacker's grid: the query grid, at most 256 per side."""
    return 1 << min(domain.depth, ATTACK_MAX_DEPTH)


def _spacing(v: np.ndarray) -> tuple[float, float]:
    """(first value, step) of a uniformly spaced axis."""
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ParamError("a grid axis must be a non-empty 1-D array")
    if v.size == 1:
        return float(v[0]), 1.0
    step = (v[-1] - v[0]) / (v.size - 1)
    if not (step > 0 and np.allclose(np.diff(v), step, rtol=1e-9, atol=1e-9 * abs(step))):
        raise ParamError("grid axes must be increasing and uniformly spaced")
    return float(v[0]), float(step)


# ================================================================ bandwidth
def knn_bandwidth(xy: np.ndarray, k: int, rng: np.random.Generator, sample_frac: float = 0.1) -> float:
    """Section 4.2.4: the mean distance from each point of a random ``sample_frac``
    sample to its ``k``-th nearest neighbour among all points (the Monte-Carlo estimate
    of the average k-th nearest-neighbour distance). NOT private: it reads raw locations."""
    from scipy.spatial import cKDTree

    xy = np.asarray(xy, dtype=np.float64)
    n = len(xy)
    k = int(k)
    if k < 1:
        raise ParamError(f"k of the k-NN bandwidth must be at least 1 (got {k})")
    if n <= k:
        raise ParamError(f"the k-NN bandwidth needs more than k = {k} locations (got {n}); lower k")
    m = max(1, int(round(sample_frac * n)))
    idx = rng.choice(n, size=m, replace=False)
    dist, _ = cKDTree(xy).query(xy[idx], k=k + 1)  # the point itself is its 0-th neighbour
    h = float(dist[:, -1].mean())
    if not h > 0:
        raise ParamError("the k-NN bandwidth is 0 (too many identical locations); raise k or fix the bandwidth")
    return h


def chi2_2_cdf(x: float) -> float:
    """CDF of the chi-squared law with 2 degrees of freedom: ``1 - exp(-x/2)``."""
    return -math.expm1(-max(float(x), 0.0) / 2)


def lemma3_max_bandwidth(side: float, gamma: float, bands: int) -> float:
    """Lemma 3: with one feature, at least ``bands`` bands cross a square of side
    ``side`` with probability at least ``1 - C(gamma)`` when ``h < sqrt(gamma) side /
    (2 pi bands)`` (C the chi-squared(2) CDF)."""
    if not (side > 0 and gamma > 0 and int(bands) >= 1):
        raise ParamError("Lemma 3 needs a positive side, gamma > 0 and at least one band")
    return math.sqrt(gamma) * side / (2 * math.pi * int(bands))


def lemma3_confidence(gamma: float) -> float:
    """``1 - C(gamma)``: the guaranteed probability of Lemma 3."""
    return 1.0 - chi2_2_cdf(gamma)


def lemma3_band_probability(h: float, side: float, bands: int) -> float:
    """Probability that one feature at bandwidth ``h`` has period ``2 pi / |omega|``
    at most ``side / bands`` (at least ``bands`` bands across the square, Eqs. 19-21):
    ``1 - C((2 pi h bands / side)^2)``."""
    return 1.0 - chi2_2_cdf((2 * math.pi * h * int(bands) / side) ** 2)


def lemma4_bandwidth(h0: float, n: int) -> float:
    """Lemma 4 (Eq. 24): the bandwidths a user accepts after drawing at ``h0``: ``(4n+1) h0``."""
    if int(n) < 0:
        raise ParamError("n of Lemma 4 must be a non-negative integer")
    return (4 * int(n) + 1) * float(h0)


def lemma4_index(h: float, h0: float, rtol: float = 1e-9) -> int | None:
    """``n`` such that ``h = (4n+1) h0`` (``n >= 0``), or None when ``h`` is not allowed."""
    q = float(h) / float(h0)
    k = round(q)
    if abs(q - k) > rtol * max(1.0, q) or k < 1 or (k - 1) % 4 != 0:
        return None
    return (k - 1) // 4


def lemma4_min_bands(m: int, n: int) -> int:
    """Lemma 4: of ``m`` bands at ``h0``, at least ``floor(m / (4n+1))`` remain at ``(4n+1) h0``."""
    return int(m) // (4 * int(n) + 1)


# ============================================================= server sums
def kde_grid_sum_direct(xy: np.ndarray, h: float, xs: np.ndarray, ys: np.ndarray, weights=None) -> np.ndarray:
    """Reference ``S[iy, ix] = sum_i w_i exp(-|g - d_i|^2 / (2 h^2))`` as the separable
    product ``K_y^T diag(w) K_x``, in chunks of users."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    out = np.zeros((ys.size, xs.size))
    inv = 1.0 / (2.0 * float(h) ** 2)
    step = max(1, 4_000_000 // max(xs.size, ys.size))
    for s in range(0, len(xy), step):
        p = xy[s : s + step]
        kx = np.exp(-((xs[None, :] - p[:, 0, None]) ** 2) * inv)
        ky = np.exp(-((ys[None, :] - p[:, 1, None]) ** 2) * inv)
        if weights is not None:
            ky *= np.asarray(weights, dtype=np.float64)[s : s + step, None]
        out += ky.T @ kx
    return out


KDE_PANEL = 1.0  # Chebyshev panel width for kernel sums, in bandwidths
KDE_CUTOFF = 40.0  # exp(-40^2/2) underflows to 0 in float64: farther users contribute exactly 0


def kde_grid_sum(xy: np.ndarray, h: float, xs: np.ndarray, ys: np.ndarray, weights=None, method: str = "auto"):
    """``S[iy, ix] = sum_i w_i exp(-|g - d_i|^2 / (2 h^2))`` (Algorithm 1's sum).

    ``"chebyshev"`` (default via ``"auto"``): the kernel is separable, and
    ``exp(-(g - d)^2 / 2h^2)`` is interpolated in ``d`` at 14 Chebyshev nodes on panels
    one bandwidth wide (absolute error ~1e-13 per user), so the sum is ``A_y C A_x^T`` with
    a small core ``C`` accumulated in one pass over the users (cost ~ N r^2 instead of
    N n^2). ``"direct"``: :func:`kde_grid_sum_direct`. ``"auto"`` falls back to direct
    when the core would be large (bandwidths of a few cells)."""
    if method not in ("auto", "chebyshev", "direct"):
        raise ParamError(f"unknown summation method {method!r}")
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    h = float(h)
    if not h > 0:
        raise ParamError("the bandwidth must be positive")
    if method == "direct":
        return kde_grid_sum_direct(xy, h, xs, ys, weights)
    _spacing(xs)
    _spacing(ys)
    w = np.ones(len(xy)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    cut = KDE_CUTOFF * h
    near = (xy[:, 0] > xs[0] - cut) & (xy[:, 0] < xs[-1] + cut) & (xy[:, 1] > ys[0] - cut) & (xy[:, 1] < ys[-1] + cut)
    xy, w = xy[near], w[near]
    if len(xy) == 0:
        return np.zeros((ys.size, xs.size))
    width = KDE_PANEL * h
    nodes, bw = _cheb_nodes(CHEB_R)

    def axis(d, g):
        lo = g[0] - cut
        p = np.floor((d - lo) / width).astype(np.int64)
        occ = np.unique(p)
        centres = (lo + (occ + 0.5) * width)[:, None] + nodes[None, :] * (width / 2)
        basis = np.exp(-((g[:, None] - centres.ravel()[None, :]) ** 2) / (2 * h * h))
        return p, occ, basis

    px, occ_x, ax = axis(xy[:, 0], xs)
    py, occ_y, ay = axis(xy[:, 1], ys)
    if ax.shape[1] * ay.shape[1] > MAX_CORE:
        if method == "chebyshev":
            raise ParamError("the Chebyshev core would be too large for this bandwidth; use method='direct'")
        return kde_grid_sum_direct(xy, h, xs, ys, w)
    core = np.zeros((ay.shape[1], ax.shape[1]))
    dummy = np.zeros_like(core) if not HAVE_NUMBA else None
    lo_x, lo_y = xs[0] - cut, ys[0] - cut
    for s in range(0, len(xy), CHUNK):
        sl = slice(s, s + CHUNK)
        ox = xy[sl, 0] - (lo_x + (px[sl] + 0.5) * width)
        oy = xy[sl, 1] - (lo_y + (py[sl] + 0.5) * width)
        lx = _lagrange(np.clip(ox / (width / 2), -1, 1), nodes, bw)
        ly = _lagrange(np.clip(oy / (width / 2), -1, 1), nodes, bw)
        qx = np.searchsorted(occ_x, px[sl]).astype(np.int64)
        qy = np.searchsorted(occ_y, py[sl]).astype(np.int64)
        if HAVE_NUMBA:
            _core_accumulate_real(qy, np.ascontiguousarray(ly), qx, np.ascontiguousarray(lx), w[sl], CHEB_R, core)
        else:
            _core_accumulate_numpy(qy, ly, qx, lx, w[sl], np.zeros(qy.size), CHEB_R, core, dummy)
    return ay @ (core @ ax.T)


def _cheb_nodes(r: int) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(r)
    ang = (2 * k + 1) * np.pi / (2 * r)
    return np.cos(ang), (-1.0) ** k * np.sin(ang)  # first-kind nodes, barycentric weights


def _lagrange(x: np.ndarray, nodes: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """Barycentric Lagrange basis at points ``x`` (in [-1, 1]): ``(len(x), r)``."""
    diff = x[:, None] - nodes[None, :]
    hit = diff == 0.0
    diff[hit] = 1.0
    t = bw[None, :] / diff
    out = t / t.sum(axis=1, keepdims=True)
    rows = hit.any(axis=1)
    if rows.any():
        out[rows] = hit[rows].astype(np.float64)
    return out


def _axis_plan(theta: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray]:
    """Per-feature wrap, panel and offset for ``exp(i theta t)``, ``t = i - (n-1)/2``."""
    m = np.round(theta / (2 * np.pi))
    tw = theta - 2 * np.pi * m  # in [-pi, pi]; exp(i 2 pi m t) = (-1)^m when t is a half-integer
    sign = np.where((n % 2 == 0) & (m % 2 != 0), -1.0, 1.0)
    tmax = max((n - 1) / 2.0, 0.5)
    width = CHEB_C / tmax
    npan = int(math.ceil(2 * np.pi / width)) + 1
    p = np.clip(np.floor((tw + np.pi) / width).astype(np.int64), 0, npan - 1)
    centre = -np.pi + (p + 0.5) * width
    return p, tw - centre, sign, width, centre


def _axis_setup(theta_chunks: list[np.ndarray], n: int) -> tuple[np.ndarray, float, np.ndarray]:
    """Occupied panels (sorted global indices), panel width and the (n, R) basis."""
    tmax = max((n - 1) / 2.0, 0.5)
    width = CHEB_C / tmax
    occ = np.unique(np.concatenate([_axis_plan(th, n)[0] for th in theta_chunks]))
    nodes, _ = _cheb_nodes(CHEB_R)
    cent = -np.pi + (occ + 0.5) * width
    freq = (cent[:, None] + nodes[None, :] * (width / 2)).ravel()
    t = np.arange(n) - (n - 1) / 2.0
    return occ, width, np.exp(1j * t[:, None] * freq[None, :])


try:  # numba: one pass over the features into the Chebyshev core
    import numba

    @numba.njit(cache=True, nogil=True)
    def _core_accumulate(qy, ly, qx, lx, zr, zi, r, core_r, core_i):  # pragma: no cover - compiled
        for j in range(qy.shape[0]):
            by = qy[j] * r
            bx = qx[j] * r
            for ky in range(r):
                ar = zr[j] * ly[j, ky]
                ai = zi[j] * ly[j, ky]
                row = by + ky
                for kx in range(r):
                    core_r[row, bx + kx] += ar * lx[j, kx]
                    core_i[row, bx + kx] += ai * lx[j, kx]

    @numba.njit(cache=True, nogil=True)
    def _core_accumulate_real(qy, ly, qx, lx, z, r, core):  # pragma: no cover - compiled
        for j in range(qy.shape[0]):
            by = qy[j] * r
            bx = qx[j] * r
            for ky in range(r):
                a = z[j] * ly[j, ky]
                row = by + ky
                for kx in range(r):
                    core[row, bx + kx] += a * lx[j, kx]

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in requirements
    HAVE_NUMBA = False


def _core_accumulate_numpy(qy, ly, qx, lx, zr, zi, r, core_r, core_i):
    ncol = core_r.shape[1]
    size = core_r.size
    for ky in range(r):
        for kx in range(r):
            idx = (qy * r + ky) * ncol + qx * r + kx
            w = ly[:, ky] * lx[:, kx]
            core_r.ravel()[:] += np.bincount(idx, weights=zr * w, minlength=size)
            core_i.ravel()[:] += np.bincount(idx, weights=zi * w, minlength=size)


def _features(xy, omega, weights):
    """Flatten (N, B, 2) frequencies into per-feature arrays (M,) with their user's location and weight."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    om = np.asarray(omega, dtype=np.float64)
    if om.ndim == 2:
        om = om[:, None, :]
    if om.ndim != 3 or om.shape[0] != len(xy) or om.shape[2] != 2:
        raise ParamError("frequencies must have shape (users, B, 2)")
    b = om.shape[1]
    w = np.ones(len(xy)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    return (
        om[:, :, 0].reshape(-1),
        om[:, :, 1].reshape(-1),
        np.repeat(xy[:, 0], b),
        np.repeat(xy[:, 1], b),
        np.repeat(w, b),
    )


def rff_grid_sum_direct(xy, omega, xs, ys, weights=None) -> np.ndarray:
    """Reference ``S[iy, ix] = sum_i w_i sum_b cos(omega_ib . (g - d_i))``, by
    ``cos(a + b) = cos a cos b - sin a sin b`` and two matrix products per chunk."""
    wx, wy, dx, dy, w = _features(xy, omega, weights)
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    out = np.zeros((ys.size, xs.size))
    step = max(1, 2_000_000 // max(xs.size, ys.size))
    for s in range(0, wx.size, step):
        sl = slice(s, s + step)
        ax = wx[sl, None] * (xs[None, :] - dx[sl, None])
        ay = wy[sl, None] * (ys[None, :] - dy[sl, None])
        cy = np.cos(ay) * w[sl, None]
        sy = np.sin(ay) * w[sl, None]
        out += cy.T @ np.cos(ax) - sy.T @ np.sin(ax)
    return out


def rff_grid_sum(xy, omega, xs, ys, weights=None, method: str = "auto") -> np.ndarray:
    """``S[iy, ix] = sum_i w_i sum_b cos(omega_ib . (g - d_i))`` on the regular grid
    ``xs`` x ``ys`` (the server's sum of Algorithm 2 before dividing by N B).

    ``method="chebyshev"`` (default via ``"auto"``): with ``g = g_c + cell * t`` and
    ``theta = omega * cell``, ``cos(omega.(g - d)) = Re[z e^{i theta_x t_x} e^{i theta_y
    t_y}]``, ``z = e^{i omega.(g_c - d)}``. Each ``theta`` is wrapped into [-pi, pi) (the
    ``t`` are integer-spaced) and ``e^{i theta t}`` is interpolated in ``theta`` on
    panels of width ``4 / max|t|`` at 14 Chebyshev nodes; the sum is then
    ``Re[A_y C A_x^T]`` with a small core ``C``. ``"direct"``: :func:`rff_grid_sum_direct`.
    ``"auto"`` falls back to direct when the core would be too large (frequencies that
    cover most of [-pi, pi), i.e. a bandwidth of a few cells)."""
    if method not in ("auto", "chebyshev", "direct"):
        raise ParamError(f"unknown summation method {method!r}")
    if method == "direct":
        return rff_grid_sum_direct(xy, omega, xs, ys, weights)
    wx, wy, dx, dy, w = _features(xy, omega, weights)
    x0, cx = _spacing(xs)
    y0, cy = _spacing(ys)
    nx, ny = len(xs), len(ys)
    if wx.size == 0:
        return np.zeros((ny, nx))
    gxc = x0 + cx * (nx - 1) / 2.0
    gyc = y0 + cy * (ny - 1) / 2.0
    chunks = [slice(s, s + CHUNK) for s in range(0, wx.size, CHUNK)]
    occ_x, width_x, ax = _axis_setup([wx[c] * cx for c in chunks], nx)
    occ_y, width_y, ay = _axis_setup([wy[c] * cy for c in chunks], ny)
    if ax.shape[1] * ay.shape[1] > MAX_CORE:
        if method == "chebyshev":
            raise ParamError("the Chebyshev core would be too large for this bandwidth; use method='direct'")
        return rff_grid_sum_direct(xy, omega, xs, ys, weights)
    nodes, bw = _cheb_nodes(CHEB_R)
    core_r = np.zeros((ay.shape[1], ax.shape[1]))
    core_i = np.zeros_like(core_r)
    acc = _core_accumulate if HAVE_NUMBA else _core_accumulate_numpy
    for c in chunks:
        px, dlx, sgx, _, _ = _axis_plan(wx[c] * cx, nx)
        py, dly, sgy, _, _ = _axis_plan(wy[c] * cy, ny)
        lx = _lagrange(np.clip(dlx / (width_x / 2), -1, 1), nodes, bw)
        ly = _lagrange(np.clip(dly / (width_y / 2), -1, 1), nodes, bw)
        phase = wx[c] * (gxc - dx[c]) + wy[c] * (gyc - dy[c])
        amp = w[c] * sgx * sgy
        acc(
            np.searchsorted(occ_y, py).astype(np.int64),
            np.ascontiguousarray(ly),
            np.searchsorted(occ_x, px).astype(np.int64),
            np.ascontiguousarray(lx),
            amp * np.cos(phase),
            amp * np.sin(phase),
            CHEB_R,
            core_r,
            core_i,
        )
    core = core_r + 1j * core_i
    return np.real(ay @ (core @ ax.T))


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


# ============================================================ synthetic data
# Section 4.1.1, in the paper's units; one unit = ``unit_m`` metres (1 km by default).
B_ACROSS_VAR = 0.16**2  # mixture (b): variance across the radius, as printed
MIXTURE_HALF_SIDE = {"a": 2.5, "b": 6.0}  # region [-s, s]^2: means + 3 sd (the paper does not state it)


def mixture_components(which: str, b_var: float = B_ACROSS_VAR) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, means (k, 2), covariances (k, 2, 2)) of mixture (a) or (b), paper units.

    (a) nine equally weighted Gaussians at ``(i, j)``, ``i, j in {-1, 0, 1}``, covariance
    ``0.25 I``. (b) eight equally weighted Gaussians at ``3 (cos(pi i/4), sin(pi i/4))``,
    ``i = 1..8``, covariance ``R_i diag(1, 0.16^2) R_i^T`` with ``R_i`` the rotation by
    ``pi i / 4`` (the printed matrix; its ``cos^2(2i/4)`` is read as ``cos^2(pi i/4)``,
    the only reading that makes it a covariance of that form): components stretched
    along the radius. ``b_var`` replaces the across-radius variance 0.16^2 (for
    sensitivity checks: with 0.16 the paper's Figure 11 utilities are approached, with
    the printed 0.16^2 the full-data KDE at h = 0.55 reaches only ~0.8 Spearman).
    """
    if which == "a":
        g = np.array([-1.0, 0.0, 1.0])
        means = np.array([(i, j) for i in g for j in g])
        covs = np.repeat((0.25 * np.eye(2))[None], 9, axis=0)
        return np.full(9, 1 / 9), means, covs
    if which == "b":
        a = np.pi * np.arange(1, 9) / 4
        c, s = np.cos(a), np.sin(a)
        means = 3.0 * np.column_stack([c, s])
        e = float(b_var)
        covs = np.empty((8, 2, 2))
        covs[:, 0, 0] = c**2 + e * s**2
        covs[:, 1, 1] = s**2 + e * c**2
        covs[:, 0, 1] = covs[:, 1, 0] = (1 - e) * s * c
        return np.full(8, 1 / 8), means, covs
    raise ParamError(f"unknown mixture {which!r}; known: a, b")


def mixture_domain(which: str, depth: int, unit_m: float = 1000.0) -> Domain:
    """The public square region of a mixture: ``[-s, s]^2`` units, s = 3 for (a), 6 for (b)."""
    if which not in MIXTURE_HALF_SIDE:
        raise ParamError(f"unknown mixture {which!r}; known: a, b")
    s = MIXTURE_HALF_SIDE[which]
    return Domain(-s * unit_m, -s * unit_m, 2 * s * unit_m, int(depth))


def sample_mixture(
    which: str, n: int, rng: np.random.Generator, unit_m: float = 1000.0, b_var: float = B_ACROSS_VAR
) -> np.ndarray:
    """``n`` draws (metres) from the mixture conditioned on its region (rejection)."""
    w, mu, cov = mixture_components(which, b_var)
    chol = np.linalg.cholesky(cov)
    half = MIXTURE_HALF_SIDE[which]
    n = int(n)
    if n < 1:
        raise ParamError("the number of points must be at least 1")
    out = np.empty((0, 2))
    while len(out) < n:
        m = int((n - len(out)) * 1.02) + 16
        comp = rng.choice(len(w), size=m, p=w)
        z = rng.standard_normal((m, 2))
        p = mu[comp] + np.einsum("kij,kj->ki", chol[comp], z)
        p = p[(np.abs(p) < half).all(axis=1)]
        out = np.concatenate([out, p])
    return out[:n] * unit_m


def mixture_pdf(
    which: str, x: np.ndarray, y: np.ndarray, unit_m: float = 1000.0, b_var: float = B_ACROSS_VAR
) -> np.ndarray:
    """Mixture density (per square metre, not renormalised to the region) at ``(x, y)``."""
    w, mu, cov = mixture_components(which, b_var)
    u = np.stack([np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)], axis=-1) / unit_m
    out = np.zeros(u.shape[:-1])
    for k in range(len(w)):
        inv = np.linalg.inv(cov[k])
        d = u - mu[k]
        q = np.einsum("...i,ij,...j->...", d, inv, d)
        out += w[k] * np.exp(-q / 2) / (2 * np.pi * math.sqrt(np.linalg.det(cov[k])))
    return out / unit_m**2


def mixture_truth(which: str, domain: Domain, unit_m: float = 1000.0, b_var: float = B_ACROSS_VAR) -> np.ndarray:
    """True density at the cell centres of ``domain``'s grid, ``grid[iy, ix]``."""
    xs, ys = axes(domain)
    gx, gy = np.meshgrid(xs, ys)
    return mixture_pdf(which, gx, gy, unit_m, b_var)


MIXTURE_LONLAT = (-117.8443, 33.6405)  # where the synthetic map is drawn (arbitrary; Irvine, CA)


def mixture_dataset(which: str, n: int, seed: int = 0, unit_m: float = 1000.0, b_var: float = B_ACROSS_VAR):
    """A :class:`~engine.data.Dataset` of ``n`` single-location users from mixture
    (a) or (b), in a local azimuthal-equidistant CRS placed at ``MIXTURE_LONLAT``;
    its public region is the mixture's square. Deterministic given the arguments."""
    from ...data.dataset import Dataset, DatasetMeta
    from ...data.projection import local_crs, to_lonlat

    if which not in ("a", "b"):
        raise ParamError(f"unknown mixture {which!r}; known: a, b")
    if not (unit_m > 0 and math.isfinite(unit_m)):
        raise ParamError("the unit of the mixture must be a positive number of metres")
    rng = np.random.default_rng([int(seed), 6, ord(which)])
    xy = sample_mixture(which, n, rng, unit_m, b_var)
    lon0, lat0 = MIXTURE_LONLAT
    crs = local_crs((lon0 - 0.1, lat0 - 0.1, lon0 + 0.1, lat0 + 0.1))
    half = MIXTURE_HALF_SIDE[which] * unit_m
    corners = to_lonlat(np.array([-half, half, half, -half]), np.array([-half, -half, half, half]), crs)
    # public region: the lon/lat box of the square's corners (its projection is the square to < 1 m)
    bbox = (
        float(corners[:, 0].min()),
        float(corners[:, 1].min()),
        float(corners[:, 0].max()),
        float(corners[:, 1].max()),
    )
    label = {"a": "3 x 3 grid of Gaussians", "b": "8 Gaussians in an octagon"}[which]
    meta = DatasetMeta(
        name=f"Zong et al. mixture ({which}): {label}",
        source=f"synthetic:zong_{which}",
        citation="Zong et al., Privacy by Projection, PoPETs 2023(1), Section 4.1.1",
        license="CC0 (generated data)",
        description=(
            f"Mixture ({which}) of Section 4.1.1, one paper unit = {unit_m:g} m, region "
            f"[-{MIXTURE_HALF_SIDE[which]:g}, {MIXTURE_HALF_SIDE[which]:g}]^2 units. Synthetic data."
        ),
        synthetic=True,
        bbox=bbox,
        extra={"mixture": which, "unit_m": float(unit_m), "seed": int(seed), "half_side_m": half, "b_var": b_var},
    )
    return Dataset(xy=xy, lonlat=to_lonlat(xy[:, 0], xy[:, 1], crs), crs=crs, meta=meta)


def register_mixture_sources() -> None:
    """Register mixtures (a) and (b) as dataset sources ``synthetic:zong_a`` and
    ``synthetic:zong_b`` through the data registry's hook (:func:`engine.data.registry.add`;
    idempotent). Called when the family's mechanisms load (:func:`engine.mechanisms.load_all`)."""
    from ...core.params import Param
    from ...data.registry import Source, add

    for which, text in (
        ("a", "nine Gaussians on a 3 x 3 grid (smooth); region 5 x 5 units"),
        ("b", "eight radially stretched Gaussians on an octagon (heterogeneous); region 12 x 12 units"),
    ):
        add(
            Source(
                key=f"synthetic:zong_{which}",
                label=f"Zong et al. mixture ({which})",
                kind="synthetic",
                description=f"Synthetic mixture ({which}) of Zong et al. 2023, Section 4.1.1: {text}.",
                loader=(lambda w: lambda n, seed, unit_m: mixture_dataset(w, n, seed, unit_m))(which),
                params=(
                    Param("n", "int", 20_000, "number of locations (one per user)", 1, 2_000_000, log=True),
                    Param("seed", "int", 0, "seed of the generator", 0, 2**31 - 1),
                    Param("unit_m", "float", 1000.0, "metres per unit of the paper's coordinates", 1.0, 1e5, log=True),
                ),
                citation="Zong et al., PoPETs 2023(1), Section 4.1.1",
                license="CC0 (generated data)",
            )
        )


# ================================================================= utility
def spearman_raw(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two surfaces over all grid points, ties averaged,
    on the raw values (the paper ranks f' itself, negative values included; equal to
    ``engine.metrics.spearman`` when both maps are non-negative). 0 if one is constant."""
    from scipy.stats import rankdata

    ra = rankdata(np.asarray(a, dtype=np.float64).ravel())
    rb = rankdata(np.asarray(b, dtype=np.float64).ravel())
    ra -= ra.mean()
    rb -= rb.mean()
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb / den) if den > 0 else 0.0


# ===================================================== privacy-utility curve
def default_geoind_eps(domain: Domain) -> list[float]:
    """Geo-indistinguishability levels (per metre) of the paper's synthetic runs,
    ``eps in {0.6, 0.7, 0.8, 1, 3, 5, 10}`` per unit on a 6-unit region, rescaled to
    this domain's side (same expected displacement ``2 / eps`` as a fraction of the side)."""
    return [e * 6.0 / domain.side for e in (0.6, 0.7, 0.8, 1.0, 3.0, 5.0, 10.0)]


def _attack_kde(xy_seen: np.ndarray, xy_true: np.ndarray, h: float, xs, ys, chunk: int = 64) -> np.ndarray:
    out = []
    for s in range(0, len(xy_seen), chunk):
        c = candidates_on_grid(kde_user_log_surfaces(xy_seen[s : s + chunk], h, xs, ys), xs, ys, log=True)
        out.append(eq16_scores(c, xy_true[s : s + chunk])[0])
    return np.concatenate(out) if out else np.zeros(0)


def _attack_rff(xy: np.ndarray, omega: np.ndarray, xs, ys, chunk: int = 64) -> np.ndarray:
    if omega.shape[1] == 0:
        return zero_feature_distance(xy, xs, ys)
    out = []
    for s in range(0, len(xy), chunk):
        c = candidates_on_grid(rff_user_surfaces(xy[s : s + chunk], omega[s : s + chunk], xs, ys), xs, ys)
        out.append(eq16_scores(c, xy[s : s + chunk])[0])
    return np.concatenate(out) if out else np.zeros(0)


def privacy_utility_curve(
    data,
    domain: Domain,
    Bs=(0, 1, 2, 3, 4, 5, 6, 7, 8, 50),
    eps_list=None,
    h: float | None = None,
    reference: np.ndarray | str | None = "auto",
    n_attack: int = 500,
    seed: int = 0,
    include_kde: bool = True,
    progress=None,
) -> dict:
    """Privacy (Eq. 16, metres, mean over ``n_attack`` sampled users) and utility
    (Spearman against ``reference``) of Federated RFF KDE for each ``B``, of
    geo-indistinguishability + federated KDE for each ``eps`` (per metre), and of
    Federated KDE, on ``data`` (each row a virtual user, Section 4.1.2).

    ``reference``: the ground-truth surface on the domain's grid (synthetic data);
    None uses the full-data KDE (real data, Section 4.2.1); ``"auto"`` (default) uses
    the true density for the mixture datasets of :func:`mixture_dataset` and the
    full-data KDE otherwise. ``h``: bandwidth in metres
    (None: 5 % of the domain side, the mechanisms' default rule). Features are drawn
    once per user and the first ``B`` are used for each ``B`` (each ``B`` is then an
    exact draw of Algorithm 2; the curve is smoother than with independent draws).
    The attack runs on the query grid capped at 256 x 256 (:func:`attack_cells`).

    Returns ``{"h_m", "reference", "n_users", "n_attack", "attack_cells", "zero_feature_m",
    "rows": [...], "gain_per_cost": [...]}``; each row has ``method`` ("rff",
    "geoind", "kde"), ``B`` or ``eps_per_m`` and ``displacement_m``, ``spearman``,
    ``privacy_m``, ``ratio`` (privacy over the 0-feature value).
    """
    rng = np.random.default_rng(seed)
    inside = domain.inside(data.xy)
    xy = np.asarray(data.xy, dtype=np.float64)[inside]
    if len(xy) == 0:
        raise DataError("no location inside the region")
    wts = None if getattr(data, "weight", None) is None else np.asarray(data.weight, dtype=np.float64)[inside]
    h = 0.05 * domain.side if h is None else float(h)
    if not h > 0:
        raise ParamError("the bandwidth must be positive")
    Bs = sorted({int(b) for b in Bs})
    if Bs and (Bs[0] < 0 or Bs[-1] > 1000):
        raise ParamError("numbers of features must be in 0..1000")
    eps_list = default_geoind_eps(domain) if eps_list is None else [float(e) for e in eps_list]
    xs, ys = axes(domain)
    na = attack_cells(domain)
    axs, ays = axes(domain, na)
    extra = getattr(getattr(data, "meta", None), "extra", None) or {}
    if isinstance(reference, str):
        if reference != "auto":
            raise ParamError(f"unknown reference {reference!r}")
        reference = None
        if extra.get("mixture") in ("a", "b"):
            reference = mixture_truth(extra["mixture"], domain, extra["unit_m"], extra.get("b_var", B_ACROSS_VAR))
    ref_name = "given" if reference is not None else "full-data KDE"
    if extra.get("mixture") in ("a", "b") and reference is not None:
        ref_name = "true mixture density"
    if reference is None:
        reference = kde_grid_sum(xy, h, xs, ys, wts)
    m = min(int(n_attack), len(xy))
    att = np.sort(rng.choice(len(xy), size=m, replace=False))
    zero = float(zero_feature_distance(xy[att], axs, ays).mean())
    bmax = max(Bs) if Bs else 0
    z = rng.standard_normal((len(xy), bmax, 2))
    total = len(Bs) + len(eps_list) + int(include_kde)
    done = 0
    rows = []

    def tick(msg):
        nonlocal done
        done += 1
        if progress:
            progress(done / max(total, 1), msg)

    for b in Bs:
        om = z[:, :b] / h
        dens = rff_grid_sum(xy, om, xs, ys, wts) if b > 0 else np.ones((len(ys), len(xs)))
        priv = float(_attack_rff(xy[att], om[att], axs, ays).mean())
        rows.append(
            {
                "method": "rff",
                "B": b,
                "spearman": spearman_raw(reference, dens),
                "privacy_m": priv,
                "ratio": priv / zero,
            }
        )
        tick(f"B = {b}")
    if include_kde:
        dens = kde_grid_sum(xy, h, xs, ys, wts)
        priv = float(_attack_kde(xy[att], xy[att], h, axs, ays).mean())
        rows.append(
            {"method": "kde", "spearman": spearman_raw(reference, dens), "privacy_m": priv, "ratio": priv / zero}
        )
        tick("federated KDE")
    from ...core.noise import planar_laplace

    for e in eps_list:
        noisy = xy + planar_laplace(rng, e, len(xy))
        dens = kde_grid_sum(noisy, h, xs, ys, wts)
        priv = float(_attack_kde(noisy[att], xy[att], h, axs, ays).mean())
        rows.append(
            {
                "method": "geoind",
                "eps_per_m": e,
                "displacement_m": 2.0 / e,
                "spearman": spearman_raw(reference, dens),
                "privacy_m": priv,
                "ratio": priv / zero,
            }
        )
        tick(f"eps = {e:.3g}/m")
    return {
        "h_m": h,
        "reference": ref_name,
        "n_users": int(len(xy)),
        "n_attack": m,
        "attack_cells": na,
        "zero_feature_m": zero,
        "rows": rows,
        "gain_per_cost": gain_per_privacy_cost(rows),
    }


def gain_per_privacy_cost(rows: list[dict]) -> list[dict]:
    """Figure 13: for B >= 2, ``(S_B - S_1) / (Z_1 - Z_B)``, the Spearman gained per
    kilometre of privacy distance lost relative to one feature (NaN when no privacy
    is lost)."""
    rff = {r["B"]: r for r in rows if r.get("method") == "rff"}
    if 1 not in rff:
        return []
    s1, z1 = rff[1]["spearman"], rff[1]["privacy_m"]
    out = []
    for b in sorted(k for k in rff if k >= 2):
        gain = rff[b]["spearman"] - s1
        cost_km = (z1 - rff[b]["privacy_m"]) / 1000.0
        out.append(
            {"B": b, "gain": gain, "cost_km": cost_km, "gain_per_km": gain / cost_km if cost_km > 0 else math.nan}
        )
    return out
