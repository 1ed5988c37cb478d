"""Geography drawn on every map without a network: coordinates on the frame, a scale bar, nearby place names
from an offline gazetteer, and the dataset's public context (streets, landmarks, boundaries).

Every function takes a frame-like object (``maps.Frame`` or ``maps.Shifted``): real lon/lat are taken to the
frame's local metres and drawn through ``frame.lonlat``, so the same layers sit on a square moved east in
Explore's paired deck.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pydeck as pdk

from engine.data import geography
from engine.data.context import Context
from engine.data.projection import to_local

from .maps import TEXT_STYLE, data_url

INK = [30, 30, 40, 255]
CONTEXT_GREY = (150, 150, 160, 255)
# A context of more vertices is drawn as an image of the square: a browser drawing WebGL in software (no GPU)
# spends seconds on every 100,000 vertices of a path layer, and the deck's JSON grows by ~45 bytes a vertex.
MAX_CONTEXT_VERTICES = 20_000
CONTEXT_PX = 1024
_context_images: dict = {}
HALO = [255, 255, 255, 255]  # opaque: a label reads the same over any colour


def _drawn(fr, lon, lat) -> np.ndarray:
    """Where real lon/lat points are drawn on ``fr`` (identity on an unshifted frame)."""
    xy = to_local(np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64), fr.crs)
    return fr.lonlat(xy[:, 0], xy[:, 1])


def _inside(fr, lon, lat, margin: float = 0.0) -> np.ndarray:
    xy = to_local(np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64), fr.crs)
    x0, y0, x1, y1 = fr.domain.bounds
    m = margin * fr.domain.side
    return (xy[:, 0] >= x0 + m) & (xy[:, 0] <= x1 - m) & (xy[:, 1] >= y0 + m) & (xy[:, 1] <= y1 - m)


def _text(layer_id: str, data: list[dict], anchor: str = "middle", align: str = "center"):
    return pdk.Layer(
        "TextLayer",
        id=layer_id,
        data=data,
        get_position="p",
        get_text="t",
        **TEXT_STYLE,
        get_color=INK,
        get_text_anchor=pdk.types.String(anchor),
        get_alignment_baseline=pdk.types.String(align),
        background=True,
        get_background_color=HALO,
        background_padding=[3, 1, 3, 1],
        pickable=False,
    )


@lru_cache(maxsize=32)
def _places(bounds: tuple, crs: str, limit: int) -> tuple:
    """Gazetteer places in the lon/lat envelope of a square (its edges sampled: a square in metres is not one
    in degrees); thrice ``limit``, as those outside the square or at its very edge are dropped after."""
    from engine.data.projection import to_lonlat

    x0, y0, x1, y1 = bounds
    t = np.linspace(0, 1, 9)
    xs = np.concatenate([x0 + (x1 - x0) * t, np.full(9, x1), x0 + (x1 - x0) * t, np.full(9, x0)])
    ys = np.concatenate([np.full(9, y0), y0 + (y1 - y0) * t, np.full(9, y1), y0 + (y1 - y0) * t])
    ll = to_lonlat(xs, ys, crs)
    return tuple(geography.places_within(ll[:, 0].min(), ll[:, 1].min(), ll[:, 0].max(), ll[:, 1].max(), limit * 3))


def place_layers(fr, layer_id: str, limit: int = 6) -> list[pdk.Layer]:
    """The most populous gazetteer places inside the square: a dot and the name beside it."""
    found = list(_places(tuple(fr.domain.bounds), fr.crs, limit))
    if not found:
        return []
    lon, lat = np.array([p[1] for p in found]), np.array([p[2] for p in found])
    keep = np.flatnonzero(_inside(fr, lon, lat, margin=0.03))[:limit]
    if not keep.size:
        return []
    at = _drawn(fr, lon[keep], lat[keep]).round(7)
    data = [{"p": a.tolist(), "t": found[i][0]} for a, i in zip(at, keep)]
    dots = pdk.Layer(
        "ScatterplotLayer",
        id=f"{layer_id}_placedots",
        data=data,
        get_position="p",
        get_radius=3,
        radius_units=pdk.types.String("pixels"),
        get_fill_color=INK,
        get_line_color=[255, 255, 255, 255],
        stroked=True,
        line_width_min_pixels=1,
        pickable=False,
    )
    return [dots, _text(f"{layer_id}_places", data, "start", "center")]


def nice_degrees(span: float) -> float:
    """A 1-2-5 x 10^k step in degrees giving two to five ticks over ``span``."""
    raw = span / 3
    e = 10 ** math.floor(math.log10(max(raw, 1e-9)))
    return min((m * e for m in (1, 2, 5, 10)), key=lambda s: abs(math.log(s / raw)))


def degrees(v: float, step: float, pos: str, neg: str) -> str:
    """``v`` degrees to the precision of ``step``, with its hemisphere (0.140° W)."""
    d = max(0, -math.floor(math.log10(step)))
    return f"{abs(v):.{d}f}° {pos if v >= 0 else neg}"


def coordinate_layers(fr, layer_id: str) -> list[pdk.Layer]:
    """Longitudes along the bottom edge and latitudes along the left edge, inside the square, with ticks."""
    x0, y0, x1, y1 = fr.domain.bounds
    base = fr.frame if hasattr(fr, "frame") else fr  # real coordinates, even on a shifted square
    bl, tr = base.lonlat([x0, x1], [y0, y1])
    labels, ticks = [], []
    inset = 0.012 * fr.domain.side
    step = nice_degrees(tr[0] - bl[0])
    for lon in np.arange(math.ceil(bl[0] / step) * step, tr[0], step):
        x = float(to_local(np.array([lon]), np.array([bl[1]]), fr.crs)[0, 0])
        if not x0 + 0.12 * fr.domain.side < x < x1 - 0.08 * fr.domain.side:
            continue
        ticks.append({"path": fr.lonlat([x, x], [y0, y0 + inset]).round(7).tolist()})
        labels.append({"p": fr.lonlat([x], [y0 + inset])[0].round(7).tolist(), "t": degrees(lon, step, "E", "W")})
    step = nice_degrees(tr[1] - bl[1])
    for lat in np.arange(math.ceil(bl[1] / step) * step, tr[1], step):
        y = float(to_local(np.array([bl[0]]), np.array([lat]), fr.crs)[0, 1])
        if not y0 + 0.12 * fr.domain.side < y < y1 - 0.05 * fr.domain.side:
            continue
        ticks.append({"path": fr.lonlat([x0, x0 + inset], [y, y]).round(7).tolist()})
        labels.append({"p": fr.lonlat([x0 + 2 * inset], [y])[0].round(7).tolist(), "t": degrees(lat, step, "N", "S")})
    if not labels:
        return []
    return [
        pdk.Layer(
            "PathLayer",
            id=f"{layer_id}_ticks",
            data=ticks,
            get_path="path",
            get_color=INK,
            width_min_pixels=1,
            pickable=False,
        ),
        _text(f"{layer_id}_coords", [d for d in labels if d["t"].endswith(("E", "W"))], "middle", "bottom"),
        _text(f"{layer_id}_coords_lat", [d for d in labels if d["t"].endswith(("N", "S"))], "start", "center"),
    ]


def context_layers(fr, ctx: Context | None, layer_id: str) -> list[pdk.Layer]:
    """The public context's lines (grey) and named points (small dark dots), to be drawn under the heatmap."""
    if ctx is None:
        return []
    out = []
    if ctx.paths and sum(len(p) for p in ctx.paths) > MAX_CONTEXT_VERTICES:
        out.append(
            pdk.Layer(
                "BitmapLayer",
                id=f"{layer_id}_ctxlines",
                image=pdk.types.String(data_url(_context_png(ctx, fr.domain.bounds, fr.crs))),
                bounds=fr.corners(),
            )
        )
    elif ctx.paths:
        flat = np.concatenate([np.asarray(p, dtype=np.float64) for p in ctx.paths])
        moved = _drawn(fr, flat[:, 0], flat[:, 1]).round(7)
        ends = np.cumsum([len(p) for p in ctx.paths])[:-1]
        paths = [{"path": p.tolist()} for p in np.split(moved, ends)]
        out.append(
            pdk.Layer(
                "PathLayer",
                id=f"{layer_id}_ctxlines",
                data=paths,
                get_path="path",
                get_color=list(CONTEXT_GREY),
                width_min_pixels=1,
                width_max_pixels=2,
                pickable=False,
            )
        )
    pts = ctx.points
    if pts:
        pts = [pts[i] for i in np.flatnonzero(_inside(fr, [p[1] for p in pts], [p[2] for p in pts]))]
    if pts:
        at = _drawn(fr, [p[1] for p in pts], [p[2] for p in pts]).round(7)
        data = [{"p": a.tolist(), "t": p[0]} for a, p in zip(at, pts)]
        out.append(
            pdk.Layer(
                "ScatterplotLayer",
                id=f"{layer_id}_ctxpoints",
                data=data,
                get_position="p",
                get_radius=4,
                radius_units=pdk.types.String("pixels"),
                get_fill_color=[20, 20, 30, 255],
                get_line_color=[255, 255, 255, 255],
                stroked=True,
                line_width_min_pixels=1,
                pickable=False,
            )
        )
    return out


