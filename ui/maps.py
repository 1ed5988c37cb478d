"""pydeck map layers for grids on the public domain.

Heatmaps are BitmapLayers carrying a server-rendered indexed PNG (a data URL,
passed as ``pdk.types.String`` so the JSON converter does not read it as an
expression), drawn with nearest-neighbour filtering. Offline maps have no
basemap (``map_provider=None``) and make no network request. Every map of a
view gets the same view state, so side-by-side maps frame the same area.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass

import numpy as np
import pydeck as pdk
from pydeck.bindings.json_tools import default_serialize

from engine.data.projection import to_lonlat

from .colors import ColourScale

MAP_HEIGHT = 420
NEAREST = {"minFilter": "nearest", "magFilter": "nearest", "mipmapFilter": "nearest"}
MAX_PATHS = 4000  # more outlines than this are drawn as a raster overlay instead
# Text drawn inside the maps (place names, coordinates, the scale bar, warnings), sized to be read at a projector's
# scale: 18 px, bold, in the browser's sans-serif. On a 1024 x 768 projector its capitals are about 13 px high, 1/60
# of the picture's height, which subtends 16 minutes of arc (the least character height ANSI/HFES 100 accepts for
# reading) from 3.5 picture heights away: the back row of a seminar room. 10-11 px text needs people within 2.
LABEL_PX = 18
TEXT_STYLE = {
    "get_size": LABEL_PX,
    "font_family": pdk.types.String("sans-serif"),
    "font_weight": 600,
    "character_set": pdk.types.String("auto"),  # every character the labels hold (°, −, accents), not only ASCII
}


class CompactDeck(pdk.Deck):
    """pydeck's JSON is indented; the browser needs it compact."""

    def to_json(self):  # noqa: D401 - pydeck API
        # pydeck's own serialisation, in one pass without its indentation (the hover layer alone is ~1 MB)
        return json.dumps(self, sort_keys=True, default=default_serialize, separators=(",", ":"))


