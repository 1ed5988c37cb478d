"""Release mode on the pages: the evaluation pages stop, and Explore shows the private map alone, its ledger, and
what may leave with it (the release files, the publication figure and the release report).

The report holds the private map (the publication figure) and its legend, the margins of error the mechanism reports
(functions of its DP outputs and public parameters), the privacy ledger with the guarantee and the side
information, and the dataset's public description. No true map, no count of people, no metric, no seed.
"""

from __future__ import annotations

import math

import numpy as np
import streamlit as st

from engine.run.execution import RunConfig, dataset_name, region_frame

from . import export, maps, views
from .colors import ColourScale
from .report import ledger_fields, made_now, margin_rows, render


def release_only_page(ctl, what: str) -> None:
    """Pages that compare releases with the truth are evaluation tools: in Release mode they say so and stop."""
    if ctl.mode == "release":
        st.info(
            f"Release mode: {what} compares private maps with the true data, which a release never shows. Publish a "
            "release on **Explore**, or switch the sidebar's Mode to Evaluate.",
            icon=":material/lock:",
        )
        st.stop()


def release_report(result, scale: ColourScale, regions=None) -> str:
    """The release report (``templates/release.html.j2``, the run report's page and parts): only DP outputs, their
    margins and the ledger (see the module's note); with ``regions`` (:class:`engine.regions.regional_table.RegionReport`),
    the regional table and its margins' basis."""
    meta, dom = result.dataset_meta, result.release.domain
    side = dom.n * max(1, math.ceil(512 / dom.n))
    return render(
        "release.html.j2",
        title=export.release_title(result),
        made=made_now(),
        ds={
            "name": dataset_name(result),
            "citation": getattr(meta, "citation", ""),
            "license": getattr(meta, "license", ""),
            "grid": f"{dom.n} × {dom.n} cells of {dom.cell:,.1f} m (side {dom.side:,.0f} m)",
            "frame": region_frame(meta),
        },
        maps={"private": export.release_png(result, scale), "legend": export.legend_png(scale, side)},
        margins=margin_rows(result.release, None if regions is None else regions.regions),
        regions=None if regions is None else _regions(regions),
        **ledger_fields(result),
    )


def _regions(rep) -> dict:
    """The report's regional table: each region's estimate and 95 % margin, what they count and rest on."""
    from .region_panel import count_text, unreliable

    about, info = rep.about, rep.describe()
    rows = [
        {
            "id": r["id"],
            "name": r["name"],
            "estimate": count_text(r["estimate"]),
            "margin": "–" if r["margin95"] is None else f"± {count_text(r['margin95'])}",
            "unreliable": bool(a),
        }
        for r, a in zip(rep.rows(), unreliable(rep))
    ]
    return {
        "count": f"{info['count']:,}",
        "spec": info["spec"],
        "unit": about.get("unit", ""),
        "recorded": about.get("recorded", ""),
        "basis": info["margin_basis"],
        "rows": rows,
    }


def release_view(result, cfg: RunConfig, display, px: int = 500, choice=None) -> None:
    """A Release-mode run: the private map alone (no truth, no metric against it), its ledger and guarantee,
    the release files (GeoTIFF, GeoParquet, CSV and a JSON manifest of DP outputs only), the publication figure
    and the release report; its regions. The map is a square of ``px`` pixels with its legend beside it, so both
    stay in the window. ``choice``: the analysis's regions (ui/region_panel.py), None: none."""
    dens = np.asarray(result.release.density, dtype=np.float64)
    fr = maps.Frame(result.release.domain, result.crs)
    scale = views.scale_for(np.clip(dens, 0, None), fr.domain, display, people=views.counts_people(cfg))
    left, right = st.columns([3, 2])
    views.heat_chart(
        dens,
        scale,
        fr,
        fr.view(px=px),
        "release_private",
        display,
        rects=result.release.partition,
        title=export.release_title(result),
        height=px + 20,
        container=left,
    )
    with right:
        st.html('<div class="map-title"></div>')  # the legend starts level with the map, under its title's row
        views.legend(scale, note=f"{fr.domain.n} × {fr.domain.n} cells of {fr.domain.cell:,.0f} m", shared=False)
        stated_margin(result, cfg)
        st.success(
            "Release mode: this map was drawn with OpenDP's samplers and fresh entropy; no seed was recorded. Only "
            "the private release is shown and exported.",
            icon=":material/lock:",
        )
    with st.expander("Regions", expanded=choice is not None):  # post-processing of the release: no truth here
        from . import region_panel

        table = region_panel.block([(export.release_title(result), result)], choice, scale, fr, "release", "people")
    chosen = None if table is None else table.regions
    t1, t2, t3 = st.tabs(["Privacy ledger", "Who sees what", "Download the release"])
    views.ledger_block(result, t1)
    views.server_block(result, t2)
    t3.download_button(
        "Release files (zip: GeoTIFF with margins, GeoParquet, CSV, "
        + ("the regional table, " if chosen is not None else "")
        + "manifest)",
        lambda people=views.counts_people(cfg): release_zip(result, chosen, people),
        file_name=f"{cfg.mechanism}_release.zip",
        mime="application/zip",
        on_click="ignore",
        key=f"dl_release_{cfg.key()}",
    )
    a, b = t3.columns(2)
    a.download_button(
        "Publication figure (PNG)",
        lambda: export.release_png(result, scale),
        file_name=f"{cfg.mechanism}_release.png",
        mime="image/png",
        on_click="ignore",
        key=f"dl_release_png_{cfg.key()}",
    )
    b.download_button(
        "Release report (HTML: the map, its margins, the ledger)",
        lambda: release_report(result, scale, table),
        file_name=f"{cfg.mechanism}_release_report.html",
        mime="text/html",
        on_click="ignore",
        key=f"dl_release_report_{cfg.key()}",
    )
    t3.caption(
        "The files hold the private grid, its margins where the mechanism has them, the ledger, the parameters and "
        "the declared side information: no true count, no metric, no seed."
    )


def release_zip(result, regions=None, people: bool = False) -> bytes:
    """The release folder of :func:`engine.run.execution.write_release` as a zip (with ``regions``, an
    :class:`engine.data.region_geometry.Regions`, its regional table)."""
    import io
    import tempfile
    import zipfile
    from pathlib import Path

    from engine.run.execution import write_release

    with tempfile.TemporaryDirectory(prefix="heatmap-release-") as tmp:
        paths = write_release(
            result,
            Path(tmp) / "release",
            formats=("geotiff", "geoparquet", "csv"),
            regions=regions,
            people=people,
        )
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for p in paths.values():
                z.write(p, arcname=p.name)
        return buf.getvalue()


def stated_margin(result, cfg: RunConfig) -> None:
    """The release's own 95 % margins per cell (from its DP outputs and public parameters only)."""
    from engine.regions.margins import cell_margins, summary

    m = cell_margins(result.release, result.crs)
    med, p90 = summary(m.margin95)
    if np.isfinite(med):
        st.markdown(
            f"**Stated 95 % margin per cell**: ±{med:,.3g} (median), ±{p90:,.3g} (worst tenth)",
            help=m.basis,
        )
    else:
        st.caption(f"No stated margin: {m.basis}")
