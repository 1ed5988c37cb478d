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
    spec: str  # engine.data.region_geometry.parse_spec: grid, h3:RES, or an upload's NAME:ID (sha256:HEX)
    polygons: object = None  # engine.data.files.polygons.PolygonFile of an upload
    name_column: str | None = None

    @property
    def noun(self) -> str:
        """What one region is called in words: "region" for the analyst's polygons, "cell", "hexagon"."""
        return "region" if self.polygons is not None else ("cell" if self.spec == "grid" else "hexagon")


@st.cache_data(max_entries=8, show_spinner=False)
def _read(data: bytes, name: str, id_column: str | None, name_column: str | None, crs: str = ""):
    """The upload read in a bounded child process; its regions are built there too, once per map
    (:func:`engine.data.region_geometry.build` keeps them by the file's digest)."""
    from engine.data.files.polygons import load_polygons_isolated

    return load_polygons_isolated(data, name, id_column=id_column, name_column=name_column, crs=crs or None)


KEY = "regions"  # the analysis's one region set: widgets and the kept upload, shared by every page
_UPLOAD = "_regions_upload"  # (name, bytes) of the polygon file: kept across pages, which drop the uploader's value


def _on_file() -> None:
    if st.session_state.get(f"{KEY}.file") is None:  # the analyst removed the file
        st.session_state.pop(_UPLOAD, None)


def control(container, counted: bool = False, domain=None) -> Choice | None:
    """The analysis's regions (the sidebar's *Regions*): what Laplace over regions counts and what the plan, the
    regional maps, the tables and the release files report over. ``counted``: a chosen mechanism counts them, so
    "Off" is not offered. None when off or not ready (an upload still to come, or refused)."""
    from . import state

    c = container
    choices = CHOICES[1:] if counted else CHOICES
    state.seed(f"{KEY}.kind", "Off", "regions", _kind_of)
    if state.get(f"{KEY}.kind") not in choices:
        state.put(f"{KEY}.kind", "H3 hexagons")
    kind = c.segmented_control(
        "Regions",
        choices,
        **state.bind(f"{KEY}.kind"),
        help="The regions of this analysis: Laplace over regions counts them; the plan, the regional maps, the table "
        "and the release files report over them.",
    )
    if kind in (None, "Off"):
        return None
    if kind == "Grid cells":
        return Choice("grid")
    if kind == "H3 hexagons":
        from engine.data.region_geometry import auto_resolution

        if state.get(f"{KEY}.h3") is None:
            dom = domain() if callable(domain) else domain
            auto = 8 if dom is None else min(max(auto_resolution(dom), H3_RANGE[0]), H3_RANGE[1])
            state.seed(f"{KEY}.h3", auto, "regions", _h3_of)
        res = c.slider(
            "H3 resolution",
            *H3_RANGE,
            **state.bind(f"{KEY}.h3"),
            help="Finer resolutions have smaller hexagons (resolution 7: about 5 km², 8: 0.7 km², 9: 0.1 km²).",
        )
        return Choice(f"h3:{res}")
    return _polygons(c)


def _kind_of(text: str) -> str:
    """A link's ``regions=grid`` or ``regions=h3:RES`` as the control's choice (an uploaded file has no link)."""
    from engine.data.region_geometry import parse_spec

    kind = parse_spec(text)[0]
    if kind == "file":
        raise ValueError("a link names grid cells or H3 hexagons; a polygon file is uploaded")
    return {"grid": "Grid cells", "h3": "H3 hexagons"}[kind]


def _h3_of(text: str) -> int:
    res = int(text.removeprefix("h3:")) if text.startswith("h3:") and text[3:].isdigit() else None
    if res is None or not H3_RANGE[0] <= res <= H3_RANGE[1]:
        raise ValueError(f"an H3 resolution of {H3_RANGE[0]} to {H3_RANGE[1]}")
    return res


def sidebar(container, ctl) -> None:
    """The sidebar's *Regions*: sets ``ctl.regions`` (an error when a chosen mechanism counts regions not ready)."""
    from engine.mechanisms import registry

    counted = [m for m in ctl.mechanisms if m in registry() and registry()[m].region_params]
    container.markdown("### Regions")
    ctl.regions = control(container, bool(counted), lambda: _public_domain(ctl))
    if ctl.regions is not None and ctl.regions.polygons is None:  # a link holds them; an upload it cannot
        ctl.url["regions"] = ctl.regions.spec
    if counted and ctl.regions is None:
        ctl.errors.append("Laplace over regions counts the analysis's regions: upload them under Regions")


def _public_domain(ctl):
    """The map's square before any run (for H3's default resolution), None while the dataset is not ready."""
    from ui import views

    try:
        return views.dataset(ctl.config()).public_domain(ctl.depth) if ctl.ready else None
    except EngineError:
        return None


