"""A self-contained HTML report of one run: one file that opens offline (CSS inline, the maps
as ``data:`` URIs, no script, font or remote image), for a reader without the dashboard.

It shows the true map and metrics against it, so it is an evaluation document, stamped
:data:`ui.export.EVALUATION`; the map exports of :mod:`ui.export` are what may be published.
The page is the Jinja template ``templates/report.html.j2`` (with ``report.css``), rendered with
autoescaping so that nothing from the data (a dataset's name, a ledger note) can add markup; this
module only gathers the values it shows. No Streamlit here: the page calls :func:`html_report`
lazily from a download button.
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

from engine.run.export import side_information

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


def _margins(result) -> list[dict]:
    return [
        {"name": _quantity(k), "median": _num(med), "margin": _num(1.96 * med), "largest": _num(top)}
        for k, med, top in margins(result.release)
    ]


def _ledger(result) -> dict:
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
    """The report of ``result`` (an ``engine.run.config.RunResult``) with the page's colour scale; the
    only link in it is ``reproduce_url``."""
    cfg = result.config
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=f"{export.mechanism_label(cfg.mechanism)} on {getattr(result.dataset_meta, 'name', '')}",
            evaluation=export.EVALUATION,
            release_title=export.release_title(result),
            made=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            ds=_dataset(result),
            maps=_maps(result, scale),
            metrics=_metrics(result),
            margins=_margins(result),
            **_ledger(result),
            reproduce_url=reproduce_url,
            command=cli_command(cfg),
            config_json=json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str),
            run_key=cfg.key(),
        )
    )
