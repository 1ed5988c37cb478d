"""Trade-off sweep charts: error against ε (or users) with 95 % bands, and the frontier; the tables they
draw come from :mod:`engine.run.analysis._sweeps`."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from . import explain

# DPBench's signal strength: the data's scale (users) times ε
AXIS = {"epsilon": "ε", "eps_x_n": "scale × ε (users × ε)", "n_users": "users"}


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
