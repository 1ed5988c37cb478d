"""Classical central-DP baselines (DPBench / DPComp): the comparators every new
mechanism is measured against.

* ``identity`` / ``identity_topt``: Laplace per cell (Dwork et al. 2006), optionally
  with negatives clipped and the top-t% thresholding of Ghazi et al. (2023, Section 4).
* ``uniform``: the total spread evenly.
* ``ug`` / ``ag``: uniform and adaptive grids (Qardaji, Yang, Li, ICDE 2013).
* ``privtree``: PrivTree (Zhang, Xiao, Xie, SIGMOD 2016).
* ``hierarchical``: quadtree of noisy counts with constrained inference (Hay et al.,
  VLDB 2010; geometric budget of Cormode et al., ICDE 2012).

Common threat model: a trusted curator sees every location in the clear and
publishes only the release; the adversary sees the release.

Unit of privacy: the ``unit`` parameter of every mechanism here (said in every
release's diagnostics and ledger notes).

* ``unit = "user"`` (default): user-level epsilon-DP, neighbouring datasets differ
  by all the locations of one user (add/remove). Each user's contribution is
  bounded once, by :func:`bound_contributions`, before anything is counted:

  - *weighting* (identity, identity_topt, uniform, ug, ag, hierarchical): each of
    a user's k locations inside the (public) domain counts 1/k; with location
    weights, w_j / (sum of the user's weights), and a user whose weights sum to 0
    contributes nothing (this is ``Dataset.true_histogram(per_user_normalised=True)``
    on the in-domain data). Every count vector these mechanisms noise is the
    per-cell sum of these masses over a partition of the domain (the output grid,
    a UG grid, an AG level, a quadtree level, the whole domain), so one user moves
    each such vector by at most sum_j 1/k = 1 in L1: the sensitivity-1 Laplace
    scales and the compositions of the record-level proofs carry over unchanged
    (hierarchical: per level; AG: the second-level partition is post-processing
    of the noisy first level, so it is fixed when the second level is noised).
  - *sampling* (privtree): PrivTree's proof is about one record moving the counts
    along one root-to-leaf path (the depth bias makes the loss decay along that
    path); a 1/k-weighted user touches up to k paths and we have no proof for
    that. So each user contributes ONE location, drawn with ``ctx.rng`` uniformly
    among its locations inside the domain (with weights: proportionally to weight),
    counted 1. A user's draw depends on that user's locations only and is
    independent of the others', so (coupling the other users' draws) the samples
    of neighbouring datasets differ by at most one record of count 1, and PrivTree's
    record-level guarantee on the sample is user-level on the data.
  - Without user ids every location is its own user and ``user`` = ``record``
    (identical releases at the same seed); location weights are then clipped to
    [0, 1] under ``user`` (a weight above 1 would count one user more than once),
    as the sparse-EMD and federated mechanisms do.

  Released values are then in units of users (a cell estimates the sum over users
  of the fraction of their locations in it), as for the sparse-EMD and federated
  releases. No cap on locations per user is offered: after 1/k weighting the
  sensitivity is already 1, so keeping only m locations (each 1/m) would only
  discard data.
* ``unit = "record"``: one location record; every count has sensitivity 1, a
  user with k locations is protected at k*epsilon only (group privacy); counts are
  sums of weights and a record of weight w is protected at w*epsilon. This was the
  only behaviour before the ``unit`` parameter and is reproduced exactly.

Outputs are estimated counts on the run's domain grid (``grid[iy, ix]``). Mechanisms
whose cells do not coincide with the output cells (UG, AG) spread each cell's count
uniformly over the output cells it overlaps, in proportion to the overlap area (the
uniformity assumption the papers use to answer range queries).

The reusable :func:`laplace_baseline` is the baseline of Ghazi et al. used by the
sparse-EMD mechanism.

Noise: every Laplace draw (cell counts, noisy totals, PrivTree's split decisions and
leaf counts, quadtree levels) is ``ctx.noise.add_laplace(values, scale)``: from the
seeded numpy stream (``values + rng.laplace(0, scale, shape)``), or in secure mode
with the values themselves passed through OpenDP's Laplace measurement, so OpenDP's
floating-point-safe guarantee covers the released numbers (engine.noise). The one
non-noise draw, the sampled location per user of PrivTree under ``user``, stays on
``ctx.rng`` in both modes (not privacy noise: the guarantee holds conditionally on every draw).

Of these papers only Ghazi et al. is in the shared corpus; the formulae of the
others are taken from REFERENCE_NOTES section 6 and the papers as we know them;
section numbers quoted for Qardaji et al. and theorem numbers for Hay et al. are
from memory and should be checked against the papers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..accounting import Ledger
from ..errors import ParamError
from ..grid import Domain, downsample, pyramid
from ..noise import NoiseSource
from ..params import Param
from .base import Communication, Mechanism, Release, aggregate_view, register

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
    raise TypeError("rng must be a numpy Generator or an engine.noise.NoiseSource")


def _check_eps(epsilon: float) -> float:
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ParamError(f"epsilon must be a positive number (got {epsilon})")
    return eps


def _split(eps: float, frac: float) -> tuple[float, float]:
    """Split eps into (frac * eps, rest) whose floating-point sum never exceeds eps."""
    a = frac * eps
    b = eps - a
    for _ in range(8):  # one or two steps of one ulp suffice
        if a + b <= eps:
            break
        b = math.nextafter(b, 0.0)
    return a, b


def curator_communication(data) -> Communication:
    """Central DP: every user uploads all of its locations in the clear (2 coordinates of 64
    bits each); the trusted curator bounds contributions after receiving them."""
    per_user = len(data) / max(data.n_users, 1)
    return Communication(
        2.0 * per_user,
        128.0 * per_user,
        note=f"each user sends its location(s) to the trusted curator: 2 coordinates (64-bit) per location, "
        f"{per_user:.3g} locations per user on average",
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
    xy_count: float, eps: float, params: dict, ledger: Ledger, noise: NoiseSource, bounded: Bounded
) -> tuple[float, float]:
    """The total N used to size a grid: public side information, or a noisy count
    bought with rho*epsilon (sensitivity 1 for either unit, see the module docstring).
    Returns (N used, epsilon left for the rest)."""
    if params["total"] == "public":
        ledger.note_side_information(
            f"the true {bounded.total_name} N (used to choose the grid size; DPComp's convention, not epsilon-DP)"
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


# ================================================================== Identity
def top_t_count(n_cells: int, top_t: float) -> int:
    """Number of cells kept by top-t% thresholding: ceil(t/100 * cells), at least 1."""
    if not (0 < top_t <= 100):
        raise ParamError(f"top t must be a percentage in (0, 100] (got {top_t})")
    return int(min(n_cells, max(1, math.ceil(n_cells * top_t / 100.0 - 1e-9))))


def laplace_baseline(
    truth: np.ndarray,
    eps: float,
    rng,
    clip: bool = True,
    top_t: float | None = None,
    sensitivity: float = 1.0,
) -> np.ndarray:
    """The Laplace baseline of Ghazi et al. (2023, Section 4, "Baselines"): add
    Laplace(sensitivity/eps) to every cell of ``truth``; with ``top_t`` (a percentage,
    e.g. 0.01 for the paper's top-0.01%) keep only the ``top_t_count`` largest noisy
    cells and zero the rest; with ``clip`` zero the negative cells. eps-DP for an
    L1 sensitivity of ``sensitivity`` (1 for counts, or for per-user distributions
    summing to 1 under add/remove-one-user). ``rng``: numpy Generator or NoiseSource.
    """
    eps = _check_eps(eps)
    noise = _noise_source(rng)
    truth = np.asarray(truth, dtype=np.float64)
    noisy = noise.add_laplace(truth, float(sensitivity) / eps)
    if top_t is not None and top_t > 0:
        k = top_t_count(noisy.size, float(top_t))
        flat = noisy.ravel()
        if k < flat.size:
            keep = np.argpartition(flat, flat.size - k)[flat.size - k :]
            out = np.zeros_like(flat)
            out[keep] = flat[keep]
            noisy = out.reshape(noisy.shape)
    if clip:
        noisy = np.clip(noisy, 0.0, None)
    return noisy


@register
class Identity(Mechanism):
    """Identity: Laplace(1/epsilon) noise on every cell of the true histogram.

    Paper: the Laplace mechanism (Dwork, McSherry, Nissim, Smith 2006), the "Identity"
    baseline of DPBench (Hay et al., SIGMOD 2016). Variants from Ghazi et al. (2023,
    Section 4, "Baselines"): negatives set to zero (``clip_negatives``), and the
    thresholding variant that keeps only the top t% noisy cells (``top_t`` as a
    percentage; the paper used 0.01% and 0.001%).

    Threat model: a trusted curator sees every location and publishes the noisy
    histogram. Guarantee: epsilon-DP (central) for the chosen ``unit``; the
    histogram has L1 sensitivity 1, so one Laplace(1/epsilon) draw per cell
    composes in parallel. Clipping and thresholding are post-processing.

    Unit of privacy (see the module docstring): ``user`` (default) counts each of a
    user's k locations 1/k, so the histogram is the sum of the users' normalised
    distributions and one user changes it by at most 1 in L1: user-level epsilon-DP,
    which is Ghazi et al.'s unit (each user's distribution normalised). ``record``:
    plain location counts, a user with k locations protected at k*epsilon.

    Departures: top-t keeps ceil(t% of the cells), at least one cell (the paper does
    not say how t% of a cell count is rounded).
    """

    key = "identity"
    label = "Identity (Laplace per cell)"
    family = "central"
    guarantee = "user-level epsilon-DP (central); record-level with unit = record"
    threat_model = "A trusted curator sees all locations; the public sees the noisy histogram."
    summary = "Add Laplace noise of scale 1/epsilon to every cell's count."
    paper = "Dwork et al. 2006; DPBench (Hay et al. 2016); top-t variant: Ghazi et al. 2023"
    equations = "Laplace mechanism (Dwork et al. 2006, Prop. 1); Ghazi et al. 2023 Section 4 (baselines)"
    params = (
        UNIT_PARAM,
        Param("clip_negatives", "bool", False, "set negative noisy counts to zero (post-processing)"),
        Param(
            "top_t",
            "float",
            0.0,
            "keep only the top t% of cells by noisy count and zero the rest (Ghazi et al. Section 4); 0 = off",
            min=0.0,
            max=100.0,
            label="top t (%)",
        ),
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        truth = bounded.data.true_histogram(domain)
        top_t = float(params["top_t"]) or None
        noisy = laplace_baseline(truth, eps, ctx.noise, clip=bool(params["clip_negatives"]), top_t=top_t)
        ledger = Ledger()
        ledger.spend(
            "cell counts", eps, composition="parallel", group="cells", note=f"Laplace(1/eps) per cell; {bounded.short}"
        )
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "noise_scale": 1.0 / eps,
                "cells": int(truth.size),
                "clip_negatives": bool(params["clip_negatives"]),
                "top_t_percent": top_t,
                "cells_kept": int(top_t_count(truth.size, top_t)) if top_t else int(truth.size),
            }
        )
        return Release(
            density=noisy,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(data),
            server_view=_server_view("the noisy histogram"),
            diagnostics=diag,
        )


@register
class IdentityTopT(Identity):
    """Identity with top-t% thresholding: the "baseline with top t%" of Ghazi et al.
    (2023, Section 4 and Figures 1-3): Laplace(1/epsilon) per cell, negatives zeroed,
    then only the top t% noisy cells kept (default t = 0.01%, the paper's choice at
    256x256; 0.001% is the other value it reports).

    Same threat model, guarantee, unit of privacy (``user`` by default: Ghazi et al.'s
    per-user normalised histogram) and departures as ``identity`` (thresholding is
    post-processing); a separate key so comparisons can show both baselines side by side.
    """

    key = "identity_topt"
    label = "Identity + top-t% threshold (Ghazi et al. baseline)"
    summary = "Laplace noise per cell, then keep only the top t% cells and zero the rest."
    params = (
        UNIT_PARAM,
        Param("clip_negatives", "bool", True, "set negative noisy counts to zero (post-processing)"),
        Param(
            "top_t",
            "float",
            0.01,
            "percentage of cells kept (the paper used 0.01 and 0.001)",
            min=1e-6,
            max=100.0,
            log=True,
            label="top t (%)",
        ),
    )


# =================================================================== Uniform
@register
class Uniform(Mechanism):
    """Uniform: the total count spread evenly over all cells.

    DPBench / DPComp (Hay et al., SIGMOD 2016): the data-independent floor; an
    algorithm whose error is close to Uniform's learns nothing about the shape.
    Threat model: trusted curator. Guarantee: with ``total = noisy``, epsilon-DP
    (the whole budget buys one Laplace(1/epsilon) count of the total); with
    ``total = public`` the true total is side information (declared in the ledger),
    no budget is spent, and the release is not private with respect to N.

    Unit of privacy: ``user`` (default) counts each of a user's k locations 1/k, so
    the total is the number of users and one user moves it by at most 1 (user-level);
    ``record``: the number of locations (a user with k locations at k*epsilon).

    Departures: a negative noisy total is set to zero (post-processing).
    """

    key = "uniform"
    label = "Uniform (total spread evenly)"
    family = "central"
    guarantee = "user-level epsilon-DP (central) on the total (record-level with unit = record); none if public"
    threat_model = "A trusted curator sees all locations; the public sees one number (the total)."
    summary = "Estimate only the total and assume locations are spread evenly."
    paper = "DPBench (Hay et al. 2016)"
    equations = "DPBench data-independent baseline (Uniform)"
    params = (UNIT_PARAM, TOTAL_PARAMS[0])

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        n_true = float(bounded.data.true_histogram(domain).sum())
        ledger = Ledger()
        if params["total"] == "public":
            ledger.note_side_information(f"the true {bounded.total_name} N (spread evenly; no budget spent)")
            n_used = n_true
        else:
            n_used = max(float(ctx.noise.add_laplace(n_true, 1.0 / eps)), 0.0)
            ledger.spend("total count N", eps, note=f"Laplace(1/eps) on the {bounded.total_name}; {bounded.short}")
        cells = domain.n * domain.n
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update({"total_used": n_used, "total": params["total"]})
        return Release(
            density=np.full((domain.n, domain.n), n_used / cells),
            domain=domain,
            ledger=ledger,
            communication=curator_communication(data),
            server_view=_server_view("the total count"),
            diagnostics=diag,
        )


# ======================================================================== UG
def ug_size(n: float, eps: float, c: float = 10.0, cap: int | None = None) -> int:
    """Qardaji et al. Guideline 1: m = max(10, ceil(sqrt(N eps / c))), optionally capped at ``cap``."""
    m = max(10, math.ceil(math.sqrt(max(n, 0.0) * eps / c)))
    return int(min(m, cap)) if cap else int(m)


@register
class UniformGrid(Mechanism):
    """UG, the uniform grid of Qardaji, Yang, Li, "Differentially private grids for
    geospatial data", ICDE 2013, Section III (Guideline 1).

    An m x m grid over the domain with m = max(10, ceil(sqrt(N eps / c))), c = 10;
    one Laplace(1/eps) count per grid cell (parallel composition); each cell's count
    is spread uniformly over the output cells it overlaps, weighted by overlap area
    (the paper's uniformity assumption for partly covered cells).

    Threat model: trusted curator; the public sees the noisy grid. Guarantee:
    epsilon-DP when ``total = noisy`` (rho*eps on N, the rest on the cells);
    with ``total = public`` N is side information (declared in the ledger; the
    paper, like DPComp, assumes N known).

    Unit of privacy: ``user`` (default) weights each of a user's k locations 1/k, so
    N is the number of users and one user moves N and the grid's count vector by at
    most 1 in L1 each (user-level epsilon-DP); ``record``: location counts, a user
    with k locations protected at k*epsilon.

    Departures: m is rounded up (the paper leaves the rounding open). With
    ``cap_to_grid`` (default) m is capped at the output resolution 2^L, since cells
    finer than the released map only add noise (DPBench's grids are likewise built
    over the domain histogram); the cap is a public quantity. Under ``user`` N counts
    users, not locations, in Guideline 1 (it is the total the noise competes with).
    """

    key = "ug"
    label = "UG (uniform grid, Qardaji et al.)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central; record-level with unit = record) with a noisy total; "
        "N as side information otherwise"
    )
    threat_model = "A trusted curator sees all locations; the public sees the noisy grid counts."
    summary = "Choose a grid size from N and epsilon, add Laplace noise to each grid cell."
    paper = "Qardaji, Yang, Li. Differentially private grids for geospatial data. ICDE 2013"
    equations = "Section III, Guideline 1: m = sqrt(N eps / c), c = 10"
    params = (
        (UNIT_PARAM,)
        + TOTAL_PARAMS
        + (
            Param("c", "float", 10.0, "constant c of Guideline 1", min=0.1, max=1000.0, log=True),
            Param("cap_to_grid", "bool", True, "cap the grid size at the output resolution"),
        )
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        noise = ctx.noise
        bounded = bound_contributions(data, domain, params["unit"])
        xy, w = _points(bounded.data, domain)
        n_true = float(len(xy) if w is None else w.sum())
        ledger = Ledger()
        n_used, eps_cells = _total_count(n_true, eps, params, ledger, noise, bounded)
        n = domain.n
        m = ug_size(n_used, eps_cells, float(params["c"]), n if params["cap_to_grid"] else None)
        if m * m > MAX_GRID_CELLS:
            raise ParamError(f"UG would need a {m}x{m} grid; turn on 'cap to grid' or lower epsilon")
        ctx.progress(0.3, f"counting on a {m}x{m} grid")
        counts = _bin_square(xy, w, domain, m)
        noisy = noise.add_laplace(counts, 1.0 / eps_cells)
        ledger.spend(
            "grid cell counts",
            eps_cells,
            composition="parallel",
            group="ug cells",
            note=f"Laplace(1/eps) per UG cell; {bounded.short}",
        )
        ctx.check_cancelled()
        rects = _grid_rects(m, n)
        density = spread_rects(rects, noisy.ravel(), n)
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "m": int(m),
                "m_uncapped": ug_size(n_used, eps_cells, float(params["c"])),
                "c": float(params["c"]),
                "total_used": n_used,
                "total": params["total"],
                "epsilon_cells": eps_cells,
                "ug_cell_side_m": domain.side / m,
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(data),
            server_view=_server_view("the noisy grid counts"),
            partition=_cells_to_metres(rects, domain),
            diagnostics=diag,
            extras={"grid_counts": noisy},
        )


# ======================================================================== AG
def ag_level1_size(n: float, eps: float, c: float = 10.0, cap: int | None = None) -> int:
    """Qardaji et al. Section IV-B: m1 = max(10, ceil(sqrt(N eps / c) / 4))."""
    m1 = max(10, math.ceil(math.sqrt(max(n, 0.0) * eps / c) / 4.0))
    return int(min(m1, cap)) if cap else int(m1)


def ag_level2_sizes(noisy_counts: np.ndarray, eps2: float, c2: float = 5.0, cap: int | None = None) -> np.ndarray:
    """m2 = ceil(sqrt(N' eps2 / c2)) per first-level cell with noisy count N' (at least 1;
    N' <= 0 gives 1), eps2 = (1 - alpha) eps; optionally capped."""
    m2 = np.ceil(np.sqrt(np.clip(noisy_counts, 0.0, None) * eps2 / c2)).astype(np.int64)
    m2 = np.maximum(m2, 1)
    if cap:
        m2 = np.minimum(m2, cap)
    return m2


@register
class AdaptiveGrid(Mechanism):
    """AG, the adaptive grid of Qardaji, Yang, Li, ICDE 2013, Section IV.

    1. First level: m1 x m1 grid, m1 = max(10, ceil(sqrt(N eps / c) / 4)), c = 10,
       counts with Laplace(1/(alpha eps)), alpha = 0.5.
    2. Each first-level cell with noisy count N' is split into m2 x m2 cells,
       m2 = ceil(sqrt(N' (1 - alpha) eps / c2)), c2 = c / 2 = 5, counted with
       Laplace(1/((1 - alpha) eps)).
    3. Constrained inference (Section IV-B): the first-level count v and the sum u
       of its m2^2 sub-cells are averaged with inverse-variance weights,
       v' = (alpha^2 m2^2 v + (1-alpha)^2 u) / (alpha^2 m2^2 + (1-alpha)^2), and
       the difference v' - u is spread equally over the sub-cells.
    Sub-cells are spread to the output grid by overlap area (uniformity assumption).

    Threat model: trusted curator; the public sees both noisy levels. Guarantee:
    epsilon-DP with ``total = noisy``: rho*eps on N, then alpha and (1 - alpha) of
    the rest on the two levels (each level parallel over disjoint cells; m2 is
    post-processing of the noisy first level). With ``total = public`` N is side
    information (declared).

    Unit of privacy: ``user`` (default) weights each of a user's k locations 1/k:
    one user moves N, the first-level vector and the second-level vector by at most 1
    in L1 each (the second-level partition is chosen from the noisy first level,
    i.e. fixed by post-processing before the second level is noised), so the same
    scales give user-level epsilon-DP; ``record``: location counts, a user with k
    locations protected at k*epsilon.

    Departures: when N' <= 0 the cell is not split (m2 = 1; the paper's formula is
    undefined there). With ``cap_to_grid`` (default) m1 <= 2^L and m1*m2 <= 2^L so
    sub-cells are no finer than output cells (see ``ug``). Under ``user`` N and N'
    count users (user mass), not locations.
    """

    key = "ag"
    label = "AG (adaptive grid, Qardaji et al.)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central; record-level with unit = record) with a noisy total; "
        "N as side information otherwise"
    )
    threat_model = "A trusted curator sees all locations; the public sees the two levels of noisy grid counts."
    summary = "A coarse noisy grid, then each cell split according to its noisy count, made consistent."
    paper = "Qardaji, Yang, Li. Differentially private grids for geospatial data. ICDE 2013"
    equations = "Section IV: m1 = max(10, sqrt(N eps/c)/4), m2 = sqrt(N'(1-alpha) eps/c2), constrained inference"
    params = (
        (UNIT_PARAM,)
        + TOTAL_PARAMS
        + (
            Param("alpha", "float", 0.5, "fraction of the grid budget spent on the first level", min=0.05, max=0.95),
            Param("c", "float", 10.0, "constant c of the first level", min=0.1, max=1000.0, log=True),
            Param(
                "c2", "float", 5.0, "constant c2 of the second level (c/2 in the paper)", min=0.1, max=1000.0, log=True
            ),
            Param("cap_to_grid", "bool", True, "cap grid sizes so cells are no finer than the output cells"),
        )
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        noise = ctx.noise
        alpha = float(params["alpha"])
        bounded = bound_contributions(data, domain, params["unit"])
        xy, w = _points(bounded.data, domain)
        n_true = float(len(xy) if w is None else w.sum())
        ledger = Ledger()
        n_used, eps_grid = _total_count(n_true, eps, params, ledger, noise, bounded)
        eps1, eps2 = _split(eps_grid, alpha)
        n = domain.n
        cap = params["cap_to_grid"]
        m1 = ag_level1_size(n_used, eps_grid, float(params["c"]), n if cap else None)

        # level 1
        s1 = m1 / domain.side
        fx = (xy[:, 0] - domain.x0) * s1
        fy = (xy[:, 1] - domain.y0) * s1
        ix1 = np.clip(fx.astype(np.int64), 0, m1 - 1)
        iy1 = np.clip(fy.astype(np.int64), 0, m1 - 1)
        cell = iy1 * m1 + ix1
        level1 = np.bincount(cell, weights=w, minlength=m1 * m1).astype(np.float64)
        noisy1 = noise.add_laplace(level1, 1.0 / eps1)
        ledger.spend(
            "first-level counts",
            eps1,
            composition="parallel",
            group="ag level 1",
            note=f"Laplace(1/(a eps)); {bounded.short}",
        )
        ctx.progress(0.3, "second level")
        ctx.check_cancelled()

        # level 2: sizes from the noisy first level only
        m2 = ag_level2_sizes(noisy1, eps2, float(params["c2"]), max(1, n // m1) if cap else None)
        sizes = m2 * m2
        total_cells = int(sizes.sum())
        if total_cells > MAX_GRID_CELLS:
            raise ParamError(
                f"AG would need {total_cells:,} second-level cells; turn on 'cap to grid' or lower epsilon"
            )
        offsets = np.zeros(m1 * m1, dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        m2p = m2[cell]
        sx = np.minimum(((fx - ix1) * m2p).astype(np.int64), m2p - 1)
        sy = np.minimum(((fy - iy1) * m2p).astype(np.int64), m2p - 1)
        sub = offsets[cell] + sy * m2p + sx
        level2 = np.bincount(sub, weights=w, minlength=total_cells).astype(np.float64)
        noisy2 = noise.add_laplace(level2, 1.0 / eps2)
        ledger.spend(
            "second-level counts",
            eps2,
            composition="parallel",
            group="ag level 2",
            note=f"Laplace(1/((1-a) eps)); {bounded.short}",
        )

        # constrained inference between the two levels (Section IV-B)
        owner = np.repeat(np.arange(m1 * m1), sizes)
        u = np.bincount(owner, weights=noisy2, minlength=m1 * m1)
        a2m2 = alpha**2 * sizes
        b2 = (1.0 - alpha) ** 2
        v_prime = (a2m2 * noisy1 + b2 * u) / (a2m2 + b2)
        est2 = noisy2 + ((v_prime - u) / sizes)[owner]
        ctx.progress(0.7, "spreading to the output grid")
        ctx.check_cancelled()

        # sub-cell rectangles in output-cell units
        rects = ag_subcell_rects(owner, offsets, m2, m1, n)
        density = spread_rects(rects, est2, n)

        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "m1": int(m1),
                "m2_min": int(m2.min()),
                "m2_median": float(np.median(m2)),
                "m2_max": int(m2.max()),
                "second_level_cells": total_cells,
                "alpha": alpha,
                "c": float(params["c"]),
                "c2": float(params["c2"]),
                "total_used": n_used,
                "total": params["total"],
                "epsilon_level1": eps1,
                "epsilon_level2": eps2,
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(data),
            server_view=_server_view("the two levels of noisy grid counts"),
            partition=_cells_to_metres(rects, domain),
            diagnostics=diag,
            extras={
                "level1_noisy": noisy1.reshape(m1, m1),
                "m2": m2.reshape(m1, m1),
                "level2_noisy": noisy2,  # sub-cells grouped by first-level cell (row-major), each row-major
                "level2_consistent": est2,
            },
        )


# ================================================================== PrivTree
def privtree_params(eps_tree: float, beta: int = 4) -> tuple[float, float]:
    """Zhang et al., PrivTree privacy theorem: lambda = (2 beta - 1) / ((beta - 1) eps), delta = lambda ln beta."""
    lam = (2.0 * beta - 1.0) / ((beta - 1.0) * eps_tree)
    return lam, lam * math.log(beta)


def privtree_decompose(
    levels: list[np.ndarray], lam: float, delta: float, theta: float, rng, max_depth: int | None = None
) -> list[np.ndarray]:
    """PrivTree's split rule (Zhang et al., Algorithm 2) over a quadtree of count grids.

    ``levels[d]`` holds the true counts of the 2^d x 2^d nodes at depth d (root = depth 0).
    A visited node v at depth d gets the biased count b(v) = max(c(v) - d delta, theta - delta)
    and is split iff b(v) + Lap(lambda) > theta; nodes at ``max_depth`` are never split.
    Returns ``leaf[d]``: boolean masks of the leaves at each depth 0..max_depth.
    Noise is drawn only for visited nodes, level by level in row-major order.
    """
    noise = _noise_source(rng)
    L = len(levels) - 1 if max_depth is None else int(max_depth)
    leaves: list[np.ndarray] = []
    active = np.ones((1, 1), dtype=bool)
    for d in range(L + 1):
        if d == L:
            leaves.append(active)
            break
        idx = np.flatnonzero(active)
        split_mask = np.zeros(active.shape, dtype=bool)
        if idx.size:
            b = np.maximum(levels[d].ravel()[idx] - d * delta, theta - delta)
            split = noise.add_laplace(b, lam) > theta
            split_mask.ravel()[idx[split]] = True
        leaves.append(active & ~split_mask)
        active = split_mask.repeat(2, axis=0).repeat(2, axis=1)
    return leaves


@register
class PrivTree(Mechanism):
    """PrivTree (Zhang, Xiao, Xie, "PrivTree: a differentially private algorithm for
    hierarchical decompositions", SIGMOD 2016), Algorithm 2 on the quadtree of the
    domain (fanout beta = 4).

    Tree construction with budget eps_tree = split_share * eps: lambda = (2 beta - 1)
    / ((beta - 1) eps_tree), delta = lambda ln beta (its privacy theorem); a node v at depth
    d(v) (root = 0, its own depth) has biased count b(v) = max(c(v) - d(v) delta,
    theta - delta) and is split iff b(v) + Lap(lambda) > theta. Nodes at the
    domain's depth L (single output cells) are not split. The leaves (disjoint) are
    then released with Laplace(1/eps_count) counts, eps_count = (1 - split_share) eps
    (parallel composition); each leaf's count is spread uniformly over its output cells.

    Threat model: trusted curator; the public sees the tree and the noisy leaf counts.
    Guarantee: epsilon-DP: the tree is eps_tree-DP whatever its depth (the privacy theorem; the
    depth limit only removes nodes from the analysis), the leaf counts eps_count-DP,
    composed sequentially.

    Unit of privacy: ``user`` (default) uses ONE location per user, drawn with
    ``ctx.rng`` uniformly among the user's locations inside the domain
    (proportionally to weight when weighted), counted 1: the sampling variant, not
    the 1/k weighting of the other baselines, because the privacy theorem is proved
    for one record changing the counts along one root-to-leaf path, and a weighted
    user changes up to k paths (we have no proof for that). Each user's draw depends
    only on its own locations, so neighbouring datasets give samples differing by
    at most one record: user-level epsilon-DP. Without user ids each location is a
    user (no draws; weights clipped to [0, 1]: a change of at most 1 along one path,
    as in the theorem, whose biased counts already differ by between 0 and 1).
    ``record``: every location counts (its weight), a user with k locations is
    protected at k*epsilon.

    Departures: fanout fixed at 4 (quadtree over the 2^L grid, so leaves align with
    output cells) and a maximum depth L (the paper has no depth limit: its domain
    is continuous). Defaults split_share = 0.5 and theta = 0 follow the paper's
    spatial experiments as we recall them; the paper is not among the shared
    texts (section and theorem numbers are not cited for that reason), so both are
    parameters. Negative noisy leaf counts are kept. Under ``user`` the locations
    beyond each user's sampled one are not used.
    """

    key = "privtree"
    label = "PrivTree (Zhang et al.)"
    family = "central"
    guarantee = "user-level epsilon-DP (central; one sampled location per user); record-level with unit = record"
    threat_model = "A trusted curator sees all locations; the public sees the tree and the noisy leaf counts."
    summary = "Split quadtree nodes while a depth-biased noisy count exceeds a threshold; publish noisy leaf counts."
    paper = "Zhang, Xiao, Xie. PrivTree. SIGMOD 2016"
    equations = "Algorithm 2 (PrivTree); lambda = (2b-1)/((b-1)eps), delta = lambda ln b; biased count b(v) = max(c(v) - depth(v) delta, theta - delta)"
    params = (
        UNIT_PARAM,
        Param("split_share", "float", 0.5, "fraction of epsilon spent on building the tree", min=0.05, max=0.95),
        Param("theta", "float", 0.0, "split threshold theta", min=0.0, max=1e6),
        Param(
            "max_depth",
            "int",
            0,
            "deepest level of the tree (0 = the run's resolution)",
            min=0,
            max=10,
            label="max depth",
        ),
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        noise = ctx.noise
        L = domain.depth if params["max_depth"] == 0 else min(int(params["max_depth"]), domain.depth)
        share = float(params["split_share"])
        eps_tree, eps_count = _split(eps, share)
        lam, delta = privtree_params(eps_tree, 4)
        theta = float(params["theta"])
        bounded = bound_contributions(data, domain, params["unit"], rng=ctx.rng, method="sample")
        truth = bounded.data.true_histogram(domain)
        levels = pyramid(truth)
        ledger = Ledger()
        leaves = privtree_decompose(levels, lam, delta, theta, noise, max_depth=L)
        ledger.spend(
            "tree construction",
            eps_tree,
            note=f"PrivTree split decisions, Lap(lambda), depth-biased counts; {bounded.short}",
        )
        ctx.progress(0.5, "noisy leaf counts")
        ctx.check_cancelled()

        grid = np.zeros((1, 1))
        depth_grid = np.zeros((1, 1), dtype=np.int16)
        rects, n_leaves = [], []
        n = domain.n
        for d, mask in enumerate(leaves):
            if d:
                grid = grid.repeat(2, axis=0).repeat(2, axis=1) / 4.0
                depth_grid = depth_grid.repeat(2, axis=0).repeat(2, axis=1)
            iy, ix = np.nonzero(mask)
            n_leaves.append(int(iy.size))
            if iy.size:
                grid[iy, ix] = noise.add_laplace(levels[d][iy, ix], 1.0 / eps_count)
                depth_grid[iy, ix] = d
                f = n / (1 << d)
                rects.append(np.stack([ix * f, iy * f, (ix + 1) * f, (iy + 1) * f], axis=1))
        ledger.spend(
            "leaf counts",
            eps_count,
            composition="parallel",
            group="leaves",
            note=f"Laplace(1/eps) per leaf; {bounded.short}",
        )
        # leaves at depth < domain depth were spread as they went down; finish to the output grid
        f = n // grid.shape[0]
        if f > 1:
            grid = grid.repeat(f, axis=0).repeat(f, axis=1) / (f * f)
            depth_grid = depth_grid.repeat(f, axis=0).repeat(f, axis=1)
        rects_arr = np.concatenate(rects).astype(np.float64)
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "lambda": lam,
                "delta": delta,
                "theta": theta,
                "beta": 4,
                "epsilon_tree": eps_tree,
                "epsilon_counts": eps_count,
                "max_depth": int(L),
                "leaves": int(sum(n_leaves)),
                "leaves_per_depth": n_leaves,
            }
        )
        return Release(
            density=grid,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(data),
            server_view=_server_view("the PrivTree partition and its noisy leaf counts"),
            partition=_cells_to_metres(rects_arr, domain),
            diagnostics=diag,
            extras={"leaf_depth": depth_grid},
        )


# ============================================== Hierarchical + consistency
def hierarchical_budget(n_levels: int, eps: float, scheme: str = "uniform") -> np.ndarray:
    """Per-level budgets, index 0 = root. ``uniform``: eps / levels (Hay et al.);
    ``geometric``: eps_d proportional to 2^(d/3), more budget towards the leaves
    (Cormode et al. ICDE 2012, geometric budget for a quadtree). Sums to eps."""
    if scheme == "uniform":
        w = np.ones(n_levels)
    elif scheme == "geometric":
        w = 2.0 ** (np.arange(n_levels) / 3.0)
    else:
        raise ParamError(f"unknown budget scheme {scheme!r} (uniform or geometric)")
    out = w / w.sum() * eps
    out[-1] = max(eps - sum(out[:-1].tolist()), 0.0)
    for _ in range(8):  # never spend more than eps, even by one rounding
        if sum(out.tolist()) <= eps:
            break
        out[-1] = np.nextafter(out[-1], 0.0)
    return out


def constrained_inference(noisy: list[np.ndarray], variances) -> list[np.ndarray]:
    """Hay et al. (VLDB 2010, hierarchical/universal histograms, Theorem 3) two-pass consistency for a tree of
    fanout 4 whose level d is a 2^d x 2^d grid (``noisy[0]`` is the root).

    Bottom-up, each node's noisy count y (variance s^2) and the sum S of its children's
    estimates (variance V) are combined with inverse-variance weights,
    z = (y / s^2 + S / V) / (1 / s^2 + 1 / V); top-down, each child gets
    z_child + (parent - sum of its siblings' z) / 4. With equal variances on all levels
    this is exactly Hay's z[v] = (k^l - k^(l-1)) / (k^l - 1) y + (k^(l-1) - 1) / (k^l - 1) S;
    with per-level variances (geometric budgets) it is the weighted least-squares
    estimate (as for the non-uniform budgets of Cormode et al. 2012; checked
    against an explicit weighted least-squares solve in the tests). The result is consistent: every
    parent equals the sum of its children.
    """
    h = len(noisy) - 1
    var = np.asarray(variances, dtype=np.float64)
    z = [None] * (h + 1)
    vz = np.empty(h + 1)
    z[h] = np.asarray(noisy[h], dtype=np.float64)
    vz[h] = var[h]
    for d in range(h - 1, -1, -1):
        s = downsample(z[d + 1])
        vs = 4.0 * vz[d + 1]
        wy, ws = 1.0 / var[d], 1.0 / vs
        z[d] = (wy * noisy[d] + ws * s) / (wy + ws)
        vz[d] = 1.0 / (wy + ws)
    out = [z[0]]
    for d in range(1, h + 1):
        diff = out[d - 1] - downsample(z[d])
        out.append(z[d] + diff.repeat(2, axis=0).repeat(2, axis=1) / 4.0)
    return out


@register
class Hierarchical(Mechanism):
    """Hierarchical quadtree with constrained inference (Hay, Rastogi, Miklau, Suciu,
    "Boosting the accuracy of differentially private histograms through consistency",
    VLDB 2010), generalised from fanout 2 to a quadtree (fanout 4).

    Every node of the complete quadtree from the root (depth 0) to the leaf depth h
    (default the run's depth L) gets a Laplace(1/eps_d) count; each location is in
    one node per level, so level d is eps_d-DP and the levels compose sequentially
    (sum eps_d = eps). Budgets: ``uniform`` (eps / (h + 1) per level, Hay et al.) or
    ``geometric`` (eps_d proportional to 2^(d/3), Cormode et al. ICDE 2012).
    Then the two-pass constrained inference (Hay et al. Theorem 3;
    :func:`constrained_inference`) makes the tree consistent and returns the leaves.
    Leaves coarser than the output cells are spread uniformly.

    Threat model: trusted curator; the public sees all the noisy node counts.
    Guarantee: epsilon-DP (central); consistency is post-processing.

    Unit of privacy: ``user`` (default) weights each of a user's k locations 1/k;
    every level is a partition of the domain, so one user moves each level's count
    vector by at most 1 in L1 and level d stays eps_d-DP (user-level), composed
    sequentially over levels as for records. ``record``: location counts, a user
    with k locations protected at k*epsilon.

    Departures: fanout 4 instead of Hay's general k (the formulae are the same with
    k = 4); with the geometric budget the inverse-variance form of the bottom-up pass
    is used (equal to Hay's weights when budgets are equal).
    """

    key = "hierarchical"
    label = "Hierarchical quadtree + consistency (Hay et al.)"
    family = "central"
    guarantee = "user-level epsilon-DP (central); record-level with unit = record"
    threat_model = "A trusted curator sees all locations; the public sees the noisy counts of every quadtree node."
    summary = "Noisy counts at every level of a quadtree, then least-squares consistency between levels."
    paper = "Hay, Rastogi, Miklau, Suciu. VLDB 2010; geometric budget: Cormode et al. ICDE 2012"
    equations = "Hay et al. Theorem 3 (two-pass constrained inference), k = 4"
    params = (
        UNIT_PARAM,
        Param("height", "int", 0, "leaf depth of the tree (0 = the run's resolution)", min=0, max=10),
        Param("budget", "choice", "uniform", "split of epsilon over levels", choices=("uniform", "geometric")),
        Param("consistency", "bool", True, "apply constrained inference (off: the raw noisy leaves)"),
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        noise = ctx.noise
        h = domain.depth if params["height"] == 0 else min(int(params["height"]), domain.depth)
        bounded = bound_contributions(data, domain, params["unit"])
        truth = bounded.data.true_histogram(domain)
        levels = pyramid(truth)[: h + 1]
        eps_levels = hierarchical_budget(h + 1, eps, params["budget"])
        ledger = Ledger()
        noisy = []
        for d, (grid, e) in enumerate(zip(levels, eps_levels)):
            noisy.append(noise.add_laplace(grid, 1.0 / e))
            ledger.spend(
                f"level {d} counts",
                float(e),
                composition="parallel",
                group=f"level {d}",
                note=f"Laplace(1/eps_{d}) per node; {bounded.short}",
            )
        ctx.check_cancelled()
        variances = 2.0 / eps_levels**2
        leaves = constrained_inference(noisy, variances)[h] if params["consistency"] else noisy[h]
        f = domain.n >> h
        density = leaves if f == 1 else leaves.repeat(f, axis=0).repeat(f, axis=1) / (f * f)
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "height": int(h),
                "levels": int(h + 1),
                "budget": params["budget"],
                "epsilon_per_level": [float(e) for e in eps_levels],
                "consistency": bool(params["consistency"]),
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(data),
            server_view=_server_view("the noisy counts of every quadtree node"),
            diagnostics=diag,
            extras={"raw_leaves": noisy[h]},
        )


CENTRAL_KEYS = ("identity", "identity_topt", "uniform", "ug", "ag", "privtree", "hierarchical")
