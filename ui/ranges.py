"""Range queries: a rectangle chosen on the map or by coordinates, and random workloads."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import pydeck as pdk
import streamlit as st

from engine.core.grid import range_counts
from engine.metrics import PSI_FRAC

from . import maps, state

PICK = 16  # the clickable grid over the map is PICK x PICK cells


def _span(v: str) -> tuple[float, float]:
    a, b = (float(x) for x in state.parse_list(v))
    if not (0 <= a < b):
        raise ValueError("expected two increasing distances in km")
    return a, b


def parse_size(v: str) -> tuple[int, int]:
    a, b = (int(float(x)) for x in state.parse_list(v))
    if not (1 <= a <= b <= 100):
        raise ValueError("expected two percentages 1 <= low <= high <= 100")
    return a, b


def psi(truth) -> float:
    """SNH's smoothing floor: 0.1 % of all locations."""
    return max(PSI_FRAC * float(np.asarray(truth).sum()), 1e-12)


def rect_controls(domain, container=None) -> tuple[np.ndarray, dict]:
    """Two range sliders (km from the west and south edges); returns the rectangle in metres."""
    c = container or st
    side = domain.side / 1000
    step = float(f"{side / 200:.1g}") or 0.01
    default_x = (round(side * 0.35, 2), round(side * 0.65, 2))
    state.seed("rq.x", default_x, "rx", _span)
    state.seed("rq.y", default_x, "ry", _span)
    for k in ("rq.x", "rq.y"):  # keep within this region (the dataset may have changed)
        a, b = state.get(k)
        a, b = min(max(a, 0.0), side), min(max(b, 0.0), side)
        state.put(k, (a, b) if b > a else default_x)
    x = c.slider("West → east (km from the west edge)", 0.0, float(side), **state.bind("rq.x"), step=step)
    y = c.slider("South → north (km from the south edge)", 0.0, float(side), **state.bind("rq.y"), step=step)
    if st.session_state.get(PICKED):
        c.button("Start a new rectangle", on_click=clear_picks, key="rq_clear", icon=":material/restart_alt:")
    rect = np.array(
        [domain.x0 + x[0] * 1000, domain.y0 + y[0] * 1000, domain.x0 + x[1] * 1000, domain.y0 + y[1] * 1000]
    )
    return rect, {"rx": [round(v, 3) for v in x], "ry": [round(v, 3) for v in y]}


def pick_layer(fr: maps.Frame) -> pdk.Layer:
    """A clickable coarse grid: the rectangle becomes the bounding box of the selected cells."""
    d = fr.domain
    step = d.side / PICK
    data = []
    for j in range(PICK):
        for i in range(PICK):
            x0, y0 = d.x0 + i * step, d.y0 + j * step
            ring = fr.lonlat([x0, x0, x0 + step, x0 + step, x0], [y0, y0 + step, y0 + step, y0, y0]).round(6)
            data.append(
                {
                    "polygon": ring.tolist(),
                    "km": [i * step / 1000, j * step / 1000, (i + 1) * step / 1000, (j + 1) * step / 1000],
                }
            )
    return pdk.Layer(
        "PolygonLayer",
        id="pick",
        data=data,
        get_polygon="polygon",
        filled=True,
        stroked=True,
        get_fill_color=[255, 255, 255, 1],  # alpha 0 would not be pickable
        get_line_color=[255, 255, 255, 60],
        line_width_min_pixels=0.5,
        pickable=True,
        auto_highlight=True,
        highlight_color=[255, 80, 80, 90],
    )


PICKED = "rq.picked"  # the cells clicked since the rectangle was last set another way


def on_pick(chart_key: str) -> None:
    """Selection callback: the rectangle becomes the bounding box of every cell clicked so far, so each
    click adds its cell (a plain click replaces the chart's own selection, so the page keeps the cells)."""
    sel = st.session_state.get(chart_key)
    try:
        objs = sel["selection"]["objects"].get("pick", [])
    except (KeyError, TypeError, AttributeError):
        return
    kms = [o.get("km") for o in objs if isinstance(o, dict) and o.get("km")]
    if not kms:
        return
    picked = st.session_state.setdefault(PICKED, [])
    picked += [k for k in kms if k not in picked]
    a = np.array(picked, dtype=float)
    state.put("rq.x", (float(a[:, 0].min()), float(a[:, 2].max())))
    state.put("rq.y", (float(a[:, 1].min()), float(a[:, 3].max())))


def clear_picks() -> None:
    st.session_state.pop(PICKED, None)


def rect_layer(rect: np.ndarray, fr: maps.Frame) -> pdk.Layer:
    return pdk.Layer(
        "PathLayer",
        id="query",
        data=maps.rect_paths(np.asarray(rect).reshape(1, 4), fr),
        get_path="path",
        get_color=[230, 30, 60, 255],
        width_min_pixels=3,
    )


