"""The released SNH and IDENTITY@ParamSelect answerers: Section 4.3's model utilisation (nearest
size, scaled; rectangles cut into near-square pieces) and range answers from the noisy grid. Both are
picklable post-processing of the noisy grid."""

from __future__ import annotations

import numpy as np

from ...core.errors import ParamError
from ...core.grid import Domain, box_sums, integral_image
from .collection import CellGrid

MAX_PIECES_PER_SIDE = 64
NORM_SPAN = 10.0  # inputs in [-5, 5] over the public domain, as in the reference code


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
