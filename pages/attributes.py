"""Attributes: private means of a numeric attribute per region (e.g. mean age by district)."""

import numpy as np
import streamlit as st

from engine.mechanisms import registry
from ui import attributes, controls, views
from ui.colors import ColourScale
from ui.page import page
from ui.text import plain

with_value = [k for k in controls.mechanism_keys() if "value" in registry()[k].needs]
with page(
    "Attributes by region",
    "Some mechanisms release a numeric attribute (such as age) averaged over regions, with a standard error; "
    "regions with too few people are suppressed. True and private means side by side.",
    sidebar={
        "mechanisms": "single",
        "mech_key": "attr.mech",
        "default_mech": with_value[0] if with_value else None,
        "kind": "attribute",
    },
    release_only="Attributes",
) as p:
    ctl = p.ctl
    if not with_value:
        st.info(
            "No registered mechanism releases regional means yet (they declare `needs = ('value',)`). "
            "This page shows any release that carries regional means.",
            icon=":material/bar_chart:",
        )
    cfg = ctl.config() if ctl.ready else None
    missing = attributes.without_value(views.dataset(cfg)) if cfg is not None else None
    if missing:  # said before Run, which stays off: every mechanism here needs the attribute
        st.info(plain(missing, 600), icon=":material/info:")
    configs = [cfg] if cfg is not None and not missing else []
    g = p.launch("attributes", configs, label="Attribute run")
    show = p.shown("attributes", g)
    if show is not None:
        res, rcfg = show.results[0], show.configs[0]
        views.data_badge(res.dataset_meta, res.n_points, res.n_users)
        if not attributes.has_regions(res):
            st.info(
                f"{views.mech_label(rcfg.mechanism)} released a heatmap but no regional means. "
                + (f"Try: {', '.join(views.mech_label(k) for k in with_value)}." if with_value else ""),
                icon=":material/info:",
            )
        else:
            vname = getattr(res.dataset_meta, "value_name", "") or "value"
            df = attributes.region_frame(res)
            fr = views.frame(rcfg, res.release.domain)
            vals = np.concatenate([df["true mean"].dropna(), df["private mean"].dropna()])
            lo, hi = (float(vals.min()), float(vals.max())) if len(vals) else (0.0, 1.0)
            view = fr.view(0.0, (0.0, 0.0), px=300)
            m1, m2 = st.columns(2)
            for col, which, key in ((m1, "true mean", "attr_true"), (m2, "private mean", "attr_private")):
                views.heat_chart(
                    None,
                    None,
                    fr,
                    view,
                    key,
                    ctl.display,
                    extra_layers=[attributes.region_layer(res, fr, which, lo, hi, ctl.display.cmap)],
                    title=f"{which.capitalize()} of {vname}",
                    container=col,
                    height=360,
                )
            legend = ColourScale(lo, hi if hi > lo else lo + 1, False, 1.0, f"mean {vname}", ctl.display.cmap)
            st.html(legend.legend_html(floor="grey: suppressed region (too few people to release)"))
            a, b = st.columns([3, 2])
            a.altair_chart(attributes.scatter(df, vname), width="stretch")
            unit = f" ({vname})"
            b.dataframe(
                df,
                hide_index=True,
                width="stretch",
                column_config={
                    k: st.column_config.NumberColumn(k + unit, format="%.2f")
                    for k in ("true mean", "private mean", "std. error", "error")
                },
            )
            n_sup = int(df["suppressed"].sum())
            b.caption(f"{n_sup} of {len(df)} regions suppressed. {attributes.ERROR_BARS}")
            b.download_button(
                "Regions (CSV)",
                attributes.regions_csv(res, df, vname),
                "attribute_regions.csv",
                "text/csv",
                on_click="ignore",
                icon=":material/download:",
                key="attr.csv",
            )
        views.ledger_block(res, st.expander("Privacy ledger"))
