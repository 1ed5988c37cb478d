"""Contribution bounding and the unit of privacy of the curator's mechanisms: the ``unit`` parameter,
:func:`bound_contributions` (user- or record-level) and what it did (:class:`Bounded`). The central baselines'
package docstring (:mod:`engine.mechanisms.central`) gives the argument for the sensitivity of each way."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...core.errors import ParamError
from ...core.grid import Domain
from ...core.params import Param

PRIVACY_UNIT = (
    "one location record; a user with k locations is protected at k*epsilon (group privacy), "
    "a record of weight w at w*epsilon"
)
PRIVACY_UNIT_USER = "one user (all of a user's locations together): user-level epsilon-DP"
UNITS = ("user", "record")

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
