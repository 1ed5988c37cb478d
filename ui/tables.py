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


def ranking(results: dict[str, object], keys=RANK_METRICS) -> pd.DataFrame:
    """Mean rank over the utility metrics (1 = best; ties share the average rank)."""
    names = list(results)
    ranks = {}
    wins = {n: [] for n in names}
    for k in keys:
        d = explain.better(k)
        vals = np.array([float(results[n].metrics.get(k, np.nan)) for n in names])
        if d is None or np.all(np.isnan(vals)):
            continue
        s = pd.Series(-vals if d == "higher" else vals, index=names)
        ranks[k] = s.rank(method="average", na_option="bottom")
        for i in explain.best_index(k, list(vals)):
            wins[names[i]].append(explain.label(k))
    if not ranks:
        return pd.DataFrame(columns=["Mechanism", "Mean rank", "Best on"])
    mean = pd.DataFrame(ranks).mean(axis=1)
    out = pd.DataFrame(
        {
            "Mechanism": names,
            "Mean rank": [round(float(mean[n]), 2) for n in names],
            "Best on": [", ".join(wins[n]) or "–" for n in names],
        }
    ).sort_values("Mean rank", kind="stable")
    out.insert(0, "Rank", range(1, len(out) + 1))
    return out.reset_index(drop=True)
