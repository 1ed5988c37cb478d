"""One user under attack: the surface the server received, the truth and the attacker's guesses."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import streamlit as st

from engine.core.csvtext import csv_text
from engine.metrics import mean_distance_to_domain

from . import explain, maps, state
from .colors import ColourScale

TOP_K = 40  # candidates drawn on the map


@dataclass
class UserView:
    surface: np.ndarray | None
    scale: ColourScale | None
    layers: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def random_user(n_users: int) -> None:
    state.put("atk.user", int(np.random.default_rng().integers(0, n_users)))


def user_view(release, ds, inv: np.ndarray, user: int, fr: maps.Frame) -> UserView:
    view = release.server_view
    rows = np.flatnonzero(inv == user)
    truth_xy = ds.xy[rows]
    out = UserView(None, None)
    if view.surface is not None:
        s = np.asarray(view.surface(user), dtype=np.float64)
        if s.ndim == 2 and s.shape[0] == s.shape[1]:
            out.surface = s if s.shape == (fr.domain.n, fr.domain.n) else _resample(s, fr.domain.n)
            pos = np.abs(out.surface)
            out.scale = ColourScale(0.0, float(pos.max()) or 1.0, False, 1.0, "received value (relative)", "cividis")
            out.surface = pos
    cand_pts = np.zeros((0, 2))
    cand_w = np.zeros(0)
    if view.candidates is not None:
        pts, wts = view.candidates(np.array([user]))[0]
        cand_pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        cand_w = np.clip(np.asarray(wts, dtype=np.float64).reshape(-1), 0, None)
        if cand_w.sum() > 0:
            cand_w = cand_w / cand_w.sum()
        elif len(cand_w):
            cand_w = np.full(len(cand_w), 1.0 / len(cand_w))
    if len(cand_pts):
        order = np.argsort(-cand_w)[:TOP_K]
        out.layers.append(
            maps.points_layer(
                fr.lonlat(cand_pts[order, 0], cand_pts[order, 1]), "candidates", [250, 200, 30, 230], 9, cand_w[order]
            )
        )
    out.layers.append(maps.points_layer(ds.lonlat[rows], "truth", [230, 30, 60, 255], 7))
    target = truth_xy[0]
    base = float(mean_distance_to_domain(target.reshape(1, 2), fr.domain)[0])
    if len(cand_pts):
        d = np.hypot(cand_pts[:, 0] - target[0], cand_pts[:, 1] - target[1])
        top = int(np.argmax(cand_w))
        out.stats["Best guess is off by"] = explain.fmt("privacy_distance_m", d[top])
        out.stats["Weighted guess distance"] = explain.fmt("privacy_distance_m", float(cand_w @ d))
        out.stats["Candidates"] = f"{len(cand_pts):,}"
    out.stats["Uninformed guess"] = explain.fmt("privacy_baseline_m", base)
    out.stats["Locations of this user"] = f"{len(rows):,}"
    return out


def _resample(s: np.ndarray, n: int) -> np.ndarray:
    k = s.shape[0]
    if k > n and k % n == 0:
        f = k // n
        return s.reshape(n, f, n, f).sum(axis=(1, 3))
    if n % k == 0:
        f = n // k
        return np.kron(s, np.ones((f, f))) / (f * f)
    idx = (np.arange(n) * k // n).astype(int)
    return s[np.ix_(idx, idx)]


def figures_csv(res) -> str:
    """The run's attack figures as numbers (metres), one row, with what the run was."""

    c = res.config
    row = {"mechanism": c.mechanism, "dataset": c.dataset, "epsilon": c.epsilon, "seed": c.seed}
    for k in ("privacy_distance_m", "privacy_baseline_m", "privacy_ratio", "emd_m"):
        row[f"{k} [m]" if k.endswith("_m") else k] = res.metrics.get(k)
    row["users"] = res.n_users
    return csv_text([row])


CURVE_BS = (0, 1, 2, 4, 8, 16, 50)


def _curve(cfg_json: str, h_m: float, seed: int) -> dict:
    import json

    from engine.mechanisms.rff_kde.curve import privacy_utility_curve
    from engine.run import RunConfig

    from . import views

    cfg = RunConfig.from_dict(json.loads(cfg_json))
    ds, domain, _ = views.prepared(cfg)
    # the attack grid is capped at 128 x 128 here so the curve takes seconds, not minutes
    return privacy_utility_curve(
        ds, domain.with_depth(min(domain.depth, 7)), Bs=CURVE_BS, h=h_m, n_attack=200, seed=seed
    )


