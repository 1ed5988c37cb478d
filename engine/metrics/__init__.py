"""Error metrics, one documented formula each.

Heatmap metrics compare two grids over the same domain (``grid[iy, ix]``).
Unless a docstring says otherwise they work on *normalised densities*: each
grid has its negative entries clipped to 0 and is then divided by its sum
(:func:`normalise`; an all-zero grid becomes uniform). Every heatmap metric is
therefore invariant to the overall scale of either grid, and a release of
counts compares with the true counts directly. Means are over all cells.

* MSE, L1: entrywise (not matrix norms), as in Bagdasaryan et al. 2022 §6.1.
* MAPE, sMAPE, MAAPE: Bagdasaryan et al. Appendix A.1 after Tabataba et al.
  (arXiv:1703.09828).
* EMD in metres (exact 2-D Wasserstein-1, L1 ground distance) via
  :mod:`engine.metrics.emd`, coarsened with a stated error bound.
* SIM, CC, KL: the MIT saliency benchmark definitions used by Ghazi et al. 2023.
* Spearman rank correlation (Zong et al. 2023).
* Range queries: SNH relative error (Zeighami et al. 2022, §2 and §6.1),
  DPBench's scaled per-query L1 error (Hay et al., SIGMOD 2016), the root-mean-squared
  error and its multiple of the SVD lower bound (:mod:`engine.metrics.lower_bound`).
* NRMSE for numeric aggregates (Cormode et al. 2024, §4).
* Privacy distance: how far an attacker's guess of a user's location lands.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..core.errors import EngineError, ParamError
from ..core.grid import Domain, downsample, range_counts

EPS_KL = 2.2e-16  # MIT saliency benchmark's epsilon (eps of float64, rounded)
RANGE_QUERIES = 200  # random square queries per run
RANGE_SIDE_FRAC = (0.02, 0.10)  # query sides, fraction of the domain side
PSI_FRAC = 0.001  # SNH smoothing factor psi = 0.1 % of the data cardinality
PRIVACY_MAX_CELLS = 64  # aggregate attack: density coarsened to <= 64 x 64
PRIVACY_MAX_USERS = 500
NEAR_CELLS = 4.0  # exact cell integral within 4 cell sides, 2nd-order expansion beyond


# -------------------------------------------------------------- normalisation
def normalise(grid: np.ndarray) -> np.ndarray:
    """Clip negatives to 0 and divide by the sum (all-zero -> uniform)."""
    g = np.asarray(grid, dtype=np.float64)
    if not np.all(np.isfinite(g)):
        raise EngineError("the map contains missing or infinite values; metrics cannot be computed")
    g = np.clip(g, 0, None)
    s = g.sum()
    return g / s if s > 0 else np.full(g.shape, 1.0 / g.size)


def _pair(truth, pred) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(truth)
    p = np.asarray(pred)
    if t.shape != p.shape:
        raise EngineError(f"the private map has shape {p.shape} but the true map has shape {t.shape}")
    return normalise(t), normalise(p)


# ---------------------------------------------------------- entrywise errors
def mse(truth: np.ndarray, pred: np.ndarray) -> float:
    """Mean squared error over cells, ``mean_i (p_i - t_i)^2`` (normalised maps)."""
    t, p = _pair(truth, pred)
    return float(np.mean((p - t) ** 2))


def l1(truth: np.ndarray, pred: np.ndarray) -> float:
    """L1 distance ``sum_i |p_i - t_i|`` of the normalised maps (in [0, 2];
    twice the total-variation distance)."""
    t, p = _pair(truth, pred)
    return float(np.abs(p - t).sum())


def mape(truth: np.ndarray, pred: np.ndarray) -> float:
    """Mean absolute percentage error ``mean_i |p_i - t_i| / d_i`` with
    ``d_i = t_i``, or, where ``t_i = 0``, the minimum positive true value
    (Bagdasaryan et al., Appendix A.1: "using the minimum location value as the
    denominator when the true value is zero")."""
    t, p = _pair(truth, pred)
    pos = t > 0
    floor = t[pos].min()  # normalise() guarantees a positive entry
    d = np.where(pos, t, floor)
    return float(np.mean(np.abs(p - t) / d))


def smape(truth: np.ndarray, pred: np.ndarray) -> float:
    """Symmetric MAPE ``mean_i |p_i - t_i| / ((|t_i| + |p_i|)/2)``, a term being 0
    when both are 0 (Tabataba et al. 2017); in [0, 2]."""
    t, p = _pair(truth, pred)
    den = (t + p) / 2
    num = np.abs(p - t)
    return float(np.mean(np.divide(num, den, out=np.zeros_like(num), where=den > 0)))


def maape(truth: np.ndarray, pred: np.ndarray) -> float:
    """Mean arctangent absolute percentage error ``mean_i arctan(|p_i - t_i|/t_i)``
    (Kim & Kim 2016), with ``arctan(x/0) = pi/2`` for x > 0 and 0 for 0/0; in
    [0, pi/2]."""
    t, p = _pair(truth, pred)
    return float(np.mean(np.arctan2(np.abs(p - t), t)))


# ----------------------------------------------------------- saliency metrics
def _minmax_sum(g: np.ndarray) -> np.ndarray:
    lo, hi = g.min(), g.max()
    if hi <= lo:
        return np.full(g.shape, 1.0 / g.size)
    s = (g - lo) / (hi - lo)
    return s / s.sum()


def sim(truth: np.ndarray, pred: np.ndarray, minmax: bool = True) -> float:
    """Similarity (histogram intersection) ``sum_i min(t_i, p_i)`` in [0, 1].

    Choice: like the MIT saliency benchmark (Bylinskii et al.), each map is first
    min-max scaled to [0, 1] and then divided by its sum (after our clipping of
    negatives, so a map with an empty cell is unchanged by the min-max step; a
    map without one loses its constant floor). ``minmax=False`` skips the
    min-max step (plain intersection of the normalised densities)."""
    t, p = _pair(truth, pred)
    if minmax:
        t, p = _minmax_sum(t), _minmax_sum(p)
    return float(np.minimum(t, p).sum())


def cc(truth: np.ndarray, pred: np.ndarray) -> float:
    """Pearson correlation coefficient of the two maps over cells (MIT benchmark
    CC). Scale-free; negatives are clipped first. A constant map has no
    correlation: 0 is returned."""
    t, p = _pair(truth, pred)
    tc = t.ravel() - t.mean()
    pc = p.ravel() - p.mean()
    # elementwise sums, not BLAS dot: BLAS threads cost more than they save at this size
    den = math.sqrt(float((tc * tc).sum()) * float((pc * pc).sum()))
    return float((tc * pc).sum() / den) if den > 0 else 0.0


def kl(truth: np.ndarray, pred: np.ndarray) -> float:
    """KL divergence as in the MIT benchmark:
    ``sum_i t_i log(eps + t_i / (p_i + eps))`` with ``eps = 2.2e-16``, both maps
    sum-normalised (truth is the reference distribution)."""
    t, p = _pair(truth, pred)
    return float(np.sum(t * np.log(EPS_KL + t / (p + EPS_KL))))


def spearman(truth: np.ndarray, pred: np.ndarray) -> float:
    """Spearman rank correlation over cells (``scipy.stats.spearmanr``, ties
    averaged) of the clipped maps; 0 when a map is constant."""
    from scipy.stats import rankdata

    t, p = _pair(truth, pred)
    rt, rp = rankdata(t.ravel()), rankdata(p.ravel())
    rt -= rt.mean()
    rp -= rp.mean()
    den = math.sqrt(float((rt * rt).sum()) * float((rp * rp).sum()))
    return float((rt * rp).sum() / den) if den > 0 else 0.0  # Pearson of ranks == spearmanr


# ------------------------------------------------------------------------ EMD
def emd_m(truth: np.ndarray, pred: np.ndarray, cell_m: float, max_cells: int | None = 64) -> tuple[float, float]:
    """Earth Mover's Distance in metres between the normalised maps (2-D
    Wasserstein-1 with the L1 ground distance between cell centres, exact), and
    an upper bound on its error: returns ``(value, bound)``.

    ``max_cells``: the maps are first summed over ``k x k`` blocks so that each
    side is at most ``max_cells`` (``None`` or a side already small enough:
    exact at full resolution, bound = the solver's rounding bound only).
    Coarsening bound: moving every fine cell's mass to its block centre moves it
    by at most ``(k-1)/2`` fine cells on each axis, so by the triangle
    inequality ``|EMD_fine - EMD_coarse| <= W1(t, t~) + W1(p, p~) <=
    cell_m * sum_i (t_i + p_i)(|dx_i| + |dy_i|) <= 2 (k-1) cell_m``; the data-
    dependent middle term is what is returned (computed by
    :func:`engine.metrics.emd.emd_coarse`).
    """
    from .emd import emd_coarse, emd_l1_bound

    t, p = _pair(truth, pred)
    if max_cells is None or max(t.shape) <= max_cells:
        v, b = emd_l1_bound(t, p, float(cell_m))
    else:
        v, b = emd_coarse(t, p, float(cell_m), int(max_cells))
    return float(v), float(b)


# --------------------------------------------------------------- range queries
def snh_relative_error(true_answers, pred_answers, n: float, psi_frac: float = PSI_FRAC) -> float:
    """Mean SNH relative error ``|pred - true| / max(true, psi)`` with
    ``psi = psi_frac * n`` (0.1 % of the data cardinality n; Zeighami et al. §2,
    §6.1)."""
    t = np.asarray(true_answers, dtype=np.float64)
    y = np.asarray(pred_answers, dtype=np.float64)
    psi = max(psi_frac * float(n), 1e-12)
    return float(np.mean(np.abs(y - t) / np.maximum(t, psi)))


def dpbench_l1(true_answers, pred_answers, total: float) -> float:
    """DPBench scaled per-query L1 error ``||Wx - Wx_hat||_1 / (q ||x||_1)`` for q
    queries, ``||x||_1`` the true total count (Hay et al. 2016)."""
    t = np.asarray(true_answers, dtype=np.float64)
    y = np.asarray(pred_answers, dtype=np.float64)
    if total <= 0 or t.size == 0:
        return float("nan")
    return float(np.abs(y - t).sum() / (t.size * float(total)))


def range_query_errors(
    truth: np.ndarray,
    release,
    domain: Domain,
    rng: np.random.Generator,
    count: int = RANGE_QUERIES,
    side_frac: tuple[float, float] = RANGE_SIDE_FRAC,
    centers: np.ndarray | None = None,
    epsilon: float | None = None,
) -> dict:
    """Random square range queries: sides uniform in ``side_frac`` of the domain
    side, centres uniform in the domain (SNH §6.1) or drawn among ``centers``
    (the SNH reference code centres them on data points). True answers are
    :func:`engine.core.grid.range_counts` on the true count grid (uniformity inside
    partly covered cells); the release answers with ``release.answer_range``
    (its model, or its density the same way). Both are raw COUNTS (the
    release's density is an estimate of counts per cell, by contract).
    Returns ``range_rel_error`` (SNH, psi = 0.1 % of the true total), ``dpbench_l1``,
    ``range_rmse`` (root-mean-squared error in counts) and, given the run's ``epsilon``,
    ``range_rmse_x_bound``: that RMSE over the least any ε-DP matrix mechanism can expect on
    these squares (:func:`engine.metrics.lower_bound.rmse_bound`)."""
    from ..core.workload import RangeWorkload
    from .lower_bound import rmse_bound

    rects = domain.random_square_queries(rng, count, side_frac, centers)
    t = range_counts(np.asarray(truth, dtype=np.float64), domain, rects)
    y = np.asarray(release.answer_range(rects), dtype=np.float64)
    n = float(np.asarray(truth).sum())
    rmse = float(np.sqrt(np.mean((y - t) ** 2)))
    out = {"range_rel_error": snh_relative_error(t, y, n), "dpbench_l1": dpbench_l1(t, y, n), "range_rmse": rmse}
    if epsilon is not None:
        w = RangeWorkload.rectangles(domain.rect_to_cells(rects), domain.n)
        out["range_rmse_x_bound"] = rmse / rmse_bound(w, epsilon)
    return out


# ---------------------------------------------------------- numeric aggregates
def nrmse(true_value: float, estimates) -> float:
    """Normalised root-mean-squared error ``sqrt(mean_j (x_hat_j - mu)^2) / |mu|``
    over repetitions j (Cormode et al. 2024, §4: mean squared difference over
    independent repetitions, normalised by the true mean mu). With one
    estimate it is the relative absolute error."""
    mu = float(true_value)
    e = np.atleast_1d(np.asarray(estimates, dtype=np.float64))
    if mu == 0 or not math.isfinite(mu):
        raise ParamError("NRMSE is undefined when the true value is 0 or not finite")
    return float(math.sqrt(np.mean((e - mu) ** 2)) / abs(mu))


# ------------------------------------------------------------ privacy distance
def _dist_antideriv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``I(x, y) = int_0^x int_0^y sqrt(u^2 + v^2) dv du`` (signed), closed form
    ``sgn(x) sgn(y) [2ab r + a^3 asinh(b/a) + b^3 asinh(a/b)] / 6`` with
    ``a = |x|, b = |y|, r = hypot(a, b)`` (a term is 0 when its a or b is 0)."""
    a = np.abs(x)
    b = np.abs(y)
    r = np.hypot(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(a > 0, a**3 * np.arcsinh(b / np.where(a > 0, a, 1.0)), 0.0)
        t2 = np.where(b > 0, b**3 * np.arcsinh(a / np.where(b > 0, b, 1.0)), 0.0)
    return np.sign(x) * np.sign(y) * (2 * a * b * r + t1 + t2) / 6.0


def mean_distance_to_cells(points: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Exact mean Euclidean distance from each point to a uniform point of each
    cell of the rectangular grid with column edges ``xs`` and row edges ``ys``.
    Returns ``(len(points), len(ys)-1, len(xs)-1)``."""
    pts = np.atleast_2d(np.asarray(points, dtype=np.float64))
    dx = xs[None, None, :] - pts[:, 0, None, None]
    dy = ys[None, :, None] - pts[:, 1, None, None]
    corner = _dist_antideriv(dx, dy)  # (m, ny+1, nx+1)
    cell = corner[:, 1:, 1:] - corner[:, :-1, 1:] - corner[:, 1:, :-1] + corner[:, :-1, :-1]
    area = np.diff(ys)[:, None] * np.diff(xs)[None, :]
    return cell / area[None]


def _expected_distance_numpy(points, xs, ys, w):
    out = np.empty(len(points))
    for s in range(0, len(points), 128):  # bounded memory: 128 x (m+1)^2 doubles per block
        md = mean_distance_to_cells(points[s : s + 128], xs, ys)
        out[s : s + 128] = np.tensordot(md, w, axes=([1, 2], [0, 1]))
    return out


try:  # numba: one pass per user over the cells, no temporaries
    import numba

    @numba.njit(cache=True, nogil=True)
    def _anti_nb(x, y):  # pragma: no cover - compiled
        a = abs(x)
        b = abs(y)
        r = math.sqrt(a * a + b * b)
        v = 2 * a * b * r
        if a > 0:
            v += a * a * a * math.asinh(b / a)
        if b > 0:
            v += b * b * b * math.asinh(a / b)
        sg = (1.0 if x > 0 else (-1.0 if x < 0 else 0.0)) * (1.0 if y > 0 else (-1.0 if y < 0 else 0.0))
        return sg * v / 6.0

    @numba.njit(cache=True, nogil=True)
    def _expected_distance_nb(points, xs, ys, w):  # pragma: no cover - compiled
        # Near cells (centre closer than NEAR_CELLS cell sides): exact corner
        # formula. Far cells: second-order expansion d + (hx^2 ny^2 + hy^2 nx^2)/(24 d),
        # n the unit vector to the centre; its error is below 3e-5 cell sides at
        # 4 sides (O(h^4/d^3)), checked against the exact formula in the tests.
        n = points.shape[0]
        ny = ys.shape[0] - 1
        nx = xs.shape[0] - 1
        out = np.empty(n)
        for u in range(n):
            px = points[u, 0]
            py = points[u, 1]
            acc = 0.0
            for j in range(ny):
                hy = ys[j + 1] - ys[j]
                cy = 0.5 * (ys[j] + ys[j + 1]) - py
                for i in range(nx):
                    wc = w[j, i]
                    if wc == 0.0:
                        continue
                    hx = xs[i + 1] - xs[i]
                    cx = 0.5 * (xs[i] + xs[i + 1]) - px
                    d2 = cx * cx + cy * cy
                    h = hx if hx > hy else hy
                    if d2 >= (NEAR_CELLS * h) ** 2:
                        d = math.sqrt(d2)
                        acc += wc * (d + (hx * hx * cy * cy + hy * hy * cx * cx) / (24.0 * d2 * d))
                    else:
                        x0 = xs[i] - px
                        x1 = xs[i + 1] - px
                        y0 = ys[j] - py
                        y1 = ys[j + 1] - py
                        c = _anti_nb(x1, y1) - _anti_nb(x0, y1) - _anti_nb(x1, y0) + _anti_nb(x0, y0)
                        acc += wc * c / (hx * hy)
            out[u] = acc
        return out

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in requirements
    HAVE_NUMBA = False


def expected_distance(points: np.ndarray, xs: np.ndarray, ys: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Expected distance from each point to a guess drawn from the
    piecewise-uniform density with cell masses ``w`` (summing to 1) on the grid
    with column edges ``xs`` and row edges ``ys``. Exact closed form per cell
    (numpy fallback everywhere; numba within 4 cell sides of the point, and the
    expansion ``d + (hx^2 n_y^2 + hy^2 n_x^2)/(24 d)`` beyond, error < 3e-5 cell
    sides per unit of mass)."""
    pts = np.ascontiguousarray(np.atleast_2d(points), dtype=np.float64)
    xs = np.ascontiguousarray(xs, dtype=np.float64)
    ys = np.ascontiguousarray(ys, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    if HAVE_NUMBA:
        return _expected_distance_nb(pts, xs, ys, w)
    return _expected_distance_numpy(pts, xs, ys, w)


def mean_distance_to_domain(points: np.ndarray, domain: Domain) -> np.ndarray:
    """Exact expected distance from each point to a uniformly random point of the
    domain (the attacker who knows nothing but the public region)."""
    x0, y0, x1, y1 = domain.bounds
    return mean_distance_to_cells(points, np.array([x0, x1]), np.array([y0, y1]))[:, 0, 0]


def _user_locations(data, rng: np.random.Generator, max_users: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``max_users`` users drawn without replacement (dense user index of
    ``data.user_index()``) and one of each user's locations chosen uniformly."""
    if data.user_id is None:  # every location its own user: no index to build (nor to hold, out of core)
        users = np.sort(rng.choice(len(data), size=min(int(max_users), len(data)), replace=False))
        return users, data.xy[users]
    inv, n_users = data.user_index()
    m = min(int(max_users), n_users)
    users = np.sort(rng.choice(n_users, size=m, replace=False))
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=n_users)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pick = starts[users] + np.floor(rng.random(m) * counts[users]).astype(np.int64)
    return users, data.xy[order[pick]]


def privacy_distance(release, data, domain: Domain, rng: np.random.Generator, max_users: int = 500) -> dict:
    """Expected distance (metres) between a user's true location and the
    attacker's guess, against the uninformed baseline.

    Users: up to ``max_users`` drawn with ``rng``; for users with several
    locations one of them, drawn uniformly, is the target. Per
    ``release.server_view.kind``:

    * ``"clear"``: the server sees the location, distance 0;
    * ``"aggregate"``: the attacker's belief about anyone is the released
      density (normalised, coarsened to at most 64 x 64 cells, uniform inside
      each cell); the distance is the exact expectation of the distance to a
      guess drawn from it (closed-form integral of the distance over each cell).
      Coarsening moves belief mass by at most one coarse-cell diagonal, so it
      changes each user's value by at most that diagonal (distance is
      1-Lipschitz);
    * ``"per_user"``: ``server_view.candidates(users)`` (dense user indices of
      ``data.user_index()``) gives weighted guesses per user; the distance is
      the weighted mean (weights normalised; all-zero weights count equally; a
      user without candidates gets the baseline).

    Baseline: the exact expected distance to a uniformly random point of the
    domain. Returns ``mean_m``, ``baseline_m``, ``ratio = mean/baseline`` (1 =
    the release tells the attacker nothing about where a user is, 0 = exact
    location) and ``n_users``.
    """
    view = release.server_view
    users, xy = _user_locations(data, rng, max_users)
    base = mean_distance_to_domain(xy, domain)
    baseline = float(base.mean())
    if view.kind == "clear":
        dist = np.zeros(len(users))
    elif view.kind == "aggregate":
        w = normalise(release.density)
        k = max(1, w.shape[0] // PRIVACY_MAX_CELLS)
        if k > 1:
            w = downsample(w, k)
        m = w.shape[0]
        edges_x = domain.x0 + np.arange(m + 1) * (domain.side / m)
        edges_y = domain.y0 + np.arange(m + 1) * (domain.side / m)
        dist = expected_distance(xy, edges_x, edges_y, w)
    elif view.kind == "per_user":
        if view.candidates is None:
            raise EngineError("this mechanism's server view lists no per-user guesses")
        cands = view.candidates(users)
        if len(cands) != len(users):
            raise EngineError("the server view returned guesses for a different number of users")
        dist = np.empty(len(users))
        for i, (pts, wts) in enumerate(cands):
            pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
            if pts.shape[0] == 0:
                dist[i] = base[i]
                continue
            wts = np.clip(np.asarray(wts, dtype=np.float64).reshape(-1), 0, None)
            wts = wts / wts.sum() if wts.sum() > 0 else np.full(pts.shape[0], 1.0 / pts.shape[0])
            dist[i] = float((wts * np.hypot(pts[:, 0] - xy[i, 0], pts[:, 1] - xy[i, 1])).sum())
    else:
        raise EngineError(f"unknown server view kind {view.kind!r}")
    mean = float(dist.mean()) if dist.size else float("nan")
    return {
        "mean_m": mean,
        "baseline_m": baseline,
        "ratio": mean / baseline if baseline > 0 else float("nan"),
        "n_users": int(len(users)),
    }


# ------------------------------------------------------------------- evaluate
def _aggregate_nrmse(evaluation) -> dict:
    """``evaluation["aggregates"] = {name: (estimate, true)}`` (numeric aggregates such
    as a mean age; the true value is evaluation, never release) -> ``nrmse_<name>``
    over this one run."""
    out = {}
    for name, pair in dict((evaluation or {}).get("aggregates", {}) or {}).items():
        est, true = pair
        try:
            out[f"nrmse_{name}"] = nrmse(true, est)
        except ParamError:
            out[f"nrmse_{name}"] = float("nan")
    return out


EXTRA_METRICS = {
    "emd_full": "EMD at full resolution (exact, can take seconds at 256 x 256 and more)",
    "range_data_centred": "range-query errors with queries centred on data points (SNH reference code)",
    "sim_plain": "SIM without the min-max step",
}


def _attribute_metrics(release, data, domain, rng, evaluation=None) -> dict:
    """Scores of a regional attribute-mean release: map distances between a mean
    and a location histogram would be meaningless, so report the regional NRMSE
    (RMSE over unsuppressed regions / |population mean|, from the run's evaluation
    record: the mechanism computes it against the true values), the population-mean
    NRMSE, the suppressed share, the cost, and the privacy distance of the locations
    the server learns (e.g. the region)."""
    d = evaluation or {}

    def num(key):
        v = d.get(key)
        return float(v) if v is not None and np.isfinite(v) else float("nan")

    out = {
        "nrmse_regions": num("nrmse_overall"),
        "nrmse_population_mean": num("population_mean_nrmse"),
        **_communication(release, data),
    }
    regional = getattr(release, "regional", None)
    if regional is not None and np.size(regional.suppressed):
        out["suppressed_share"] = float(np.mean(np.asarray(regional.suppressed, dtype=bool)))
    pdist = privacy_distance(release, data, domain, rng, PRIVACY_MAX_USERS)
    out["privacy_distance_m"] = pdist["mean_m"]
    out["privacy_baseline_m"] = pdist["baseline_m"]
    out["privacy_ratio"] = pdist["ratio"]
    out.update(_aggregate_nrmse(evaluation))
    return out


def _communication(release, data) -> dict:
    """``comm_elements_per_client`` (and ``comm_bits_per_client`` when known); a per-location
    cost (central upload) times the mean number of locations per user of the true data."""
    comm = release.communication
    k = len(data) / max(data.n_users, 1) if getattr(comm, "per_location", False) else 1.0
    out = {"comm_elements_per_client": float(comm.elements_per_client) * k}
    if comm.bits_per_client is not None:
        out["comm_bits_per_client"] = float(comm.bits_per_client) * k
    return out


def gaussian_heatmap(p: np.ndarray, sigma_cells: float) -> np.ndarray:
    """``H_p^sigma`` of Ghazi et al. 2023, Section 2.3, on the grid, ``sigma`` in cells: the
    heatmap that the paper scores SIM, CC and KL on (:func:`_paper_heatmap_scores`).

    ``H(x) = sum_x' K(x - x') p(x') / Z(x')`` with ``K(d) = exp(-|d|^2 / (2 sigma^2))`` and
    ``Z(x') = sum_{x'' in grid} K(x'' - x')``: each source cell's kernel is renormalised
    over the grid, so ``H`` has the same total as ``p`` (the paper writes ``Z`` with ``x``;
    mass preservation needs ``x'``). The kernel is NOT truncated (as in the paper), which
    matters for KL: far from the mass the map is tiny but positive. Computed exactly as
    ``H = G_y (p / Z) G_x`` with the dense 1-D kernel matrices (the Gaussian is separable)."""
    p = np.asarray(p, dtype=np.float64)
    if sigma_cells <= 0:
        return p.copy()
    if p.ndim != 2:
        raise ValueError("heatmap input must be a 2-D grid")
    gy = _kernel_matrix(p.shape[0], float(sigma_cells))
    gx = _kernel_matrix(p.shape[1], float(sigma_cells))
    z = np.outer(gy.sum(axis=0), gx.sum(axis=0))  # Z(x') = (sum_y'' K)(sum_x'' K)
    h = gy @ (p / z) @ gx  # kernels are symmetric
    if (p >= 0).all():
        np.clip(h, 0.0, None, out=h)
    return h


@lru_cache(maxsize=16)
def _kernel_matrix(n: int, sigma: float) -> np.ndarray:
    d = np.arange(n, dtype=np.float64)
    k = np.exp(-((d[:, None] - d[None, :]) ** 2) / (2.0 * sigma * sigma))
    k.setflags(write=False)  # shared by the cache
    return k


def _paper_heatmap_scores(t: np.ndarray, release) -> dict:
    """SIM, CC and KL as Ghazi et al. 2023 score them (Section 4, Figure 1): on the heatmaps
    ``H^sigma`` of Section 2.3, when the release publishes one (``Release.heat`` with a filter width
    ``sigma_cells > 0``: the sparse EMD family and its Laplace baselines), the
    truth smoothed by the same filter. ``heatmap_sigma_cells`` says which map was scored: the
    filter width in cells, 0 (no filter) when SIM/CC/KL are on the unsmoothed maps. On the unsmoothed
    estimate a sparse release scores SIM 0.002-0.08 and KL ~ 20, not the paper's measures."""
    layer = getattr(release, "heat", None)
    sigma = float(layer.sigma_cells) if layer is not None else 0.0
    if layer is None or sigma <= 0 or np.shape(layer.map) != t.shape:
        return {"heatmap_sigma_cells": 0.0}
    th, ph = normalise(gaussian_heatmap(t, sigma)), normalise(np.asarray(layer.map, dtype=np.float64))
    return {"sim": sim(th, ph), "cc": cc(th, ph), "kl": kl(th, ph), "heatmap_sigma_cells": sigma}


def evaluate(truth, release, data, domain, rng, emd_max_cells=64, extra=(), evaluation=None, epsilon=None) -> dict:
    """The default metric dict of every run (all floats; NaN when not applicable).

    Keys: ``mse``, ``l1``, ``mape``, ``smape``, ``maape``, ``sim``, ``cc``,
    ``kl``, ``spearman`` (normalised maps, see the module docstring; SIM, CC and KL
    are scored on the paper's Gaussian-smoothed heatmaps when the release publishes one,
    ``heatmap_sigma_cells`` holding the filter width, 0 when unsmoothed:
    :func:`_paper_heatmap_scores`);
    ``emd_m`` and ``emd_bound_m`` (EMD in metres on maps coarsened to at most
    ``emd_max_cells`` per side, and the bound on the coarsening error;
    ``emd_max_cells <= 0`` skips EMD: NaN); ``range_rel_error``,
    ``dpbench_l1``, ``range_rmse`` and (given the run's ``epsilon``) ``range_rmse_x_bound``
    (200 random squares with sides 2-10 % of the domain side, centres uniform, psi = 0.1 %
    of the true total; :func:`range_query_errors`); ``privacy_distance_m``,
    ``privacy_baseline_m``, ``privacy_ratio`` (:func:`privacy_distance`, up to
    500 users); ``comm_elements_per_client`` (and ``comm_bits_per_client``
    when known); ``nrmse_<name>`` for each numeric aggregate listed in
    ``evaluation["aggregates"]``. ``evaluation``: the run's record of values the
    mechanism computed from the truth (``RunContext.evaluation``), read by the
    attribute-mean scores and the aggregates. ``extra`` names optional metrics from
    :data:`EXTRA_METRICS`. Deterministic given ``rng`` (queries first, then
    privacy users).
    """
    truth = np.asarray(truth, dtype=np.float64)
    dens = np.asarray(release.density, dtype=np.float64)
    if dens.shape != truth.shape:
        raise EngineError(f"the private map has shape {dens.shape} but the true map has shape {truth.shape}")
    unknown = [e for e in extra if e not in EXTRA_METRICS]
    if unknown:
        raise ParamError(f"unknown metric(s) {', '.join(unknown)}; known extras: {', '.join(EXTRA_METRICS)}")
    if getattr(release, "quantity", "counts") == "attribute_mean":
        return _attribute_metrics(release, data, domain, rng, evaluation)
    t, p = _pair(truth, dens)  # normalised once; the metric functions are idempotent on these
    out: dict = {
        "mse": mse(t, p),
        "l1": l1(t, p),
        "mape": mape(t, p),
        "smape": smape(t, p),
        "maape": maape(t, p),
        "sim": sim(t, p),
        "cc": cc(t, p),
        "kl": kl(t, p),
        "spearman": spearman(t, p),
    }
    out.update(_paper_heatmap_scores(t, release))
    if emd_max_cells and int(emd_max_cells) > 0:
        out["emd_m"], out["emd_bound_m"] = emd_m(t, p, domain.cell, int(emd_max_cells))
    else:
        out["emd_m"] = out["emd_bound_m"] = float("nan")
    out.update(range_query_errors(truth, release, domain, rng, epsilon=epsilon))
    pdist = privacy_distance(release, data, domain, rng, PRIVACY_MAX_USERS)
    out["privacy_distance_m"] = pdist["mean_m"]
    out["privacy_baseline_m"] = pdist["baseline_m"]
    out["privacy_ratio"] = pdist["ratio"]
    out.update(_communication(release, data))
    out.update(_aggregate_nrmse(evaluation))
    if "emd_full" in extra:
        out["emd_full_m"], out["emd_full_bound_m"] = emd_m(t, p, domain.cell, None)
    if "range_data_centred" in extra:
        inside = data.xy[domain.inside(data.xy)]
        r = range_query_errors(truth, release, domain, rng, centers=inside if len(inside) else None)
        out["range_rel_error_data"] = r["range_rel_error"]
        out["dpbench_l1_data"] = r["dpbench_l1"]
    if "sim_plain" in extra:
        out["sim_plain"] = sim(t, p, minmax=False)
    return out