def _context_png(ctx: Context, bounds, crs: str, side: int = CONTEXT_PX) -> bytes:
    """The context's lines, in its grey, on a ``side`` x ``side`` transparent image of the square ``bounds``
    (local metres): drawn at twice the size and halved, so the lines are smooth and two pixels wide. Kept for
    the context and the square, so the paired map's second square costs nothing."""
    key = (id(ctx), tuple(bounds), crs, side)
    if _context_images.get(key, (None,))[0] is ctx:
        return _context_images[key][1]
    import io

    from PIL import Image, ImageDraw

    x0, y0, x1, y1 = bounds
    flat = np.concatenate([np.asarray(p, dtype=np.float64) for p in ctx.paths])
    xy = to_local(flat[:, 0], flat[:, 1], crs)
    big = 2 * side
    pix = np.column_stack([(xy[:, 0] - x0) / (x1 - x0), (y1 - xy[:, 1]) / (y1 - y0)]) * big
    img = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    start = 0
    for n in (len(p) for p in ctx.paths):
        draw.line(pix[start : start + n].ravel().tolist(), fill=CONTEXT_GREY, width=4, joint="curve")
        start += n
    buf = io.BytesIO()
    img.resize((side, side), Image.Resampling.BOX).save(buf, format="PNG", optimize=False)
    _context_images.clear()  # one context is drawn at a time
    _context_images[key] = (ctx, buf.getvalue())
    return buf.getvalue()


def frame_layers(fr, layer_id: str, places: int = 6) -> list[pdk.Layer]:
    """What every map draws on top: coordinates, place names and a scale bar."""
    from .maps import scale_bar_layers

    return coordinate_layers(fr, layer_id) + place_layers(fr, layer_id, places) + scale_bar_layers(fr, layer_id)
