"""A self-contained HTML report of one run: one file that opens offline (CSS inline, the maps
as ``data:`` URIs, no script, font or remote image), for a reader without the dashboard.

It shows the true map and metrics against it, so it is an evaluation document, stamped
:data:`ui.export.EVALUATION`; the map exports of :mod:`ui.export` are what may be published.
The page is the Jinja template ``templates/report.html.j2`` (on ``page.html.j2`` with ``report.css``, like the
release report of :mod:`ui.release`), rendered with autoescaping so that nothing from the data (a dataset's
name, a ledger note) can add markup; this module only gathers the values it shows. No Streamlit here: the
page calls :func:`html_report` lazily from a download button.
"""

from __future__ import annotations

import base64
import json
import math
import shlex
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.regions import margins
from engine.run.execution import side_information

from . import explain, export
from .colors import ColourScale

TEMPLATES = Path(__file__).with_name("templates")


@lru_cache(maxsize=1)
def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a value the template names but the report forgot is an error
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["base64"] = lambda png: base64.b64encode(png).decode("ascii")
    return env


def render(template: str, **values) -> str:
    """The page of ``template`` (a file of ``templates/``) with ``values``, every one of them escaped."""
    return _environment().get_template(template).render(**values)


def _num(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return "n/a" if not math.isfinite(f) else f"{f:.4g}"


# ------------------------------------------------------------------------ sections
def _dataset(result) -> dict:
    meta = result.dataset_meta
    bbox = tuple(getattr(meta, "bbox", ()))
    dom = result.release.domain
    region = ""
    if len(bbox) == 4:
        where = "read off the data (side information)" if getattr(meta, "bbox_from_data", False) else "public"
        region = ", ".join(f"{v:.5f}" for v in bbox) + f" · {where}"
    return {
        "name": getattr(meta, "name", "") or result.config.dataset,
        "synthetic": bool(getattr(meta, "synthetic", False)),
        "source": getattr(meta, "source", "") or result.config.dataset,
        "citation": getattr(meta, "citation", ""),
        "license": getattr(meta, "license", ""),
        "description": getattr(meta, "description", ""),
        "region": region,
        "grid": f"{dom.n} × {dom.n} cells of {dom.cell:,.1f} m (side {dom.side:,.0f} m)",
        "counts": f"{result.n_users:,} / {result.n_points:,} (exact: not private)",
    }


def _maps(result, scale: ColourScale) -> dict:
    dom = result.release.domain
    side = dom.n * max(1, math.ceil(512 / dom.n))
    return {
        "truth": export.map_png(result.truth, scale, dom, title="True map (the sensitive input)", legend=False),
        "private": export.map_png(result.release.density, scale, dom, title=export.release_title(result), legend=False),
        "legend": export.legend_png(scale, side),
        "attribution": export.attribution(result),
    }


def _metrics(result) -> list[dict]:
    rows = []
    for k in explain.ordered(result.metrics):
        label, expl, better, _ = explain.info(k)
        rows.append(
            {
                "label": label,
                "value": explain.fmt(k, result.metrics.get(k)),
                "better": {"lower": "lower is better", "higher": "higher is better"}.get(better, ""),
                "explanation": expl,
            }
        )
    return rows


def margin_rows(release, regions=None) -> list[dict]:
    """The report's margins of error, the numbers the screen and the release files show
    (:mod:`engine.regions.margins`): per quantity, the 95 % margin's median, worst tenth (90th percentile) and
    largest, and what it rests on. Each cell's estimate where the release states its noise (and each region's,
    with ``regions``); each region's mean for an attribute-mean release."""
    if release.regional is not None:
        return [_margin_row("each region's mean", margins.mean_margins(release.regional.stderr), margins.MEAN_BASIS)]
    if margins.no_margin_reason(release) is not None:
        return []
    cells = margins.cell_margins(release)
    rows = [_margin_row("each cell's estimate", cells.margin95, cells.basis)]
    if regions is not None:
        rm = margins.region_margins(release, regions)
        rows.append(_margin_row(f"each region's estimate ({len(regions):,} regions)", rm.margin95, rm.basis))
    return rows


def _margin_row(name: str, values, basis: str) -> dict:
    med, worst = margins.summary(values)
    v = np.asarray(values, dtype=np.float64)
    top = float(np.nanmax(v)) if np.isfinite(v).any() else math.nan
    return {"name": name, "median": _num(med), "worst": _num(worst), "largest": _num(top), "basis": basis}


def ledger_fields(result) -> dict:
    led = result.release.ledger.to_dict()
    side = side_information(result)
    from engine.mechanisms import registry

    cls = registry().get(result.config.mechanism)
    return {
        "ledger": {
            "total": f"{led['total_epsilon']:g}",
            "delta": f", δ = {led['total_delta']:g}" if led.get("total_delta") else "",
            "configured": f"{result.config.epsilon:g}",
            "entries": [
                {
                    "step": e["step"],
                    "epsilon": _num(e["epsilon"]),
                    "composition": e["composition"],
                    "group": e["group"],
                    "delta": _num(e["delta"]),
                    "note": e["note"],
                }
                for e in led["entries"]
            ],
        },
        "guarantee": cls.guarantee if cls is not None else "",
        "threat_model": cls.threat_model if cls is not None else "",
        "server_view": result.release.server_view.description,
        "side": side,
    }


def grid_arguments(config) -> list[str]:
    """The command line's options for the configuration's resolution and frame."""
    if config.resolution != "auto":
        out = ["--depth", str(config.depth)]
    elif config.people is not None:
        out = ["--depth", "auto", "--people", str(config.people)]
    else:
        out = ["--depth", "auto", "--count-share", f"{config.count_share:g}"]
    if config.frame == "dp":
        out += [
            "--frame",
            "dp",
            "--frame-share",
            f"{config.frame_share:g}",
            "--frame-quantile",
            f"{config.frame_quantile:g}",
        ]
    return out


def cli_command(config) -> str | None:
    """The command line that reruns the configuration (None for the user's own file, which
    the command line cannot name)."""
    from engine.data.registry import source
    from engine.mechanisms import load_all

    load_all()
    src = source(config.dataset)
    if src is None or src.kind == "file":
        return None
    parts = ["python", "-m", "engine", "run", "--dataset", config.dataset, "--mechanism", config.mechanism]
    parts += ["--epsilon", repr(float(config.epsilon)), *grid_arguments(config), "--seed", str(config.seed)]
    if config.n_users is not None:
        parts += ["--users", str(config.n_users)]
    if config.secure:
        parts.append("--secure")
    for k, v in sorted(config.dataset_options.items()):
        parts += ["--data-opt", f"{k}={v}"]
    for k, v in sorted(config.params.items()):
        parts += ["--param", f"{k}={v}"]
    return shlex.join(parts)


def html_report(result, scale: ColourScale, reproduce_url: str = "") -> str:
    """The report of ``result`` (an ``engine.run.execution.RunResult``) with the page's colour scale; the
    only link in it is ``reproduce_url``."""
    cfg = result.config
    return render(
        "report.html.j2",
        title=f"{export.mechanism_label(cfg.mechanism)} on {getattr(result.dataset_meta, 'name', '')}",
        evaluation=export.EVALUATION,
        release_title=export.release_title(result),
        made=made_now(),
        ds=_dataset(result),
        maps=_maps(result, scale),
        metrics=_metrics(result),
        margins=margin_rows(result.release),
        **ledger_fields(result),
        reproduce_url=reproduce_url,
        command=cli_command(cfg),
        config_json=json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str),
        run_key=cfg.key(),
    )


def made_now() -> str:
    """When a report is made, as it states it."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
