"""The Data page's blocks: provenance card, density preview, attribute summaries, catalogue."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from engine.run.execution import REGION_FROM_DATA, region_frame

from . import views
from .text import plain

SAMPLE = 50_000  # points used for attribute histograms


def source_card(src) -> None:
    st.markdown(f"### {plain(src.label)}")
    st.markdown(plain(src.description, 2000))
    rows = {"Source key": src.key, "Kind": src.kind, "Citation": src.citation or "—", "Licence": src.license or "—"}
    st.table(pd.DataFrame({"": list(rows.values())}, index=list(rows)))


def overview(cfg, ctl, release: bool = False) -> None:
    """The dataset's card and density. ``release``: the session is in Release mode, where no statistic of the
    data reaches the screen: the card keeps its public description and frame, without counts or density."""
    if release:
        return _release_card(cfg)
    ds, domain, truth = views.prepared(cfg)
    meta = ds.meta
    views.data_badge(meta, len(ds), ds.n_users)
    left, right = st.columns([3, 2], gap="medium")
    with right:
        st.markdown(f"### {plain(meta.name)}")
        if meta.description:
            st.markdown(plain(meta.description, 2000))
        bbox = ", ".join(f"{v:.5f}" for v in meta.bbox)
        rows = {
            "Source": meta.source,
            "Citation": meta.citation or "—",
            "Licence": meta.license or "—",
            "Locations": f"{len(ds):,}" + (" (sample)" if cfg.n_users else ""),
            "Users": f"{ds.n_users:,}",
            "Region (lon/lat box)": bbox,
            "Frame of the maps": region_frame(meta),
            "Region side": f"{domain.side / 1000:,.2f} km (square, {domain.n} × {domain.n} cells of "
            f"{domain.cell:,.0f} m)",
            "Attributes": ", ".join(attribute_names(ds)) or "none",
        }
        st.table(pd.DataFrame({"": list(rows.values())}, index=list(rows)))
        if meta.bbox_from_data:  # in the words of every run's ledger and release manifest
            region = meta.extra.get("search_region") or region_frame(meta)
            st.warning(
                plain(
                    f"Side information, not covered by ε (every run's ledger declares it): the region: {region}, "
                    f"{REGION_FROM_DATA}.",
                    600,
                ),
                icon=":material/warning:",
            )
        else:
            st.caption("The region comes from a public catalogue, not from the data.")
    with left:
        fr = views.frame(cfg, domain)
        scale = views.scale_for(truth, domain, ctl.display)
        views.heat_chart(
            truth, scale, fr, fr.view(px=380), "data_density", ctl.display, title="Point density", height=440
        )
        views.legend(scale)
    attributes(ds)


def _release_card(cfg) -> None:
    meta = views.dataset(cfg).meta
    st.markdown(f"### {plain(meta.name)}")
    if meta.description and not str(meta.source).startswith("file:"):  # a file's description counts its rows
        st.markdown(plain(meta.description, 2000))
    rows = {"Source": meta.source, "Citation": meta.citation or "—", "Licence": meta.license or "—"}
    st.table(pd.DataFrame({"": list(rows.values())}, index=list(rows)))
    st.info(
        "Release mode: the data's counts, density and attributes are not shown, as no statistic of the private "
        "data reaches a Release-mode screen. Switch the Mode to Evaluate (Explore's sidebar) to inspect them.",
        icon=":material/lock:",
    )


def attribute_names(ds) -> list[str]:
    names = []
    m = ds.meta
    if ds.user_id is not None:
        names.append("user id (several locations per user)")
    if ds.weight is not None:
        names.append("weight")
    if ds.value is not None:
        names.append(f"value: {m.value_name or 'numeric'}")
    if ds.flag is not None:
        names.append(f"flag: {m.flag_name or 'yes/no'}")
    return names


def attributes(ds) -> None:
    if ds.value is None and ds.flag is None and ds.weight is None:
        return
    st.subheader("Attributes")
    rng = np.random.default_rng(0)  # display sample only
    idx = rng.choice(len(ds), size=min(len(ds), SAMPLE), replace=False) if len(ds) > SAMPLE else np.arange(len(ds))
    cols = st.columns(3)
    i = 0
    for arr, name in ((ds.value, ds.meta.value_name or "value"), (ds.weight, "weight")):
        if arr is None:
            continue
        v = np.asarray(arr, dtype=float)[idx]
        v = v[np.isfinite(v)]
        chart = (
            alt.Chart(pd.DataFrame({name: v}))
            .mark_bar()
            .encode(x=alt.X(f"{name}:Q", bin=alt.Bin(maxbins=40)), y=alt.Y("count():Q", title="locations"))
            .properties(height=220, title=name)
        )
        cols[i].altair_chart(chart, width="stretch")
        cols[i].caption(f"mean {v.mean():.3g} · median {np.median(v):.3g} · range {v.min():.3g} – {v.max():.3g}")
        i += 1
    if ds.flag is not None:
        rate = float(np.mean(ds.flag))
        cols[i].metric(ds.meta.flag_name or "flag", f"{rate:.1%}", help="share of locations with the flag set")


def catalogue() -> None:
    from engine.data import sources
    from engine.mechanisms import load_all

    load_all()
    own = st.session_state.get("_uploads", {})
    rows = []
    for key, s in sorted(sources().items()):
        if s.kind == "file" and key not in own:
            continue
        rows.append(
            {
                "Dataset": s.label,
                "Key": key,
                "Kind": s.kind,
                "Available offline": "yes" if s.offline else "download needed",
                "Licence": s.license,
                "Citation": s.citation,
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