def exact_count(ds, rect, unit: str = "user") -> float:
    """The true count inside ``rect`` in a release's unit: for ``unit`` "user" each person weighs 1, spread
    over their locations (with no user ids, a location count); for "record", locations."""
    x0, y0, x1, y1 = rect
    xy = ds.xy
    inside = (xy[:, 0] >= x0) & (xy[:, 0] < x1) & (xy[:, 1] >= y0) & (xy[:, 1] < y1)
    if unit == "record" or (ds.user_id is None and ds.weight is None):
        return float(np.count_nonzero(inside))
    inv, u = ds.user_index()
    w = np.ones(len(ds)) if ds.weight is None else ds.weight.astype(np.float64)
    tot = np.bincount(inv, weights=w, minlength=u)[inv]
    w = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
    return float(w[inside].sum())


def shown_answer(raw: float) -> float:
    """A count cannot be negative: noise can make an estimate so; it is shown as 0 (the raw value beside it)."""
    return max(float(raw), 0.0)


def workload_squares(domain, count: int, side_pct, seed: int) -> np.ndarray:
    """The page's random squares (metres) for this seed."""
    rng = np.random.default_rng([int(seed), 7])
    return domain.random_square_queries(rng, int(count), (side_pct[0] / 100, side_pct[1] / 100))


BOUND_MAX_QUERIES = 1000  # the bound's eigenproblem has one row per square: about a second at 1,000


def workload_bounds(domain, rects: np.ndarray, configs: dict[str, object]) -> dict[str, float]:
    """Per mechanism label, the SVD lower bound of any ε-DP matrix mechanism's RMSE on these squares at the
    mechanism's ε (:func:`engine.metrics.lower_bound.rmse_bound`); none above :data:`BOUND_MAX_QUERIES` squares or
    for a mechanism without ε."""
    from engine.core.workload import RangeWorkload
    from engine.mechanisms import registry
    from engine.metrics.lower_bound import rmse_bound

    if len(rects) > BOUND_MAX_QUERIES:
        return {}
    w = RangeWorkload.rectangles(domain.rect_to_cells(rects), domain.n)
    reg = registry()
    return {n: rmse_bound(w, c.epsilon) for n, c in configs.items() if reg[c.mechanism].uses_epsilon}


def workload_errors(truth, results: dict[str, object], domain, count: int, side_pct, seed: int) -> pd.DataFrame:
    """Per-query SNH relative errors ``|y - t| / max(t, psi)``, psi = 0.1 % of the total, for random squares.

    True answers come from the true histogram with the uniformity assumption inside partly covered cells,
    exactly as the engine's range-query metric computes them."""
    rects = workload_squares(domain, count, side_pct, seed)
    t = range_counts(np.asarray(truth, dtype=np.float64), domain, rects)
    floor = psi(truth)
    frames = []
    for name, r in results.items():
        y = np.asarray(r.release.answer_range(rects), dtype=np.float64)
        frames.append(
            pd.DataFrame(
                {
                    "mechanism": name,
                    "side_pct": (rects[:, 2] - rects[:, 0]) / domain.side * 100,
                    "true": t,
                    "answer": y,
                    "relative_error": np.abs(y - t) / np.maximum(t, floor),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def error_box(df: pd.DataFrame) -> alt.Chart:
    d = df.assign(relative_error=np.maximum(df["relative_error"], 1e-6))
    return (
        alt.Chart(d)
        .mark_boxplot(extent="min-max", size=28)
        .encode(
            x=alt.X("mechanism:N", title=None),
            y=alt.Y("relative_error:Q", scale=alt.Scale(type="log"), title="relative error (log)"),
            color=alt.Color("mechanism:N", legend=None, scale=alt.Scale(scheme="tableau10")),
        )
        .properties(height=320)
    )


def error_summary(df: pd.DataFrame, bounds: dict[str, float] | None = None) -> pd.DataFrame:
    """Relative errors per mechanism; with ``bounds`` (:func:`workload_bounds`) the RMSE of the counts and its
    multiple of the SVD lower bound."""
    g = df.groupby("mechanism")["relative_error"]
    out = pd.DataFrame(
        {
            "mean": g.mean(),
            "median": g.median(),
            "90th percentile": g.quantile(0.9),
            "queries": g.size(),
        }
    )
    if bounds:
        rmse = df.assign(sq=(df["answer"] - df["true"]) ** 2).groupby("mechanism")["sq"].mean() ** 0.5
        out["RMSE"] = rmse
        out["RMSE ÷ bound"] = [rmse[m] / bounds[m] if m in bounds else np.nan for m in out.index]
    return out.sort_values("mean")


def workload_caption(bounds) -> str:
    """What the workload table's columns are, and what its lower bound means (or why there is none)."""
    return (
        "Relative error |answer − true| / max(true, 0.1 % of all locations) (SNH's measure). True answers from "
        "the true histogram, counting partly covered cells by area. "
        + (
            "RMSE ÷ bound: the RMSE of the counts over the least any ε-DP matrix mechanism can expect on these "
            "squares (SVD lower bound); linear unbiased mechanisms (Identity, HDMM) never go below 1 on average, "
            "biased or data-dependent ones can."
            if bounds
            else f"The lower bound is computed for at most {BOUND_MAX_QUERIES:,} squares."
        )
    )
