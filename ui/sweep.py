"""Trade-off sweep charts: error against ε (or users) with 95 % bands, and the frontier; the tables they
draw come from :mod:`engine.run.sweeps`."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from . import explain

# DPBench's signal strength: the data's scale (users) times ε
AXIS = {"epsilon": "ε", "eps_x_n": "scale × ε (users × ε)", "n_users": "users"}


def error_chart(summary: pd.DataFrame, metric: str, x: str, log_y: bool = True) -> alt.Chart:
    xt = AXIS[x]
    unit = explain.info(metric)[3]
    ylab = (
        explain.label(metric)
        + (f" ({unit})" if unit else "")
        + {"lower": " (lower is better)", "higher": " (higher is better)"}.get(explain.better(metric) or "", "")
    )
    yscale = alt.Scale(type="log") if log_y and (summary["mean"] > 0).all() else alt.Scale(zero=False)
    base = alt.Chart(summary).encode(
        x=alt.X(f"{x}:Q", scale=alt.Scale(type="log"), title=xt),
        color=alt.Color("mechanism:N", title="Mechanism", scale=alt.Scale(scheme="tableau10")),
    )
    band = base.mark_area(opacity=0.18).encode(y=alt.Y("lo:Q", scale=yscale, title=ylab), y2="hi:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", scale=yscale, title=ylab),
        tooltip=["mechanism", alt.Tooltip(f"{x}:Q", format=".3g"), alt.Tooltip("mean:Q", format=".4g"), "trials"],
    )
    return (band + line).properties(height=360)


def frontier_chart(fr: pd.DataFrame, metric: str, x: str, log_y: bool = True) -> alt.Chart:
    xt = AXIS[x]
    yscale = alt.Scale(type="log") if log_y and (fr["mean"] > 0).all() else alt.Scale(zero=False)
    base = alt.Chart(fr).encode(x=alt.X(f"{x}:Q", scale=alt.Scale(type="log"), title=xt))
    line = base.mark_line(color="#888", strokeDash=[4, 3]).encode(
        y=alt.Y("mean:Q", scale=yscale, title=f"best {explain.label(metric)}")
    )
    pts = base.mark_point(filled=True, size=110).encode(
        y="mean:Q",
        color=alt.Color("best mechanism:N", title="Best mechanism", scale=alt.Scale(scheme="tableau10")),
        tooltip=["best mechanism", alt.Tooltip(f"{x}:Q", format=".3g"), alt.Tooltip("mean:Q", format=".4g")],
    )
    return (line + pts).properties(height=260)


def ensure_numeric(df: pd.DataFrame, metric: str) -> bool:
    return metric in df.columns and np.isfinite(df[metric].to_numpy(dtype=float)).any()
