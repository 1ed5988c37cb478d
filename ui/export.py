"""Exports of a run: the private heatmap as a PNG figure (title, legend, scale bar,
attribution), a GeoTIFF, GeoJSON or CSV grid, and two evaluation documents (a JSON record
and the HTML report of :mod:`ui.report`).

The map exports hold the *private* release only. The evaluation documents also hold what
was computed from the true data (the true map, metrics against it, exact counts), so they
carry the stamp :data:`EVALUATION`. The grid writers and the stamp live in
:mod:`engine.run.execution._release_files`, which also writes Release-mode folders (``write_release``)."""

from __future__ import annotations

import io
import json
import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from engine.run.execution import EVALUATION as EVALUATION
from engine.run.execution import OWN_FILE, dataset_name, geotiff_grid, stamp_of
from engine.run.execution import csv_grid as csv_grid
from engine.run.execution import geojson_grid as geojson_grid

from .colors import ColourScale, lut

EMPTY = (236, 238, 242)  # cells drawn as empty (ui.maps.EMPTY, the dashboard's no-basemap colour)


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def record_json(result, url: str = "", extra: dict | None = None) -> str:
    """Configuration, metrics, ledger, communication and provenance of a run, stamped
    ``"evaluation"``: the metrics and exact counts come from the true data."""
    d = {"evaluation": EVALUATION, **result.summary()}
    meta = result.dataset_meta
    d["dataset"] = {
        "name": getattr(meta, "name", ""),
        "source": getattr(meta, "source", ""),
        "citation": getattr(meta, "citation", ""),
        "license": getattr(meta, "license", ""),
        "synthetic": bool(getattr(meta, "synthetic", False)),
        "bbox": list(getattr(meta, "bbox", ())),
        "bbox_from_data": bool(getattr(meta, "bbox_from_data", False)),
    }
    d["url"] = url
    if extra:
        d.update(extra)
    return json.dumps(_clean(json.loads(json.dumps(d, default=float))), indent=2)


# ------------------------------------------------------------------------ GeoTIFF
def release_geotiff(result, crs: str) -> bytes:
    """:func:`geotiff_grid` of a run's private grid (``crs``: its dataset's local CRS), tagged with
    its title and attribution, and stamped :data:`EVALUATION` in Evaluate mode."""
    from engine.regions.margins import grid_margin

    tags = {"title": release_title(result), "attribution": attribution(result)}
    margin = grid_margin(result.release)  # a second band, where there is a margin
    return geotiff_grid(result.release.density, result.release.domain, crs, tags, stamp=stamp_of(result), margin=margin)


def release_geoparquet(result, crs: str) -> bytes:
    """The private grid's non-empty cells as GeoParquet, each with its 95 % margin (null where none)."""
    from engine.regions.margin_files import geoparquet_grid
    from engine.regions.margins import grid_margin

    rel = result.release
    margin = grid_margin(rel)
    return geoparquet_grid(rel.density, margin, rel.domain, crs, stamp=stamp_of(result))


# ------------------------------------------------------------------- titles, credits
def mechanism_label(key: str) -> str:
    from engine.mechanisms import registry

    cls = registry().get(key)
    return (cls.label or key) if cls else key


def release_title(result) -> str:
    """The map's title: the mechanism and the ε its ledger spent, in the mechanism's own unit
    (geo-indistinguishability's per km or per metre), or "not private" when it spent none."""
    from engine.mechanisms import registry

    key = result.config.mechanism
    cls = registry().get(key)
    label = mechanism_label(key)
    led = result.release.ledger
    if cls is None or not cls.uses_epsilon or led.total() <= 0:
        return f"Map: {label} · not private (no ε spent)"
    unit = cls.schema().resolve(result.config.params).get("epsilon_unit")  # its default when not set
    eps = f"ε = {led.total():g}" + (f" {unit}" if unit else "")
    if led.total_delta():
        eps += f", δ = {led.total_delta():g}"
    return f"Private map: {label} · {eps}"


def attribution(result) -> str:
    """The dataset's citation and licence, and who made the release."""
    meta = result.dataset_meta
    name = dataset_name(result)
    cite = getattr(meta, "citation", "")
    if getattr(meta, "synthetic", False):
        data = f"Synthetic data: {name}, no real person; its coordinates are fictitious (placed at sea)"
    else:
        data = f"Data: {name}"
    if cite and name not in (cite, OWN_FILE):
        data += f" ({cite})"
    lic = getattr(meta, "license", "")
    by = "Private release" if result.release.ledger.total() > 0 else "Non-private reference"
    return f"{data}{'; ' + lic if lic else ''}. {by} by {mechanism_label(result.config.mechanism)}."


