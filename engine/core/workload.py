"""Range-query workloads over an ``n x n`` grid in implicit form, for the mechanisms that optimise for a
workload (HDMM) and the lower bound on any matrix mechanism's error (:mod:`engine.metrics.lower_bound`).

A workload is a matrix ``W`` with one row per query and one column per cell (row-major, ``iy * n + ix``,
the grid's own order). Rectangles are products: a query covering the fraction ``cy[k, iy]`` of every row
and ``cx[k, ix]`` of every column of the grid (whole cells 1, partly covered cells their share, as
:func:`engine.core.grid.range_counts` answers them) is the row ``cy[k] (x) cx[k]`` (Kronecker product). So

* ``W^T W = sum_k (cy_k cy_k^T) (x) (cx_k cx_k^T)``, a union of Kronecker products (HDMM's form), and
* ``W W^T = (cy cy^T) o (cx cx^T)`` (elementwise product), a ``q x q`` matrix built from two ``q x n``
  ones, never from the ``q x n^2`` matrix ``W``;
* all the ranges of the grid are the Kronecker product of the 1-D all-range workload with itself, whose
  Gram matrix has the closed form of :func:`all_range_gram`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from .errors import ParamError

ALL_RANGES = "all ranges"
RECTANGLES = "rectangles"


def all_range_gram(n: int) -> np.ndarray:
    """``R^T R`` for the ``n (n + 1) / 2`` intervals of ``0 .. n-1`` (``R``, one row per interval): entry
    ``(a, b)`` counts the intervals holding both cells, ``(min(a, b) + 1) (n - max(a, b))``."""
    i = np.arange(int(n))
    return ((np.minimum.outer(i, i) + 1) * (n - np.maximum.outer(i, i))).astype(np.float64)


def axis_coverage(lo, hi, n: int) -> np.ndarray:
    """``(q, n)``: the share of each of the ``n`` cells of an axis inside each interval ``[lo, hi)`` (in
    fractional cell units, clipped to the grid)."""
    lo = np.clip(np.asarray(lo, dtype=np.float64).reshape(-1, 1), 0, n)
    hi = np.clip(np.asarray(hi, dtype=np.float64).reshape(-1, 1), 0, n)
    i = np.arange(int(n), dtype=np.float64)[None, :]
    return np.clip(np.minimum(hi, i + 1) - np.maximum(lo, i), 0.0, 1.0)


@dataclass(frozen=True)
class RangeWorkload:
    """All the ranges of an ``n x n`` grid (``kind`` :data:`ALL_RANGES`), or the rectangles whose per-axis
    coverages are ``cx`` and ``cy`` (``kind`` :data:`RECTANGLES`; see the module docstring)."""

    n: int
    kind: str = ALL_RANGES
    cx: np.ndarray | None = field(default=None, repr=False)
    cy: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def all_ranges(cls, n: int) -> RangeWorkload:
        return cls(int(n))

    @classmethod
    def rectangles(cls, cell_rects, n: int) -> RangeWorkload:
        """Rectangles ``(x0, y0, x1, y1)`` in fractional cell units (half-open), as
        :meth:`engine.core.grid.Domain.rect_to_cells` gives them."""
        r = np.atleast_2d(np.asarray(cell_rects, dtype=np.float64))
        if r.ndim != 2 or r.shape[1] != 4 or not len(r):
            raise ParamError("a rectangle workload needs at least one rectangle (x0, y0, x1, y1)")
        return cls(int(n), RECTANGLES, axis_coverage(r[:, 0], r[:, 2], n), axis_coverage(r[:, 1], r[:, 3], n))

    @property
    def queries(self) -> int:
        if self.kind == ALL_RANGES:
            return (self.n * (self.n + 1) // 2) ** 2
        return int(self._coverages()[0].shape[0])

    @property
    def cells(self) -> int:
        return self.n * self.n

    def key(self) -> str:
        """A digest naming the workload (a file name of the disk caches)."""
        h = hashlib.sha256(f"{self.kind}|{self.n}".encode())
        if self.kind == RECTANGLES:
            h.update(np.ascontiguousarray(self.cx, dtype=np.float64).tobytes())
            h.update(np.ascontiguousarray(self.cy, dtype=np.float64).tobytes())
        return h.hexdigest()[:32]

    def _coverages(self) -> tuple[np.ndarray, np.ndarray]:
        """``(cx, cy)`` of a rectangle workload, which :meth:`rectangles` always sets."""
        if self.cx is None or self.cy is None:
            raise ParamError(f"a {self.kind} workload has no per-axis coverages cx, cy")
        return self.cx, self.cy

    def row_gram(self) -> np.ndarray:
        """``W W^T`` (``q x q``) of a rectangle workload, from its per-axis coverages."""
        if self.kind != RECTANGLES:
            raise ParamError("W W^T is formed for rectangle workloads only (all ranges: use the Kronecker factors)")
        cx, cy = self._coverages()
        return (cy @ cy.T) * (cx @ cx.T)

    def dense(self) -> np.ndarray:
        """``W`` itself, ``q x n^2`` (small grids only: tests and brute force)."""
        if self.kind == RECTANGLES:
            cx, cy = self._coverages()
        else:
            lo, hi = np.triu_indices(self.n)
            one = axis_coverage(lo, hi + 1, self.n)
            cy, cx = np.repeat(one, len(one), axis=0), np.tile(one, (len(one), 1))
        return (cy[:, :, None] * cx[:, None, :]).reshape(len(cx), -1)
