"""What the server of the federated KDE mechanisms sees of each user (Zong et al. 2023, Section 4.2.2): the
users as the virtual users of their locations, and a picklable per-user view (the surface each sent, the
attacker's candidate locations)."""

from __future__ import annotations

import numpy as np

from ...core.errors import DataError, ParamError
from ...core.grid import Domain
from . import localisation


class Users:
    """Virtual users (rows inside the region) and the map from dense user index to them.

    ``max_per_user`` (with ``rng``): a person with more locations inside the region keeps that
    many, drawn uniformly at random (``capped`` counts the others); without user ids every row
    is its own person and nothing is dropped."""

    def __init__(self, data, domain: Domain, max_per_user: int | None = None, rng: np.random.Generator | None = None):
        inside = domain.inside(data.xy)
        self.outside = int((~inside).sum())
        self.capped = 0
        if max_per_user is not None and data.user_id is not None:
            inv, _ = data.user_index()
            idx = np.flatnonzero(inside)
            order = np.lexsort((rng.random(idx.size), inv[idx]))  # each person's rows in random order
            grp = inv[idx][order]
            rank = np.arange(grp.size) - np.searchsorted(grp, grp)
            inside = np.zeros(len(inside), dtype=bool)
            inside[idx[order[rank < int(max_per_user)]]] = True
            self.capped = int(idx.size - inside.sum())
        self.xy = np.ascontiguousarray(data.xy[inside], dtype=np.float64)
        if len(self.xy) == 0:
            raise DataError("no location of this dataset falls inside the region")
        self.weights = None if data.weight is None else np.asarray(data.weight, dtype=np.float64)[inside]
        if self.weights is not None and (np.any(self.weights < 0) or not np.all(np.isfinite(self.weights))):
            raise DataError("location weights must be finite and non-negative")
        self.total = float(len(self.xy) if self.weights is None else self.weights.sum())
        inv, n_users = data.user_index()
        internal = np.full(len(inside), -1, dtype=np.int64)
        internal[inside] = np.arange(len(self.xy))
        order = np.argsort(inv, kind="stable")
        self.ptr = np.searchsorted(inv[order], np.arange(n_users + 1))
        self.rows = internal[order]
        self.n_users = int(n_users)

    def rows_of(self, user: int) -> np.ndarray:
        u = int(user)
        if not 0 <= u < self.n_users:
            raise ParamError(f"user index {u} out of range 0..{self.n_users - 1}")
        r = self.rows[self.ptr[u] : self.ptr[u + 1]]
        return r[r >= 0]


class FederatedKDEView:
    """Picklable per-user view: ``surface(user)`` and ``candidates(users)``.

    ``mode="rff"``: users at ``xy`` with frequencies ``z / h`` (``z`` standard normal,
    ``(N, B, 2)``; ``B = 0`` answers a constant). ``mode="kde"``: exact Gaussian
    kernels centred at ``xy`` (the true locations, or geo-indistinguishable ones).
    ``refused``: the users refused the query (nothing per user reaches the server).
    """

    def __init__(self, users: Users, mode: str, xy: np.ndarray, h: float, xs, ys, z=None, refused=False):
        self.users = users
        self.mode = mode
        self.xy = xy
        self.h = float(h)
        self.xs = np.asarray(xs, dtype=np.float64)
        self.ys = np.asarray(ys, dtype=np.float64)
        self.z = z
        self.refused = bool(refused)
        self._memo: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._grid = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_memo"] = {}
        d["_grid"] = None
        return d

    @property
    def n_features(self) -> int:
        return 0 if self.z is None else int(self.z.shape[1])

    def row_surfaces(self, rows: np.ndarray) -> np.ndarray:
        """Surfaces sent by virtual users ``rows`` on the attack grid, ``(k, ny, nx)``."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.refused:
            return np.zeros((len(rows), len(self.ys), len(self.xs)))
        if self.mode == "rff":
            return localisation.rff_user_surfaces(self.xy[rows], self.z[rows] / self.h, self.xs, self.ys)
        return np.exp(localisation.kde_user_log_surfaces(self.xy[rows], self.h, self.xs, self.ys))

    def surface(self, user: int) -> np.ndarray:
        rows = self.users.rows_of(user)
        if rows.size == 0:
            return np.zeros((len(self.ys), len(self.xs)))
        acc = np.zeros((len(self.ys), len(self.xs)))
        for s in range(0, rows.size, 64):
            acc += self.row_surfaces(rows[s : s + 64]).sum(axis=0)
        return acc / rows.size

    def _all_points(self):
        if self._grid is None:
            gx, gy = np.meshgrid(self.xs, self.ys)
            pts = np.column_stack([gx.ravel(), gy.ravel()])
            self._grid = (pts, np.full(len(pts), 1.0 / len(pts)))
        return self._grid

    def row_candidates(self, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        rows = np.asarray(rows, dtype=np.int64)
        if self.refused:
            return [(np.zeros((0, 2)), np.zeros(0)) for _ in rows]
        if self.mode == "rff" and self.n_features == 0:
            return [self._all_points() for _ in rows]  # one plateau: every grid point (shared arrays)
        need = np.array([r for r in dict.fromkeys(rows.tolist()) if r not in self._memo], dtype=np.int64)
        for s in range(0, need.size, 64):
            chunk = need[s : s + 64]
            if self.mode == "rff":
                surf = localisation.rff_user_surfaces(self.xy[chunk], self.z[chunk] / self.h, self.xs, self.ys)
                cands = localisation.candidates_on_grid(surf, self.xs, self.ys)
            else:
                surf = localisation.kde_user_log_surfaces(self.xy[chunk], self.h, self.xs, self.ys)
                cands = localisation.candidates_on_grid(surf, self.xs, self.ys, log=True)
            for r, c in zip(chunk.tolist(), cands):
                self._memo[r] = c
        return [self._memo[r] for r in rows.tolist()]

    def candidates(self, user_indices) -> list[tuple[np.ndarray, np.ndarray]]:
        users = np.atleast_1d(np.asarray(user_indices, dtype=np.int64))
        per = [self.users.rows_of(u) for u in users]
        flat = np.concatenate(per) if per else np.zeros(0, dtype=np.int64)
        got = dict(zip(flat.tolist(), self.row_candidates(flat))) if flat.size else {}
        out = []
        for rows in per:
            if rows.size == 0:
                out.append((np.zeros((0, 2)), np.zeros(0)))
            elif rows.size == 1:
                out.append(got[int(rows[0])])
            else:  # a person's several locations: pool, each location with total weight 1/k
                pts = [got[int(r)][0] for r in rows]
                wts = [got[int(r)][1] / rows.size for r in rows]
                out.append((np.concatenate(pts), np.concatenate(wts)))
        return out