def _polygons(c) -> Choice | None:
    from engine.data.region_geometry import keep_upload

    from . import state

    up = c.file_uploader(
        "Polygons (GeoJSON, GeoPackage, GeoParquet or zipped Shapefile)",
        type=["geojson", "json", "gpkg", "parquet", "zip"],
        key=f"{KEY}.file",
        on_change=_on_file,
    )
    if up is not None:
        st.session_state[_UPLOAD] = (up.name, up.getvalue())
    if st.session_state.get(_UPLOAD) is None:
        c.caption("Upload a file of polygons (districts, postcodes, neighbourhoods) to report over them.")
        return None
    name, data = st.session_state[_UPLOAD]
    if up is None:
        c.caption(f"Regions: {plain(name, 80)} (uploaded before).")
    state.seed(f"{KEY}.crs", "")
    crs = c.text_input(
        "CRS of the polygons (when the file does not say)",
        **state.bind(f"{KEY}.crs"),
        placeholder="EPSG:27700",
        help="Empty: the CRS the file declares (a Shapefile's .prj), or longitude and latitude in degrees. A "
        "Shapefile without its .prj needs its CRS here: an EPSG code, or a PROJ string such as "
        "+proj=utm +zone=36 +units=km +datum=WGS84.",
    ).strip()
    try:
        with c, st.spinner("Reading the polygons…"):  # shown after half a second: a large file, a cold reader
            first = _read(data, name, None, None, crs)
    except EngineError as exc:
        c.error(plain(str(exc), 400))
        return None
    fields = list(first.fields)
    if not fields:
        return Choice(keep_upload(first), first)
    cols = c.columns(2)
    picked = []
    for col, label, default in ((cols[0], "Id column", first.id_column), (cols[1], "Name column", first.name_column)):
        key = f"{KEY}.{label.split()[0].lower()}"
        state.seed(key, default if default in fields else fields[0])
        if state.get(key) not in fields:
            state.put(key, default if default in fields else fields[0])
        picked.append(col.selectbox(label, fields, **state.bind(key)))
    try:
        with c, st.spinner("Reading the polygons…"):
            pf = _read(data, name, picked[0], picked[1], crs)
    except EngineError as exc:
        c.error(plain(str(exc), 400))
        return None
    return Choice(keep_upload(pf), pf, picked[1])


def _public(choice: Choice) -> str:
    from engine.data.region_geometry import public_spec

    return public_spec(choice.spec)


def report(result, choice: Choice, dataset=None):
    """The regional table of a result (``dataset``: the prepared data, Evaluate only)."""
    from engine.data.region_geometry import build
    from engine.regions import regional_report
    from ui import views

    rel = result.release
    regions = build(choice.spec, rel.domain, result.crs, choice.name_column, polygons=choice.polygons)
    return regional_report(result, regions, dataset, people=views.counts_people(result.config))


def colours(values_per_cell: np.ndarray, scale) -> np.ndarray:
    """RGBA per region from the page's shared scale (counts per cell); empty (transparent) below its floor."""
    idx = scale.index(np.asarray(values_per_cell, dtype=np.float64))
    pal = np.zeros((256, 4), dtype=np.int64)
    pal[1:, :3] = lut(scale.cmap, 255)
    pal[1:, 3] = 230
    return pal[idx]


def count_text(v: float) -> str:
    """A count as the tables and hovers write it: whole counts whole, others to one decimal below 100."""
    from engine.regions.regional_table import whole

    if isinstance(whole(v), int):
        return f"{whole(v):,}"
    return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"


# A region whose 95 % margin exceeds its estimate cannot be told from nothing: it is drawn apart from every class
# of the scale (a separate class, VSUP's rule that values too uncertain to read get no value colour), in a light
# grey no palette here holds, hatched, so that neither its fill nor the lowest class can be mistaken for the other
UNRELIABLE_FILL = (200, 200, 200, 255)
HATCH = (100, 100, 100, 255)
HATCHES = 60  # hatch lines across the regions' width


def unreliable(rep) -> np.ndarray:
    """The regions whose 95 % margin exceeds their estimate (a region without a margin is not judged)."""
    m = rep.margins
    return np.isfinite(m.margin95) & (m.margin95 > m.estimate)