# ------------------------------------------------------------------------ PNG figure
WHITE, INK, GREY = (255, 255, 255), (20, 20, 20), (95, 95, 95)
PAD = 16


@lru_cache(maxsize=8)
def _font(size: int, bold: bool = False):
    """DejaVu or Liberation (they have ε, ², ×), else Pillow's own font."""
    names = (
        ("DejaVuSans-Bold.ttf", "LiberationSans-Bold.ttf") if bold else ("DejaVuSans.ttf", "LiberationSans-Regular.ttf")
    )
    for name in names:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def _wrap(text: str, font, width: float) -> list[str]:
    lines = []
    for para in text.split("\n"):
        line = ""
        for word in para.split():
            trial = f"{line} {word}".strip()
            if line and font.getlength(trial) > width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


def _text_block(text: str, width: int, size: int, bold: bool = False, fill=INK) -> Image.Image:
    font = _font(size, bold)
    lines = _wrap(text, font, width - 2 * PAD)
    lh = round(size * 1.35)
    img = Image.new("RGB", (width, lh * len(lines) + 6), WHITE)
    draw = ImageDraw.Draw(img)
    for i, ln in enumerate(lines):
        draw.text((PAD, 3 + i * lh), ln, font=font, fill=fill)
    return img


def _map_block(grid: np.ndarray, scale: ColourScale, side_px: int) -> Image.Image:
    """The map, north up, each cell a square of whole pixels, inside a 1-pixel frame."""
    g = np.asarray(grid, dtype=np.float64)
    k = side_px // g.shape[0]
    pal = np.empty((256, 3), dtype=np.uint8)
    pal[0] = EMPTY
    pal[1:] = lut(scale.cmap, 255)
    rgb = pal[scale.index(g)[::-1]].repeat(k, axis=0).repeat(k, axis=1)  # grid row 0 is the south edge
    img = Image.new("RGB", (side_px + 2 * PAD, side_px + 2), WHITE)
    ImageDraw.Draw(img).rectangle((PAD - 1, 0, PAD + side_px, side_px + 1), outline=GREY)
    img.paste(Image.fromarray(np.ascontiguousarray(rgb), mode="RGB"), (PAD, 1))
    return img


def nice_length(limit: float) -> float:
    """The largest 1, 2 or 5 x 10^k not above ``limit`` (a scale bar's length)."""
    e = 10 ** math.floor(math.log10(limit))
    return max(m * e for m in (1, 2, 5) if m * e <= limit)


def _metres(v: float) -> str:
    return f"{v / 1000:g} km" if v >= 1000 else f"{v:g} m"


