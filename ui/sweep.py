"""Trade-off sweeps: configurations, the trial table, 95 % confidence bands, the frontier, charts."""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd
from scipy import stats

from engine.jobs import RunConfig

from . import explain

MAX_RUNS = 600
# DPBench's signal strength: the data's scale (users) times ε
AXIS = {"epsilon": "ε", "eps_x_n": "scale × ε (users × ε)", "n_users": "users"}


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


def trials_frame(results: list[tuple[RunConfig, object]], labels: dict[str, str]) -> pd.DataFrame:
    """One row per trial: mechanism, ε, users, seed, ε × n, every metric, run time."""
    rows = []
    for cfg, r in results:
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


def frontier(summary: pd.DataFrame, metric: str, x: str, trials: pd.DataFrame | None = None) -> pd.DataFrame:
    """For each x, the mechanism with the best mean (DPComp-style lower envelope) and, given the
    ``trials``, the mechanisms not significantly different from it over the same seeds (paired
    t-test at the 5 % level, :func:`engine.metrics.rank_over_seeds`): DPComp marks them as tied."""
    from engine.metrics import rank_over_seeds

    d = explain.better(metric) or "lower"
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


# mechanisms' full names, under the chart where they have its width (Vega-Lite cuts labels at 160 px)
FULL_NAMES = alt.Legend(orient="bottom", direction="vertical", labelLimit=0, columns=2)


def fitted_scale(values, log: bool) -> alt.Scale:
    """An axis that spans the data with a small margin, not rounded out to the next decade or to zero."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if log and (v > 0).any():  # a band's lower end below zero is cut at the axis
        lo, hi = float(v[v > 0].min()), float(v.max())
        f = (hi / lo) ** 0.05 if hi > lo else 1.2
        return alt.Scale(type="log", domain=[lo / f, hi * f], nice=False)
    if not v.size:
        return alt.Scale(zero=False)
    lo, hi = float(v.min()), float(v.max())
    m = 0.05 * (hi - lo) if hi > lo else 0.05 * abs(hi) or 1.0
    return alt.Scale(domain=[lo - m, hi + m], nice=False, zero=False)


def error_chart(summary: pd.DataFrame, metric: str, x: str, log_y: bool = True) -> alt.Chart:
    xt = AXIS[x]
    unit = explain.info(metric)[3]
    ylab = (
        explain.label(metric)
        + (f" ({unit})" if unit else "")
        + {"lower": " (lower is better)", "higher": " (higher is better)"}.get(explain.better(metric) or "", "")
    )
    ys = pd.concat([summary["mean"], summary["lo"], summary["hi"]])
    yscale = fitted_scale(ys, log_y and bool((summary["mean"] > 0).all()))
    base = alt.Chart(summary).encode(
        x=alt.X(f"{x}:Q", scale=fitted_scale(summary[x], True), title=xt),
        color=alt.Color("mechanism:N", title="Mechanism", scale=alt.Scale(scheme="tableau10"), legend=FULL_NAMES),
    )
    band = base.mark_area(opacity=0.18).encode(y=alt.Y("lo:Q", scale=yscale, title=ylab), y2="hi:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", scale=yscale, title=ylab),
        tooltip=["mechanism", alt.Tooltip(f"{x}:Q", format=".3g"), alt.Tooltip("mean:Q", format=".4g"), "trials"],
    )
    return (band + line).properties(height=360)


def frontier_chart(fr: pd.DataFrame, metric: str, x: str, log_y: bool = True) -> alt.Chart:
    xt = AXIS[x]
    yscale = fitted_scale(fr["mean"], log_y and bool((fr["mean"] > 0).all()))
    base = alt.Chart(fr).encode(x=alt.X(f"{x}:Q", scale=fitted_scale(fr[x], True), title=xt))
    line = base.mark_line(color="#888", strokeDash=[4, 3]).encode(
        y=alt.Y("mean:Q", scale=yscale, title=f"best {explain.label(metric)}")
    )
    pts = base.mark_point(filled=True, size=110).encode(
        y="mean:Q",
        color=alt.Color(
            "best mechanism:N", title="Best mechanism", scale=alt.Scale(scheme="tableau10"), legend=FULL_NAMES
        ),
        tooltip=["best mechanism", alt.Tooltip(f"{x}:Q", format=".3g"), alt.Tooltip("mean:Q", format=".4g")],
    )
    return (line + pts).properties(height=260)


def ensure_numeric(df: pd.DataFrame, metric: str) -> bool:
    return metric in df.columns and np.isfinite(df[metric].to_numpy(dtype=float)).any()
