"""Trade-off sweeps: their configurations, the table of trials, 95 % confidence bands, the frontier.

The charts drawn from these tables are the dashboard's (``ui/sweep.py``)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats

from ...core.errors import EngineError
from ..execution import RunConfig, RunResult

if TYPE_CHECKING:
    from ..server import Light

MAX_SWEEP_RUNS = 600


def repeat_configs(cfg: RunConfig, runs: int) -> list[RunConfig]:
    """The repeated releases behind a margin from seeded repeats (:func:`engine.regions.margins.empirical`):
    ``cfg`` with the next ``runs`` seeds."""
    return [replace(cfg, seed=cfg.seed + 1 + i) for i in range(runs)]


def rank_over_seeds(errors: dict, confidence: float = 0.95) -> list[dict]:
    """Rank methods by their mean error over seeds, DPComp-style: each method's mean, a
    t-interval for it at ``confidence``, and ``tied``: not significantly different from the
    best (lowest mean) by a two-sided paired t-test over the seeds at level 1 - confidence.

    ``errors`` maps a method to its errors over the SAME seeds, in the same order (paired);
    at least 2 seeds. Returns dicts sorted by mean: method, mean, low, high, tied."""
    names = list(errors)
    arr = {k: np.asarray(errors[k], dtype=np.float64) for k in names}
    k = {a.size for a in arr.values()}
    if len(k) != 1 or k.pop() < 2:
        raise ValueError("every method needs errors for the same seeds, at least 2")
    best = min(names, key=lambda m: arr[m].mean())
    out = []
    for m in names:
        a = arr[m]
        half = stats.t.ppf(0.5 + confidence / 2, a.size - 1) * a.std(ddof=1) / np.sqrt(a.size)
        d = a - arr[best]
        tied = m == best or not (d.std(ddof=1) > 0 and stats.ttest_1samp(d, 0.0).pvalue < 1 - confidence)
        out.append(
            {
                "method": m,
                "mean": float(a.mean()),
                "low": float(a.mean() - half),
                "high": float(a.mean() + half),
                "tied": bool(tied),
            }
        )
    return sorted(out, key=lambda r: r["mean"])


def configs(base_cfgs: dict[str, RunConfig], epsilons, users, trials: int, seed0: int = 0) -> list[RunConfig]:
    """mechanism x ε x users x trial; trial t uses seed ``seed0 + t`` (a fresh release each)."""
    out = []
    for base in base_cfgs.values():
        for e in epsilons:
            for n in users:
                for t in range(trials):
                    out.append(
                        RunConfig.from_dict({**base.to_dict(), "epsilon": float(e), "n_users": n, "seed": seed0 + t})
                    )
    return out


def trials_frame(results: list[tuple[RunConfig, RunResult | Light]], labels: dict[str, str]) -> pd.DataFrame:
    """One row per trial: mechanism, ε, users, seed, ε × n, every metric, run time."""
    rows = []
    for cfg, r in results:
        if r.n_users is None:
            raise EngineError(f"a sweep's trials are Evaluate runs, which count their users ({cfg.mechanism}: none)")
        row = {
            "mechanism": labels.get(cfg.mechanism, cfg.mechanism),
            "mechanism_key": cfg.mechanism,
            "epsilon": float(cfg.epsilon),
            "n_users": int(r.n_users),
            "seed": int(cfg.seed),
            "eps_x_n": float(cfg.epsilon) * int(r.n_users),
        }
        row.update({k: float(v) for k, v in r.metrics.items() if isinstance(v, (int, float))})
        row["run_time_s"] = float(r.timings.get("total_s", float("nan")))
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame, metric: str, x: str) -> pd.DataFrame:
    """Mean and 95 % confidence interval (Student t over trials) per mechanism and x."""

    def agg(s: pd.Series) -> pd.Series:
        v = s.dropna().to_numpy(dtype=float)
        k = len(v)
        mean = float(v.mean()) if k else math.nan
        if k > 1:
            half = float(stats.t.ppf(0.975, k - 1) * v.std(ddof=1) / math.sqrt(k))
        else:
            half = math.nan
        return pd.Series({"mean": mean, "lo": mean - half, "hi": mean + half, "trials": k})

    g = df.groupby(["mechanism", x])[metric].apply(agg).unstack().reset_index()
    return g.sort_values(["mechanism", x])


def frontier(
    summary: pd.DataFrame, metric: str, x: str, trials: pd.DataFrame | None = None, better: str = "lower"
) -> pd.DataFrame:
    """For each x, the mechanism with the best mean (DPComp-style lower envelope; ``better``: "lower" or
    "higher", the metric's direction) and, given the ``trials``, the mechanisms not significantly different
    from it over the same seeds (paired t-test at the 5 % level, :func:`rank_over_seeds`):
    DPComp marks them as tied."""
    d = better
    rows = []
    for xv, grp in summary.groupby(x):
        grp = grp.dropna(subset=["mean"])
        if grp.empty:
            continue
        best = grp.loc[grp["mean"].idxmin() if d == "lower" else grp["mean"].idxmax()]
        row = {x: xv, "best mechanism": best["mechanism"], "mean": best["mean"]}
        if trials is not None:
            t = trials[trials[x] == xv].pivot_table(index="seed", columns="mechanism", values=metric).dropna()
            if len(t) >= 2 and t.shape[1] >= 2:
                sign = -1.0 if d == "higher" else 1.0
                ranked = rank_over_seeds({m: sign * t[m].to_numpy() for m in t.columns})
                row["tied with the best"] = ", ".join(r["method"] for r in ranked[1:] if r["tied"]) or "none"
        rows.append(row)
    return pd.DataFrame(rows)