@dataclass(frozen=True)
class Frame:
    """Where a domain sits on the globe: its corners and a fitted view."""

    domain: object  # engine.core.grid.Domain
    crs: str

    def lonlat(self, x, y) -> np.ndarray:
        return to_lonlat(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), self.crs)

    def corners(self) -> list[list[float]]:
        """Bottom-left, top-left, top-right, bottom-right (BitmapLayer order)."""
        x0, y0, x1, y1 = self.domain.bounds
        ll = self.lonlat([x0, x0, x1, x1], [y0, y1, y1, y0])
        return [[round(float(a), 7), round(float(b), 7)] for a, b in ll]

    def centre(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.domain.bounds
        ll = self.lonlat([(x0 + x1) / 2], [(y0 + y1) / 2])[0]
        return float(ll[0]), float(ll[1])

    def view(self, zoom: float = 0.0, pan: tuple[float, float] = (0.0, 0.0), px: int = 380) -> pdk.ViewState:
        """Fit the square into ``px`` pixels, then zoom in by ``zoom`` levels and pan by
        a fraction of the side (east, north)."""
        x0, y0, x1, y1 = self.domain.bounds
        cx = (x0 + x1) / 2 + pan[0] * self.domain.side
        cy = (y0 + y1) / 2 + pan[1] * self.domain.side
        lon, lat = self.lonlat([cx], [cy])[0]
        m_per_px = self.domain.side / px
        # deck.gl's web-mercator zoom: the world is 512 * 2**zoom pixels wide
        z = math.log2(78271.51696 * math.cos(math.radians(float(lat))) / m_per_px)
        return pdk.ViewState(
            longitude=round(float(lon), 7), latitude=round(float(lat), 7), zoom=round(z + zoom, 3), pitch=0, bearing=0
        )


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


EMPTY = (236, 238, 242)  # cells with no one, when no basemap is drawn


def heat_layer(
    grid: np.ndarray, scale: ColourScale, frame: Frame, layer_id: str, opacity: float = 1.0, background=None
) -> pdk.Layer:
    return pdk.Layer(
        "BitmapLayer",
        id=layer_id,
        image=pdk.types.String(data_url(scale.png(grid, background))),
        bounds=frame.corners(),
        texture_parameters=NEAREST,
        opacity=opacity,
        pickable=False,
    )


def region_layer(frame: Frame, dark: bool = False, layer_id: str = "region") -> pdk.Layer:
    """The public square: a faint fill so the region's extent is visible with no basemap."""
    ring = frame.corners() + [frame.corners()[0]]
    return pdk.Layer(
        "PolygonLayer",
        id=layer_id,
        data=[{"polygon": ring}],
        get_polygon="polygon",
        filled=True,
        stroked=True,
        get_fill_color=[40, 40, 48, 255] if dark else [236, 238, 242, 255],
        get_line_color=[120, 120, 130, 255],
        line_width_min_pixels=1,
        pickable=False,
    )


def rect_paths(rects: np.ndarray, frame: Frame) -> list[dict]:
    """Closed lon/lat paths of rectangles (metres)."""
    r = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    xs = r[:, [0, 0, 2, 2, 0]]
    ys = r[:, [1, 3, 3, 1, 1]]
    ll = frame.lonlat(xs.ravel(), ys.ravel()).round(6).reshape(len(r), 5, 2)
    return [{"path": p.tolist()} for p in ll]


def outline_layer(rects: np.ndarray, frame: Frame, layer_id: str, colour=(255, 255, 255, 200)) -> pdk.Layer:
    """Outlines of adaptive cells; a PathLayer, or a raster overlay beyond ``MAX_PATHS`` cells."""
    rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    if len(rects) > MAX_PATHS:
        return pdk.Layer(
            "BitmapLayer",
            id=layer_id,
            image=pdk.types.String(data_url(outline_png(rects, frame.domain, colour))),
            bounds=frame.corners(),
            texture_parameters=NEAREST,
        )
    return pdk.Layer(
        "PathLayer",
        id=layer_id,
        data=rect_paths(rects, frame),
        get_path="path",
        get_color=list(colour),
        width_min_pixels=1,
        width_max_pixels=2,
        pickable=False,
    )


def outline_png(rects: np.ndarray, domain, colour=(255, 255, 255, 200), side: int = 1024) -> bytes:
    """Rectangle borders rasterised on a ``side`` x ``side`` transparent image.

    Vectorised (a release can hold tens of thousands of cells, and a loop over them cost Sparse EMD's page
    about half a second per rerun): each border is an interval on one row or column, marked with +1/-1 in a
    difference array whose running sum is positive exactly on the interval."""
    import io

    from PIL import Image

    r = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    s = side / domain.side

    def pix(v, o):
        return np.clip((v - o) * s, 0, side - 1).astype(np.int64)  # truncation toward 0, as int() did

    i0, j0, i1, j1 = pix(r[:, 0], domain.x0), pix(r[:, 1], domain.y0), pix(r[:, 2], domain.x0), pix(r[:, 3], domain.y0)
    rows = np.zeros((side, side + 1), dtype=np.int32)  # horizontal borders: rows j0 and j1, columns i0..i1
    for j in (j0, j1):
        np.add.at(rows, (j, i0), 1)
        np.add.at(rows, (j, i1 + 1), -1)
    cols = np.zeros((side + 1, side), dtype=np.int32)  # vertical borders: columns i0 and i1, rows j0..j1
    for i in (i0, i1):
        np.add.at(cols, (j0, i), 1)
        np.add.at(cols, (j1 + 1, i), -1)
    on = (np.cumsum(rows, axis=1)[:, :side] > 0) | (np.cumsum(cols, axis=0)[:side] > 0)
    img = np.zeros((side, side, 4), dtype=np.uint8)
    img[on] = colour
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img[::-1]), mode="RGBA").save(buf, format="PNG")
    return buf.getvalue()


def rects_to_grid(rects: np.ndarray, values: np.ndarray, domain) -> np.ndarray:
    """Spread each rectangle's count uniformly over the grid cells it covers (display only)."""
    n = domain.n
    out = np.zeros((n, n))
    s = n / domain.side
    for (x0, y0, x1, y1), v in zip(np.asarray(rects).reshape(-1, 4), np.asarray(values).ravel()):
        i0, i1 = int(round((x0 - domain.x0) * s)), int(round((x1 - domain.x0) * s))
        j0, j1 = int(round((y0 - domain.y0) * s)), int(round((y1 - domain.y0) * s))
        i0, j0 = max(i0, 0), max(j0, 0)
        i1, j1 = min(max(i1, i0 + 1), n), min(max(j1, j0 + 1), n)
        out[j0:j1, i0:i1] += v / ((i1 - i0) * (j1 - j0))
    return out


def points_layer(points_lonlat: np.ndarray, layer_id: str, colour, radius_px=6, weights=None) -> pdk.Layer:
    pts = np.asarray(points_lonlat, dtype=np.float64).reshape(-1, 2).round(6)
    w = np.ones(len(pts)) if weights is None else np.asarray(weights, dtype=np.float64)
    wmax = float(w.max()) if len(w) and w.max() > 0 else 1.0
    data = [
        {"p": p.tolist(), "r": float(radius_px * (0.4 + 0.6 * math.sqrt(max(wi, 0) / wmax))), "w": float(wi)}
        for p, wi in zip(pts, w)
    ]
    return pdk.Layer(
        "ScatterplotLayer",
        id=layer_id,
        data=data,
        get_position="p",
        get_radius="r",
        radius_units=pdk.types.String("pixels"),  # a plain string would be read as an expression
        get_fill_color=list(colour),
        get_line_color=[255, 255, 255, 255],
        line_width_min_pixels=1,
        stroked=True,
        pickable=True,
    )