def hatch_paths(rep, mask: np.ndarray) -> list[dict]:
    """Diagonal hatch lines clipped to the regions of ``mask`` (lon/lat paths for a PathLayer)."""
    import shapely

    geoms = rep.regions.lonlat_geoms()[mask]
    if not len(geoms):
        return []
    x0, y0, x1, y1 = shapely.total_bounds(rep.regions.lonlat_geoms())
    step, span = (x1 - x0) / HATCHES, (x1 - x0) + (y1 - y0)
    starts = np.arange(x0 - (y1 - y0), x1 + step, step)
    lines = shapely.multilinestrings([[(s, y0), (s + span, y0 + span)] for s in starts])
    out = []
    for cut in shapely.intersection(geoms, lines):
        for part in shapely.get_parts(cut):
            if part.geom_type == "LineString" and not part.is_empty:
                out.append({"path": np.round(np.asarray(part.coords)[:, :2], 6).tolist()})
    return out


def hatch_layer(paths: list[dict], layer_id: str) -> pdk.Layer:
    return pdk.Layer("PathLayer", id=layer_id, data=paths, get_path="path", get_color=list(HATCH), width_min_pixels=1.5)


def legend_html(scale, n_unreliable: int, noun: str) -> str:
    """The regional maps' legend: the page's colour scale and the unreliable class beside it."""
    swatch = (
        '<span class="unreliable-swatch" style="display:inline-block;width:36px;height:16px;vertical-align:middle;'
        f"margin-right:6px;border:1px solid rgb(60,60,70);background:repeating-linear-gradient(45deg, "
        f'rgb{HATCH[:3]} 0 2px, rgb{UNRELIABLE_FILL[:3]} 2px 7px)"></span>'
    )
    return (
        f'<div class="region-legend">{scale.legend_html("a region is coloured by its estimate over its area", shared=True)}'
        f'<div style="font-size:0.85rem">{swatch}<b>unreliable</b>: the 95 % margin exceeds the estimate, so the '
        f"region cannot be told from an empty one; drawn apart from every colour of the scale ({n_unreliable:,} "
        f"{html.escape(noun)}{'' if n_unreliable == 1 else 's'} here)</div></div>"
    )


def layer_rows(rep, scale, which: str, unit: str) -> list[dict]:
    """One row per region for the polygon layer: its ring(s), colour and hover text."""
    import shapely

    cells = np.asarray(rep.regions.weights.sum(axis=1)).ravel()
    m = rep.margins
    value = m.estimate if which == "private" else rep.true
    fill = colours(np.divide(value, cells, out=np.zeros_like(value), where=cells > 0), scale)
    apart = unreliable(rep) if which == "private" else np.zeros(len(value), dtype=bool)
    fill[apart] = UNRELIABLE_FILL
    rows = []
    for i, g in enumerate(rep.regions.lonlat_geoms()):
        margin = m.margin95[i]
        est = f"{count_text(m.estimate[i])} {unit}" + (
            f" ± {count_text(margin)} (95 % margin)" if math.isfinite(margin) else " (no margin: see the basis below)"
        )
        tip = f"<b>{html.escape(rep.regions.names[i])}</b><br/>private: {html.escape(est)}"
        if apart[i]:
            tip += "<br/>unreliable: the margin exceeds the estimate"
        if rep.true is not None:
            tip += f"<br/>true: {count_text(rep.true[i])} {unit} (evaluation only)"
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
    "private") each; the true one only in Evaluate. Under them, their legend (:func:`legend_html`)."""
    apart = 0
    for row in range(0, len(panels), per_row):
        cols = st.columns(per_row)
        for i, (col, (title, rep, which)) in enumerate(zip(cols, panels[row : row + per_row])):
            col.html(f'<div class="map-title">{html.escape(title)}</div>')
            layers = [maps.region_layer(fr), polygon_layer(layer_rows(rep, scale, which, unit), f"{key}_{row + i}")]
            if which == "private":
                mask = unreliable(rep)
                apart = max(apart, int(mask.sum()))
                layers.append(hatch_layer(hatch_paths(rep, mask), f"{key}_hatch_{row + i}"))
            # keyed: app.py's "Drawing the map…" shows under its canvas until the map is drawn
            col.container(key=f"regionmap_{key}_{row + i}").pydeck_chart(
                maps.deck(layers, view, tooltip={"html": "{tip}"}), height=height, key=f"{key}_regions_{row + i}"
            )
    st.html(legend_html(scale, apart, "region"))


def _caption_and_downloads(rep, result, key: str) -> None:
    import pandas as pd

    from engine.run.execution import stamp_of

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
        st.caption(
            "Report over regions (grid cells, H3 hexagons or your own polygons): choose them in the sidebar's Regions."
        )
        return None
    counted = {res.release.regions_counted for _, res in results if res.release.regions_counted is not None}
    if counted and counted != {_public(choice)}:
        st.warning(
            f"Laplace over regions counted {', '.join(sorted(counted))}, not these regions: their figures below are "
            "spread from its counts. Press Run to count these regions.",
            icon=":material/warning:",
        )
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
