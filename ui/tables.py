"""Comparison tables: metrics per mechanism with the best value marked, and a ranking."""

from __future__ import annotations

import numpy as np
import pandas as pd

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


def ranking(per_seed: dict[str, list[object]], metric: str = "emd_m", confidence: float = 0.95) -> pd.DataFrame:
    """Rank mechanisms on one ``metric`` over seeds (DPComp's way): mean, 95 % t-interval, and the
    mechanisms not significantly different from the best (paired t-test over the same seeds) marked
    as tied. ``per_seed`` maps a mechanism's label to its results for the same seeds, in order."""
    from engine.metrics import rank_over_seeds

    sign = -1.0 if explain.better(metric) == "higher" else 1.0
    errors = {n: [sign * float(r.metrics.get(metric, np.nan)) for r in rs] for n, rs in per_seed.items()}
    errors = {n: v for n, v in errors.items() if v and np.all(np.isfinite(v))}
    cols = ["Rank", "Mechanism", "Mean", "95 % interval", "Tied with the best"]
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
