"""What a release knows about its noise, stated by the mechanism that drew it.

A release whose noise has a known law is a set of **released units** (a cell, a UG cell, a PrivTree leaf,
an Adaptive HH node, a DAWA bucket, a region of Laplace over regions): unit k released the count
``c_k + eta_k`` with noise of standard deviation ``sigma_k`` and spread it over its cells, evenly or by
area (``S[cell, k]``, each column summing to 1). :class:`NoiseModel` holds exactly that, built by the
mechanism from its DP outputs and public parameters; :mod:`engine.regions.margins` turns it into the 95 %
margin of any cell, block or region. Where units share draws (the hierarchical tree's constrained
inference) the model carries a :class:`Covariance` that knows the variance of any weighted sum of cells.

A release without such a law states why instead (a sentence in ``Release.noise``).

:class:`Measurements` are the raw noisy numbers a release rests on, as drawn, for the noise audits.

Every class here is data (arrays, numbers, strings), so a release that carries one stays cacheable;
:func:`part` registers the classes the disk cache may rebuild (:mod:`engine.run.execution._result_cache`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

PARTS: dict[str, type] = {}  # the dataclasses a release may hold, by name: what the disk cache rebuilds

NO_CLOSED_FORM = "no margin: the mechanism's noise has no closed form given its release (repeated runs only)"
ATTRIBUTE_MEAN = (
    "no margin: the release is an attribute mean, not counts (each region's mean has its own standard error)"
)


def part(cls: type) -> type:
    """Register a dataclass a release may hold (its name must be unique)."""
    if PARTS.get(cls.__name__, cls) is not cls:
        raise ValueError(f"two release parts named {cls.__name__}")
    PARTS[cls.__name__] = cls
    return cls


class Covariance(Protocol):
    """How the noise of units that share draws adds up (e.g. :class:`engine.mechanisms.central.trees.TreeCovariance`)."""

    def variance(self, cell_weights: np.ndarray) -> float:
        """The noise variance of ``cell_weights . density`` (weights over the cells, row-major); NaN: unknown."""

    def block_variance(self, k: int) -> np.ndarray | None:
        """The noise variance of every square of ``k`` x ``k`` cells (row-major blocks), or None (then
        :meth:`variance` per block)."""


@part
@dataclass(frozen=True)
class Correlated:
    """Units whose draws are correlated in a way the release does not describe (DAWA's buckets share the
    measured tree's noise): a region inside one unit has its exact margin, a region over several has none."""

    reason: str

    def variance(self, cell_weights: np.ndarray) -> float:
        return math.nan

    def block_variance(self, k: int) -> np.ndarray | None:
        return None


@part
@dataclass(frozen=True, eq=False)
class NoiseModel:
    """The released units of a release and their noise (see the module docstring).

    ``sd``: each unit's noise standard deviation (NaN: that unit has no margin); ``count``: each unit's
    released count; ``basis``: the noise's law in words. The units' cells: ``label`` (a unit per cell,
    row-major; the unit's count spread evenly over its cells) or ``weights`` (a units x cells matrix of
    overlap areas in CSR form ``(indptr, indices, data)``; the count spread by area share): regions of
    the mechanism's own, or a grid that does not line up with the cells. ``blank``: cells the mechanism
    changed after the noise (clipped, not kept by top-t), which hold a choice biased towards 0 rather than
    noise around the truth, so no region over them has a margin. ``covariance``: how units that share
    draws add up (None: independent).
    """

    sd: np.ndarray
    count: np.ndarray
    basis: str
    label: np.ndarray | None = None
    weights: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    blank: np.ndarray | None = None
    covariance: Covariance | None = None

    @classmethod
    def of_cells(cls, density, cell_sd, basis: str, label=None, covariance=None) -> NoiseModel:
        """Units of whole cells. ``cell_sd``: each cell's noise standard deviation (its share of its unit's;
        a scalar for all; NaN: the cell was changed after the noise, see ``blank``); ``label``: each cell's
        unit (row-major; None: every cell its own unit)."""
        dens = np.asarray(density, dtype=np.float64).ravel()
        se = np.broadcast_to(np.asarray(cell_sd, dtype=np.float64), np.shape(density)).ravel()
        lab = np.arange(dens.size) if label is None else np.unique(np.asarray(label).ravel(), return_inverse=True)[1]
        k = int(lab.max()) + 1
        size = np.bincount(lab, minlength=k).astype(np.float64)
        blank = np.isnan(se)
        # a unit's sd is its cells' share times its cells (the same in each); blank cells do not count
        sd = np.bincount(lab, weights=np.where(blank, 0.0, se) * size[lab], minlength=k)
        shown = np.bincount(lab, weights=(~blank).astype(np.float64), minlength=k)
        sd = np.divide(sd, shown, out=np.full(k, np.nan), where=shown > 0)
        count = np.bincount(lab, weights=dens, minlength=k)
        return cls(
            sd, count, basis, label=lab.astype(np.int64), blank=blank if blank.any() else None, covariance=covariance
        )

    @classmethod
    def of_blocks(cls, density, cell_sd, cells, basis: str, covariance=None) -> NoiseModel:
        """Units that are dyadic squares of ``cells`` cells each (per cell, or one number for all), named by their
        south-west cell."""
        n = np.shape(density)[0]
        k = np.rint(np.sqrt(np.broadcast_to(np.asarray(cells), (n, n)))).astype(np.int64).ravel()
        iy, ix = np.divmod(np.arange(n * n), n)
        return cls.of_cells(density, cell_sd, basis, label=(iy // k * k) * n + (ix // k * k), covariance=covariance)

    @classmethod
    def of_areas(cls, counts, sd, weights, basis: str, blank=None) -> NoiseModel:
        """Units spread over the cells by area: ``weights`` (units x cells, scipy sparse or CSR triple) holds each
        unit's overlap with each cell in cells; ``counts`` and ``sd`` the units' (a scalar sd for all). A unit
        partly outside the map keeps the share of its count and noise that falls inside."""
        from scipy import sparse

        A = weights if sparse.issparse(weights) else sparse.csr_matrix(_csr(weights))
        A = sparse.csr_matrix(A, dtype=np.float64)
        counts = np.asarray(counts, dtype=np.float64).ravel()
        return cls(
            np.broadcast_to(np.asarray(sd, dtype=np.float64), counts.shape).copy(),
            counts,
            basis,
            weights=(A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data.astype(np.float64)),
            blank=None if blank is None or not np.any(blank) else np.asarray(blank, dtype=bool).ravel(),
        )

    @classmethod
    def of_grid(cls, noisy, sd: float, edges, n: int, basis: str, blank=None) -> NoiseModel:
        """An ``m`` x ``m`` grid of independent noisy counts (``noisy[iy, ix]``) with cell edges ``edges`` in output
        cells from the map's south-west corner, spread by area over the ``n`` x ``n`` cells: its units are the grid
        cells that meet the map, each with the share of its count and noise inside it."""
        e = np.asarray(edges, dtype=np.float64)
        m = e.size - 1
        noisy = np.asarray(noisy, dtype=np.float64).reshape(m * m)
        if m <= n and e[0] == 0 and e[-1] == n and np.array_equal(e, np.round(e)):  # blocks of whole cells
            j = np.searchsorted(e, np.arange(n), side="right") - 1  # each row's (column's) grid interval
            label = (j[:, None] * m + j[None, :]).ravel()
            mask = None if blank is None or not np.any(blank) else np.asarray(blank, dtype=bool).ravel()
            return cls(np.full(m * m, float(sd)), noisy.copy(), basis, label=label, blank=mask)
        wy = _overlaps(e, n)  # (m, n): grid interval j's overlap with output interval i, in cells
        full = np.outer(np.diff(e), np.diff(e)).ravel()
        from scipy import sparse

        A = sparse.csr_matrix(sparse.kron(sparse.csr_matrix(wy), sparse.csr_matrix(wy)))  # (m*m, n*n), row-major
        inside = np.asarray(A.sum(axis=1)).ravel()
        keep = np.flatnonzero(inside > 0)
        share = inside[keep] / full[keep]
        counts = noisy[keep] * share
        return cls.of_areas(counts, float(sd) * share, A[keep], basis, blank)

    # ---------------------------------------------------------------- reading the model
    @property
    def units(self) -> int:
        return int(self.count.size)

    def spread(self, cells: int):
        """``S`` (cells x units, sparse): the share of each unit's count in each cell; columns sum to 1."""
        from scipy import sparse

        if self.label is not None:
            size = np.bincount(self.label, minlength=self.units).astype(np.float64)
            return sparse.csr_matrix(
                (1.0 / size[self.label], (np.arange(cells), self.label)), shape=(cells, self.units)
            )
        A = self.own_weights(cells)
        w = np.asarray(A.sum(axis=1)).ravel()
        return sparse.csr_matrix(A.multiply(1.0 / w[:, None]).T)

    def own_weights(self, cells: int):
        """The units' area weights (units x cells) when they are regions of their own, else None."""
        from scipy import sparse

        if self.weights is None:
            return None
        return sparse.csr_matrix(_csr(self.weights), shape=(self.units, cells))

    def cell_sd(self, n: int) -> np.ndarray:
        """Each cell's noise standard deviation (``[iy, ix]``; NaN where there is none)."""
        S = self.spread(n * n)
        var = np.asarray(S.multiply(S) @ np.nan_to_num(self.sd**2, nan=0.0)).ravel()
        touched = np.asarray((S != 0).astype(np.float64) @ np.isnan(self.sd).astype(np.float64)).ravel() > 0
        var[touched] = np.nan
        if self.blank is not None:
            var[self.blank] = np.nan
        return np.sqrt(var).reshape(n, n)


@part
@dataclass(frozen=True, eq=False)
class Measurements:
    """The raw noisy numbers a release rests on, as drawn (before post-processing): what the noise audits
    (:mod:`engine.run.analysis.noise_audit`, :mod:`engine.run.analysis._audit`) read.

    ``grid``: noisy counts over square cells of side ``cell_m`` metres from the map's south-west corner
    (``grid[iy, ix]``), where the release measured such a grid (the identity's cells, UG's cells, SNH's
    grid, a count-min sketch's estimates at its finest level), with ``scale`` the Laplace scale of each
    cell's draw where one draw made it. ``locations``: noisy locations (metres, (n, 2)) with
    ``planar_epsilon`` per metre, for planar Laplace (geo-indistinguishability). ``reports``: any other
    raw noisy numbers (e.g. every client's randomised bit).
    """

    grid: np.ndarray | None = None
    cell_m: float | None = None
    scale: float | None = None
    locations: np.ndarray | None = None
    planar_epsilon: float | None = None
    reports: np.ndarray | None = None

    def numbers(self) -> np.ndarray:
        """Every raw noisy number, flattened (what a seed replay compares)."""
        parts = [self.grid, self.locations, self.reports]
        return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in parts if p is not None])

    def at(self, x: float, y: float, domain) -> float:
        """The grid's noisy count of the cell holding the point ``(x, y)`` (metres)."""
        g = np.asarray(self.grid, dtype=np.float64)
        iy = min(max(int((y - domain.y0) / self.cell_m), 0), g.shape[0] - 1)
        ix = min(max(int((x - domain.x0) / self.cell_m), 0), g.shape[1] - 1)
        return float(g[iy, ix])


def _csr(weights):
    indptr, indices, data = (np.asarray(a) for a in weights)
    return data, indices, indptr


def _overlaps(edges: np.ndarray, n: int) -> np.ndarray:
    """(len(edges) - 1, n): the overlap of interval j of ``edges`` with the unit interval [i, i + 1], i < n."""
    lo = np.maximum(edges[:-1, None], np.arange(n)[None, :])
    hi = np.minimum(edges[1:, None], np.arange(1, n + 1)[None, :])
    return np.clip(hi - lo, 0.0, None)
