"""Explore's views of one result: the paired maps (true | private in one deck), the swipe view (one square, a
handle sliding between true and private) and the difference map (private - true, diverging), sized to the room
the browser reports; and the public context drawn under them."""

from __future__ import annotations

import html

import pydeck as pdk
import streamlit as st

from engine.core.errors import DataError

from . import colors, drawn, geo, maps, state, viewport, views
from .colors import ColourScale
from .diverging import DiffScale
from .text import plain

MODES = {"side": "Side by side", "swipe": "Swipe", "diff": "Private − true"}
OVERHEAD = 400  # px above and below the maps at the top of Explore: header rows, map titles, legend
ONE_LINE = "height:1.4em;-webkit-line-clamp:1"  # Explore's titles are short: one line keeps the maps up
NARROW = 1000  # px of the main column under which Explore's controls take two rows


def square_px(room: viewport.Room) -> int:
    """Each map's side: two squares and their gap fill the column's width; with the sidebar open they also
    leave room for the header and the legend in the window, so both maps are seen without scrolling after
    Run. A collapsed sidebar gives the maps its width."""
    px = room.width / (2 + maps.GAP) - 6
    if room.sidebar:
        px = min(px, room.height - OVERHEAD)
    return int(max(260, min(px, 900)))


RELEASE_OVERHEAD = 320  # px above and below Release mode's one map: header rows, its title, the deck's margins


def release_px(room: viewport.Room) -> int:
    """The side of Release mode's one map, left of its legend (three fifths of the column): with the sidebar open
    it also leaves room for the header, so the map and its legend are seen without scrolling."""
    px = room.width * 3 / 5 - 12
    if room.sidebar:
        px = min(px, room.height - RELEASE_OVERHEAD)
    return int(max(260, min(px, 900)))


def control_row(room: viewport.Room) -> list:
    """Explore's controls above the maps (Run, the map view, two popovers): one row where the column is wide
    enough for all four, else two rows, so no label is cut (the map views' names need about 330 px)."""
    if room.width >= NARROW:
        return st.columns([1.5, 2.1, 1.6, 1.6], vertical_alignment="bottom")
    run, view = st.columns([1, 2.4], vertical_alignment="bottom")
    return [run, view, *st.columns(2, vertical_alignment="bottom")]


def context_for(dataset_key: str):
    """The public context drawn under this dataset's maps: the analyst's own layer when one was added, else
    what the dataset's publisher ships (John Snow's streets and pumps), else None."""
    own = st.session_state.get("context.layer")
    if own is not None:
        return own
    try:
        return _builtin_context(dataset_key)
    except DataError:  # the example files are missing: the maps go without their context
        return None


def _on_context() -> None:
    from engine.core.errors import EngineError
    from engine.data.context import load_context_isolated

    f = st.session_state.get("context_file")
    st.session_state.pop("_context_error", None)
    if f is None:
        st.session_state.pop("context.layer", None)
        return
    try:
        with st.spinner("Reading the context layer…"):  # at the top of the page, after half a second
            st.session_state["context.layer"] = load_context_isolated(f.getvalue(), f.name)
    except EngineError as exc:
        st.session_state["_context_error"] = str(exc)
    except Exception as exc:  # never a traceback for a user's file
        st.session_state["_context_error"] = f"{f.name} could not be read ({type(exc).__name__})"


def context_controls(container) -> None:
    """Add (or remove) the analyst's own context layer: drawn under every map, never given to a mechanism."""
    container.file_uploader(
        "Your context layer (GeoJSON: roads, districts)",
        type=["geojson", "json"],
        key="context_file",
        on_change=_on_context,
        help="Drawn under the heatmaps in place of the dataset's own context. Public: it is never given to a "
        "mechanism and never leaves with a release.",
    )
    if st.session_state.get("_context_error"):
        container.error(plain(st.session_state["_context_error"], 600))  # it quotes the user's file name


@st.cache_resource(max_entries=8, show_spinner=False)
def _builtin_context(key: str):
    from engine.data.context import builtin_context

    return builtin_context(key)


