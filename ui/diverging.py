"""The difference map: private - true on a diverging scale centred on zero, with its own legend.

Blue where the release counts fewer than the truth, red where it counts more, white where they agree, in
the one diverging palette of the dashboard (:data:`ui.colors.DIVERGING`, colorcet's CET-D1); symmetric about zero, its end the 99th percentile of |private - true| over the cells where either is
non-zero (one extreme cell does not wash the rest out), in the page's display units.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .colors import DIVERGING, lut, tick_label


@dataclass(frozen=True)
class DiffScale:
    end: float  # |difference| (display units) that gets the end colours
    factor: float  # counts per cell -> display units
    unit: str

    @classmethod
    def of(cls, truth, private, factor: float, unit: str) -> DiffScale:
        t, p = np.asarray(truth, dtype=np.float64), np.asarray(private, dtype=np.float64)
        d = np.abs(p - t)[((t != 0) | (p != 0)) & np.isfinite(p)] * factor
        end = float(np.percentile(d, 99)) if d.size else 1.0
        return cls(end if end > 0 else 1.0, factor, unit)

    def rgb(self, truth, private) -> np.ndarray:
        d = (np.asarray(private, dtype=np.float64) - np.asarray(truth, dtype=np.float64)) * self.factor
        pal = lut(DIVERGING, 255)
        idx = np.clip(np.round((np.nan_to_num(d) / self.end + 1) / 2 * 254), 0, 254).astype(np.int64)
        return pal[idx[::-1]]  # grid row 0 is the south edge

    def png(self, truth, private) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(self.rgb(truth, private)), mode="RGB").save(buf, format="PNG")
        return buf.getvalue()

    def legend_html(self) -> str:
        pal = lut(DIVERGING, 17)
        grad = ", ".join(f"rgb({r},{g},{b}) {i * 100 / 16:.1f}%" for i, (r, g, b) in enumerate(pal))
        ticks = "".join(
            f'<span style="position:absolute;left:{p}%;transform:translateX(-50%);">{html.escape(s)}</span>'
            for p, s in (
                (0, f"−{tick_label(self.end)}"),
                (25, f"−{tick_label(self.end / 2)}"),
                (50, "0"),
                (75, f"+{tick_label(self.end / 2)}"),
                (100, f"+{tick_label(self.end)}"),
            )
        )
        return (
            '<div class="diff-legend" style="font-size:0.85rem;line-height:1.2;margin:0.2rem 0 0.6rem 0;">'
            f"<div><b>private − true, {html.escape(self.unit)}</b> (linear scale centred on 0; blue: the release "
            "counts too few, red: too many; beyond ±" + html.escape(tick_label(self.end)) + " the end colours)</div>"
            f'<div style="height:14px;border-radius:3px;margin-top:4px;background:linear-gradient(to right, {grad});">'
            f'</div><div style="position:relative;height:1.3em;margin:2px 8px 0 8px;">{ticks}</div></div>'
        )
