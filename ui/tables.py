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
    from engine.run.sweeps import rank_over_seeds

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
