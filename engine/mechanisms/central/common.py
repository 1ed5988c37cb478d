"""What the central baselines share (see the package docstring for the threat model and the unit of
privacy): the ``unit`` parameter and :func:`bound_contributions` (user- or record-level bounding), the
curator's communication and server view, binning and spreading helpers, the noisy total, the
closed-form standard errors of Laplace counts and :data:`CENTRAL_KEYS`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import ParamError
from ...core.grid import Domain
from ...core.noise import NoiseSource
from ...core.params import Param
from ..base import Communication, aggregate_view

PRIVACY_UNIT = (
    "one location record; a user with k locations is protected at k*epsilon (group privacy), "
    "a record of weight w at w*epsilon"
)
PRIVACY_UNIT_USER = "one user (all of a user's locations together): user-level epsilon-DP"
UNITS = ("user", "record")
MAX_GRID_CELLS = 16_000_000  # refuse UG/AG grids that would not fit in memory

UNIT_PARAM = Param(
    "unit",
    "choice",
    "user",
    "unit of privacy: 'user' protects all of a person's locations together (user-level epsilon-DP; each user's "
    "contribution is bounded to 1, see the docstring); 'record' protects one location, so a user with k "
    "locations is protected only at k*epsilon. Identical when the dataset has no user ids",
    choices=UNITS,
    label="unit of privacy",
)


# ===================================================== contribution bounding
@dataclass(frozen=True)
class Bounded:
    """The data a mechanism counts after contribution bounding, and how it was bounded.

    ``data``'s plain record-level counts (sums of ``data.weight``, 1 when None) are the
    bounded contributions; it keeps ``user_id`` so the bounding can be checked."""

    data: object  # engine.data.dataset.Dataset
    unit: str
    method: str  # "weight" (1/k per location), "sample" (one location per user), "per_row", "none"
    bounding: str  # what was done, for diagnostics
    privacy_unit: str
    total_name: str  # what the total of the counts is, for notes

    @property
    def short(self) -> str:
        """One phrase for ledger notes."""
        return {
            "weight": "unit: user (each user's locations weighted to total 1, 1/k each unweighted; L1 <= 1 per user)",
            "sample": "unit: user (one location per user, sampled)",
            "per_row": "unit: user (no user ids: each location is one user)",
            "none": "unit: record (a user with k locations is protected at k*eps)",
        }[self.method]

    def diagnostics(self) -> dict:
        return {"unit": self.unit, "privacy_unit": self.privacy_unit, "contribution_bounding": self.bounding}


def _lean(d, idx, weight=None, keep_weight: bool = False):
    """The rows ``idx`` (None = all) with only what counting needs: locations, user ids and
    the contribution ``weight`` (or ``d``'s own weights with ``keep_weight``)."""

    def take(a):
        return a if a is None or idx is None else a[idx]

    return replace(
        d,
        xy=take(d.xy),
        lonlat=take(d.lonlat),
        user_id=take(d.user_id),
        weight=take(d.weight) if keep_weight else weight,
        value=None,
        flag=None,
    )


def bound_contributions(data, domain: Domain, unit: str = "user", rng=None, method: str = "weight") -> Bounded:
    """Bound each user's contribution for the given unit of privacy (see the module docstring).

    ``unit="record"``: ``data`` unchanged (every location counts its weight, 1 by default).
    ``unit="user"``, data with ``user_id``, restricted to the (public) domain:

    * ``method="weight"``: each of a user's k locations weighted 1/k (with weights:
      w_j / the user's total weight; users with total weight 0 dropped), so every
      user's masses sum to exactly 1; the histogram equals
      ``data.in_domain(domain).true_histogram(domain, per_user_normalised=True)``.
    * ``method="sample"``: one location per user, drawn with ``rng`` (a numpy Generator)
      uniformly among the user's locations (proportionally to weight when weighted),
      with count 1; one exponential draw per location (the minimum of Exp(1)/w_j wins
      with probability w_j / sum w).

    ``unit="user"`` without ``user_id``: each location is its own user (no draws);
    weights clipped to [0, 1] so no user counts more than 1.
    """
    if unit not in UNITS:
        raise ParamError(f"unknown unit of privacy {unit!r} (user or record)")
    if method not in ("weight", "sample"):
        raise ParamError(f"unknown contribution bounding {method!r} (weight or sample)")
    if unit == "record":
        what = "its weight" if data.weight is not None else "1"
        return Bounded(
            data,
            "record",
            "none",
            f"none: every location counts {what} (record-level)",
            PRIVACY_UNIT,
            "number of locations" if data.weight is None else "total weight of the locations",
        )
    if data.user_id is None:
        clip = data.weight is not None
        return Bounded(
            data if not clip else replace(data, weight=np.clip(data.weight.astype(np.float64), 0.0, 1.0)),
            "user",
            "per_row",
            "none needed: the dataset has no user ids, each location is its own user"
            + ("; location weights clipped to [0, 1]" if clip else ""),
            PRIVACY_UNIT_USER + " (here one user = one location: the dataset has no user ids)",
            "number of locations (each its own user)" if not clip else "total clipped weight (each location a user)",
        )
    # only the domain is released; normalising inside it keeps each user's mass at 1
    inside = domain.inside(data.xy)
    d = data if inside.all() else _lean(data, np.flatnonzero(inside), keep_weight=True)
    inv, u = d.user_index()
    base = np.ones(len(d)) if d.weight is None else d.weight.astype(np.float64)
    weighted = d.weight is not None
    if method == "weight":
        tot = np.bincount(inv, weights=base, minlength=u)
        w = np.divide(base, tot[inv], out=np.zeros(len(d)), where=tot[inv] > 0)
        keep = np.flatnonzero(w > 0) if weighted and not (w > 0).all() else None
        out = _lean(d, keep, w if keep is None else w[keep])
        how = (
            "each user's locations inside the domain weighted w_j / (the user's total weight)"
            if weighted
            else "each of a user's k locations inside the domain weighted 1/k"
        )
        return Bounded(
            out,
            "user",
            "weight",
            how + ": every user's masses sum to 1, so each count vector has L1 sensitivity 1 per user",
            PRIVACY_UNIT_USER,
            "number of users (each user's locations weighted to total 1)",
        )
    if not isinstance(rng, np.random.Generator):
        raise TypeError("sampling one location per user needs a numpy Generator")
    # exponential race: per user, the location with the smallest Exp(1)/w_j wins (uniform when unweighted);
    # each user's choice depends on its own locations and draws only
    e = rng.exponential(size=len(d))
    key = np.divide(e, base, out=np.full(len(d), np.inf), where=base > 0)
    order = np.argsort(inv, kind="stable")  # rows grouped by user (every user 0..u-1 has a row)
    counts = np.bincount(inv, minlength=u)
    starts = np.cumsum(counts) - counts
    ks = key[order]
    pos = np.flatnonzero(ks == np.repeat(np.minimum.reduceat(ks, starts), counts))
    grp = inv[order[pos]]
    first = np.ones(pos.size, dtype=bool)
    first[1:] = grp[1:] != grp[:-1]
    chosen = order[pos[first]]
    chosen = np.sort(chosen[np.isfinite(key[chosen])])  # a user whose weights are all 0 contributes nothing
    out = _lean(d, chosen, None)
    how = "proportionally to weight" if weighted else "uniformly"
    return Bounded(
        out,
        "user",
        "sample",
        f"one location per user, drawn {how} among the user's locations inside the domain (ctx.rng), count 1",
        PRIVACY_UNIT_USER,
        "number of users",
    )


# ============================================================== shared helpers
def _noise_source(rng) -> NoiseSource:
    """Accept a numpy Generator or a NoiseSource (so callers outside a RunContext can reuse helpers).
    A Generator gives the seeded (non-secure) source: the same numbers as ``x + rng.laplace(...)``."""
    if isinstance(rng, np.random.Generator):
        return NoiseSource(rng)
    if callable(getattr(rng, "add_laplace", None)):  # a NoiseSource (seeded or secure)
        return rng
    raise TypeError("rng must be a numpy Generator or an engine.core.noise.NoiseSource")


def _split(eps: float, frac: float) -> tuple[float, float]:
    """Split eps into (frac * eps, rest) whose floating-point sum never exceeds eps."""
    a = frac * eps
    b = eps - a
    for _ in range(8):  # one or two steps of one ulp suffice
        if a + b <= eps:
            break
        b = math.nextafter(b, 0.0)
    return a, b


def curator_communication() -> Communication:
    """Central DP: every user uploads all of its locations in the clear (2 coordinates of 64
    bits each); the trusted curator bounds contributions after receiving them. Counted per
    location: the locations per user are a fact of the true data, which a release does not
    carry (the evaluation's ``comm_*`` metrics multiply by their mean)."""
    return Communication(
        2.0,
        128.0,
        note="each user sends each of its locations to the trusted curator: 2 coordinates (64-bit) per location",
        per_location=True,
    )


def _server_view(what: str):
    return aggregate_view(f"The curator sees every location in the clear; the public sees only {what}.")


def _base_diagnostics(eps: float, bounded: Bounded, ctx=None) -> dict:
    d = {**bounded.diagnostics(), "epsilon": float(eps)}
    if ctx is not None:
        d["noise_source"] = getattr(ctx.noise, "description", "custom")
    return d


def _points(data, domain: Domain) -> tuple[np.ndarray, np.ndarray | None]:
    """Locations inside the domain and their weights (None = unit weights)."""
    inside = domain.inside(data.xy)
    xy = data.xy[inside]
    w = None if data.weight is None else np.asarray(data.weight, dtype=np.float64)[inside]
    return xy, w


def _bin_square(xy: np.ndarray, w: np.ndarray | None, domain: Domain, m: int) -> np.ndarray:
    """Counts on an m x m grid over the domain (m need not be a power of two), grid[iy, ix]."""
    s = m / domain.side
    ix = np.clip(((xy[:, 0] - domain.x0) * s).astype(np.int64), 0, m - 1)
    iy = np.clip(((xy[:, 1] - domain.y0) * s).astype(np.int64), 0, m - 1)
    return np.bincount(iy * m + ix, weights=w, minlength=m * m).astype(np.float64).reshape(m, m)


def _cells_to_metres(rects: np.ndarray, domain: Domain) -> np.ndarray:
    """Rectangles in output-cell units -> metres."""
    out = np.asarray(rects, dtype=np.float64) * domain.cell
    out[:, [0, 2]] += domain.x0
    out[:, [1, 3]] += domain.y0
    return out


def _grid_rects(m: int, n: int) -> np.ndarray:
    """The m x m uniform grid as rectangles in units of output cells (n per side), row-major [iy, ix]."""
    edges = np.arange(m + 1, dtype=np.float64) * n / m
    x0, y0 = np.meshgrid(edges[:-1], edges[:-1])
    x1, y1 = np.meshgrid(edges[1:], edges[1:])
    return np.stack([x0.ravel(), y0.ravel(), x1.ravel(), y1.ravel()], axis=1)


try:  # numba: one pass over the rectangles; the numpy loop below is the fallback
    import numba

    @numba.njit(cache=True, nogil=True)
    def _spread_numba(x0, y0, x1, y1, v, n, out):
        for r in range(x0.shape[0]):
            w = x1[r] - x0[r]
            h = y1[r] - y0[r]
            if w <= 0.0 or h <= 0.0:
                continue
            dens = v[r] / (w * h)
            i0 = max(int(math.floor(x0[r])), 0)
            i1 = min(int(math.ceil(x1[r])), n)
            j0 = max(int(math.floor(y0[r])), 0)
            j1 = min(int(math.ceil(y1[r])), n)
            for j in range(j0, j1):
                oy = min(y1[r], j + 1.0) - max(y0[r], float(j))
                if oy <= 0.0:
                    continue
                for i in range(i0, i1):
                    ox = min(x1[r], i + 1.0) - max(x0[r], float(i))
                    if ox > 0.0:
                        out[j, i] += dens * ox * oy

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in requirements
    HAVE_NUMBA = False


def ag_subcell_rects(owner: np.ndarray, offsets: np.ndarray, m2: np.ndarray, m1: int, n: int) -> np.ndarray:
    """AG's second-level cells as rectangles ``(x0, y0, x1, y1)`` in output-cell units:
    cell ``t`` is sub-cell ``t - offsets[owner[t]]`` (row-major) of the ``m2 x m2`` split of
    first-level cell ``owner[t]`` of the ``m1 x m1`` grid over ``n`` output cells."""
    local = np.arange(owner.size) - offsets[owner]
    m2o = m2[owner]
    ly, lx = np.divmod(local, m2o)
    cx, cy = owner % m1, owner // m1
    unit = n / m1
    return np.column_stack(
        [(cx + lx / m2o) * unit, (cy + ly / m2o) * unit, (cx + (lx + 1) / m2o) * unit, (cy + (ly + 1) / m2o) * unit]
    )


def spread_rects(rects: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Spread each rectangle's value uniformly over the n x n output cells it overlaps,
    in proportion to the overlap area (the uniformity assumption).

    ``rects`` are ``(x0, y0, x1, y1)`` in units of output cells (0..n); returns ``grid[iy, ix]``.
    Mass is conserved for rectangles inside the grid.
    """
    r = np.ascontiguousarray(rects, dtype=np.float64).reshape(-1, 4)
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    out = np.zeros((n, n), dtype=np.float64)
    if HAVE_NUMBA:
        _spread_numba(
            np.ascontiguousarray(r[:, 0]),
            np.ascontiguousarray(r[:, 1]),
            np.ascontiguousarray(r[:, 2]),
            np.ascontiguousarray(r[:, 3]),
            v,
            n,
            out,
        )
        return out
    for (x0, y0, x1, y1), val in zip(r, v):  # pragma: no cover - fallback
        if x1 <= x0 or y1 <= y0:
            continue
        i = np.arange(max(int(np.floor(x0)), 0), min(int(np.ceil(x1)), n))
        j = np.arange(max(int(np.floor(y0)), 0), min(int(np.ceil(y1)), n))
        ox = np.clip(np.minimum(x1, i + 1.0) - np.maximum(x0, i), 0, None)
        oy = np.clip(np.minimum(y1, j + 1.0) - np.maximum(y0, j), 0, None)
        out[np.ix_(j, i)] += val / ((x1 - x0) * (y1 - y0)) * np.outer(oy, ox)
    return out


def _total_count(
    xy_count: float,
    eps: float,
    params: dict,
    ledger: Ledger,
    noise: NoiseSource,
    bounded: Bounded,
    purpose: str = "to choose the grid size",
) -> tuple[float, float]:
    """The total N used to size a grid (or for ``purpose``): public side information, or a noisy count
    bought with rho*epsilon (sensitivity 1 for either unit, see the module docstring).
    Returns (N used, epsilon left for the rest)."""
    if params["total"] == "public":
        ledger.note_side_information(
            f"the true {bounded.total_name} N (used {purpose}; DPComp's convention, not epsilon-DP)"
        )
        return float(xy_count), eps
    rho = float(params["rho"])
    eps_n, eps_rest = _split(eps, rho)
    n_hat = float(noise.add_laplace(xy_count, 1.0 / eps_n))
    ledger.spend("total count N", eps_n, note=f"Laplace(1/({rho:g} eps)) on the {bounded.total_name}; {bounded.short}")
    return max(n_hat, 0.0), eps_rest


TOTAL_PARAMS = (
    Param(
        "total",
        "choice",
        "noisy",
        "how the total N that sizes the grid is obtained: 'noisy' spends a fraction rho of epsilon on it; "
        "'public' reads the true N as side information (DPComp's convention; the release is then not epsilon-DP "
        "with respect to N)",
        choices=("noisy", "public"),
        label="total N",
    ),
    Param(
        "rho", "float", 0.05, "fraction of epsilon spent on the noisy total (when total = noisy)", min=0.001, max=0.5
    ),
)


# ======================================================= noise
# What a release knows of its noise is its noise model (``Release.noise``, engine.mechanisms.noise_model)
LAPLACE_SD = math.sqrt(2.0)  # a Laplace(b) draw has standard deviation sqrt(2) b


def blank_postprocessed(stderr: np.ndarray, released: np.ndarray, noisy: np.ndarray) -> np.ndarray:
    """NaN where post-processing (clipping, top-t) replaced the noisy value: such a cell holds 0 by a
    choice made on its noisy value, biased towards 0 rather than noisy around the truth, so the noise's
    standard deviation is no margin for it."""
    out = np.array(stderr, dtype=np.float64)
    out[np.asarray(released) != np.asarray(noisy)] = np.nan
    return out


CENTRAL_KEYS = ("identity", "identity_topt", "uniform", "ug", "ag", "privtree", "hierarchical")
