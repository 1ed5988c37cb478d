"""Colour scales shared by every map of a view, their PNG rendering and legend.

One :class:`ColourScale` is built per view from the true histogram so the true
and private maps (and every small multiple) use the same mapping from counts to
colours. Values are shown in display units (locations per km², or % of all
locations per cell); the mapping works in counts per cell internally.

The colour maps come from the libraries that define them: matplotlib's perceptually
uniform sequential maps (viridis, magma, cividis, inferno) for counts, and colorcet's
perceptually uniform diverging blue-white-red map (Kovesi's CET-D1, :data:`DIVERGING`) for the
difference map private − true and its legend (:mod:`ui.diverging`), whose equal steps of lightness
on either side of its white centre make a deficit and an excess of the same size look
equally strong.
"""

from __future__ import annotations

import html
import io
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image

SEQUENTIAL = ("viridis", "magma", "cividis", "inferno")  # matplotlib's
# colorcet's CET_D1 (diverging_bwr_40_95_c42): blue (below) - white (0) - red (above), lightness 40 -> 95 -> 40
DIVERGING = "CET_D1"
UNITS = {"km2": "locations per km²", "share": "% of all locations (per cell)"}


@lru_cache(maxsize=16)
def _table(cmap: str) -> np.ndarray:
    """The colour map's own table of RGB colours in [0, 255] (256 entries), from the library defining it."""
    if cmap in SEQUENTIAL:
        import matplotlib

        return matplotlib.colormaps[cmap](np.linspace(0.0, 1.0, 256))[:, :3] * 255.0
    import colorcet

    if cmap not in colorcet.palette:
        raise KeyError(f"unknown colour map {cmap!r}")
    return np.array([[int(h[i : i + 2], 16) for i in (1, 3, 5)] for h in colorcet.palette[cmap]], dtype=np.float64)


def lut(cmap: str, n: int = 255) -> np.ndarray:
    """``n`` RGB colours evenly spaced along the map (uint8, shape (n, 3))."""
    s = _table(cmap)
    x = np.linspace(0, 1, len(s))
    t = np.linspace(0, 1, n)
    return np.stack([np.interp(t, x, s[:, c]) for c in range(3)], axis=1).round().astype(np.uint8)


# the floor keeps 99.9% of the true map's mass and at least 95% of each private map's positive mass drawn:
# thin noise in a release's empty cells may fall under it, its real structure may not
FAINT_TRUE, FAINT_PRIVATE = 0.001, 0.05


def mass_floor(grid, faint: float) -> float:
    """The value below which a map's positive cells hold only ``faint`` of its positive mass (0 if none)."""
    g = np.asarray(grid, dtype=np.float64)
    v = np.sort(g[np.isfinite(g) & (g > 0)])
    if not v.size:
        return 0.0
    c = np.cumsum(v)
    i = int(np.searchsorted(c, faint * c[-1], side="right"))
    return float(v[min(i, v.size - 1)])


