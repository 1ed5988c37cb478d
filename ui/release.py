"""Release mode on the pages: the evaluation pages stop, and Explore shows the private map alone, its ledger, and
what may leave with it (the release files, the publication figure and the release report).

The report holds the private map (the publication figure) and its legend, the margins of error the mechanism reports
(functions of its DP outputs and public parameters), the privacy ledger with the guarantee and the side
information, and the dataset's public description. No true map, no count of people, no metric, no seed.
"""

from __future__ import annotations

import base64
import html
import math
from datetime import UTC, datetime

import numpy as np
import streamlit as st

from engine.run.execution import RunConfig, dataset_name, region_frame

from . import export, maps, views
from .colors import ColourScale
from .report import ledger_fields, margin_rows


def release_only_page(ctl, what: str) -> None:
    """Pages that compare releases with the truth are evaluation tools: in Release mode they say so and stop."""
    if ctl.mode == "release":
        st.info(
            f"Release mode: {what} compares private maps with the true data, which a release never shows. Publish a "
            "release on **Explore**, or switch the sidebar's Mode to Evaluate.",
            icon=":material/lock:",
        )
        st.stop()


def _e(x) -> str:
    return html.escape(str(x))


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def release_report(result, scale: ColourScale, regions=None) -> str:
    """An HTML page holding only DP outputs, their margins and the ledger (see the module's note); with
    ``regions`` (:class:`engine.regions.report.RegionReport`), the regional table and its margins' summary."""
    meta, dom = result.dataset_meta, result.release.domain
    title = export.release_title(result)
    side = dom.n * max(1, math.ceil(512 / dom.n))
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    led = ledger_fields(result)
    data = [
        ["Name", dataset_name(result)],
        ["Citation", getattr(meta, "citation", "") or "–"],
        ["Licence", getattr(meta, "license", "") or "–"],
        ["Grid", f"{dom.n} × {dom.n} cells of {dom.cell:,.1f} m (side {dom.side:,.0f} m)"],
        ["Frame", region_frame(meta)],
    ]
    rows = margin_rows(result.release, None if regions is None else regions.regions)
    margins = [[m["name"], f"± {m['median']}", f"± {m['worst']}", f"± {m['largest']}"] for m in rows]
    entries = [
        [e["step"], e["epsilon"], e["composition"], e["group"], e["delta"], e["note"]] for e in led["ledger"]["entries"]
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Release: {_e(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>Release: {_e(title)}</h1>"
        f"<p>Made {made} by the private heatmap workbench. Everything here is a differentially private output, a "
        "function of one, or a public parameter.</p>"
        "<h2>Dataset</h2>" + _table(["", ""], data) + "<h2>The private map</h2>"
        f"<p>{_img(export.release_png(result, scale), 'private map')}</p>"
        f"<p>{_img(export.legend_png(scale, side), 'legend')}</p>"
        + (
            "<h2>Margins of error</h2>"
            + _table(["Estimate", "95 % margin (median)", "95 % margin (worst tenth)", "Largest"], margins)
            + "".join(f"<p>{_e(m['name'].capitalize())}: {_e(m['basis'])}.</p>" for m in rows)
            if margins
            else ""
        )
        + _regions_html(regions)
        + f"<h2>Privacy ledger</h2><p><b>Total ε = {_e(led['ledger']['total'])}</b>{_e(led['ledger']['delta'])}</p>"
        + _table(["Step", "ε", "Composition", "Group", "δ", "Note"], entries)
        + f"<p><b>Guarantee:</b> {_e(led['guarantee'])}</p><p><b>Threat model:</b> {_e(led['threat_model'])}</p>"
        + "<h2>Side information</h2><ul>"
        + "".join(f"<li>{_e(x)}</li>" for x in led["side"])
        + "</ul>"
        + "</body></html>"
    )


def _regions_html(rep) -> str:
    """The regional table of the report: each region's estimate and 95 % margin, what they count and rest on."""
    if rep is None:
        return ""
    from .regions import estimate_text, unreliable

    about, info = rep.about, rep.describe()
    apart = unreliable(rep)
    rows = [
        [
            r["id"],
            r["name"],
            estimate_text(r["estimate"]),
            "–" if r["margin95"] is None else f"± {estimate_text(r['margin95'])}",
        ]
        + (["unreliable: the margin exceeds the estimate"] if a else [""])
        for r, a in zip(rep.rows(), apart)
    ]
    return (
        f"<h2>Regions</h2><p>{info['count']:,} regions ({_e(info['spec'])}); counts of {_e(about.get('unit', ''))} "
        f"({_e(about.get('recorded', ''))}), 95 % margins: {_e(info['margin_basis'])}.</p>"
        + _table(["Id", "Name", "Estimate", "95 % margin", ""], rows)
    )


CSS = "body{font-family:sans-serif;max-width:900px;margin:2rem auto}table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}"


def release_view(result, cfg: RunConfig, display, px: int = 500, choice=None) -> None:
    """A Release-mode run: the private map alone (no truth, no metric against it), its ledger and guarantee,
    the release files (GeoTIFF, GeoParquet, CSV and a JSON manifest of DP outputs only), the publication figure
    and the release report; its regions. The map is a square of ``px`` pixels with its legend beside it, so both
    stay in the window. ``choice``: the analysis's regions (ui/regions.py), None: none."""
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
        from . import regions

        table = regions.block([(export.release_title(result), result)], choice, scale, fr, "release", "people")
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
    :class:`engine.data.regions.Regions`, its regional table)."""
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