def paired_chart(
    truth,
    grid,
    scale: ColourScale,
    fr: maps.Frame,
    zoom: float,
    pan: tuple[float, float],
    key: str,
    display,
    rects=None,
    titles=("True locations", "Private map"),
    margin95=None,
    unit: str = "",
    px: int = 460,
    height: int = 520,
    container=None,
    context=None,
    estimate=None,
):
    """The true and the private map side by side in ONE deck: one view, so mouse zoom and pan move both
    (linked views); hovering a cell shows its true and private value (and the margin when known); a scale
    bar, coordinates and nearby place names on each square, the dataset's public ``context`` under both. Without
    a basemap only: with one, the squares must sit on their real place."""
    c = container or st
    a, b = c.columns(2)
    a.html(f'<div class="map-title" style="{ONE_LINE}">{html.escape(titles[0])}</div>')
    b.html(f'<div class="map-title" style="{ONE_LINE}">{html.escape(titles[1])}</div>')
    note = colors.swamp_note(scale, grid)

    def build():
        shifted = maps.Shifted(fr, fr.domain.side * (1 + maps.GAP))
        # the public context goes under the heatmaps, whose empty cells are then left transparent
        under = geo.context_layers(fr, context, f"{key}_true") + geo.context_layers(shifted, context, f"{key}_private")
        bg = None if under else maps.EMPTY
        layers = [maps.region_layer(fr), maps.region_layer(shifted, layer_id="region_private")] if under else []
        layers += under + [maps.heat_layer(truth, scale, fr, f"{key}_true_heat", background=bg)]
        if grid is None:
            layers += [] if under else [maps.region_layer(shifted)]
        else:
            layers.append(maps.heat_layer(grid, scale, shifted, f"{key}_private_heat", background=bg))
        if rects is not None and len(rects) and display.outlines:
            layers.append(maps.outline_layer(rects, shifted, f"{key}_cells"))
        if note is not None:
            layers.append(maps.note_layer(shifted, note[0], key))
        layers += geo.frame_layers(fr, key) + geo.frame_layers(shifted, f"{key}_private")
        tooltip = None
        if grid is not None:
            hover, tooltip = maps.hover_layer(truth, grid, margin95, fr, key, unit, estimate)
            layers.append(hover)
        return maps.deck(layers, maps.paired_view(fr, zoom, pan, px), False, tooltip=tooltip)

    parts = ("paired", truth, grid, scale, fr, zoom, pan, px, key, display.outlines, rects, margin95, unit, context)
    parts += (estimate,)
    chart = c.pydeck_chart(drawn.deck(parts, build), height=height, key=key)
    if note is not None:
        c.caption(f":material/warning: {titles[1]}: {note[1]}")
    return chart


def swipe_view(truth, grid, scale: ColourScale, fr: maps.Frame, px: int, key: str, title: str) -> None:
    """One square: the true map left of the handle, the private map right of it, on the shared colour scale."""
    st.html(f'<div class="map-title" style="{ONE_LINE}">True locations ◀ drag the handle ▶ {html.escape(title)}</div>')
    bl, tr = fr.corners()[0], fr.corners()[2]
    corners = tuple(f"{geo.degrees(c[1], 1e-4, 'N', 'S')}, {geo.degrees(c[0], 1e-4, 'E', 'W')}" for c in (bl, tr))
    viewport.swipe(
        maps.data_url(scale.png(truth, maps.EMPTY)),
        maps.data_url(scale.png(grid, maps.EMPTY)),
        px,
        key,
        ("true", "private"),
        corners,
    )


def diff_view(truth, grid, scale: ColourScale, fr: maps.Frame, px: int, height: int, key: str, context=None):
    """private - true on a diverging scale centred on zero, with geography; returns its scale for the legend."""
    ds = DiffScale.of(truth, grid, scale.factor, scale.unit)
    st.html(f'<div class="map-title" style="{ONE_LINE}">Private − true (blue: too few, red: too many)</div>')
    layers = geo.context_layers(fr, context, key) + [
        pdk.Layer(
            "BitmapLayer",
            id=f"{key}_diff",
            image=pdk.types.String(maps.data_url(ds.png(truth, grid))),
            bounds=fr.corners(),
            texture_parameters=maps.NEAREST,
            opacity=0.85 if context is not None else 1.0,
        )
    ]
    layers += geo.frame_layers(fr, key)
    st.pydeck_chart(maps.deck(layers, fr.view(px=px)), height=height, key=key)
    return ds


def pair(
    mode: str,
    truth,
    grid,
    scale: ColourScale,
    fr: maps.Frame,
    view,
    display,
    square: int,
    rects=None,
    title: str = "Private map",
    noun: str = "locations",
    margins=None,
    context=None,
    estimate=None,
):
    """Explore's true and private maps in the chosen view ``mode`` (each ``square`` px; before a run the true map
    alone); ``margins``: a function giving the private map's 95 % margin per cell, read only where hover shows it;
    ``estimate``: the map those margins are for when it is not ``grid`` (:func:`maps.hover_layer`).
    Returns the difference map's scale when that map is drawn (its legend replaces the maps')."""
    height = square + 28  # the deck: the square and its margin
    if mode == "swipe" and grid is not None:
        swipe_view(truth, grid, scale, fr, square, "explore_swipe", title)
    elif mode == "diff" and grid is not None:
        return diff_view(truth, grid, scale, fr, square, height, "explore_diff", context)
    elif not display.basemap:  # one deck for both maps: linked zoom and pan, hover values, scale bar
        paired_chart(
            truth,
            grid,
            scale,
            fr,
            state.get("view.zoom"),
            views.AREAS[state.get("view.area")],
            "explore",
            display,
            rects=rects,
            titles=("True " + noun, title),
            margin95=margins() if margins is not None else None,
            estimate=estimate,
            unit=noun,
            px=square,
            height=height,
            context=context,
        )
    else:  # a basemap puts each square on its real place: two maps sharing one view
        m1, m2 = st.columns(2)
        kw = dict(height=height, context=context)
        views.heat_chart(truth, scale, fr, view, "explore_true", display, title="True " + noun, container=m1, **kw)
        if grid is not None:
            views.heat_chart(
                grid, scale, fr, view, "explore_private", display, rects=rects, title=title, container=m2, **kw
            )
    return None


def mode_picker(container=None) -> str:
    c = container or st
    got = c.segmented_control(
        "Map view", list(MODES), format_func=MODES.get, key="explore.mapview", label_visibility="collapsed"
    )
    return got or "side"
