"""Bias and noise apart, where a mechanism bounds each person's contribution (PipelineDP's utility analysis).

A study may state ``locations_per_user = k`` (a public bound, declared as side information). The proxy then
gives each of its people k locations, drawn independently from the proxy city (people who move across it:
the most a person's locations can spread), so a mechanism whose releases state no margin for people with
several locations (Adaptive HH) gets no prediction, as its release would state none.

A mechanism that bounds each person's contribution (the central ones' ``unit = user``: a person's k locations
weighted 1/k each, so one person moves the counts by at most 1 in all) counts a person with locations in
three cells as a third in each: the map estimates the people's mass per cell, and a person who was in a
cell counts less than one there. Against the count of the distinct people with a location in each cell
(or region), that is a **bias**, the same in every release and independent of ε; the **noise** is the
release's own margin. Both are computed on the proxy, at the product's statistic over its cells or
regions, and the plan says which dominates: past the noise, more ε does not bring the map closer to the
people who were there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ._forecast import PROXIES, Frame, Proxy, Users, proxy_dataset


@dataclass(frozen=True)
class SeveralProxy(Proxy):
    """A proxy whose people have ``per_user`` locations each, drawn independently from the proxy city."""

    per_user: int = 1

    def sample(self, frame: Frame, n_users: int, seed: int):
        key = ("several", self.label, self.per_user, frame.label, frame.crs, tuple(frame.meta.bbox), n_users, seed)
        if key not in PROXIES:
            if len(PROXIES) >= 16:
                PROXIES.pop(next(iter(PROXIES)))
            xy = self._points(frame, n_users * self.per_user, seed)
            ds = proxy_dataset(frame, xy, f"public proxy: {self.label}, {n_users:,} users")
            PROXIES[key] = replace(ds, user_id=np.repeat(np.arange(n_users, dtype=np.int64), self.per_user))
        return PROXIES[key]


def several(proxy: Proxy, per_user: int) -> Proxy:
    """``proxy`` with ``per_user`` locations per person (itself when 1)."""
    if per_user <= 1:
        return proxy
    label = f"{proxy.label}, {per_user} locations per user drawn independently"
    return SeveralProxy(label, proxy.preset, proxy.density, proxy.domain, per_user=per_user)


def bounds_contributions(mechanism: str) -> bool:
    """Whether the mechanism bounds a person's contribution by weighting their locations (``unit = user``)."""
    from ...mechanisms import get

    return any(p.name == "unit" for p in get(mechanism).schema().params)


@dataclass(frozen=True)
class Split:
    noise: float
    bias: float

    @property
    def dominates(self) -> str:
        return "bias" if self.bias > self.noise else "noise"

    def to_dict(self) -> dict:
        return {"noise": self.noise, "bias": self.bias, "dominates": self.dominates}


def split(proxy: Proxy, frame: Frame, users: Users, product, mechanism: str, noise: float, regions=None):
    """The product's error split into the release's noise (``noise``: its predicted figure) and the bias of
    bounding contributions, at the product's statistic; None where nothing is bounded (one location per user,
    a mechanism that does not weight them, a range-query product) or the noise has no figure."""
    if not isinstance(proxy, SeveralProxy) or product.kind == "ranges" or not bounds_contributions(mechanism):
        return None
    if noise is None or not math.isfinite(noise):
        return None
    ds = proxy.sample(frame, users.n, seed=0)
    dom = frame.domain(product.depth)
    if regions is not None:
        unit, n_units = regions.assign(ds.xy), len(regions)
    else:
        inside = dom.inside(ds.xy)
        unit = np.where(inside, dom.flat_index(ds.xy), -1)
        n_units = dom.n * dom.n
    ok = unit >= 0
    mass = np.bincount(unit[ok], weights=np.full(ok.sum(), 1.0 / proxy.per_user), minlength=n_units)
    pairs = np.unique(np.column_stack([ds.user_id[ok], unit[ok]]), axis=0)
    distinct = np.bincount(pairs[:, 1], minlength=n_units).astype(np.float64)
    gap = distinct - mass
    bias = float(np.quantile(gap, 0.9) if product.statistic == "p90" else np.median(gap))
    return Split(float(noise), bias)