def curve_section(res, rcfg) -> None:
    """Privacy-utility curve over B (federated RFF KDE) and epsilon (geo-indistinguishability),
    with federated KDE and the 0-feature baseline (Zong et al., Figures 9-13)."""
    import json

    import pandas as pd

    from engine.mechanisms.rff_kde.readings import bandwidth_m

    h_m = bandwidth_m(res.release)
    if h_m is None:
        return
    st.subheader("Privacy-utility curve")
    st.caption(
        "Each point is one setting on this dataset. Utility: how well the private map ranks places like the true "
        "one (rank correlation). Privacy: how far off the attacking server's best guesses of 200 people's "
        "locations are, as a share of its guesses with nothing to go on (1 = it learns nothing; the Methods page "
        "gives the formula). RFF: B = " + ", ".join(map(str, CURVE_BS)) + " features; geo-indistinguishability: "
        "several ε; the same bandwidth as this run."
    )
    key = f"atk.curve.{rcfg.key()}"
    if st.button("Compute the curve", key="atk.curve.go", icon=":material/insights:"):
        with st.spinner("Attacking users at every setting…"):
            st.session_state[key] = _curve(json.dumps(rcfg.to_dict(), default=str), float(h_m), int(rcfg.seed))
    cur = st.session_state.get(key)
    if cur is None:
        return
    rows = []
    for r in cur["rows"]:
        setting = (
            f"B={r['B']}"
            if r["method"] == "rff"
            else (f"{r['displacement_m']:.0f} m" if r["method"] == "geoind" else "all")
        )
        rows.append(
            {
                "method": {"rff": "Federated RFF KDE", "geoind": "Geo-ind + KDE", "kde": "Federated KDE"}[r["method"]],
                "setting": setting,
                "privacy ratio": float(r["ratio"]),
                "Spearman": float(r["spearman"]),
                "privacy distance (m)": float(r["privacy_m"]),
            }
        )
    df = pd.DataFrame(rows)
    st.altair_chart(curve_chart(df), width="stretch")
    st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        column_config={
            "privacy ratio": st.column_config.NumberColumn(format="%.3f"),
            "Spearman": st.column_config.NumberColumn(format="%.3f"),
            "privacy distance (m)": st.column_config.NumberColumn(format="%.0f"),
        },
    )
    st.download_button(
        "The curve (CSV)",
        csv_text(df),
        "privacy_utility_curve.csv",
        "text/csv",
        on_click="ignore",
        icon=":material/download:",
        key="atk.csv.curve",
    )
    if cur.get("gain_per_cost"):
        st.caption("Performance gain per unit privacy cost (Figure 13): Spearman gained per km of privacy lost.")
        st.dataframe(pd.DataFrame(cur["gain_per_cost"]), hide_index=True, width="stretch")


def curve_chart(df):
    """Each method's settings joined in order by a line, every point labelled with its setting (B, or the
    geo-indistinguishable displacement); the axes fitted to the points."""
    import altair as alt

    df = df.assign(order=range(len(df)))
    pad = lambda lo, hi: [lo - 0.05 * (hi - lo or 1), hi + 0.05 * (hi - lo or 1)]  # noqa: E731
    x = alt.X(
        "privacy ratio:Q",
        title="Privacy ratio (1 = the attacker learns nothing)",
        scale=alt.Scale(domain=pad(df["privacy ratio"].min(), df["privacy ratio"].max())),
    )
    y = alt.Y(
        "Spearman:Q",
        title="Utility: Spearman rank correlation",
        scale=alt.Scale(domain=pad(df["Spearman"].min(), df["Spearman"].max())),
    )
    colour = alt.Color("method:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=400))
    base = alt.Chart(df).encode(x=x, y=y, color=colour, order="order:Q")
    tips = ["method", "setting", alt.Tooltip("privacy ratio:Q", format=".3f"), alt.Tooltip("Spearman:Q", format=".3f")]
    lines = base.mark_line(point=alt.OverlayMarkDef(size=50)).encode(tooltip=tips)
    labels = base.mark_text(align="left", dx=6, dy=-6, fontSize=11).encode(text="setting:N")
    return (lines + labels).properties(height=340)
