"""The report of a Release-mode run: only what may leave with the release.

It holds the private map (the publication figure) and its legend, the margins of error the mechanism reports
(functions of its DP outputs and public parameters), the privacy ledger with the guarantee and the side
information, and the dataset's public description. No true map, no count of people, no metric, no seed.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from . import export
from .colors import ColourScale
from .report import CSS, _e, _img, _ledger, _margins, _table


def _public_dataset(result) -> str:
    meta = result.dataset_meta
    dom = result.release.domain
    rows = [
        ["Name", _e(getattr(meta, "name", "") or "")],
        ["Citation", _e(getattr(meta, "citation", "") or "–")],
        ["Licence", _e(getattr(meta, "license", "") or "–")],
        ["Grid", _e(f"{dom.n} × {dom.n} cells of {dom.cell:,.1f} m (side {dom.side:,.0f} m)")],
    ]
    return "<h2>Dataset</h2>" + _table([], rows)


def release_report(result, scale: ColourScale) -> str:
    """An HTML page holding only DP outputs, their margins and the ledger (see the module's note)."""
    title = export.release_title(result)
    dom = result.release.domain
    side = dom.n * max(1, math.ceil(512 / dom.n))
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Release: {_e(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>Release: {_e(title)}</h1>"
        f'<p class="sub">Made {made} by the private heatmap workbench. Everything here is a differentially private '
        "output, a function of one, or a public parameter.</p>"
        + _public_dataset(result)
        + "<h2>The private map</h2>"
        + f"<p>{_img(export.release_png(result, scale), 'private map')}</p>"
        + f"<p>{_img(export.legend_png(scale, side), 'legend')}</p>"
        + _margins(result)
        + _ledger(result)
        + "</body></html>"
    )