def deck(layers: list, view: pdk.ViewState, basemap: bool = False, tooltip=None) -> CompactDeck:
    """A deck with no basemap (offline, no network) unless ``basemap`` is on."""
    kw = dict(layers=layers, initial_view_state=view, tooltip=tooltip if tooltip is not None else False)
    if basemap:
        return CompactDeck(map_provider="carto", map_style="light", **kw)
    # map_style left at its default: pydeck then sends the "__MAP_STYLE__" sentinel, which Streamlit reads as
    # "no basemap"; map_style=None would make Streamlit fall back to a Carto basemap (a network request).
    return CompactDeck(map_provider=None, **kw)


# ------------------------------------------------------------------ the paired (linked) map
GAP = 0.06  # gap between the two squares, in region sides
HOVER_MAX = 64  # hover blocks per side at most: finer grids are summed into blocks (payload stays small)


@dataclass(frozen=True)
class Shifted:
    """The frame moved east by ``dx`` metres: where the private square sits in a paired map."""

    frame: Frame
    dx: float

    @property
    def domain(self):
        return self.frame.domain

    @property
    def crs(self) -> str:
        return self.frame.crs

    def lonlat(self, x, y) -> np.ndarray:
        return self.frame.lonlat(np.asarray(x, dtype=np.float64) + self.dx, y)

    def corners(self) -> list[list[float]]:
        x0, y0, x1, y1 = self.domain.bounds
        ll = self.lonlat([x0, x0, x1, x1], [y0, y1, y1, y0])
        return [[round(float(a), 7), round(float(b), 7)] for a, b in ll]


def paired_view(frame: Frame, zoom: float, pan: tuple[float, float], px: int) -> pdk.ViewState:
    """One view of both squares: fitted to ``px`` pixels per square, centred between them."""
    v = frame.view(zoom, (pan[0] + (1 + GAP) / 2, pan[1]), px=px)
    return v


def nice_metres(limit: float) -> float:
    """The largest 1-2-5 × 10^k metres not above ``limit``."""
    e = 10 ** math.floor(math.log10(max(limit, 1e-9)))
    return max(m * e for m in (1, 2, 5) if m * e <= limit) if limit >= e else e


def scale_bar_layers(frame: Frame, layer_id: str) -> list[pdk.Layer]:
    """A bar of a round number of metres (at most a quarter of the side) in the square's top-right corner
    (the frame's coordinates take the bottom and left edges)."""
    d = frame.domain
    length = nice_metres(d.side / 4)
    x1, y0 = d.x0 + 0.96 * d.side, d.y0 + 0.93 * d.side
    path = frame.lonlat([x1 - length, x1], [y0, y0]).round(7).tolist()
    label = f"{length / 1000:g} km" if length >= 1000 else f"{length:g} m"
    mid = frame.lonlat([x1 - length / 2], [y0 + 0.035 * d.side])[0].round(7).tolist()
    return [
        pdk.Layer(
            "PathLayer",
            id=f"{layer_id}_scalebar",
            data=[{"path": path}],
            get_path="path",
            get_color=[30, 30, 40, 255],
            width_min_pixels=3,
            pickable=False,
        ),
        pdk.Layer(
            "TextLayer",
            id=f"{layer_id}_scalelabel",
            data=[{"p": mid, "t": label}],
            get_position="p",
            get_text="t",
            **TEXT_STYLE,
            get_color=[30, 30, 40, 255],
            background=True,
            get_background_color=[255, 255, 255, 210],
            pickable=False,
        ),
    ]


def note_layer(frame: Frame, text: str, layer_id: str) -> pdk.Layer:
    """A short warning written on the map (two lines that fit a small multiple), near its top, on a light band."""
    d = frame.domain
    pos = frame.lonlat([d.x0 + d.side / 2], [d.y0 + 0.88 * d.side])[0].round(7).tolist()
    return pdk.Layer(
        "TextLayer",
        id=f"{layer_id}_note",
        data=[{"p": pos, "t": text}],
        get_position="p",
        get_text="t",
        **TEXT_STYLE,
        get_color=[150, 20, 20, 255],
        background=True,
        get_background_color=[255, 255, 255, 225],
        background_padding=[4, 2],
        pickable=False,
    )


