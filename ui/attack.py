"""One user under attack: the surface the server received, the truth and the attacker's guesses."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.metrics import mean_distance_to_domain

from . import explain, maps, state
from .colors import ColourScale

TOP_K = 40  # candidates drawn on the map


@dataclass
class UserView:
    surface: np.ndarray | None
    scale: ColourScale | None
    layers: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def random_user(n_users: int) -> None:
    state.put("atk.user", int(np.random.default_rng().integers(0, n_users)))


def user_view(release, ds, inv: np.ndarray, user: int, fr: maps.Frame) -> UserView:
    view = release.server_view
    rows = np.flatnonzero(inv == user)
    truth_xy = ds.xy[rows]
    out = UserView(None, None)
    if view.surface is not None:
        s = np.asarray(view.surface(user), dtype=np.float64)
        if s.ndim == 2 and s.shape[0] == s.shape[1]:
            out.surface = s if s.shape == (fr.domain.n, fr.domain.n) else _resample(s, fr.domain.n)
            pos = np.abs(out.surface)
            out.scale = ColourScale(0.0, float(pos.max()) or 1.0, False, 1.0, "received value (relative)", "cividis")
            out.surface = pos
    cand_pts = np.zeros((0, 2))
    cand_w = np.zeros(0)
    if view.candidates is not None:
        pts, wts = view.candidates(np.array([user]))[0]
        cand_pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        cand_w = np.clip(np.asarray(wts, dtype=np.float64).reshape(-1), 0, None)
        if cand_w.sum() > 0:
            cand_w = cand_w / cand_w.sum()
        elif len(cand_w):
            cand_w = np.full(len(cand_w), 1.0 / len(cand_w))
    if len(cand_pts):
        order = np.argsort(-cand_w)[:TOP_K]
        out.layers.append(
            maps.points_layer(
                fr.lonlat(cand_pts[order, 0], cand_pts[order, 1]), "candidates", [250, 200, 30, 230], 9, cand_w[order]
            )
        )
    out.layers.append(maps.points_layer(ds.lonlat[rows], "truth", [230, 30, 60, 255], 7))
    target = truth_xy[0]
    base = float(mean_distance_to_domain(target.reshape(1, 2), fr.domain)[0])
    if len(cand_pts):
        d = np.hypot(cand_pts[:, 0] - target[0], cand_pts[:, 1] - target[1])
        top = int(np.argmax(cand_w))
        out.stats["Best guess is off by"] = explain.fmt("privacy_distance_m", d[top])
        out.stats["Weighted guess distance"] = explain.fmt("privacy_distance_m", float(cand_w @ d))
        out.stats["Candidates"] = f"{len(cand_pts):,}"
    out.stats["Uninformed guess"] = explain.fmt("privacy_baseline_m", base)
    out.stats["Locations of this user"] = f"{len(rows):,}"
    return out


def _resample(s: np.ndarray, n: int) -> np.ndarray:
    k = s.shape[0]
    if k > n and k % n == 0:
        f = k // n
        return s.reshape(n, f, n, f).sum(axis=(1, 3))
    if n % k == 0:
        f = n // k
        return np.kron(s, np.ones((f, f))) / (f * f)
    idx = (np.arange(n) * k // n).astype(int)
    return s[np.ix_(idx, idx)]
