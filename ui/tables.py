"""Comparison tables: metrics per mechanism with the best value marked, and a ranking."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from engine.core.csvtext import csv_text

from . import explain

RANK_METRICS = ("emd_m", "l1", "mse", "sim", "cc", "spearman", "kl", "range_rel_error")


def compare_table(results: dict[str, object], keys: list[str] | None = None) -> pd.DataFrame:
    """Rows = mechanisms (labels), columns = metrics; the best value of each metric gets a ★."""
    names = list(results)
    if keys is None:
        allk: list[str] = []
        for r in results.values():
            allk += [k for k in r.metrics if k not in allk]
        keys = [k for k in explain.ordered(allk) if k in explain.PRIMARY or k.startswith("comm_")]
    cols = {}
    for k in keys:
        vals = [results[n].metrics.get(k) for n in names]
        best = explain.best_index(k, vals) if len(names) > 1 else set()
        arrow = {"lower": " ↓", "higher": " ↑"}.get(explain.better(k), "")
        cols[explain.label(k) + arrow] = [("★ " if i in best else "") + explain.fmt(k, v) for i, v in enumerate(vals)]
    return pd.DataFrame(cols, index=names)


def bound_note(results: dict[str, object]) -> str:
    """The caption of the table's "Range RMSE ÷ bound" column: what the bound is, and which of the compared
    mechanisms it binds (the matrix mechanisms, :meth:`engine.mechanisms.base.Mechanism.matrix_mechanism`)."""
    from engine.mechanisms import registry

    reg = registry()
    shown = {n: r for n, r in results.items() if "range_rmse_x_bound" in getattr(r, "metrics", {})}
    if not shown:
        return ""
    bound = [n for n, r in shown.items() if reg[r.config.mechanism].matrix_mechanism(r.config.params)]
    return (
        "*Range RMSE ÷ bound*: the RMSE of the same 200 squares over the SVD lower bound (Li and Miklau), the least "
        "expected RMSE of any ε-DP matrix mechanism on those squares (Laplace noise of data-independent scale on "
        "linear queries, a linear unbiased estimate). "
        + (f"Bound by it (never below 1 on average): {', '.join(bound)}. " if bound else "")
        + "Biased or data-dependent mechanisms (coarse cells spread evenly, clipping, thresholds, partitions read "
        "off the data) are outside its class and can go below 1; one release's value varies with its noise. Under "
        "ε-DP the bound is not attained in general (for all the rectangles of a 256 × 256 map the best strategy known, "
        "HDMM's, is 3.9 × it): compare the multiples, do not read them as room left."
    )


def ranking(per_seed: dict[str, list[object]], metric: str = "emd_m", confidence: float = 0.95) -> pd.DataFrame:
    """Rank mechanisms on one ``metric`` over seeds (DPComp's way): mean, 95 % t-interval, and the
    mechanisms not significantly different from the best (paired t-test over the same seeds) marked
    as tied. ``per_seed`` maps a mechanism's label to its results for the same seeds, in order."""
    from engine.run.analysis import rank_over_seeds

    sign = -1.0 if explain.better(metric) == "higher" else 1.0
    errors = {n: [sign * float(r.metrics.get(metric, np.nan)) for r in rs] for n, rs in per_seed.items()}
    errors = {n: v for n, v in errors.items() if v and np.all(np.isfinite(v))}
    cols = ["Rank", "Mechanism", "Tied with the best", "Mean", "95 % interval"]
    if len(errors) < 1 or min(len(v) for v in errors.values()) < 2:
        return pd.DataFrame(columns=cols)
    rows = rank_over_seeds(errors, confidence)
    out = []
    for i, r in enumerate(rows):
        lo, hi = sorted((sign * r["low"], sign * r["high"]))
        out.append(
            {
                "Rank": i + 1,
                "Mechanism": r["method"],
                "Mean": explain.fmt(metric, sign * r["mean"]),
                "95 % interval": f"{explain.fmt(metric, lo)} – {explain.fmt(metric, hi)}",
                "Tied with the best": "yes" if r["tied"] else "",
            }
        )
    return pd.DataFrame(out, columns=cols)


def ties_line(rank: pd.DataFrame) -> str:
    """The ranking's verdict in one line above the table: who is best and who is tied with it."""
    if rank.empty:
        return "Not enough releases to rank."
    tied = [m for m, t in zip(rank["Mechanism"], rank["Tied with the best"]) if t]
    best, rest = tied[0], tied[1:]
    if not rest:
        return f"**Best: {best}**, significantly better than every other mechanism."
    return f"**Best: {best}**, tied with {', '.join(f'**{m}**' for m in rest)} (not significantly different)."


def _unit_name(key: str) -> str:
    unit = explain.info(key)[3]
    return f"{key} [{unit}]" if unit else key


def metrics_csv(results: dict[str, object], sigma: float) -> str:
    """The metrics table as numbers (full precision, units in the column names), one row per mechanism."""
    keys: list[str] = []
    for r in results.values():
        keys += [k for k in r.metrics if k not in keys]
    rows = []
    for name, r in results.items():
        c = r.config
        row = {"mechanism": name, "key": c.mechanism, "epsilon": c.epsilon, "seed": c.seed, "dataset": c.dataset}
        row.update({_unit_name(k): r.metrics.get(k) for k in explain.ordered(keys)})
        row["sim_cc_kl_filter [cells]"] = sigma
        rows.append(row)
    return csv_text(rows)


def seeds_csv(per_seed: dict[str, list[object]], sigma: float) -> str:
    """Every release of the ranking: one row per mechanism and seed, the ranked metrics as numbers."""
    rows = []
    for name, rs in per_seed.items():
        for r in rs:
            row = {"mechanism": name, "seed": r.config.seed}
            row.update({_unit_name(k): r.metrics.get(k) for k in RANK_METRICS})
            row["sim_cc_kl_filter [cells]"] = sigma
            rows.append(row)
    return csv_text(rows)


# ------------------------------------------------------------- like-for-like
SMOOTHING = {"smoothed": "smoothed maps (Ghazi et al.'s protocol)", "unsmoothed": "unsmoothed maps"}


@st.cache_data(show_spinner=False, max_entries=4)
def _truth_scored(truth: np.ndarray, sigma: float) -> np.ndarray:
    """The truth as the comparison scores it (the same for every run of one comparison: smoothed once)."""
    from engine.metrics import likeforlike

    return likeforlike.smoothed_truth(truth, sigma)


@st.cache_data(show_spinner=False, max_entries=4096)
def _rescored(key: str, sigma: float, _truth, _release) -> dict:
    """A run's SIM, CC and KL at filter width ``sigma``; ``key`` (the run's config key) names the run."""
    from engine.metrics import likeforlike

    return likeforlike.rescore(_truth_scored(np.asarray(_truth, dtype=np.float64), sigma), _release, sigma)


def comparison_sigma(results) -> float:
    """The filter the releases of a comparison that publish a smoothed heatmap use (0: none does)."""
    from engine.metrics import likeforlike

    return likeforlike.common_sigma(r.release for r in results if getattr(r, "release", None) is not None)


def like_for_like(results: dict[str, object], sigma: float) -> dict[str, object]:
    """The results with SIM, CC and KL rescored on the same maps for every mechanism: all smoothed by one
    Gaussian filter of ``sigma`` cells, or all unsmoothed (``sigma`` = 0). Other metrics are untouched;
    a result without its maps (a sweep's summary) or not a heatmap (regional means) is returned as it is."""
    out = {}
    for name, r in results.items():
        rel = getattr(r, "release", None)
        plain = rel is None or getattr(rel, "quantity", "counts") != "counts"
        if plain or getattr(r, "truth", None) is None or not getattr(r, "metrics", None):
            out[name] = r
        else:
            new = _rescored(r.config.key(), float(sigma), r.truth, r.release)
            out[name] = replace(r, metrics={**r.metrics, **new})
    return out


def smoothing_note(sigma: float) -> str:
    """What the table's SIM, CC and KL were scored on, for its caption."""
    if sigma > 0:
        return (
            f"SIM, CC and KL: every map, the truth's included, smoothed by the same Gaussian filter "
            f"(σ = {sigma:.3g} cells, Ghazi et al. 2023 §2.3) before scoring, as that paper scores them."
        )
    return "SIM, CC and KL: every map scored unsmoothed, cell by cell."


def mixed_smoothing(trials: pd.DataFrame, metric: str) -> str | None:
    """A warning when a sweep's SIM, CC or KL were scored on smoothed maps for some mechanisms and unsmoothed
    for others (a sweep keeps only each run's scores, not its maps, so it cannot rescore them)."""
    if metric not in ("sim", "cc", "kl") or "heatmap_sigma_cells" not in trials:
        return None
    by = trials.groupby("mechanism")["heatmap_sigma_cells"].max().fillna(0.0)
    smooth = sorted(by[by > 0].index)
    if not smooth or len(smooth) == len(by):
        return None
    return (
        f"Not like for like: {explain.label(metric)} of {', '.join(smooth)} is scored on Gaussian-smoothed heatmaps "
        "(Ghazi et al.'s protocol), of the others on unsmoothed maps; smoothing alone improves it. Compare scores "
        "every map through the same filter."
    )


RANK_BY = {"mean": "Mean over seeds", "regret": "Average regret (DPComp)"}


def regret_ranking(per_setting: dict, metric: str) -> pd.DataFrame:
    """Rank mechanisms by average regret, as DPComp does: in each setting a mechanism's error over the best
    error of that setting, averaged over the settings (:func:`engine.metrics.regret.average_regret`).
    ``per_setting`` maps a setting (a seed, an epsilon) to ``{mechanism label: error}``. Only for errors
    (lower is better): a ratio of scores such as SIM or a correlation is no regret."""
    from engine.metrics.regret import average_regret, regrets

    cols = ["Rank", "Mechanism", "Average regret", "Best in"]
    if explain.better(metric) == "higher" or not per_setting:
        return pd.DataFrame(columns=cols)
    clean = {s: {m: v for m, v in by.items() if v is not None and np.isfinite(v)} for s, by in per_setting.items()}
    avg = average_regret(clean)
    per = regrets({s: by for s, by in clean.items() if set(avg) <= set(by)})
    out = []
    for i, (m, r) in enumerate(avg.items()):
        best = sum(1 for by in per.values() if by[m] == 1.0)
        out.append({"Rank": i + 1, "Mechanism": m, "Average regret": f"{r:.3g}", "Best in": f"{best} of {len(per)}"})
    return pd.DataFrame(out, columns=cols)


def seed_settings(per_seed: dict[str, list[object]], metric: str) -> dict[int, dict[str, float]]:
    """``{seed index: {mechanism: metric}}`` from results over the same seeds: each seed a setting."""
    n = min((len(v) for v in per_seed.values()), default=0)
    return {i: {m: float(rs[i].metrics.get(metric, np.nan)) for m, rs in per_seed.items()} for i in range(n)}


SWEEP_RANK_BY = {"mean": "Mean over the sweep's points", "regret": "Average regret (DPComp)"}


def sweep_ranking(summary: pd.DataFrame, metric: str, x: str, by: str) -> pd.DataFrame:
    """Rank the mechanisms of a sweep (``summary``: mean per mechanism and point ``x``, ui.sweep.summarise)
    by the mean of their means over the points, or by average regret with each point a setting (DPComp:
    the points with the largest errors do not dominate it)."""
    per_setting = {xv: dict(zip(g["mechanism"], g["mean"])) for xv, g in summary.groupby(x)}
    if by == "regret":
        return regret_ranking(per_setting, metric)
    means = summary.groupby("mechanism")["mean"].mean()
    means = means.sort_values(ascending=explain.better(metric) != "higher")
    return pd.DataFrame(
        {
            "Rank": range(1, len(means) + 1),
            "Mechanism": means.index,
            "Mean over the points": [explain.fmt(metric, v) for v in means],
        }
    )
