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
* bandwidth rules: :func:`knn_bandwidth` (Section 4.2.4), the Lemma 3 bound, the
  Lemma 4 / Algorithm 3 rescaling.

The rest of the family's numerics: per-user response surfaces and the localisation attack
of Section 4.2.2 (:mod:`.localisation`), the synthetic mixtures (a) and (b) of Section 4.1.1
(:mod:`.datasets`), and the privacy-utility curve of Figures 10-13 (:mod:`.curve`).
"""

from __future__ import annotations

import math

import numpy as np

from ...core.errors import ParamError
from ...core.grid import Domain

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


def lemma4_index(h: float, h0: float, rtol: float = 1e-9) -> int | None:
    """Lemma 4 (Eq. 24): the bandwidths a user accepts after drawing at ``h0`` are ``(4n+1) h0``; ``n``
    such that ``h = (4n+1) h0`` (``n >= 0``), or None when ``h`` is not allowed."""
    q = float(h) / float(h0)
    k = round(q)
    if abs(q - k) > rtol * max(1.0, q) or k < 1 or (k - 1) % 4 != 0:
        return None
    return (k - 1) // 4


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
