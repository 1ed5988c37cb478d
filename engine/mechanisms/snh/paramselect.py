"""ParamSelect (Zeighami et al., PVLDB 2022, Section 5.1): predict SNH's grid cell width rho
from public information only, without spending privacy budget.

Features (Section 5.1.1, Algorithm 2, ``phi(D, n, eps)``):
``(n, eps, 1/(n eps), 1/sqrt(n eps), h)`` where ``n`` is the size of the private
dataset (treated as public, as in Algorithm 3) and ``h`` is the Shannon entropy
(natural log, as ``scipy.stats.entropy``) of a 512 x 512 histogram of a *public*
dataset of the same region (the ParamSelect inference dataset ``D_I``), taken
over the public domain.

Regressor: ExtraTrees with 150 trees of depth at most 7 (Section 6.1.2).

Departures, each documented in ``data/paramselect_README.md``:

* The label is rho as a *fraction of the domain side* (the published labels are in
  units of a 10-wide normalised domain: divide by 10), so one model serves regions
  of any size.
* One extra feature, the mid query side ``(l + u) / 2`` as a fraction of the domain
  side: the paper fixes one query distribution (its label "accounts for the query
  distribution"), while the workbench lets the analyst choose ``[l, u]``. The
  training table covers two query ranges.
* A second regressor without the entropy feature serves runs with no public data
  of the region ("for regions where an auxiliary source of information is
  unavailable, we may still utilize the data-independent features", Section 5.1.1).
* The model is not shipped as a pickle (fragile across scikit-learn versions): the
  training table ``data/paramselect_table.csv`` is, made by
  ``scripts/train_paramselect.py`` on synthetic cities only, and the ExtraTrees is
  fitted from it deterministically (``random_state=0``) the first time it is needed
  (well under a second).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.grid import Domain

ENTROPY_BINS = 512
N_TREES = 150
MAX_DEPTH = 7
RHO_BOUNDS = (0.0005, 0.05)  # predictions are clipped to [0.05%, 5%] of the domain side
TABLE = Path(__file__).resolve().parents[3] / "data" / "paramselect_table.csv"
FEATURES = ("n", "eps", "inv_n_eps", "inv_sqrt_n_eps", "entropy", "q_mid")
FEATURES_NO_ENTROPY = ("n", "eps", "inv_n_eps", "inv_sqrt_n_eps", "q_mid")


def entropy_512(points_xy: np.ndarray, domain: Domain) -> float:
    """Shannon entropy (nats) of the 512 x 512 histogram of public points over the
    public domain (points outside it are ignored)."""
    pts = np.asarray(points_xy, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2:
        raise ParamError("public points must be an (n, 2) array of metres")
    d = Domain(domain.x0, domain.y0, domain.side, 9)  # 2^9 = 512 cells per side
    pts = pts[d.inside(pts)]
    if len(pts) == 0:
        raise ParamError("the public auxiliary dataset has no point inside the region")
    h = d.histogram(pts).ravel()
    p = h[h > 0] / h.sum()
    return float(-(p * np.log(p)).sum())


def feature_vector(n: float, eps: float, entropy: float | None, q_mid: float) -> dict:
    """``phi(D_I, n, eps)`` of Algorithm 2/3 plus the mid query side (fraction of the side)."""
    n = float(n)
    eps = check_epsilon(eps)
    if not (n >= 1 and math.isfinite(n)):
        raise ParamError(f"ParamSelect needs the number of records n >= 1 (got {n})")
    out = {
        "n": n,
        "eps": eps,
        "inv_n_eps": 1.0 / (n * eps),
        "inv_sqrt_n_eps": 1.0 / math.sqrt(n * eps),
        "q_mid": float(q_mid),
    }
    if entropy is not None:
        out["entropy"] = float(entropy)
    return out


# ------------------------------------------------------------------ training table
@dataclass(frozen=True)
class Row:
    features: dict
    rho: float  # best cell width, fraction of the domain side


def read_table(path: str | Path | None = None) -> list[Row]:
    """Rows of a ParamSelect training table (CSV with columns n, eps, entropy, q_lo, q_hi, best_rho)."""
    p = Path(path) if path is not None else TABLE
    if not p.is_file():
        raise ParamError(
            f"the ParamSelect training table {p} is missing; run `python scripts/train_paramselect.py` "
            "or give the cell width explicitly"
        )
    rows = []
    with p.open(newline="") as f:
        for rec in csv.DictReader(line for line in f if not line.startswith("#")):
            try:
                q_mid = (float(rec["q_lo"]) + float(rec["q_hi"])) / 2
                feats = feature_vector(float(rec["n"]), float(rec["eps"]), float(rec["entropy"]), q_mid)
                rows.append(Row(feats, float(rec["best_rho"])))
            except (KeyError, ValueError) as exc:
                raise ParamError(f"{p.name}: bad row {rec}: {exc}") from None
    if len(rows) < 4:
        raise ParamError(f"{p.name} has only {len(rows)} rows; ParamSelect needs more training samples")
    return rows


def _matrix(rows_or_feats, names) -> np.ndarray:
    return np.array([[f[c] for c in names] for f in rows_or_feats], dtype=np.float64)


@lru_cache(maxsize=4)
def _fit(path: str, with_entropy: bool, mtime: float):
    from sklearn.ensemble import ExtraTreesRegressor

    rows = read_table(path)
    names = FEATURES if with_entropy else FEATURES_NO_ENTROPY
    X = _matrix([r.features for r in rows], names)
    y = np.array([r.rho for r in rows])
    model = ExtraTreesRegressor(n_estimators=N_TREES, max_depth=MAX_DEPTH, random_state=0, n_jobs=1)
    model.fit(X, y)
    return model, names, len(rows)


def regressor(with_entropy: bool = True, path: str | Path | None = None):
    """The fitted ExtraTrees (cached per table file and its modification time)."""
    p = Path(path) if path is not None else TABLE
    if not p.is_file():
        read_table(p)  # raises the explanatory error
    return _fit(str(p), bool(with_entropy), p.stat().st_mtime)


def predict_rho(
    n: float, eps: float, q_lo: float, q_hi: float, entropy: float | None = None, path: str | Path | None = None
) -> tuple[float, dict]:
    """Predicted cell width (fraction of the domain side) and the features used.

    ``entropy=None`` uses the data-independent regressor (no public data of the region)."""
    feats = feature_vector(n, eps, entropy, (q_lo + q_hi) / 2)
    model, names, n_rows = regressor(entropy is not None, path)
    x = _matrix([feats], names)
    rho = float(np.clip(model.predict(x)[0], *RHO_BOUNDS))
    info = {"features": {k: feats[k] for k in names}, "training_rows": n_rows, "rho_frac": rho}
    return rho, info
