"""One-line explanations of the engine's metrics, their direction and display format.

The formulas live in :mod:`engine.metrics`; this only says what a number means to
a reader of the dashboard. Unknown metrics (added later) are shown with their key.
"""

from __future__ import annotations

import math

# key: (label, one-line explanation, better: "lower" | "higher" | None, unit)
METRICS: dict[str, tuple[str, str, str | None, str]] = {
    "mse": ("MSE", "Mean squared difference per cell of the two maps, each scaled to sum to 1.", "lower", ""),
    "l1": (
        "L1",
        "Share of the population drawn in the wrong place, doubled (0 = identical, 2 = disjoint).",
        "lower",
        "",
    ),
    "emd_m": (
        "EMD",
        "Average distance people would have to move to turn the private map into the true one.",
        "lower",
        "m",
    ),
    "emd_bound_m": (
        "EMD bound",
        "How much the EMD figure may be off because it is computed on a coarser grid.",
        None,
        "m",
    ),
    "sim": ("SIM", "Overlap of the two maps (histogram intersection): 1 = identical.", "higher", ""),
    "cc": (
        "CC",
        "Pearson correlation between the maps' cells: 1 = perfectly aligned hot and cold spots.",
        "higher",
        "",
    ),
    "spearman": ("Spearman", "Rank correlation of cells: do busy places stay busier than quiet ones?", "higher", ""),
    "kl": ("KL", "Information lost using the private map in place of the true one (0 = none).", "lower", ""),
    "heatmap_sigma_cells": (
        "Heatmap filter (cells)",
        "SIM, CC and KL are scored as Ghazi et al. score them: on the Gaussian-smoothed heatmaps (the release's "
        "and the truth's, this filter width in cells). 0: scored on the unsmoothed maps.",
        None,
        "cells",
    ),
    "mape": ("MAPE", "Mean relative error per cell (zero cells use the smallest true value).", "lower", ""),
    "smape": ("sMAPE", "Symmetric relative error per cell, from 0 (exact) to 2.", "lower", ""),
    "maape": (
        "MAAPE",
        "Arctangent relative error per cell, from 0 (exact) to π/2; robust to empty cells.",
        "lower",
        "",
    ),
    "range_rel_error": (
        "Range-query error",
        "Mean relative error of counts in 200 random squares (2–10 % of the side), SNH's measure.",
        "lower",
        "",
    ),
    "dpbench_l1": ("DPBench L1", "Per-query error of the same squares as a share of the population.", "lower", ""),
    "range_rmse": ("Range RMSE", "Root-mean-squared error of the counts in the same squares.", "lower", ""),
    "range_rmse_x_bound": (
        "Range RMSE ÷ bound",
        "The same RMSE over the least any ε-DP matrix mechanism can expect on these squares (the SVD lower bound): "
        "linear unbiased mechanisms with data-independent noise (Identity, HDMM) never go below 1 on average; "
        "biased or data-dependent ones can.",
        "lower",
        "",
    ),
    "privacy_distance_m": (
        "Privacy distance",
        "How far an attacker's best guess of a person's location lands from the truth (larger = more private).",
        "higher",
        "m",
    ),
    "privacy_baseline_m": (
        "Uninformed guess",
        "The same distance for an attacker who only knows the region (a random point in it).",
        None,
        "m",
    ),
    "privacy_ratio": (
        "Privacy ratio",
        "Privacy distance ÷ uninformed guess: 1 = the release reveals nothing about where someone is.",
        "higher",
        "",
    ),
    "comm_elements_per_client": ("Upload per client", "Numbers each person's device sends.", "lower", "elements"),
    "comm_bits_per_client": ("Upload per client", "Bits each person's device sends.", "lower", "bits"),
}
PRIMARY = (
    "emd_m",
    "l1",
    "mse",
    "sim",
    "cc",
    "spearman",
    "kl",
    "range_rel_error",
    "range_rmse_x_bound",
    "privacy_ratio",
)
UTILITY_SKIP = ("emd_bound_m", "privacy_baseline_m")


def info(key: str) -> tuple[str, str, str | None, str]:
    if key in METRICS:
        return METRICS[key]
    if key.startswith("nrmse_"):
        name = key[len("nrmse_") :].replace("_", " ")
        return (f"NRMSE {name}", f"Relative error of the released {name} (root-mean-square / true value).", "lower", "")
    return (key, "", "lower" if ("error" in key or key.endswith("_m")) else None, "")


def label(key: str) -> str:
    return info(key)[0]


def better(key: str) -> str | None:
    return info(key)[2]


def fmt(key: str, value) -> str:
    if value is None:
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "n/a"
    unit = info(key)[3]
    if unit == "m":
        return f"{v / 1000:.2f} km" if abs(v) >= 1000 else f"{v:.0f} m"
    if unit in ("elements", "bits"):
        return f"{v:,.0f} {unit}"
    if key in BOUNDED or abs(v) < 1e-12:  # a correlation of -2e-17 is 0.000, not a number to decipher
        return f"{0.0 if abs(v) < 5e-4 else v:.3f}"
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    if abs(v) < 1e-3:
        return sci(v)
    return f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}"


BOUNDED = ("sim", "cc", "spearman", "privacy_ratio", "l1")  # metrics between -1/0 and 1/2
_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def sci(v: float) -> str:
    """1.2e-10 as "1.2 × 10⁻¹⁰": the same number, readable."""
    m, e = f"{v:.2g}".split("e") if "e" in f"{v:.2g}" else (f"{v:.2g}", "0")
    e = int(e)
    return f"{m} × 10{str(e).translate(_SUP)}" if e else m


def ordered(keys) -> list[str]:
    keys = list(keys)
    first = [k for k in PRIMARY if k in keys]
    return first + [k for k in keys if k not in first]


def best_index(key: str, values: list) -> set[int]:
    """Indices of the best value(s) of a metric (empty when it has no direction)."""
    d = better(key)
    vals = [float(v) if v is not None else math.nan for v in values]
    finite = [v for v in vals if not math.isnan(v)]
    if d is None or not finite:
        return set()
    b = min(finite) if d == "lower" else max(finite)
    return {i for i, v in enumerate(vals) if not math.isnan(v) and math.isclose(v, b, rel_tol=1e-12, abs_tol=1e-15)}