@dataclass(frozen=True)
class ColourScale:
    """Counts per cell -> colour index; ``lo``/``hi`` are counts per cell."""

    lo: float
    hi: float
    log: bool
    factor: float  # counts per cell -> display units
    unit: str
    cmap: str = "viridis"

    @classmethod
    def shared(
        cls,
        truth: np.ndarray,
        cell_km2: float,
        *,
        log: bool = True,
        units: str = "km2",
        cmap: str = "viridis",
        others=(),
    ) -> ColourScale:
        """One scale for a view: the true map and every private map of the page (``others``).

        The log scale's floor adapts to the maps instead of a fixed half-location per cell: it is the
        lowest of the maps' *mass floors*, the value under which a map's faintest positive cells hold
        only a small share of its mass (``FAINT_TRUE`` of the truth's, ``FAINT_PRIVATE`` of a release's).
        A release that spreads its mass thinly over many cells (a good smooth one, or a truth of
        per-user weights) then stays visible, while thin noise in a release's empty cells may not. The top is the truth's densest cell (a private map's higher peaks
        saturate the top colour, as the legend says)."""
        t = np.asarray(truth, dtype=np.float64)
        pos = t[t > 0]
        top = float(pos.max()) if pos.size else 1.0
        if log:
            true_floor = mass_floor(t, FAINT_TRUE)
            if pos.size and np.all(pos == np.round(pos)):
                true_floor = min(true_floor, 1.0)  # counts of locations: a single location is never hidden
            floors = [true_floor] + [mass_floor(m, FAINT_PRIVATE) for m in others]
            floors = [f for f in floors if f > 0 and math.isfinite(f)]
            lo = min(floors) if floors else 0.5
            lo = min(lo, top / 2)
            hi = max(top, 2 * lo)
        else:
            lo = 0.0
            # a heavy-tailed city saturates its few densest cells rather than darkening the rest
            hi = float(np.percentile(pos, 99.5)) if pos.size > 200 else top
            hi = max(hi, 1e-9)
        total = float(t.sum()) if t.sum() > 0 else 1.0
        factor = 1.0 / cell_km2 if units == "km2" else 100.0 / total
        return cls(lo, hi, log, factor, UNITS.get(units, units), cmap)

    # ---------------------------------------------------------------- mapping
    def index(self, grid: np.ndarray) -> np.ndarray:
        """uint8 indices: 0 = transparent (no one, or a negative estimate), 1..255 colours."""
        g = np.asarray(grid, dtype=np.float64)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                t = (np.log(np.maximum(g, 1e-300)) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
            show = g >= self.lo
        else:
            t = (g - self.lo) / (self.hi - self.lo)
            show = g > 0
        idx = 1 + np.clip(np.nan_to_num(t), 0.0, 1.0) * 254
        out = idx.round().astype(np.uint8)
        out[~show | ~np.isfinite(g)] = 0
        return out

    def png(self, grid: np.ndarray, background: tuple[int, int, int] | None = None) -> bytes:
        """Indexed PNG (1 byte per cell), north up. Palette index 0 (no one, or a negative
        estimate) is transparent, or the opaque ``background`` colour when there is no basemap
        (one layer then draws the whole region: less work for the browser)."""
        idx = np.ascontiguousarray(self.index(grid)[::-1])  # grid row 0 is the south edge
        img = Image.fromarray(idx, mode="P")
        pal = np.zeros((256, 3), dtype=np.uint8)
        pal[1:] = lut(self.cmap, 255)
        if background is not None:
            pal[0] = background
        img.putpalette(pal.ravel().tolist())
        buf = io.BytesIO()
        if background is None:
            img.save(buf, format="PNG", transparency=0, compress_level=6)
        else:
            img.save(buf, format="PNG", compress_level=6)
        return buf.getvalue()

    # ----------------------------------------------------------------- legend
    def ticks(self) -> list[tuple[float, str]]:
        """(position 0..1, label in display units)."""
        a, b = self.lo * self.factor, self.hi * self.factor
        out = []
        if not (math.isfinite(a) and math.isfinite(b) and b > a and (a > 0 or not self.log)):
            return out  # a degenerate scale gets a legend without ticks, never an error
        if self.log:
            la, lb = math.log10(a), math.log10(b)
            decades = lb - la
            mult = (1,) if decades > 3.5 else ((1, 3) if decades > 1.5 else (1, 2, 5))
            for e in range(math.floor(la), math.ceil(lb) + 1):
                for m in mult:
                    v = m * 10.0**e
                    if a * 0.999 <= v <= b * 1.001:
                        out.append(((math.log10(v) - la) / (lb - la), tick_label(v)))
        else:
            step = _nice_step((b - a) / 4)
            # whole multiples of the step: labels without float residue (0, never 1e-17)
            for k in range(math.ceil(a / step), math.floor(b * 1.0001 / step) + 1):
                v = k * step
                out.append(((v - a) / (b - a), tick_label(v)))
        return out

    def legend_html(self, note: str = "", shared: bool = True, floor: str | None = None) -> str:
        cols = lut(self.cmap, 17)
        grad = ", ".join(f"rgb({r},{g},{b}) {i * 100 / 16:.1f}%" for i, (r, g, b) in enumerate(cols))
        ticks = "".join(
            f'<span style="position:absolute;left:{p * 100:.1f}%;transform:translateX(-50%);">{html.escape(lbl)}</span>'
            for p, lbl in self.ticks()
        )
        scale = "log scale" if self.log else "linear scale"
        if floor is None:
            floor = (
                f"below {tick_label(self.lo * self.factor)} (and negative estimates): drawn as empty"
                if self.log
                else "zero or negative estimates: drawn as empty"
            )
        ends = f"values above {tick_label(self.hi * self.factor)} get the top colour"
        extra = f" · {html.escape(note)}" if note else ""
        return (
            '<div class="heat-legend" style="font-size:0.85rem;line-height:1.2;margin:0.2rem 0 0.6rem 0;">'
            f"<div><b>{html.escape(self.unit)}</b> ({scale}{', shared by every map on this page' if shared else ''}; "
            f"{ends})</div>"
            f'<div style="height:14px;border-radius:3px;margin-top:4px;background:linear-gradient(to right, {grad});">'
            "</div>"
            f'<div style="position:relative;height:1.3em;margin:2px 8px 0 8px;">{ticks}</div>'
            f'<div style="opacity:0.75">{html.escape(floor)}{extra}</div></div>'
        )


def _nice_step(x: float) -> float:
    if x <= 0 or not math.isfinite(x):
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= x:
            return m * e
    return 10 * e


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    av = abs(v)
    if av >= 1e6:
        return f"{v / 1e6:.3g}M"
    if av >= 1e4:
        return f"{v / 1e3:.3g}k"  # 10.6k, never 10.649k
    if av >= 100:
        return f"{v:,.0f}"
    if av >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


SATURATED = 0.10  # of the region's cells at the top colour: the truth's scale puts at most 0.5 % there
FLAT_SPREAD = 2  # colour steps (of 254) that the drawn cells of a flat map span at most


def swamp_note(scale: ColourScale | None, grid) -> tuple[str, str] | None:
    """When the colour scale cannot show a map's structure: (two short lines for the map itself, a sentence for
    its caption), else None. Noise that puts many cells above the scale's top saturates the map (a local-DP
    grid's per-cell noise); a map of one value everywhere (the uniform baseline, or a release whose noise
    flattened it) draws one flat block that ranks no place above another."""
    if scale is None or grid is None:
        return None
    g = np.asarray(grid, dtype=np.float64)
    idx = scale.index(g)
    drawn = idx > 0
    n = idx.size
    top = float((idx == 255).sum()) / n
    if not drawn.any():
        return (
            "Nothing above\nthe scale's floor",
            "Every cell of this map is below the colour scale's floor (or negative): it is drawn empty.",
        )
    if top >= SATURATED:
        neg = float((np.isfinite(g) & (g < 0)).sum()) / n
        return (
            f"Noise swamps the scale:\n{top:.0%} of cells at the top",
            f"Noise swamps this map's colour scale: {top:.0%} of its cells are above the scale's top (the truth's "
            f"densest cell) and get the top colour"
            + (f", {neg:.0%} are negative estimates drawn empty" if neg >= 0.01 else "")
            + ". Its bright cells are noise, not busy places.",
        )
    vals = idx[drawn]
    if drawn.mean() >= 0.5 and int(vals.max()) - int(vals.min()) <= FLAT_SPREAD:
        return (
            "Flat: one value\nin every cell",
            "This map is flat: nearly every cell holds the same value, so it shows no place as busier than another.",
        )
    return None
