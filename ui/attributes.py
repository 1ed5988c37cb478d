"""Regional means of a numeric attribute (e.g. age) released privately, region by region.

Generic over any run whose release carries regional means (``Release.regional``: the regions' rectangles in
metres, each region's private mean, its standard error and whether it was suppressed); the true means,
computed from the truth, are in the run's evaluation record (``region_true_mean``), never in the release.
Error bars are the 95 % margin of :mod:`engine.regions.margins` (:data:`~engine.regions.margins.MEAN_RULE`)."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import pydeck as pdk

from engine.core.csvtext import csv_text
from engine.regions.margins import MEAN_RULE, mean_margins

from . import maps
from .colors import lut

ERROR_BARS = f"Error bars: the 95 % margin, {MEAN_RULE}."


def without_value(dataset) -> str | None:
    """Why the page's mechanisms cannot run on ``dataset`` (it has no numeric attribute), or None. Read off the
    dataset's columns, its schema: no statistic of the data."""
    if dataset.value is not None:
        return None
    return (
        f"{dataset.meta.name} has no numeric attribute, and the mechanisms of this page release the mean of one per "
        "region (such as an age or a price), so there is nothing to run. A file gives it in a column named value; "
        "the synthetic cities (age) and the Berlin listings (price) carry one."
    )


def has_regions(result) -> bool:
    return result.release.regional is not None


def region_frame(result) -> pd.DataFrame:
    reg = result.release.regional
    k = len(np.asarray(reg.rects).reshape(-1, 4))
    true = (getattr(result, "evaluation", None) or {}).get("region_true_mean")
    df = pd.DataFrame(
        {
            "region": np.arange(k),
            "true mean": (np.full(k, np.nan) if true is None else np.asarray(true).reshape(-1)).astype(float),
            "private mean": np.asarray(reg.mean, dtype=float).reshape(-1),
            "std. error": np.asarray(reg.stderr, dtype=float).reshape(-1),
            "suppressed": np.asarray(reg.suppressed, dtype=bool).reshape(-1),
        }
    )
    df["error"] = df["private mean"] - df["true mean"]
    df.loc[df["suppressed"], ["private mean", "error"]] = np.nan
    return df


def region_layer(result, fr: maps.Frame, which: str, lo: float, hi: float, cmap: str = "viridis") -> pdk.Layer:
    rects = np.asarray(result.release.regional.rects, dtype=np.float64).reshape(-1, 4)
    df = region_frame(result)
    vals = df[which].to_numpy(dtype=float)
    colours = lut(cmap, 255)
    paths = maps.rect_paths(rects, fr)
    data = []
    for p, v, sup in zip(paths, vals, df["suppressed"]):
        if sup or not np.isfinite(v):
            fill = [160, 160, 160, 110]
        else:
            t = 0.0 if hi <= lo else (v - lo) / (hi - lo)
            r, g, b = colours[int(np.clip(t, 0, 1) * 254)]
            fill = [int(r), int(g), int(b), 210]
        data.append({"polygon": p["path"], "fill": fill, "value": None if not np.isfinite(v) else round(float(v), 3)})
    return pdk.Layer(
        "PolygonLayer",
        id=f"regions_{which.replace(' ', '_')}",
        data=data,
        get_polygon="polygon",
        get_fill_color="fill",
        get_line_color=[255, 255, 255, 160],
        line_width_min_pixels=1,
        pickable=True,
    )


def scatter(df: pd.DataFrame, value_name: str) -> alt.Chart:
    """Private against true mean per region, with bars of its 95 % margin (:data:`ERROR_BARS`) and the diagonal."""
    d = df.dropna(subset=["private mean", "true mean"]).copy()
    half = mean_margins(d["std. error"].fillna(0).to_numpy())
    d["lo"] = d["private mean"] - half
    d["hi"] = d["private mean"] + half
    lo = float(min(d["true mean"].min(), d["lo"].min())) if len(d) else 0.0
    hi = float(max(d["true mean"].max(), d["hi"].max())) if len(d) else 1.0
    sc = alt.Scale(domain=[lo, hi], zero=False)
    diag = alt.Chart(pd.DataFrame({"x": [lo, hi], "y": [lo, hi]})).mark_line(color="#999", strokeDash=[4, 3])
    diag = diag.encode(x=alt.X("x:Q", scale=sc), y=alt.Y("y:Q", scale=sc))
    base = alt.Chart(d).encode(x=alt.X("true mean:Q", title=f"true mean {value_name}", scale=sc))
    bars = base.mark_rule(color="#3b528b", opacity=0.5, clip=True).encode(y=alt.Y("lo:Q", scale=sc), y2="hi:Q")
    pts = base.mark_circle(size=60, color="#3b528b").encode(
        y=alt.Y("private mean:Q", title="private mean", scale=sc),
        tooltip=["region", "true mean", "private mean", "std. error"],
    )
    return (diag + bars + pts).properties(height=320)


def regions_csv(result, df: pd.DataFrame, vname: str) -> str:
    """The regions' table with their rectangles (metres, the release's local CRS) and the value's name."""
    rects = np.asarray(result.release.regional.rects, dtype=np.float64).reshape(-1, 4)
    out = df.rename(columns={k: f"{k} [{vname}]" for k in ("true mean", "private mean", "std. error", "error")})
    for i, name in enumerate(("x0", "y0", "x1", "y1")):
        out[f"{name} [m]"] = rects[:, i]
    out.insert(0, "mechanism", result.config.mechanism)
    return csv_text(out)
