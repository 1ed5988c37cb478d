"""The privacy-utility curve of Zong et al. 2023, Figures 10-13: utility (Spearman rank correlation
of the raw surfaces, :func:`spearman_raw`) against the localisation attack's error, for federated KDE,
RFF KDE and geo-indistinguishable KDE (:func:`privacy_utility_curve`, :func:`gain_per_privacy_cost`)."""

from __future__ import annotations

import math

import numpy as np

from ...core.errors import DataError, ParamError
from ...core.grid import Domain
from .datasets import B_ACROSS_VAR, mixture_truth
from .kde import axes, kde_grid_sum, rff_grid_sum
from .localisation import (
    attack_cells,
    candidates_on_grid,
    eq16_scores,
    kde_user_log_surfaces,
    rff_user_surfaces,
    zero_feature_distance,
)


# ================================================================= utility
def spearman_raw(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two surfaces over all grid points, ties averaged,
    on the raw values (the paper ranks f' itself, negative values included; equal to
    ``engine.metrics.spearman`` when both maps are non-negative). 0 if one is constant."""
    from scipy.stats import rankdata

    ra = rankdata(np.asarray(a, dtype=np.float64).ravel())
    rb = rankdata(np.asarray(b, dtype=np.float64).ravel())
    ra -= ra.mean()
    rb -= rb.mean()
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb / den) if den > 0 else 0.0


# ===================================================== privacy-utility curve
def default_geoind_eps(domain: Domain) -> list[float]:
    """Geo-indistinguishability levels (per metre) of the paper's synthetic runs,
    ``eps in {0.6, 0.7, 0.8, 1, 3, 5, 10}`` per unit on a 6-unit region, rescaled to
    this domain's side (same expected displacement ``2 / eps`` as a fraction of the side)."""
    return [e * 6.0 / domain.side for e in (0.6, 0.7, 0.8, 1.0, 3.0, 5.0, 10.0)]


def _attack_kde(xy_seen: np.ndarray, xy_true: np.ndarray, h: float, xs, ys, chunk: int = 64) -> np.ndarray:
    out = []
    for s in range(0, len(xy_seen), chunk):
        c = candidates_on_grid(kde_user_log_surfaces(xy_seen[s : s + chunk], h, xs, ys), xs, ys, log=True)
        out.append(eq16_scores(c, xy_true[s : s + chunk])[0])
    return np.concatenate(out) if out else np.zeros(0)


def _attack_rff(xy: np.ndarray, omega: np.ndarray, xs, ys, chunk: int = 64) -> np.ndarray:
    if omega.shape[1] == 0:
        return zero_feature_distance(xy, xs, ys)
    out = []
    for s in range(0, len(xy), chunk):
        c = candidates_on_grid(rff_user_surfaces(xy[s : s + chunk], omega[s : s + chunk], xs, ys), xs, ys)
        out.append(eq16_scores(c, xy[s : s + chunk])[0])
    return np.concatenate(out) if out else np.zeros(0)


def privacy_utility_curve(
    data,
    domain: Domain,
    Bs=(0, 1, 2, 3, 4, 5, 6, 7, 8, 50),
    eps_list=None,
    h: float | None = None,
    reference: np.ndarray | str | None = "auto",
    n_attack: int = 500,
    seed: int = 0,
    include_kde: bool = True,
    progress=None,
) -> dict:
    """Privacy (Eq. 16, metres, mean over ``n_attack`` sampled users) and utility
    (Spearman against ``reference``) of Federated RFF KDE for each ``B``, of
    geo-indistinguishability + federated KDE for each ``eps`` (per metre), and of
    Federated KDE, on ``data`` (each row a virtual user, Section 4.1.2).

    ``reference``: the ground-truth surface on the domain's grid (synthetic data);
    None uses the full-data KDE (real data, Section 4.2.1); ``"auto"`` (default) uses
    the true density for the mixture datasets of :func:`mixture_dataset` and the
    full-data KDE otherwise. ``h``: bandwidth in metres
    (None: 5 % of the domain side, the mechanisms' default rule). Features are drawn
    once per user and the first ``B`` are used for each ``B`` (each ``B`` is then an
    exact draw of Algorithm 2; the curve is smoother than with independent draws).
    The attack runs on the query grid capped at 256 x 256 (:func:`attack_cells`).

    Returns ``{"h_m", "reference", "n_users", "n_attack", "attack_cells", "zero_feature_m",
    "rows": [...], "gain_per_cost": [...]}``; each row has ``method`` ("rff",
    "geoind", "kde"), ``B`` or ``eps_per_m`` and ``displacement_m``, ``spearman``,
    ``privacy_m``, ``ratio`` (privacy over the 0-feature value).
    """
    rng = np.random.default_rng(seed)
    inside = domain.inside(data.xy)
    xy = np.asarray(data.xy, dtype=np.float64)[inside]
    if len(xy) == 0:
        raise DataError("no location inside the region")
    wts = None if getattr(data, "weight", None) is None else np.asarray(data.weight, dtype=np.float64)[inside]
    h = 0.05 * domain.side if h is None else float(h)
    if not h > 0:
        raise ParamError("the bandwidth must be positive")
    Bs = sorted({int(b) for b in Bs})
    if Bs and (Bs[0] < 0 or Bs[-1] > 1000):
        raise ParamError("numbers of features must be in 0..1000")
    eps_list = default_geoind_eps(domain) if eps_list is None else [float(e) for e in eps_list]
    xs, ys = axes(domain)
    na = attack_cells(domain)
    axs, ays = axes(domain, na)
    extra = getattr(getattr(data, "meta", None), "extra", None) or {}
    if isinstance(reference, str):
        if reference != "auto":
            raise ParamError(f"unknown reference {reference!r}")
        reference = None
        if extra.get("mixture") in ("a", "b"):
            reference = mixture_truth(extra["mixture"], domain, extra["unit_m"], extra.get("b_var", B_ACROSS_VAR))
    ref_name = "given" if reference is not None else "full-data KDE"
    if extra.get("mixture") in ("a", "b") and reference is not None:
        ref_name = "true mixture density"
    if reference is None:
        reference = kde_grid_sum(xy, h, xs, ys, wts)
    m = min(int(n_attack), len(xy))
    att = np.sort(rng.choice(len(xy), size=m, replace=False))
    zero = float(zero_feature_distance(xy[att], axs, ays).mean())
    bmax = max(Bs) if Bs else 0
    z = rng.standard_normal((len(xy), bmax, 2))
    total = len(Bs) + len(eps_list) + int(include_kde)
    done = 0
    rows = []

    def tick(msg):
        nonlocal done
        done += 1
        if progress:
            progress(done / max(total, 1), msg)

    for b in Bs:
        om = z[:, :b] / h
        dens = rff_grid_sum(xy, om, xs, ys, wts) if b > 0 else np.ones((len(ys), len(xs)))
        priv = float(_attack_rff(xy[att], om[att], axs, ays).mean())
        rows.append(
            {
                "method": "rff",
                "B": b,
                "spearman": spearman_raw(reference, dens),
                "privacy_m": priv,
                "ratio": priv / zero,
            }
        )
        tick(f"B = {b}")
    if include_kde:
        dens = kde_grid_sum(xy, h, xs, ys, wts)
        priv = float(_attack_kde(xy[att], xy[att], h, axs, ays).mean())
        rows.append(
            {"method": "kde", "spearman": spearman_raw(reference, dens), "privacy_m": priv, "ratio": priv / zero}
        )
        tick("federated KDE")
    from ...core.noise import planar_laplace

    for e in eps_list:
        noisy = xy + planar_laplace(rng, e, len(xy))
        dens = kde_grid_sum(noisy, h, xs, ys, wts)
        priv = float(_attack_kde(noisy[att], xy[att], h, axs, ays).mean())
        rows.append(
            {
                "method": "geoind",
                "eps_per_m": e,
                "displacement_m": 2.0 / e,
                "spearman": spearman_raw(reference, dens),
                "privacy_m": priv,
                "ratio": priv / zero,
            }
        )
        tick(f"eps = {e:.3g}/m")
    return {
        "h_m": h,
        "reference": ref_name,
        "n_users": int(len(xy)),
        "n_attack": m,
        "attack_cells": na,
        "zero_feature_m": zero,
        "rows": rows,
        "gain_per_cost": gain_per_privacy_cost(rows),
    }


def gain_per_privacy_cost(rows: list[dict]) -> list[dict]:
    """Figure 13: for B >= 2, ``(S_B - S_1) / (Z_1 - Z_B)``, the Spearman gained per
    kilometre of privacy distance lost relative to one feature (NaN when no privacy
    is lost)."""
    rff = {r["B"]: r for r in rows if r.get("method") == "rff"}
    if 1 not in rff:
        return []
    s1, z1 = rff[1]["spearman"], rff[1]["privacy_m"]
    out = []
    for b in sorted(k for k in rff if k >= 2):
        gain = rff[b]["spearman"] - s1
        cost_km = (z1 - rff[b]["privacy_m"]) / 1000.0
        out.append(
            {"B": b, "gain": gain, "cost_km": cost_km, "gain_per_km": gain / cost_km if cost_km > 0 else math.nan}
        )
    return out