def _scalebar_block(domain, side_px: int) -> Image.Image:
    """A bar of a round number of metres (at most a quarter of the side), and the grid's cells."""
    length = nice_length(domain.side / 4)
    px = round(length / domain.side * side_px)
    font = _font(12)
    img = Image.new("RGB", (side_px + 2 * PAD, 30), WHITE)
    draw = ImageDraw.Draw(img)
    y = 14
    draw.rectangle((PAD, y, PAD + px, y + 4), fill=INK)
    draw.rectangle((PAD + px // 2, y + 1, PAD + px - 1, y + 3), fill=WHITE)  # alternate halves, as on maps
    draw.line((PAD, y - 5, PAD, y + 4), fill=INK)
    draw.line((PAD + px, y - 5, PAD + px, y + 4), fill=INK)
    draw.text((PAD + px + 6, y - 6), _metres(length), font=font, fill=INK)
    right = f"{domain.n} × {domain.n} cells of {_metres(float(f'{domain.cell:.3g}'))} · north up"
    draw.text((PAD + side_px - font.getlength(right), y - 6), right, font=font, fill=GREY)
    return img


def _num(v: float) -> str:
    """Three significant digits, k/M for thousands/millions."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def floor_text(scale: ColourScale) -> str:
    """What is drawn as empty, in the legend's words (as ``ColourScale.legend_html``)."""
    if scale.log:
        return f"below {_num(scale.lo * scale.factor)} (and negative estimates): drawn as empty"
    return "zero or negative estimates: drawn as empty"


def _legend_block(scale: ColourScale, side_px: int, floor: str | None) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """Units, the colour ramp with its ticks, and the floor; returns the image and the ramp's box."""
    width = side_px + 2 * PAD
    head = _text_block(
        f"{scale.unit} ({'log' if scale.log else 'linear'} scale; above {_num(scale.hi * scale.factor)}: top colour)",
        width,
        13,
    )
    font = _font(12)
    ramp_h, y0 = 16, head.height + 2
    img = Image.new("RGB", (width, y0 + ramp_h + 48), WHITE)
    img.paste(head, (0, 0))
    # pixel x of the ramp shows colour index 1 + t * 254 with t = x / (side - 1), as ColourScale.index maps t
    t = np.arange(side_px) / (side_px - 1)
    cols = lut(scale.cmap, 255)[np.round(t * 254).astype(int)]
    img.paste(Image.fromarray(np.ascontiguousarray(np.repeat(cols[None], ramp_h, axis=0))), (PAD, y0))
    draw = ImageDraw.Draw(img)
    for p, label in scale.ticks():
        x = PAD + round(p * (side_px - 1))
        draw.line((x, y0 + ramp_h, x, y0 + ramp_h + 4), fill=INK)
        w = font.getlength(label)
        draw.text((min(max(x - w / 2, PAD), PAD + side_px - w), y0 + ramp_h + 5), label, font=font, fill=INK)
    fy = y0 + ramp_h + 26
    draw.rectangle((PAD, fy + 1, PAD + 12, fy + 13), fill=EMPTY, outline=GREY)
    draw.text((PAD + 18, fy), floor or floor_text(scale), font=font, fill=GREY)
    return img, (PAD, y0, PAD + side_px, y0 + ramp_h)


def map_png(
    grid: np.ndarray,
    scale: ColourScale,
    domain,
    *,
    title: str = "",
    attribution: str = "",
    legend: bool = True,
    floor: str | None = None,
    min_side: int = 512,
) -> bytes:
    """A map figure: title, the map (north up, cells as whole-pixel squares, at least
    ``min_side`` pixels), a scale bar in metres, the legend (units, colour ramp with its
    numbers, what is drawn as empty) and an attribution line.

    The PNG's text chunks ``map_box`` and ``legend_box`` give the map's and the colour ramp's
    pixel boxes as "x0,y0,x1,y1" (ends exclusive), for readers that check the figure."""
    n = np.asarray(grid).shape[0]
    side_px = n * max(1, math.ceil(min_side / n))
    width = side_px + 2 * PAD
    blocks: list[Image.Image] = [Image.new("RGB", (width, PAD // 2), WHITE)]
    if title:
        blocks.append(_text_block(title, width, 17, bold=True))
    map_y = sum(b.height for b in blocks) + 1
    blocks += [_map_block(grid, scale, side_px), _scalebar_block(domain, side_px)]
    boxes = {"map_box": (PAD, map_y, PAD + side_px, map_y + side_px)}
    if legend:
        img, (a, b, c, d) = _legend_block(scale, side_px, floor)
        y = sum(blk.height for blk in blocks)
        boxes["legend_box"] = (a, y + b, c, y + d)
        blocks.append(img)
    if attribution:
        blocks.append(_text_block(attribution, width, 11, fill=GREY))
    blocks.append(Image.new("RGB", (width, PAD // 2), WHITE))
    fig = Image.new("RGB", (width, sum(b.height for b in blocks)), WHITE)
    y = 0
    for b in blocks:
        fig.paste(b, (0, y))
        y += b.height
    info = PngInfo()
    for key, box in boxes.items():
        info.add_text(key, ",".join(map(str, box)))
    if title:
        info.add_text("Title", title)
    if attribution:
        info.add_text("Source", attribution)
    buf = io.BytesIO()
    fig.save(buf, format="PNG", pnginfo=info, optimize=False, compress_level=6)
    return buf.getvalue()


def release_png(result, scale: ColourScale) -> bytes:
    """The private map of a run as a figure (:func:`map_png`)."""
    rel = result.release
    return map_png(rel.density, scale, rel.domain, title=release_title(result), attribution=attribution(result))


def legend_png(scale: ColourScale, side_px: int = 512, floor: str | None = None) -> bytes:
    """The legend of :func:`map_png` alone (one legend under several maps)."""
    img, _ = _legend_block(scale, side_px, floor)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=6)
    return buf.getvalue()
