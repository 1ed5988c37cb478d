"""Spatial Neural Histograms (SNH) for private range-count queries, with ParamSelect
(Zeighami, Ahuja, Ghinita, Shahabi, "A Neural Database for Differentially Private
Spatial Range Queries", PVLDB 15(5), 2022), and the IDENTITY@ParamSelect ablation.

Pipeline (Sections 3.3-4.3), all in the run's public square domain:

1. **Data collection** (Section 4.1): an equi-width grid of cell width ``rho`` laid from
   the domain's south-west corner (``m = ceil(side / rho)`` cells per side); each
   cell's count plus Laplace(1/eps). The cells are disjoint, so the whole grid costs
   eps by parallel composition: one ledger entry.
2. **Spatial data augmentation** (Algorithm 1): ``k`` sizes
   ``R = {l + (u - l)/k (i + 1/2)}``; for each size ``r`` and each grid-aligned corner
   ``c``, ``Y_A^r[c] = sum_c' |(c, r) ∩ (c', rho)| / rho^2 Y_D[c']`` (uniformity
   assumption inside partly covered cells), computed exactly in O(1) per query with
   the bilinear interpolation of the noisy grid's integral image.
3. **Training** (Section 4.2, Eq. 6): one fully connected network per size, input
   the query location, loss ``sum w_(c,r) / max(Y, psi) (f(c) - Y)^2``; JAX + optax
   (Adam), the ``k`` networks trained together with ``vmap``, early stopping on the
   training loss (see :mod:`.networks`).
4. **Model utilisation** (Section 4.3): a query ``(c, r)`` is answered by the network of
   the nearest size ``r*`` scaled by ``(r / r*)^2``; or, with ``variant = snh_qs``
   (SNH+QS, Section 6.3.2), by a network that also takes the query size as input.

**ParamSelect** (Section 5.1, :mod:`.paramselect`) picks ``rho`` from public
features when ``rho_m = 0``.

Threat model: a trusted curator holds every location, runs the whole pipeline and
publishes the trained networks (and the density grid derived from them). The
adversary sees the networks. Guarantee: epsilon-DP (central, Theorem 5.1): only the
data-collection grid reads the private data (Laplace(1/eps) per disjoint cell); the
augmentation, training, utilisation and the density grid are post-processing.
ParamSelect, the workload weights and the input normalisation use only public
information: the public domain, the public auxiliary dataset, and ``n`` (the number
of records, public in Algorithm 3; recorded as side information when ParamSelect runs).
The unit of privacy is the ``unit`` parameter shared with the central baselines: by
default one user (a user's k locations weighted 1/k, so every user adds at most 1 to
the grid: user-level eps-DP); ``record`` protects one location as the paper does (a
user with k locations is then protected at k*eps). The two agree on datasets with one
location per user.

Departures from the paper (and from the reference code, szeighami/SNH):

* Coordinates are normalised with the **public** domain (the reference uses the private
  data's own min/max, which is not DP), to ``[-5, 5]`` as in the reference.
* Noise comes from the run's seeded generator (the reference's seed is always 0).
* The optimiser is optax Adam (``jax.experimental.optimizers`` no longer exists).
* Workload weights ``w_(c,r)`` (Eq. 6) with ``workload = aux``: the workload ``Q_W`` is
  one square per public auxiliary point, centred on it, of side uniform in ``[l, u]``;
  ``w`` is the expected number of workload squares that overlap ``(c, r)`` (4-point
  midpoint rule over the side; auxiliary points counted on the ``rho`` grid with the
  uniformity assumption). The reference counts auxiliary points inside the training
  query instead. Other workloads: ``uniform`` (every training query weighs 1: queries
  anywhere, like the paper's test queries) and ``noisy`` (squares centred where the
  *noisy grid* has mass: the same weights computed on the signed noisy grid, whose noise
  averages out in the box sums, clipped at 0 afterwards, so their expectation is the
  weights of a workload drawn like the data; post-processing, no side information; not in the paper, the
  default when there is no public data).
* ``weight_floor`` (default 1; 0 = the paper) adds that fraction of the mean weight to
  every training query, i.e. mixes a uniform workload of equal total weight into
  ``Q_W``. With the paper's pure workload a training query that meets no workload
  query has weight 0 and drops out of Eq. 6, so the network is unconstrained there:
  on the coastal city (sea) and the SF cabs (empty blocks) queries centred uniformly
  at random then got relative errors of 0.18-0.20 against 0.03-0.06 with the floor,
  while data-centred queries were unchanged (``python -m engine bench snh``).
* Public auxiliary data: ``aux = proxy`` draws a public proxy of a synthetic city from a
  sibling city of the same preset (same centres, river and coast, different
  neighbourhood fields and parks): another dataset of the same region, never the
  private points. ``aux = dataset`` uses another registered dataset (e.g. Gowalla for
  the SF cabs, as in Section 6.1.1). It is recorded as side information.
* Training corners extend ``ceil(r / rho)`` cells beyond the west and south edges (and
  the grid's own overhang beyond the north and east edges), where the count is known to
  be 0, so queries that stick out of the domain are inside the training range (the
  reference also pads its training queries).
* Augmented labels are not clipped by default (the paper does not say; the reference
  clips them at 0, ``clip_labels``, which biases sparse areas upwards).
* Network outputs are reparametrised as ``s_j * net_j(c)`` with ``s_j`` the RMS of
  model j's labels (post-processing of the noisy grid), so every network learns an O(1)
  target; the loss is Eq. 6 divided by constants. ``psi`` is 0.1% of the noisy total
  (the paper uses 0.1% of n).
* One "epoch" is one pass over the training queries in mini-batches (the reference uses
  one full batch per epoch). Presets: ``paper`` = depth 20, width 80, Adam lr 1e-3,
  1,000 epochs, the reference code's He-uniform initialisation; ``fast`` (default,
  interactive on a CPU) = depth 4, width 64, at most 3,000 steps per network of batch 256, lr 3e-3
  with a cosine decay to 5%, and the sin layer's weights scaled by 2.5 (higher initial
  frequencies: a small network trained briefly otherwise underfits the city's structure);
  ``quality`` = 1,500 steps of batch 1,024 (the former default: twice the training work, within the
  seed-to-seed spread of ``fast`` on the synthetic cities, BENCHMARKS.md, issue 18).
* Model utilisation extends to rectangles and to sizes outside ``[l, u]``: a rectangle is
  clipped to the domain and cut into ``a x b`` near-square pieces of side close to
  ``clip(min side, l, u)``; each piece is answered by the Section 4.3 rule with
  ``r = sqrt(piece area)``. A square of side in ``[l, u]`` is one piece, i.e. exactly
  Section 4.3. Answers are clipped at 0 (a count is never negative).
* ``corners_per_cell`` (default 1 = Algorithm 1): s > 1 also trains on corners every
  ``rho / s``, answered from the same noisy grid (post-processing). Training corners
  only at the cell corners sample ``f(c)`` every ``rho``, which aliases when the query
  side is below ``rho``.
* SNH+QS: each network covers ``[l + (u-l) j/k, l + (u-l)(j+1)/k]``, trained on
  ``qs_sizes`` sizes spaced in that interval; its output is scaled by ``(r / r_mid)^2``
  so the network learns the correction to the uniformity assumption.
* The density grid (heatmap) is the model's answer for every output cell taken as a
  range query (Section 4.3 rule), clipped at 0.

**Does SNH add anything beyond its grid?** (issue 22 item 6; ``scripts/snh_vs_grid.py``, BENCHMARKS.md)
The training targets of Algorithm 1 are IDENTITY@ParamSelect's own answers at the grid corners, so a
network that fits them exactly answers as IDENTITY does: on the polycentric and sprawl cities at eps 0.2,
n 100k, data-point centres, rho 202 m, the zero-loss fit of the targets is 1.00-1.01x IDENTITY on the same
noisy grid, and the noisy grid smoothed with the best Gaussian sigma chosen on the test queries (an
optimistic stand-in for a network's implicit smoothing) is 1.00-1.08x; the exact grid would be 0.48-0.86x.
Fitting the targets better (more epochs, larger networks) therefore cannot reach SNH <= 0.9x IDENTITY
here, and our measured SNH is 0.98-1.04x IDENTITY.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import ParamError
from ...core.grid import Domain, box_sums, integral_image
from ...core.params import Param
from ..base import Mechanism, Release, aggregate_view, register
from ..central import (
    LAPLACE_SD,
    UNIT_PARAM,
    blank_postprocessed,
    bound_contributions,
    curator_communication,
    grid_stderr,
)

MAX_CELLS_PER_SIDE = 2048
MAX_PIECES_PER_SIDE = 64
NORM_SPAN = 10.0  # inputs in [-5, 5] over the public domain, as in the reference code
WEIGHT_QUAD = 4  # midpoint nodes over the workload query side

PRESETS = {
    # depth/width of the networks, first-layer frequency scale, Adam lr and its final fraction (cosine),
    # max epochs, batch, patience, cap on gradient steps per network
    "fast": dict(
        depth=4,
        width=64,
        sin_scale=2.5,
        lr=3e-3,
        lr_decay=0.05,
        epochs=300,
        batch_size=256,
        patience=20,
        max_steps=3000,
    ),
    "quality": dict(
        depth=4,
        width=64,
        sin_scale=2.5,
        lr=3e-3,
        lr_decay=0.05,
        epochs=300,
        batch_size=1024,
        patience=20,
        max_steps=1500,
    ),
    "paper": dict(
        depth=20, width=80, sin_scale=1.0, lr=1e-3, lr_decay=1.0, epochs=1000, batch_size=8192, patience=50, max_steps=0
    ),
}
CUSTOM_KEYS = ("depth", "width", "sin_scale", "lr", "lr_decay", "epochs", "batch_size", "patience", "max_steps")


# ====================================================================== params
def _aux_params() -> tuple[Param, ...]:
    return (
        Param(
            "aux",
            "choice",
            "auto",
            "public auxiliary dataset of the same region, TREATED AS PUBLIC (it sets the workload weights of "
            "Eq. 6 and ParamSelect's entropy feature, and never spends budget): proxy = a synthetic proxy "
            "(synthetic cities only); dataset = another dataset of the region (aux_dataset); none = no public "
            "data; auto = proxy for synthetic cities, else none",
            choices=("auto", "proxy", "dataset", "none"),
            label="public auxiliary data",
        ),
        Param(
            "aux_dataset",
            "str",
            "",
            "registry key of the public dataset of the same region when aux = dataset (e.g. gowalla:san_francisco)",
        ),
        Param("aux_n", "int", 50_000, "points in the synthetic proxy (aux = proxy)", min=100, max=5_000_000, log=True),
    )


def _workload_param() -> Param:
    return Param(
        "workload",
        "choice",
        "auto",
        "workload Q_W of Eq. 6: aux = squares centred on the public auxiliary points (the paper's experiments); "
        "uniform = squares anywhere (equal weights); noisy = squares centred where the noisy grid has mass "
        "(post-processing, no public data; not in the paper); auto = aux when there is public data, else noisy",
        choices=("auto", "aux", "uniform", "noisy"),
    )


def _rho_params() -> tuple[Param, ...]:
    return (
        Param(
            "rho_m",
            "float",
            0.0,
            "cell width of the data-collection grid in metres; 0 = chosen by ParamSelect from public features",
            min=0.0,
            max=1e6,
            label="cell width rho (m)",
        ),
        Param(
            "query_min_pct",
            "float",
            0.5,
            "smallest query side l, % of the domain side (the models are trained for sides in [l, u])",
            min=0.01,
            max=50.0,
            log=True,
            label="query side min (%)",
        ),
        Param(
            "query_max_pct",
            "float",
            2.0,
            "largest query side u, % of the domain side",
            min=0.01,
            max=100.0,
            log=True,
            label="query side max (%)",
        ),
    )


# ====================================================================== geometry
class CellGrid:
    """The data-collection grid ``Q_D``: ``m x m`` cells of width ``rho`` from the domain's
    south-west corner (the last row/column may overhang the domain, where counts are 0)."""

    def __init__(self, domain: Domain, rho: float):
        if not (rho > 0 and math.isfinite(rho)):
            raise ParamError(f"the cell width rho must be a positive number of metres (got {rho})")
        m = math.ceil(domain.side / rho - 1e-9)
        if m > MAX_CELLS_PER_SIDE:
            raise ParamError(
                f"a cell width of {rho:.3g} m gives {m} cells per side (limit {MAX_CELLS_PER_SIDE}); use a wider cell"
            )
        self.domain = domain
        self.x0, self.y0, self.side = domain.x0, domain.y0, domain.side
        self.rho = float(rho)
        self.m = max(1, int(m))

    def counts(self, xy: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """Counts per cell, ``grid[iy, ix]``."""
        m = self.m
        ix = np.clip(((xy[:, 0] - self.x0) / self.rho).astype(np.int64), 0, m - 1)
        iy = np.clip(((xy[:, 1] - self.y0) / self.rho).astype(np.int64), 0, m - 1)
        return np.bincount(iy * m + ix, weights=w, minlength=m * m).astype(np.float64).reshape(m, m)


def augment(noisy: np.ndarray, rho: float, r: float, pad: int, per_cell: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 for one size ``r``: corners ``c = (i rho, j rho)`` for ``i, j`` in
    ``[-pad, m)`` (cell units from the grid origin) and ``Y_A^r[c]``. ``per_cell > 1`` also
    takes corners at ``rho / per_cell`` steps (a departure, see the module docstring).

    Returns ``(corners (P, 2) in cell units, labels (P,))``, row-major over (j, i)."""
    m = noisy.shape[0]
    s = integral_image(noisy)
    idx = np.arange(-pad * per_cell, m * per_cell, dtype=np.float64) / per_cell
    cx, cy = np.meshgrid(idx, idx)
    cx, cy = cx.ravel(), cy.ravel()
    rr = r / rho
    keep = (cx + rr > 0) & (cy + rr > 0)  # the query meets the grid
    cx, cy = cx[keep], cy[keep]
    return np.stack([cx, cy], axis=1), box_sums(s, cx, cy, cx + rr, cy + rr)


