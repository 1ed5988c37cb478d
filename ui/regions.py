"""Regions on Explore and Compare: a control (off, the grid's cells, H3 hexagons at a chosen resolution, or
the user's polygons with id and name column pickers) and the regional maps: polygons coloured on the
page's shared colour scale (count per km²), outlined, hovering the estimate ± its 95 % margin and, in
Evaluate, the true count; a table and downloads (CSV, GeoPackage). The numbers come from
:mod:`engine.regions` (post-processing of the release)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pydeck as pdk
import streamlit as st

from engine.core.errors import EngineError
from ui import maps
from ui.colors import lut
from ui.text import plain

CHOICES = ("Off", "Grid cells", "H3 hexagons", "Your polygons")
H3_RANGE = (4, 11)
MAX_DRAWN = 5000  # polygons per map: more would make the page's JSON too heavy for the browser


@dataclass(frozen=True)
class Choice:
    spec: str
    polygons: object = None  # engine.data.files.polygons.PolygonFile of an upload
    name_column: str | None = None


@st.cache_data(max_entries=8, show_spinner=False)
def _read(data: bytes, name: str, id_column: str | None, name_column: str | None, crs: str = ""):
    """The upload read in a bounded child process; its regions are built there too, once per map
    (:func:`engine.data.regions.build` keeps them by the file's digest)."""
    from engine.data.files.polygons import load_polygons_isolated

    return load_polygons_isolated(data, name, id_column=id_column, name_column=name_column, crs=crs or None)


def control(prefix: str, domain, container=None) -> Choice | None:
    """The regions control; None when off or not ready (an upload still to come, or refused)."""
    from engine.data.regions import auto_resolution

    c = container or st
    kind = c.segmented_control("Regions", CHOICES, default="Off", key=f"{prefix}.regions.kind")
    if kind in (None, "Off"):
        return None
    if kind == "Grid cells":
        return Choice("grid")
    if kind == "H3 hexagons":
        auto = min(max(auto_resolution(domain), H3_RANGE[0]), H3_RANGE[1])
        res = c.slider(
            "H3 resolution",
            *H3_RANGE,
            value=auto,
            key=f"{prefix}.regions.h3",
            help="Finer resolutions have smaller hexagons (resolution 7: about 5 km², 8: 0.7 km², 9: 0.1 km²).",
        )
        return Choice(f"h3:{res}")
    up = c.file_uploader(
        "Polygons (GeoJSON, GeoPackage, GeoParquet or zipped Shapefile)",
        type=["geojson", "json", "gpkg", "parquet", "zip"],
        key=f"{prefix}.regions.file",
    )
    if up is None:
        c.caption("Upload a file of polygons (districts, postcodes) to report over them.")
        return None
    crs = c.text_input(
        "CRS of the polygons (when the file does not say)",
        key=f"{prefix}.regions.crs",
        placeholder="EPSG:27700",
        help="Empty: the CRS the file declares (a Shapefile's .prj), or longitude and latitude in degrees. A "
        "Shapefile without its .prj needs its CRS here: an EPSG code, or a PROJ string such as "
        "+proj=utm +zone=36 +units=km +datum=WGS84.",
    ).strip()
    data = up.getvalue()
    try:
        with c.spinner("Reading the polygons…"):  # shown after half a second: a large file, a cold reader
            first = _read(data, up.name, None, None, crs)
    except EngineError as exc:
        c.error(plain(str(exc), 400))
        return None
    fields = list(first.fields)
    if not fields:
        return Choice(up.name, first)
    cols = st.columns(2) if container is None else container.columns(2)
    idc = cols[0].selectbox(
        "Id column", fields, index=fields.index(first.id_column) if first.id_column in fields else 0,
        key=f"{prefix}.regions.id",
    )  # fmt: skip
    namec = cols[1].selectbox(
        "Name column", fields, index=fields.index(first.name_column) if first.name_column in fields else 0,
        key=f"{prefix}.regions.name",
    )  # fmt: skip
    try:
        with c.spinner("Reading the polygons…"):
            pf = _read(data, up.name, idc, namec, crs)
    except EngineError as exc:
        c.error(plain(str(exc), 400))
        return None
    return Choice(up.name, pf, namec)


def report(result, choice: Choice, dataset=None):
    """The regional table of a result (``dataset``: the prepared data, Evaluate only)."""
    from engine.data.regions import build
    from engine.regions import regional_report

    rel = result.release
    regions = build(choice.spec, rel.domain, result.crs, choice.name_column, polygons=choice.polygons)
    return regional_report(result, regions, dataset)


def colours(values_per_cell: np.ndarray, scale) -> np.ndarray:
    """RGBA per region from the page's shared scale (counts per cell); empty (transparent) below its floor."""
    idx = scale.index(np.asarray(values_per_cell, dtype=np.float64))
    pal = np.zeros((256, 4), dtype=np.int64)
    pal[1:, :3] = lut(scale.cmap, 255)
    pal[1:, 3] = 230
    return pal[idx]


def _fmt(v: float) -> str:
    return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"


def layer_rows(rep, scale, which: str, unit: str) -> list[dict]:
    """One row per region for the polygon layer: its ring(s), colour and hover text."""
    import shapely

    cells = np.asarray(rep.regions.weights.sum(axis=1)).ravel()
    m = rep.margins
    value = m.estimate if which == "private" else rep.true
    fill = colours(np.divide(value, cells, out=np.zeros_like(value), where=cells > 0), scale)
    rows = []
    for i, g in enumerate(rep.regions.lonlat_geoms()):
        margin = m.margin95[i]
        est = f"{_fmt(m.estimate[i])} {unit}" + (
            f" ± {_fmt(margin)} (95 % margin)" if math.isfinite(margin) else " (no margin: see the basis below)"
        )
        tip = f"<b>{html.escape(rep.regions.names[i])}</b><br/>private: {html.escape(est)}"
        if rep.true is not None:
            tip += f"<br/>true: {_fmt(rep.true[i])} {unit} (evaluation only)"
        for part in shapely.get_parts(g):
            if part.geom_type != "Polygon" or part.is_empty:
                continue
            ring = np.round(np.asarray(part.exterior.coords)[:, :2], 6).tolist()
            rows.append({"polygon": ring, "fill": fill[i].tolist(), "tip": tip})
    return rows


def polygon_layer(rows: list[dict], layer_id: str) -> pdk.Layer:
    return pdk.Layer(
        "PolygonLayer",
        id=layer_id,
        data=rows,
        get_polygon="polygon",
        get_fill_color="fill",
        get_line_color=[60, 60, 70, 200],
        line_width_min_pixels=1,
        filled=True,
        stroked=True,
        pickable=True,
        auto_highlight=True,
    )


def draw(panels, scale, fr, view, key: str, unit: str, height: int = 420, per_row: int = 2) -> None:
    """Regional maps on the shared scale, ``per_row`` to a row: ``panels`` = (title, report, "true" or
    "private") each; the true one only in Evaluate."""
    for row in range(0, len(panels), per_row):
        cols = st.columns(per_row)
        for i, (col, (title, rep, which)) in enumerate(zip(cols, panels[row : row + per_row])):
            col.html(f'<div class="map-title">{html.escape(title)}</div>')
            layers = [maps.region_layer(fr), polygon_layer(layer_rows(rep, scale, which, unit), f"{key}_{row + i}")]
            # keyed: app.py's "Drawing the map…" shows under its canvas until the map is drawn
            col.container(key=f"regionmap_{key}_{row + i}").pydeck_chart(
                maps.deck(layers, view, tooltip={"html": "{tip}"}), height=height, key=f"{key}_regions_{row + i}"
            )


def _caption_and_downloads(rep, result, key: str) -> None:
    import pandas as pd

    from engine.run.export import stamp_of

    df = pd.DataFrame(rep.rows()).rename(columns={"margin95": "95 % margin"})
    st.dataframe(df, hide_index=True, height=240, key=f"{key}_regions_table")
    info = rep.describe()
    st.caption(
        f"{info['count']:,} regions. Margins: {info['margin_basis']}. Cells crossing a boundary: "
        f"{info['straddling_cells']}." + (" " + " ".join(info["notes"]) if info["notes"] else "")
    )
    stamp = stamp_of(result)
    d1, d2 = st.columns(2)
    d1.download_button(
        "Regions (CSV)", rep.as_csv(stamp), file_name="regions.csv", mime="text/csv", key=f"{key}_regions_csv"
    )
    d2.download_button(
        "Regions (GeoPackage)",
        rep.to_gpkg(stamp),
        file_name="regions.gpkg",
        mime="application/geopackage+sqlite3",
        key=f"{key}_regions_gpkg",
    )


def block(results, choice: Choice | None, scale, fr, key: str, unit: str, dataset=None, per_row: int = 2):
    """The regions section of a page for ``results`` (title, RunResult) pairs: the true regional map
    (Evaluate), each result's private one, the first result's table, what its margins rest on, downloads.
    Returns the first result's regional table (None without regions, or when they could not be made)."""
    if choice is None:
        st.caption("Report over regions (grid cells, H3 hexagons or your own polygons) with the control above.")
        return None
    try:
        with st.spinner("Counting over the regions…"):
            reps = [(title, report(res, choice, dataset)) for title, res in results]
    except EngineError as exc:
        st.error(plain(str(exc), 400))
        return None
    panels = [(f"{title}: private estimate", rep, "private") for title, rep in reps]
    if reps[0][1].true is not None:
        panels.insert(0, ("True count (evaluation only)", reps[0][1], "true"))
    px = 420 if per_row <= 2 else 250
    if len(reps[0][1].regions) <= MAX_DRAWN:
        with st.spinner("Drawing the regions…"):
            draw(panels, scale, fr, fr.view(px=px), key, unit, height=px, per_row=per_row)
    else:
        st.info(
            f"{len(reps[0][1].regions):,} regions are too many to draw (at most {MAX_DRAWN:,}): the maps above show "
            "the cells; choose H3 hexagons or a coarser resolution to see regions. The table lists them all.",
            icon=":material/info:",
        )
    _caption_and_downloads(reps[0][1], results[0][1], key)
    return reps[0][1]