def block_sums(grid: np.ndarray, k: int) -> np.ndarray:
    n = grid.shape[0]
    return grid.reshape(n // k, k, n // k, k).sum(axis=(1, 3))


def hover_block(n: int) -> int:
    """Cells per side of the hover's blocks on a grid of ``n`` a side (at most ``HOVER_MAX`` blocks a side)."""
    return max(1, n // HOVER_MAX)


def hover_layer(
    truth: np.ndarray,
    private: np.ndarray,
    margin95: np.ndarray | None,
    frame: Frame,
    layer_id: str,
    unit: str,
    estimate: np.ndarray | None = None,
) -> tuple[pdk.Layer, dict]:
    """Near-invisible cells that carry, for the tooltip, each cell's true and private value and, when the
    release has one, the private value's 95 % margin (``margin95``: one per hover block, as
    :func:`engine.regions.margins.block_margins` gives, NaN where there is none). Over ``HOVER_MAX`` cells per
    side, cells are summed into blocks (:func:`hover_block`). ``estimate``: the map the margins are for when it
    is not the drawn one (``Release.summed_map``: the tree's least-squares leaves beside its non-negative map);
    its sums are then shown with the margin. Returns the layer and the Deck tooltip."""
    k = hover_block(truth.shape[0])
    t, p = block_sums(np.asarray(truth, float), k), block_sums(np.asarray(private, float), k)
    s = None if estimate is None else block_sums(np.asarray(estimate, float), k)
    e = None if margin95 is None else np.asarray(margin95, dtype=np.float64).reshape(t.shape)
    m = t.shape[0]
    cell = frame.domain.side / m
    jj, ii = np.nonzero((t != 0) | (p != 0))
    x0 = frame.domain.x0 + ii * cell
    y0 = frame.domain.y0 + jj * cell
    data = []
    for shift in (0.0, frame.domain.side * (1 + GAP)):
        xs = np.stack([x0, x0, x0 + cell, x0 + cell], axis=1) + shift
        ys = np.stack([y0, y0 + cell, y0 + cell, y0], axis=1)
        ll = frame.lonlat(xs.ravel(), ys.ravel()).round(6).reshape(-1, 4, 2).tolist()
        # plain Python floats: formatting a numpy scalar per cell costs several times more
        tv, pv = t[jj, ii].tolist(), p[jj, ii].tolist()
        if e is None:
            data += [{"g": q, "t": f"{a:.3g}", "p": f"{b:.3g}"} for q, a, b in zip(ll, tv, pv)]
        else:
            ev, sv = e[jj, ii].tolist(), (p if s is None else s)[jj, ii].tolist()
            at = "" if s is None else "; its unbiased estimate {:.3g}"
            data += [
                {
                    "g": q,
                    "t": f"{a:.3g}",
                    "p": f"{b:.3g}",
                    "e": (at.format(v) + f" ± {m:.2g}") if math.isfinite(m) else "",
                }
                for q, a, b, m, v in zip(ll, tv, pv, ev, sv)
            ]
    layer = pdk.Layer(
        "PolygonLayer",
        id=f"{layer_id}_hover",
        data=data,
        get_polygon="g",
        filled=True,
        stroked=False,
        get_fill_color=[0, 0, 0, 1],  # all but transparent: drawn, so it can be picked
        pickable=True,
        auto_highlight=True,
        highlight_color=[255, 255, 255, 90],
    )
    what = "cell" if k == 1 else f"block of {k} × {k} cells"
    margin = "{e}" if e is not None else ""
    tip = {
        "html": f"<b>this {what}</b><br/>true: {{t}} {unit}<br/>private: {{p}}{margin} {unit}"
        + (
            "<br/>± : the 95 % margin of error (the noise, and where people may sit in a larger released unit)"
            if e is not None
            else ""
        ),
        "style": {"fontSize": "16px", "backgroundColor": "#222", "color": "white"},
    }
    return layer, tip


def deck_json_bytes(n_points: int, depth: int) -> int:
    """Size of the private map's deck JSON for an identity release of the default synthetic city with
    ``n_points`` locations at ``2^depth`` cells per side (the app benchmark's figure)."""
    from engine.run import RunConfig, load_dataset, run

    cfg = RunConfig(dataset_options={"n": n_points}, depth=depth, epsilon=1.0, seed=0)
    res = run(cfg, use_cache=False)
    dom = res.release.domain
    fr = Frame(dom, load_dataset(cfg.dataset, cfg.dataset_options).crs)
    scale = ColourScale.shared(res.truth, dom.cell**2 / 1e6)
    d = deck([region_layer(fr), heat_layer(res.release.density, scale, fr, "private_heat")], fr.view())
    return len(d.to_json().encode())
