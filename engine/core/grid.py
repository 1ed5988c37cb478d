"""The public square domain, its grids, quadtree paths, pyramids and range queries.

Conventions (used everywhere in the engine):

* Coordinates are metres in the dataset's local projected CRS.
* A grid at depth ``L`` has ``2**L x 2**L`` cells and is indexed ``grid[iy, ix]``,
  ``iy = 0`` the southernmost row (so images are flipped vertically for display).
* A quadtree path at depth ``L`` interleaves one bit of ``ix`` then one bit of
  ``iy`` per level, most significant first (Bagdasaryan et al., Section 5.6):
  ``code = sum_l (xbit_l << 1 | ybit_l) << 2 (L - l)``; the prefix at level
  ``l`` is ``code >> 2 (L - l)``.
* A rectangle is ``(x0, y0, x1, y1)`` in metres.

The domain is public by construction: it comes from a catalogue bounding box,
from the user, or (for uploaded files) from the data with that fact recorded as
side information by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import ParamError

MAX_DEPTH = 10


@dataclass(frozen=True)
class Domain:
    x0: float
    y0: float
    side: float
    depth: int

    def __post_init__(self):
        if not (isinstance(self.depth, (int, np.integer)) and 0 <= self.depth <= MAX_DEPTH):
            raise ParamError(f"depth must be an integer in 0..{MAX_DEPTH} (got {self.depth})")
        if not (math.isfinite(self.side) and self.side > 0):
            raise ParamError(f"domain side must be a positive number of metres (got {self.side})")
        if not (math.isfinite(self.x0) and math.isfinite(self.y0)):
            raise ParamError("domain origin must be finite")

    # ----------------------------------------------------------------- shape
    @property
    def n(self) -> int:
        """Cells per side."""
        return 1 << self.depth

    @property
    def cell(self) -> float:
        """Cell side in metres."""
        return self.side / self.n

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (self.x0, self.y0, self.x0 + self.side, self.y0 + self.side)

    def with_depth(self, depth: int) -> Domain:
        return Domain(self.x0, self.y0, self.side, int(depth))

    @classmethod
    def around(cls, xmin: float, ymin: float, xmax: float, ymax: float, depth: int) -> Domain:
        """Smallest square containing the box, centred on it."""
        if not (xmax > xmin and ymax > ymin):
            raise ParamError("the region is empty (zero width or height)")
        side = max(xmax - xmin, ymax - ymin)
        cx, cy = (xmin + xmax) / 2, (ymin + ymax) / 2
        # a hair of margin so points on the max edge fall inside
        side *= 1 + 1e-9
        return cls(cx - side / 2, cy - side / 2, side, int(depth))

    def cell_centers(self) -> tuple[np.ndarray, np.ndarray]:
        """1-D arrays of cell-centre x and y coordinates (length ``n``)."""
        c = self.x0 + (np.arange(self.n) + 0.5) * self.cell
        r = self.y0 + (np.arange(self.n) + 0.5) * self.cell
        return c, r

    # --------------------------------------------------------------- binning
    def inside(self, xy: np.ndarray) -> np.ndarray:
        x, y = xy[:, 0], xy[:, 1]
        return (x >= self.x0) & (x < self.x0 + self.side) & (y >= self.y0) & (y < self.y0 + self.side)

    def cell_index(self, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Integer cell indices ``(ix, iy)``; points outside are clamped to the edge."""
        return _cell_index(np.asarray(xy, dtype=np.float64), self.x0, self.y0, self.n / self.side, self.n)

    def flat_index(self, xy: np.ndarray) -> np.ndarray:
        ix, iy = self.cell_index(xy)
        return iy.astype(np.int64) * self.n + ix

    def histogram(self, xy: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Counts per cell, ``grid[iy, ix]``. Points outside the domain must be
        filtered by the caller (they would be clamped to the border cells)."""
        return bin_points(np.asarray(xy, dtype=np.float64), self, weights)

    # ------------------------------------------------------------- quadtree
    def paths(self, xy: np.ndarray) -> np.ndarray:
        """Quadtree path codes at full depth (uint64), x bit then y bit per level."""
        ix, iy = self.cell_index(xy)
        return interleave(ix, iy, self.depth)

    # ---------------------------------------------------------- range queries
    def rect_to_cells(self, rects: np.ndarray) -> np.ndarray:
        """Rectangles in metres -> fractional cell coordinates, clipped to the grid."""
        r = np.atleast_2d(np.asarray(rects, dtype=np.float64))
        out = np.empty_like(r)
        s = self.n / self.side
        out[:, [0, 2]] = np.clip((r[:, [0, 2]] - self.x0) * s, 0, self.n)
        out[:, [1, 3]] = np.clip((r[:, [1, 3]] - self.y0) * s, 0, self.n)
        return out

    def random_square_queries(
        self, rng: np.random.Generator, count: int, side_frac: tuple[float, float], centers: np.ndarray | None = None
    ) -> np.ndarray:
        """Random axis-aligned squares with sides uniform in ``side_frac`` (fractions of
        the domain side), centred uniformly in the domain or on the given points."""
        lo, hi = side_frac
        if not (0 < lo <= hi <= 1):
            raise ParamError("query side fractions must satisfy 0 < low <= high <= 1")
        sides = rng.uniform(lo, hi, count) * self.side
        if centers is None:
            cx = rng.uniform(self.x0 + sides / 2, self.x0 + self.side - sides / 2)
            cy = rng.uniform(self.y0 + sides / 2, self.y0 + self.side - sides / 2)
        else:
            pick = rng.integers(0, len(centers), count)
            cx, cy = centers[pick, 0], centers[pick, 1]
        return np.stack([cx - sides / 2, cy - sides / 2, cx + sides / 2, cy + sides / 2], axis=1)


# ---------------------------------------------------------------------------
def _cell_index(xy, x0, y0, scale, n):
    ix = ((xy[:, 0] - x0) * scale).astype(np.int64)
    iy = ((xy[:, 1] - y0) * scale).astype(np.int64)
    np.clip(ix, 0, n - 1, out=ix)
    np.clip(iy, 0, n - 1, out=iy)
    return ix, iy


try:  # numba gives a single pass over the points; numpy is the fallback
    import numba

    @numba.njit(cache=True, nogil=True)
    def _bin_numba(x, y, x0, y0, scale, n, out):
        for i in range(x.shape[0]):
            fx = (x[i] - x0) * scale
            fy = (y[i] - y0) * scale
            ix = int(fx) if fx > 0 else 0
            iy = int(fy) if fy > 0 else 0
            if ix >= n:
                ix = n - 1
            if iy >= n:
                iy = n - 1
            out[iy * n + ix] += 1.0

    @numba.njit(cache=True, nogil=True)
    def _bin_numba_w(x, y, w, x0, y0, scale, n, out):
        for i in range(x.shape[0]):
            fx = (x[i] - x0) * scale
            fy = (y[i] - y0) * scale
            ix = int(fx) if fx > 0 else 0
            iy = int(fy) if fy > 0 else 0
            if ix >= n:
                ix = n - 1
            if iy >= n:
                iy = n - 1
            out[iy * n + ix] += w[i]

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in requirements
    HAVE_NUMBA = False


def bin_points(xy: np.ndarray, domain: Domain, weights: np.ndarray | None = None) -> np.ndarray:
    n = domain.n
    scale = n / domain.side
    if HAVE_NUMBA:
        out = np.zeros(n * n, dtype=np.float64)
        x = np.ascontiguousarray(xy[:, 0])
        y = np.ascontiguousarray(xy[:, 1])
        if weights is None:
            _bin_numba(x, y, domain.x0, domain.y0, scale, n, out)
        else:
            _bin_numba_w(x, y, np.ascontiguousarray(weights, dtype=np.float64), domain.x0, domain.y0, scale, n, out)
        return out.reshape(n, n)
    ix, iy = _cell_index(xy, domain.x0, domain.y0, scale, n)
    flat = iy * n + ix
    return np.bincount(flat, weights=weights, minlength=n * n).astype(np.float64).reshape(n, n)


def interleave(ix: np.ndarray, iy: np.ndarray, depth: int) -> np.ndarray:
    """Quadtree code: per level (MSB first) the x bit then the y bit."""
    ix = np.asarray(ix, dtype=np.uint64)
    iy = np.asarray(iy, dtype=np.uint64)
    code = np.zeros(ix.shape, dtype=np.uint64)
    for b in range(depth):
        code |= ((ix >> np.uint64(b)) & np.uint64(1)) << np.uint64(2 * b + 1)
        code |= ((iy >> np.uint64(b)) & np.uint64(1)) << np.uint64(2 * b)
    return code


def deinterleave(code: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    code = np.asarray(code, dtype=np.uint64)
    ix = np.zeros(code.shape, dtype=np.int64)
    iy = np.zeros(code.shape, dtype=np.int64)
    for b in range(depth):
        ix |= ((code >> np.uint64(2 * b + 1)) & np.uint64(1)).astype(np.int64) << b
        iy |= ((code >> np.uint64(2 * b)) & np.uint64(1)).astype(np.int64) << b
    return ix, iy


@lru_cache(maxsize=12)
def morton_of_pixels(depth: int) -> np.ndarray:
    """``(2^D, 2^D)`` array: Morton code of every grid cell ``[iy, ix]`` (read-only)."""
    n = 1 << depth
    iy, ix = np.mgrid[0:n, 0:n]
    out = interleave(ix.ravel(), iy.ravel(), depth).astype(np.int64).reshape(n, n)
    out.flags.writeable = False
    return out


def prefix(code: np.ndarray, depth: int, level: int) -> np.ndarray:
    """Prefix of full-depth codes at ``level`` (0 = root)."""
    return np.asarray(code, dtype=np.uint64) >> np.uint64(2 * (depth - level))


def downsample(grid: np.ndarray, factor: int = 2) -> np.ndarray:
    """Sum ``factor x factor`` blocks."""
    n = grid.shape[0]
    if n % factor:
        raise ValueError("grid side not divisible by factor")
    m = n // factor
    return grid.reshape(m, factor, m, factor).sum(axis=(1, 3))


def pyramid(grid: np.ndarray) -> list[np.ndarray]:
    """Levels 0..L of a 2^L grid: ``levels[l]`` is ``2^l x 2^l`` (sums of children)."""
    levels = [np.asarray(grid, dtype=np.float64)]
    while levels[-1].shape[0] > 1:
        levels.append(downsample(levels[-1]))
    return levels[::-1]


def integral_image(grid: np.ndarray) -> np.ndarray:
    """``S[j, i]`` = sum of ``grid[:j, :i]`` (shape ``(n+1, n+1)``)."""
    s = np.zeros((grid.shape[0] + 1, grid.shape[1] + 1), dtype=np.float64)
    np.cumsum(np.cumsum(grid, axis=0), axis=1, out=s[1:, 1:])
    return s


def _interp_integral(s: np.ndarray, fx: np.ndarray, fy: np.ndarray) -> np.ndarray:
    # Under the uniformity assumption the cumulative count F(x, y) is bilinear
    # inside each cell, so it is the bilinear interpolation of the integral image.
    n = s.shape[0] - 1
    fx = np.clip(fx, 0, n)  # outside the grid F is that of the nearest edge: cells there count 0
    fy = np.clip(fy, 0, n)
    i = np.minimum(np.floor(fx).astype(np.int64), n - 1)
    j = np.minimum(np.floor(fy).astype(np.int64), n - 1)
    tx = fx - i
    ty = fy - j
    return (
        s[j, i] * (1 - tx) * (1 - ty)
        + s[j, i + 1] * tx * (1 - ty)
        + s[j + 1, i] * (1 - tx) * ty
        + s[j + 1, i + 1] * tx * ty
    )


def box_sums(s: np.ndarray, fx0, fy0, fx1, fy1) -> np.ndarray:
    """Sums of a grid over boxes given in fractional cell units, from its integral image
    ``s``: partly covered cells count by the fraction of their area inside (uniformity
    assumption); the parts of a box outside the grid count 0."""
    fx1 = np.maximum(fx1, fx0)
    fy1 = np.maximum(fy1, fy0)
    return (
        _interp_integral(s, fx1, fy1)
        - _interp_integral(s, fx0, fy1)
        - _interp_integral(s, fx1, fy0)
        + _interp_integral(s, fx0, fy0)
    )


def range_counts(grid: np.ndarray, domain: Domain, rects: np.ndarray, integral: np.ndarray | None = None) -> np.ndarray:
    """Answer rectangles (metres) from a grid, counting partly covered cells by the
    fraction of their area inside the rectangle (uniformity assumption)."""
    if grid.shape != (domain.n, domain.n):
        raise ValueError(f"grid shape {grid.shape} does not match domain {domain.n}x{domain.n}")
    s = integral_image(grid) if integral is None else integral
    c = domain.rect_to_cells(rects)
    return box_sums(s, c[:, 0], c[:, 1], c[:, 2], c[:, 3])
