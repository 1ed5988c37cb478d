"""A self-contained HTML report of one run: one file that opens offline (CSS inline, the maps
as ``data:`` URIs, no script, font or remote image), for a reader without the dashboard.

It shows the true map and metrics against it, so it is an evaluation document, stamped
:data:`ui.export.EVALUATION` (issue 23); the map exports of :mod:`ui.export` are what may be
published. No Streamlit here: the page calls :func:`html_report` lazily from a download button.
"""

from __future__ import annotations

import base64
import html
import json
import math
import shlex
from datetime import UTC, datetime

import numpy as np

from . import explain, export
from .colors import ColourScale

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1180px;margin:1.5rem auto;padding:0 1rem;
color:#1b1b1f;line-height:1.4}
h1{font-size:1.6rem;margin:.8rem 0 .2rem}h2{font-size:1.2rem;margin:1.6rem 0 .4rem;border-bottom:1px solid #ddd}
.sub{color:#555;margin:0 0 .6rem}
.stamp{border:2px solid #b3261e;color:#b3261e;background:#fdf0ef;padding:.5rem .8rem;border-radius:6px;font-weight:600}
.stamp span{font-weight:400;color:#5b1a16}
.maps{display:flex;flex-wrap:wrap;gap:12px}.maps figure{flex:1 1 420px;margin:0}
img{max-width:100%;height:auto}figcaption{color:#555;font-size:.9rem}
table{border-collapse:collapse;margin:.3rem 0;font-size:.92rem}
td,th{border-bottom:1px solid #e4e4e4;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f6f8}td.num{text-align:right;white-space:nowrap}
pre,code{background:#f6f6f8;border-radius:4px}pre{padding:.6rem;overflow-x:auto;white-space:pre-wrap}
.muted{color:#666}
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _img(png: bytes, alt: str) -> str:
    return f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" alt="{_e(alt)}">'


def _table(head: list[str], rows: list[list[str]], num: tuple[int, ...] = ()) -> str:
    """Rows of already-escaped cells; columns in ``num`` right-aligned."""
    th = f"<tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>" if head else ""
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i in num else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table>{th}{body}</table>"


def _num(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return _e(v)
    return "n/a" if not math.isfinite(f) else _e(f"{f:.4g}")


# ------------------------------------------------------------------------ sections
def _dataset(result) -> str:
    meta = result.dataset_meta
    synthetic = bool(getattr(meta, "synthetic", False))
    bbox = tuple(getattr(meta, "bbox", ()))
    dom = result.release.domain
    rows = [
        ["Name", _e(getattr(meta, "name", "") or result.config.dataset)],
        ["Kind", "synthetic (generated, no real person)" if synthetic else "real data"],
        ["Source", f"<code>{_e(getattr(meta, 'source', '') or result.config.dataset)}</code>"],
        ["Citation", _e(getattr(meta, "citation", "") or "–")],
        ["Licence", _e(getattr(meta, "license", "") or "–")],
    ]
    if getattr(meta, "description", ""):
        rows.append(["Description", _e(meta.description)])
    if len(bbox) == 4:
        where = "read off the data (side information)" if getattr(meta, "bbox_from_data", False) else "public"
        rows.append(["Region (lon/lat)", _e(", ".join(f"{v:.5f}" for v in bbox) + f" · {where}")])
    rows += [
        ["Grid", _e(f"{dom.n} × {dom.n} cells of {dom.cell:,.1f} m (side {dom.side:,.0f} m)")],
        ["Users / locations in the run", _e(f"{result.n_users:,} / {result.n_points:,} (exact: not private)")],
    ]
    return "<h2>Dataset and provenance</h2>" + _table([], rows)


def _maps(result, scale: ColourScale) -> str:
    dom = result.release.domain
    truth = export.map_png(result.truth, scale, dom, title="True map (the sensitive input)", legend=False)
    private = export.map_png(result.release.density, scale, dom, title=export.release_title(result), legend=False)
    n = dom.n
    side = n * max(1, math.ceil(512 / n))
    return (
        "<h2>Maps</h2>"
        f'<div class="maps"><figure>{_img(truth, "true map")}<figcaption>What the mechanism was given: '
        "each user weighs 1 in total.</figcaption></figure>"
        f"<figure>{_img(private, 'private map')}<figcaption>What it released.</figcaption></figure></div>"
        f"<p>{_img(export.legend_png(scale, side), 'legend')}</p>"
        f'<p class="muted">One colour scale for both maps. {_e(export.attribution(result))}</p>'
    )


def _metrics(result) -> str:
    rows = []
    for k in explain.ordered(result.metrics):
        label, expl, better, _ = explain.info(k)
        arrow = {"lower": "lower is better", "higher": "higher is better"}.get(better, "")
        rows.append([f"<b>{_e(label)}</b>", _e(explain.fmt(k, result.metrics.get(k))), _e(arrow), _e(expl)])
    if not rows:
        return "<h2>How good is it?</h2><p>No metric was computed.</p>"
    return (
        "<h2>How good is it?</h2>"
        + _table(["Metric", "Value", "", "What it measures"], rows, num=(1,))
        + '<p class="muted">Maps are compared after scaling each to sum to 1.</p>'
    )


def margins(release) -> list[tuple[str, float, float]]:
    """(name, median, largest) of each standard error the release reports: diagnostics or extras
    whose key names a standard error (``stderr``), over their finite values; not the keys that
    describe one (``stderr_cells``: cells sharing a noise draw; ``stderr_basis``: how it was derived)."""
    out = []
    for src in (release.diagnostics or {}, release.extras or {}):
        for k, v in src.items():
            if "stderr" not in str(k).lower() or str(k) in ("stderr_cells", "stderr_basis"):
                continue
            try:
                a = np.asarray(v, dtype=np.float64).ravel()
            except (TypeError, ValueError):
                continue
            a = a[np.isfinite(a)]
            if a.size:
                out.append((str(k), float(np.median(a)), float(a.max())))
    return out


def _quantity(key: str) -> str:
    """A margin's key in words: ``stderr`` is the map's own estimate per cell, ``count_stderr`` the count's."""
    if key == "stderr":
        return "each cell's estimate"
    words = key.replace("_stderr", "").replace("stderr_", "").replace("stderr", "").replace("_", " ").strip()
    return words or key


def _margins(result) -> str:
    found = margins(result.release)
    if not found:
        return ""
    rows = [[_e(_quantity(k)), _num(med), _num(1.96 * med), _num(top)] for k, med, top in found]
    return (
        "<h2>Margins of error</h2>"
        + _table(["Estimate", "Standard error (median)", "95 % margin (± 1.96 SE)", "Largest SE"], rows, (1, 2, 3))
        + '<p class="muted">In the units of the quantity (counts per cell for a map), as the mechanism reports it.</p>'
    )


def _ledger(result) -> str:
    led = result.release.ledger.to_dict()
    rows = [
        [_e(e["step"]), _num(e["epsilon"]), _e(e["composition"]), _e(e["group"]), _num(e["delta"]), _e(e["note"])]
        for e in led["entries"]
    ]
    delta = f", δ = {led['total_delta']:g}" if led.get("total_delta") else ""
    body = (
        _table(["Step", "ε", "Composition", "Group", "δ", "Note"], rows, (1, 4))
        if rows
        else "<p>This mechanism spends no privacy budget.</p>"
    )
    side = list(led.get("side_information", []))
    if getattr(result.dataset_meta, "bbox_from_data", False):
        side.append("The region (map extent) was read off the data's bounding box, not from a public catalogue.")
    side_html = "<ul>" + "".join(f"<li>{_e(s)}</li>" for s in side) + "</ul>" if side else "<p>None recorded.</p>"
    from engine.mechanisms import registry

    cls = registry().get(result.config.mechanism)
    guarantee = [f"<p><b>Guarantee:</b> {_e(cls.guarantee)}</p>"] if cls is not None and cls.guarantee else []
    if cls is not None and cls.threat_model:
        guarantee.append(f"<p><b>Threat model:</b> {_e(cls.threat_model)}</p>")
    return (
        "<h2>Privacy ledger</h2>"
        f"<p><b>Total ε = {led['total_epsilon']:g}</b>{_e(delta)} of the configured ε = {result.config.epsilon:g}. "
        "Sequential steps add up; a parallel group (disjoint cells or users) costs only its largest entry.</p>"
        + body
        + "".join(guarantee)
        + f"<p><b>The server sees:</b> {_e(result.release.server_view.description)}</p>"
        + "<h2>Side information</h2><p>Read from the data without spending ε:</p>"
        + side_html
    )


def cli_command(config) -> str | None:
    """The command line that reruns the configuration (None for the user's own file, which
    the command line cannot name)."""
    from engine.data.registry import sources
    from engine.mechanisms import load_all

    load_all()
    src = sources().get(config.dataset)
    if src is None or src.kind == "file":
        return None
    parts = ["python", "-m", "engine", "run", "--dataset", config.dataset, "--mechanism", config.mechanism]
    parts += ["--epsilon", repr(float(config.epsilon)), "--depth", str(config.depth), "--seed", str(config.seed)]
    if config.n_users is not None:
        parts += ["--users", str(config.n_users)]
    if config.secure:
        parts.append("--secure")
    for k, v in sorted(config.dataset_options.items()):
        parts += ["--data-opt", f"{k}={v}"]
    for k, v in sorted(config.params.items()):
        parts += ["--param", f"{k}={v}"]
    return shlex.join(parts)


def _configuration(result, reproduce_url: str) -> str:
    cfg = result.config
    link = (
        f'<p>Reproduce it in the workbench: <a href="{_e(reproduce_url)}">{_e(reproduce_url)}</a></p>'
        if reproduce_url
        else ""
    )
    cmd = cli_command(cfg)
    cli = (
        f"<p>or on the command line (same release, same seed):</p><pre>{_e(cmd)}</pre>"
        if cmd
        else "<p>The data is the user's own file: rerun it by uploading the same file.</p>"
    )
    conf = json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str)
    return f"<h2>Configuration</h2>{link}{cli}<pre>{_e(conf)}</pre><p class=muted>Run key {_e(cfg.key())}</p>"


def html_report(result, scale: ColourScale, reproduce_url: str = "") -> str:
    """The report of ``result`` (an ``engine.run.config.RunResult``) with the page's colour scale; the
    only link in it is ``reproduce_url``."""
    title = f"{export.mechanism_label(result.config.mechanism)} on {getattr(result.dataset_meta, 'name', '')}"
    stamp = (
        f'<div class="stamp">Evaluation: {_e(export.EVALUATION)}. '
        "<span>This report shows the true map, metrics computed against it and exact counts. "
        "Share the private map exports (PNG, GeoTIFF, GeoJSON, CSV), not this report.</span></div>"
    )
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Run report: {_e(title)}</title><style>{CSS}</style></head><body>"
        f"{stamp}<h1>Run report: {_e(title)}</h1>"
        f'<p class="sub">{_e(export.release_title(result))} · made {made} by the private heatmap workbench</p>'
        + _dataset(result)
        + _maps(result, scale)
        + _metrics(result)
        + _margins(result)
        + _ledger(result)
        + _configuration(result, reproduce_url)
        + "</body></html>"
    )