def workload_weights(
    aux_grid: np.ndarray | None, corners: np.ndarray, rho: float, r: float, lo: float, hi: float
) -> np.ndarray:
    """``w_(c,r)`` of Eq. 6: expected number of workload squares (one per auxiliary point,
    centred on it, side uniform in ``[lo, hi]``) that overlap the training query ``(c, r)``.
    A square of side ``t`` centred at p overlaps ``(c, r)`` iff p lies in ``(c, r)`` grown
    by ``t/2`` on every side. ``aux_grid=None``: uniform weights."""
    if aux_grid is None:
        return np.ones(len(corners))
    s = integral_image(aux_grid)
    rr = r / rho
    out = np.zeros(len(corners))
    for q in range(WEIGHT_QUAD):
        half = (lo + (hi - lo) * (q + 0.5) / WEIGHT_QUAD) / 2 / rho
        out += box_sums(
            s, corners[:, 0] - half, corners[:, 1] - half, corners[:, 0] + rr + half, corners[:, 1] + rr + half
        )
    return np.maximum(out / WEIGHT_QUAD, 0.0)


# ====================================================================== the released model
class SNHModel:
    """The released SNH: ``k`` networks and the Section 4.3 utilisation rule.

    Picklable (numpy parameters; the jitted function is rebuilt on first use), so runs
    are cached on disk and the model can be saved. ``__call__(rects)`` answers
    rectangles ``(x0, y0, x1, y1)`` in metres."""

    def __init__(
        self,
        params,
        sizes: np.ndarray,
        scales: np.ndarray,
        domain: Domain,
        anchor: str = "corner",
        variant: str = "snh",
        intervals: np.ndarray | None = None,
        bounds: tuple[float, float] | None = None,
    ):
        self.params = params
        self.sizes = np.asarray(sizes, dtype=np.float64)  # r_j (metres); QS: interval mid-points
        self.scales = np.asarray(scales, dtype=np.float64)
        self.x0, self.y0, self.side = domain.x0, domain.y0, domain.side
        self.anchor = anchor
        self.variant = variant
        self.intervals = None if intervals is None else np.asarray(intervals, dtype=np.float64)
        self.lo, self.hi = bounds if bounds is not None else (float(self.sizes.min()), float(self.sizes.max()))
        self._predictor = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_predictor"] = None
        return d

    @property
    def k(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        from .networks import param_bytes

        return param_bytes(self.params) + self.sizes.nbytes + self.scales.nbytes

    def _norm(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        u = ((x - self.x0) / self.side - 0.5) * NORM_SPAN
        v = ((y - self.y0) / self.side - 0.5) * NORM_SPAN
        return np.stack([u, v], axis=1)

    def _net(self, j: int, inputs: np.ndarray) -> np.ndarray:
        if self._predictor is None:
            from .networks import BatchPredictor

            self._predictor = BatchPredictor(self.params)
        return self._predictor(j, inputs.astype(np.float32))

    def model_index(self, r: np.ndarray) -> np.ndarray:
        if self.variant == "snh_qs":
            rc = np.clip(r, self.lo, self.hi)
            j = np.searchsorted(self.intervals[:, 1], rc, side="left")
            return np.clip(j, 0, self.k - 1)
        return np.argmin(np.abs(r[:, None] - self.sizes[None, :]), axis=1)

    def squares(self, x: np.ndarray, y: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Answers of squares with south-west corners ``(x, y)`` and sides ``r`` (metres),
        by Section 4.3 (nearest model, scaled by ``(r / r*)^2``), before clipping at 0."""
        x, y, r = (np.asarray(a, dtype=np.float64).ravel() for a in (x, y, r))
        out = np.zeros(len(r))
        js = self.model_index(r)
        for j in np.unique(js):
            sel = np.flatnonzero(js == j)
            rs = r[sel]
            if self.variant == "snh_qs":
                a, b = self.intervals[j]
                rq = np.clip(rs, self.lo, self.hi)  # size the network sees
                mid = self.sizes[j]
            else:
                rq = np.full(len(sel), self.sizes[j])
                mid = self.sizes[j]
            cx, cy = x[sel], y[sel]
            if self.anchor == "centre":  # the model's square shares the query's centre
                cx = cx + (rs - rq) / 2
                cy = cy + (rs - rq) / 2
            inp = self._norm(cx, cy)
            if self.variant == "snh_qs":
                z = (rq - mid) / max(b - a, 1e-12) * 2.0
                inp = np.column_stack([inp, z])
            pred = self.scales[j] * (rq / mid) ** 2 * self._net(int(j), inp)
            out[sel] = pred * (rs / rq) ** 2
        return out

    def __call__(self, rects: np.ndarray) -> np.ndarray:
        r = np.atleast_2d(np.asarray(rects, dtype=np.float64))
        if r.shape[1] != 4:
            raise ParamError("rectangles must be (x0, y0, x1, y1) rows")
        x0 = np.clip(np.minimum(r[:, 0], r[:, 2]), self.x0, self.x0 + self.side)
        x1 = np.clip(np.maximum(r[:, 0], r[:, 2]), self.x0, self.x0 + self.side)
        y0 = np.clip(np.minimum(r[:, 1], r[:, 3]), self.y0, self.y0 + self.side)
        y1 = np.clip(np.maximum(r[:, 1], r[:, 3]), self.y0, self.y0 + self.side)
        w, h = x1 - x0, y1 - y0
        ok = (w > 0) & (h > 0)
        out = np.zeros(len(r))
        if not ok.any():
            return out
        idx = np.flatnonzero(ok)
        w, h, x0, y0 = w[idx], h[idx], x0[idx], y0[idx]
        t = np.clip(np.minimum(w, h), self.lo, self.hi)
        ax = np.clip(np.ceil(w / t - 1e-9), 1, MAX_PIECES_PER_SIDE).astype(np.int64)
        ay = np.clip(np.ceil(h / t - 1e-9), 1, MAX_PIECES_PER_SIDE).astype(np.int64)
        npieces = ax * ay
        owner = np.repeat(np.arange(len(idx)), npieces)
        local = np.arange(npieces.sum()) - np.repeat(np.cumsum(npieces) - npieces, npieces)
        px, py = local % ax[owner], local // ax[owner]
        pw, ph = w[owner] / ax[owner], h[owner] / ay[owner]
        ans = self.squares(x0[owner] + px * pw, y0[owner] + py * ph, np.sqrt(pw * ph))
        out[idx] = np.bincount(owner, weights=ans, minlength=len(idx))
        return np.maximum(out, 0.0)

    def density(self, domain: Domain) -> np.ndarray:
        """Counts per cell of ``domain``'s grid: each cell answered as a range query
        (a cell-sized square, Section 4.3 rule), clipped at 0."""
        n = domain.n
        xs = domain.x0 + np.arange(n) * domain.cell
        ys = domain.y0 + np.arange(n) * domain.cell
        gx, gy = np.meshgrid(xs, ys)
        vals = self.squares(gx.ravel(), gy.ravel(), np.full(n * n, domain.cell))
        return np.maximum(vals, 0.0).reshape(n, n)


class GridAnswerer:
    """Range answers from a noisy ``m x m`` grid of width ``rho`` (uniformity assumption);
    IDENTITY@ParamSelect's release. ``clip`` sets answers below zero to zero, as SNH's
    (post-processing; a rectangle's count is never negative). Picklable."""

    def __init__(self, noisy: np.ndarray, grid: CellGrid, clip: bool = True):
        self.s = integral_image(noisy)
        self.x0, self.y0, self.rho = grid.x0, grid.y0, grid.rho
        self.clip = bool(clip)

    def __call__(self, rects: np.ndarray) -> np.ndarray:
        r = np.atleast_2d(np.asarray(rects, dtype=np.float64))
        f = (r - np.array([self.x0, self.y0, self.x0, self.y0])) / self.rho
        out = box_sums(
            self.s,
            np.minimum(f[:, 0], f[:, 2]),
            np.minimum(f[:, 1], f[:, 3]),
            np.maximum(f[:, 0], f[:, 2]),
            np.maximum(f[:, 1], f[:, 3]),
        )
        return np.maximum(out, 0.0) if self.clip else out

    def density(self, domain: Domain) -> np.ndarray:
        n = domain.n
        e = domain.x0 + np.arange(n + 1) * domain.cell
        f = domain.y0 + np.arange(n + 1) * domain.cell
        gx0, gy0 = np.meshgrid(e[:-1], f[:-1])
        gx1, gy1 = np.meshgrid(e[1:], f[1:])
        rects = np.stack([gx0.ravel(), gy0.ravel(), gx1.ravel(), gy1.ravel()], axis=1)
        return self(rects).reshape(n, n)


# ====================================================================== shared steps
def _points(data, domain: Domain):
    inside = domain.inside(data.xy)
    w = None if data.weight is None else np.asarray(data.weight, dtype=np.float64)[inside]
    return data.xy[inside], w


def _check_eps(epsilon) -> float:
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ParamError(f"epsilon must be a positive number (got {epsilon})")
    return eps


def _query_bounds(params: dict, domain: Domain) -> tuple[float, float]:
    lo, hi = float(params["query_min_pct"]) / 100.0, float(params["query_max_pct"]) / 100.0
    if not lo < hi:
        raise ParamError(f"query side min ({lo * 100:g}%) must be smaller than query side max ({hi * 100:g}%)")
    return lo * domain.side, hi * domain.side


def synthetic_proxy(data, domain: Domain, n: int, seed: int = 1) -> tuple[np.ndarray, str]:
    """Public proxy of a synthetic city: ``n`` points from a *sibling* city of the same
    preset (same centres, river and coast; its own neighbourhood fields and parks, from
    field seed ``seed + 1000 + city seed``), i.e. another dataset of the same region that
    resembles the private one without being drawn from it."""
    from ...data.synthetic import PRESETS, RASTER, intensity

    meta = data.meta
    preset = meta.extra.get("preset") if meta.synthetic else None
    if preset not in PRESETS:
        raise ParamError(
            "aux = proxy needs a synthetic city; for this dataset choose aux = dataset (another dataset of "
            "the same region) or none"
        )
    city_seed = int(meta.extra.get("seed", 0))
    sib = 1000 + int(seed) + city_seed
    prob = intensity(preset, sib).ravel()
    rng = np.random.default_rng([sib, 99, int(n)])  # public data: its own fixed generator
    cells = rng.choice(prob.size, size=int(n), p=prob)
    side = float(meta.extra.get("side_m", PRESETS[preset].side_km * 1000.0))
    cell = side / RASTER
    x = (cells % RASTER + rng.random(len(cells))) * cell - side / 2
    y = (cells // RASTER + rng.random(len(cells))) * cell - side / 2
    pts = np.column_stack([x, y])
    pts = pts[domain.inside(pts)]
    text = (
        f"public auxiliary data: a synthetic proxy of {n:,} points from a sibling of the '{preset}' city (same "
        "centres, river and coast; different neighbourhood fields and parks), treated as public"
    )
    return pts, text


def aux_points(data, domain: Domain, params: dict) -> tuple[str, np.ndarray | None, str]:
    """Resolve the auxiliary-data choice: ``(mode, public points or None, description)``."""
    mode = params["aux"]
    if mode == "auto":
        mode = "proxy" if data.meta.synthetic and data.meta.extra.get("preset") else "none"
    if mode == "proxy":
        pts, text = synthetic_proxy(data, domain, int(params["aux_n"]))
        return mode, pts, text
    if mode == "dataset":
        key = str(params["aux_dataset"]).strip()
        if not key:
            raise ParamError("aux = dataset needs aux_dataset, the registry key of a public dataset of the region")
        if key == data.meta.source:
            raise ParamError(f"the auxiliary dataset {key!r} is the private dataset itself; choose another source")
        from ...data import load
        from ...data.projection import to_local

        aux = load(key)
        pts = to_local(aux.lonlat[:, 0], aux.lonlat[:, 1], data.crs)
        pts = pts[domain.inside(pts)]
        if len(pts) == 0:
            raise ParamError(f"no point of the auxiliary dataset {key!r} lies inside this region")
        text = f"public auxiliary data: the dataset {key!r} ({len(pts):,} points in the region), treated as public"
        return mode, pts, text
    return "none", None, "no public auxiliary data"


def workload_mode(params: dict, aux) -> str:
    mode = params["workload"]
    if mode == "auto":
        return "aux" if aux is not None else "noisy"
    if mode == "aux" and aux is None:
        raise ParamError("workload = aux needs public auxiliary data (aux = proxy or dataset)")
    return mode


def choose_rho(data, domain: Domain, eps: float, params: dict, ledger: Ledger, aux_pts) -> tuple[float, dict]:
    """The cell width in metres: given, or ParamSelect (Algorithm 3) on public features."""
    rho_m = float(params["rho_m"])
    lo, hi = _query_bounds(params, domain)
    if rho_m > 0:
        return rho_m, {"source": "given", "rho_m": rho_m}
    from .paramselect import entropy_512, predict_rho

    # data: the bounded contributions, so n is the number of users (unit = user) or of records
    n = float(len(data)) if data.weight is None else float(np.sum(data.weight))
    ledger.note_side_information(
        f"ParamSelect: the data size n = {n:,.0f} is treated as public (Algorithm 3 of Zeighami et al.)"
    )
    ent = entropy_512(aux_pts, domain) if aux_pts is not None else None
    frac, info = predict_rho(n, eps, lo / domain.side, hi / domain.side, ent)
    info.update(
        {
            "source": "ParamSelect",
            "rho_m": frac * domain.side,
            "entropy_from": "public auxiliary data" if ent is not None else "none (data-independent regressor)",
        }
    )
    return frac * domain.side, info


def collect(
    bounded, domain: Domain, grid: CellGrid, eps: float, ctx, ledger: Ledger, step: str
) -> tuple[np.ndarray, np.ndarray]:
    """Section 4.1: true counts on the rho grid plus Laplace(1/eps) per cell (parallel composition).
    ``bounded`` comes from :func:`bound_contributions`: each unit adds at most 1 in total (L1 sensitivity 1)."""
    xy, w = _points(bounded.data, domain)
    counts = grid.counts(xy, w)
    noisy = ctx.noise.add_laplace(counts, 1.0 / eps)  # secure mode: OpenDP's Laplace on the counts
    ledger.spend(
        step,
        eps,
        composition="parallel",
        group="snh-grid",
        note=f"Laplace(1/eps) per disjoint cell of width rho; {bounded.short}",
    )
    return noisy, counts


def collect_step(data, domain: Domain, eps: float, params: dict, ctx, step: str, check=None, aux_given=None) -> dict:
    """The part SNH and IDENTITY@ParamSelect share: public auxiliary data (side information),
    contribution bounding, the cell width (given or ParamSelect), the noisy grid (one ledger
    entry) and their diagnostics. ``check(aux)`` validates parameters against the aux data.
    ``aux_given = (points, description)`` supplies public points directly (scripts and
    benchmarks with their own public data), in place of the ``aux`` parameter."""
    ledger = Ledger()
    if aux_given is None:
        mode, aux, aux_text = aux_points(data, domain, params)
    else:
        aux = np.asarray(aux_given[0], dtype=np.float64)
        mode, aux, aux_text = "given", aux[domain.inside(aux)], str(aux_given[1])
    if check is not None:
        check(aux)
    if aux is not None:
        ledger.note_side_information(aux_text)
    bounded = bound_contributions(data, domain, params["unit"])
    rho, rho_info = choose_rho(bounded.data, domain, eps, params, ledger, aux)
    grid = CellGrid(domain, rho)
    ctx.progress(0.01, f"data collection: {grid.m}x{grid.m} grid of {rho:.1f} m cells")
    noisy, _ = collect(bounded, domain, grid, eps, ctx, ledger, step)
    diag = {
        **bounded.diagnostics(),
        "epsilon": eps,
        "rho_m": rho,
        "rho_frac": rho / domain.side,
        "rho_choice": rho_info,
        "grid_cells_per_side": grid.m,
        "noise_scale": 1.0 / eps,
        "aux": mode,
        "aux_description": aux_text,
    }
    return {"ledger": ledger, "aux": aux, "aux_text": aux_text, "grid": grid, "noisy": noisy, "diagnostics": diag}


def _server_view():
    return aggregate_view(
        "The curator sees every location; the public sees only the released model and its density grid."
    )


# ====================================================================== SNH
@register
class SNH(Mechanism):
    __doc__ = __doc__
    key = "snh"
    label = "SNH (Spatial Neural Histograms)"
    family = "central"
    guarantee = (
        "epsilon-DP (central) under add/remove user (add/remove record with unit = record); training and answers "
        "are post-processing of one Laplace grid"
    )
    neighbouring = "add/remove user"
    threat_model = (
        "A trusted curator sees all locations, collects one noisy grid and trains the networks; "
        "the public sees the networks and the density grid."
    )
    summary = (
        "Noisy counts on a grid, augmented into range queries of k sizes, learned by k small neural networks "
        "that answer any range query; the grid width is chosen by ParamSelect from public data."
    )
    paper = "Zeighami, Ahuja, Ghinita, Shahabi. A Neural Database for Differentially Private Spatial Range Queries. PVLDB 15(5), 2022"
    equations = (
        "Sections 3.3-4.3 (Algorithm 1, Eq. 6), Section 5.1 (ParamSelect, Algorithms 2-3), Section 6.3.2 (SNH+QS)"
    )
    params = (
        UNIT_PARAM,
        *_rho_params(),
        Param("k", "int", 8, "number of networks / query sizes (Algorithm 1)", min=1, max=32),
        Param(
            "variant",
            "choice",
            "snh",
            "snh: one network per size, answers scaled (r/r*)^2 (Section 4.3); snh_qs: the size is an input (Section 6.3.2)",
            choices=("snh", "snh_qs"),
        ),
        Param(
            "corners_per_cell",
            "int",
            1,
            "training-query corners per cell side: 1 = the cell corners of Algorithm 1 (paper); s > 1 adds corners "
            "every rho/s (more augmented queries from the same noisy grid, for queries smaller than rho)",
            min=1,
            max=4,
        ),
        Param("qs_sizes", "int", 4, "SNH+QS: training sizes per network", min=2, max=16),
        Param(
            "anchor",
            "choice",
            "corner",
            "Section 4.3 scaling anchor: corner = the model's square shares the query's south-west corner (paper); "
            "centre = shares its centre (reference code)",
            choices=("corner", "centre"),
        ),
        *_aux_params(),
        _workload_param(),
        Param(
            "psi_pct", "float", 0.1, "smoothing psi of the loss, % of the (noisy) total", min=1e-4, max=100.0, log=True
        ),
        Param(
            "weight_floor",
            "float",
            1.0,
            "added to every workload weight, fraction of the mean weight: f mixes a uniform workload of f times the "
            "weight into Q_W (0 = the paper; with 0 the model is unconstrained where the workload has no query)",
            min=0.0,
            max=100.0,
        ),
        Param(
            "clip_labels",
            "bool",
            False,
            "clip augmented labels at 0 as the reference code does (biases sparse areas upwards; the paper does not clip)",
        ),
        Param(
            "preset",
            "choice",
            "fast",
            "fast: depth 4, width 64, at most 3,000 steps of batch 256 (interactive, ~10 s); quality: 1,500 steps "
            "of batch 1,024 (twice the training); paper: depth 20, width 80, lr 1e-3, 1,000 epochs (long); "
            "custom: the values below",
            choices=("fast", "quality", "paper", "custom"),
        ),
        Param("depth", "int", 20, "custom preset: swish hidden layers (paper: 20)", min=1, max=40),
        Param("width", "int", 80, "custom preset: units per layer (paper: 80)", min=4, max=512),
        Param("epochs", "int", 1000, "custom preset: maximum epochs", min=1, max=100_000, log=True),
        Param("batch_size", "int", 8192, "custom preset: mini-batch size", min=16, max=1_000_000, log=True),
        Param(
            "sin_scale",
            "float",
            1.0,
            "custom preset: first (sin) layer weights He uniform (std 1 for 2 inputs) times sin_scale; 1 = the reference",
            min=0.01,
            max=1000.0,
            log=True,
        ),
        Param("lr", "float", 1e-3, "custom preset: Adam learning rate (paper: 1e-3)", min=1e-6, max=1.0, log=True),
        Param(
            "lr_decay",
            "float",
            1.0,
            "custom preset: final learning rate as a fraction of lr, cosine schedule (1 = constant, as the paper)",
            min=0.0,
            max=1.0,
        ),
        Param(
            "patience",
            "int",
            50,
            "custom preset: epochs without improvement before a network stops",
            min=1,
            max=100_000,
        ),
        Param(
            "max_steps", "int", 0, "custom preset: cap on gradient steps per network (0 = none)", min=0, max=10_000_000
        ),
    )
    dp_outputs = (
        "psi",
        "epochs_run",
        "stopped_early",
        "best_training_loss",
        "gradient_steps",
        "augmentation_seconds",
        "training_seconds",
        "density_seconds",
        "output_scales",
        "snh_noisy_grid",
    )
    side_information_keys = (
        "rho_m",
        "rho_frac",
        "rho_choice",
        "grid_cells_per_side",
        "model_sizes_m",
        "training_queries_per_model",
        "model_bytes",
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        fit = fit_snh(data, domain, eps, params, ctx)
        model, ledger, diag = fit["model"], fit["ledger"], fit["diagnostics"]
        ctx.progress(0.96, "density grid from the model")
        t = time.perf_counter()
        density = model.density(domain)
        diag["density_seconds"] = time.perf_counter() - t
        diag["density_derivation"] = (
            f"each of the {domain.n}x{domain.n} cells ({domain.cell:.0f} m) is answered as a range query by the "
            "model (Section 4.3: the network of the nearest size r*, scaled by (cell/r*)^2), clipped at 0"
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=_server_view(),
            range_answerer=model,
            diagnostics=diag,
            extras={"snh_noisy_grid": fit["noisy"].astype(np.float32)},
        )


def train_config(params: dict):
    from .networks import NetConfig, TrainConfig

    p = dict(PRESETS[params["preset"]]) if params["preset"] in PRESETS else {k: params[k] for k in CUSTOM_KEYS}
    in_dim = 3 if params["variant"] == "snh_qs" else 2
    return TrainConfig(
        net=NetConfig(depth=int(p["depth"]), width=int(p["width"]), in_dim=in_dim, sin_scale=float(p["sin_scale"])),
        lr=float(p["lr"]),
        epochs=int(p["epochs"]),
        batch_size=int(p["batch_size"]),
        patience=int(p["patience"]),
        max_steps=int(p["max_steps"]),
        decay=float(p["lr_decay"]),
    )


def fit_snh(
    data,
    domain: Domain,
    eps: float,
    params: dict,
    ctx,
    sizes_subset: list[int] | None = None,
    on_epoch=None,
    every: int = 0,
    aux_given=None,
) -> dict:
    """Data collection, augmentation, training; returns the model, ledger and diagnostics.

    ``sizes_subset`` trains only some of the k networks (benchmarks of one model);
    ``on_epoch(epoch, model)`` sees the model every ``every`` epochs (learning curves);
    ``aux_given``: see :func:`collect_step`."""
    from .networks import train

    t0 = time.perf_counter()
    lo, hi = _query_bounds(params, domain)
    k = int(params["k"])
    # workload_mode: fail before spending budget on an impossible combination
    got = collect_step(
        data,
        domain,
        eps,
        params,
        ctx,
        "data collection grid Q_D (Section 4.1)",
        check=lambda a: workload_mode(params, a),
        aux_given=aux_given,
    )
    ledger, aux, aux_text, grid, noisy = got["ledger"], got["aux"], got["aux_text"], got["grid"], got["noisy"]
    rho = grid.rho
    ctx.check_cancelled()

    # ---------------------------------------------------------------- augmentation
    variant = params["variant"]
    if variant == "snh_qs":
        edges = lo + (hi - lo) * np.arange(k + 1) / k
        intervals = np.stack([edges[:-1], edges[1:]], axis=1)
        mids = intervals.mean(axis=1)
        T = int(params["qs_sizes"])
        train_sizes = [[a + (b - a) * (t + 0.5) / T for t in range(T)] for a, b in intervals]
    else:
        intervals = None
        mids = lo + (hi - lo) / k * (np.arange(k) + 0.5)  # Algorithm 1, line 1
        train_sizes = [[r] for r in mids]
    models = list(range(k)) if sizes_subset is None else [int(j) for j in sizes_subset]
    total = float(max(noisy.sum(), 1.0))
    psi = float(params["psi_pct"]) / 100.0 * total
    wmode = workload_mode(params, aux)
    if wmode == "aux":
        aux_grid = grid.counts(aux)
    elif wmode == "noisy":
        aux_grid = noisy  # signed: the noise cancels in the box sums; workload_weights clips the sums at 0
    else:
        aux_grid = None
    Xs, Ys, Ws, scales, counts_used = [], [], [], [], []
    for j in models:
        xs, ys, ws = [], [], []
        for r in train_sizes[j]:
            pad = int(math.ceil(r / rho))
            corners, y = augment(noisy, rho, r, pad, int(params["corners_per_cell"]))
            if params["clip_labels"]:
                y = np.maximum(y, 0.0)
            wq = workload_weights(aux_grid, corners, rho, r, lo, hi)
            if params["weight_floor"] > 0:
                wq = wq + float(params["weight_floor"]) * wq.mean()
            wt = wq / np.maximum(y, psi)  # Eq. 6
            inp = ((corners * rho) / domain.side - 0.5) * NORM_SPAN
            if variant == "snh_qs":
                a, b = intervals[j]
                z = np.full((len(inp), 1), (r - mids[j]) / (b - a) * 2.0)
                inp = np.hstack([inp, z])
                y = y / (r / mids[j]) ** 2  # the network learns the count at the interval's mid size
            keep = wt > 0  # zero-weight queries do not enter Eq. 6
            xs.append(inp[keep])
            ys.append(y[keep])
            ws.append(wt[keep])
        x, y, wt = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
        if len(y) == 0:
            raise ParamError("no training query has a positive workload weight; check the auxiliary data")
        sw = float(np.sum(wt))
        s = float(max(np.sqrt(np.sum(wt * y**2) / sw), 1e-3))  # RMS label under the loss weights
        scales.append(s)
        Xs.append(x)
        Ys.append(y / s)
        Ws.append(wt / (sw / len(wt)))  # mean weight 1
        counts_used.append(len(y))
        ctx.check_cancelled()
    P = max(counts_used)
    kk = len(models)
    in_dim = Xs[0].shape[1]
    X = np.zeros((kk, P, in_dim), np.float32)
    Y = np.zeros((kk, P), np.float32)
    W = np.zeros((kk, P), np.float32)
    for i in range(kk):
        c = counts_used[i]
        X[i, :c], Y[i, :c], W[i, :c] = Xs[i], Ys[i], Ws[i]
    t_aug = time.perf_counter() - t0
    ctx.progress(0.08, f"augmented {sum(counts_used):,} training queries for {kk} networks")

    # ---------------------------------------------------------------- training
    cfg = train_config(params)
    seed = int(ctx.rng.integers(0, 2**31 - 1))

    def prog(f, msg):
        ctx.progress(0.08 + 0.87 * f, msg)

    sizes_out = np.asarray(mids)[models]

    def make(p):
        return SNHModel(
            p,
            sizes_out,
            np.asarray(scales),
            domain,
            anchor=params["anchor"],
            variant=variant,
            intervals=None if intervals is None else intervals[models],
            bounds=(lo, hi),
        )

    hook = None if on_epoch is None else (lambda e, p: on_epoch(e, make(p)))
    res = train(
        X,
        Y,
        W,
        np.array(counts_used),
        cfg,
        seed,
        progress=prog,
        check_cancelled=ctx.check_cancelled,
        on_epoch=hook,
        every=every,
    )
    model = make(res.params)
    diag = {
        **got["diagnostics"],
        "query_side_m": [lo, hi],
        "model_sizes_m": [float(v) for v in sizes_out],
        "variant": variant,
        "anchor": params["anchor"],
        "aux_points": None if aux is None else int(len(aux)),
        "workload": wmode,
        "public_note": (
            "The auxiliary data is treated as PUBLIC: it sets the loss weights and ParamSelect's entropy feature "
            "and never spends budget; it must not be derived from the private dataset."
            if aux is not None
            else aux_text
        ),
        "psi": psi,
        "training_queries_per_model": counts_used,
        "preset": params["preset"],
        "network": {"depth": cfg.net.depth, "width": cfg.net.width, "in_dim": cfg.net.in_dim},
        "lr": cfg.lr,
        "batch_size": cfg.batch_size,
        "epochs_run": [int(v) for v in res.epochs_run],
        "stopped_early": [bool(v) for v in res.stopped_early],
        "best_training_loss": [float(v) for v in res.best_loss],
        "gradient_steps": int(res.steps),
        "augmentation_seconds": t_aug,
        "training_seconds": res.seconds,
        "model_bytes": model.nbytes,
        "output_scales": [float(s) for s in scales],
    }
    return {"model": model, "ledger": ledger, "diagnostics": diag, "noisy": noisy, "grid": grid, "train": res}


# ====================================================================== IDENTITY@ParamSelect
@register
class IdentityParamSelect(Mechanism):
    """IDENTITY@ParamSelect (Zeighami et al. 2022, Section 6.3.1): SNH's data-collection grid
    alone. An equi-width grid of cell width rho chosen by ParamSelect (Section 5.1) from
    public features, Laplace(1/eps) per cell; range queries are answered from the noisy
    grid with the uniformity assumption, and the density grid is the same answer for each
    output cell.

    Threat model: a trusted curator publishes the noisy grid. Guarantee: epsilon-DP
    (central), one Laplace(1/eps) draw per disjoint cell (parallel composition).
    Departures: as SNH's (public-domain grid from its south-west corner, ParamSelect
    table and query-size feature of :mod:`.paramselect`). Answers (and density
    cells) below zero are set to zero by default (``clip_answers``), as SNH's are, so the
    two are compared on the same post-processing; the paper does not say whether its
    IDENTITY clips. Noisy cells themselves are never clipped (that would bias sums up).

    Standard error (issue 16): each output cell's answer is a sum of the rho-grid's independent
    Laplace(1/eps) counts weighted by overlap, so ``extras["stderr"]`` is sqrt(2)/eps x sqrt(sum
    of the squared overlap fractions) (``central.grid_stderr``), exact given rho; NaN in the cells
    whose answer was clipped to 0. SNH itself has none in closed form (its density comes from
    networks trained on the noisy grid); the dashboard estimates it from repeated runs.
    """

    key = "identity_paramselect"
    label = "IDENTITY@ParamSelect (SNH's grid alone)"
    family = "central"
    guarantee = "epsilon-DP (central) under add/remove user (add/remove record with unit = record)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy grid."
    summary = "The SNH data-collection grid, with ParamSelect's cell width, released as a noisy histogram."
    paper = SNH.paper
    equations = "Section 4.1 (data collection), Section 5.1 (ParamSelect), Section 6.3.1 (IDENTITY@ParamSelect)"
    params = (
        UNIT_PARAM,
        *_rho_params(),
        *_aux_params(),
        Param("clip_answers", "bool", True, "set answers below zero to zero (post-processing, as SNH's answers)"),
    )
    dp_outputs = ("stderr",)
    side_information_keys = ("rho_m", "rho_frac", "rho_choice", "grid_cells_per_side", "stderr")

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        got = collect_step(data, domain, eps, params, ctx, "noisy grid (Section 4.1)")
        ledger = got["ledger"]
        grid = got["grid"]
        ans = GridAnswerer(got["noisy"], grid, clip=params["clip_answers"])
        density = ans.density(domain)
        edges = np.arange(grid.m + 1, dtype=np.float64) * (grid.rho / domain.cell)
        stderr = grid_stderr(edges, edges, LAPLACE_SD / eps, domain.n)
        if params["clip_answers"]:
            stderr = blank_postprocessed(stderr, density, GridAnswerer(got["noisy"], grid, clip=False).density(domain))
        diag = {
            **got["diagnostics"],
            "density_derivation": "each output cell is the noisy rho-grid's count over it (uniformity assumption)",
            "stderr_basis": "Laplace(1/eps) per rho-grid cell, summed by overlap; cells clipped to 0 have none",
        }
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view("The curator sees every location; the public sees only the noisy grid."),
            range_answerer=ans,
            diagnostics=diag,
            extras={"stderr": stderr},
        )
