"""What leaves the workbench: the private grid as GeoTIFF, GeoJSON or CSV, and a release folder
(those files and a JSON manifest) for a Release-mode run.

Two kinds of export, after the run's mode (``RunConfig.mode``):

* a **release** (:func:`write_release`; ``python -m engine release``): only what the mechanism
  published under its guarantee (the private grid), what it spent (the ledger, with the
  neighbouring relation the guarantee is about), the parameters, the side information the
  ledger declares, and the public frame (region, CRS, grid). Nothing else computed from the
  data: no true map or count, no metric, no diagnostics, no seed (a release draws OpenDP noise
  and fresh operating-system entropy, so there is none to record).
* an **evaluation** (Evaluate mode: the dashboard's downloads, ``python -m engine run``): seeded
  numpy noise that anyone with the seed and the other people's data can recompute, and records
  holding metrics against the truth and exact counts. Each such file carries :data:`EVALUATION`
  (``stamp=`` of the grid writers, :func:`stamp_of` gives it for a result).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from ...core.csvtext import csv_text
from ...core.errors import ParamError
from ...data.projection import to_lonlat

EVALUATION = "contains non-private information about the data"
FORMATS = ("geotiff", "geoparquet", "geojson", "csv")
FILE_NAMES = {
    "geotiff": "heatmap.tif",
    "geoparquet": "heatmap.parquet",
    "geojson": "heatmap.geojson",
    "csv": "heatmap.csv",
}
MANIFEST = "manifest.json"
UPLOAD_PREFIX = "upload:"  # the dataset key of an uploaded file, private to its session


def stamp_of(result) -> str | None:
    """:data:`EVALUATION` for an Evaluate-mode result, None for a release."""
    return None if result.config.mode == "release" else EVALUATION


# ------------------------------------------------------------------------ grid writers
def _cell_corners(domain, crs):
    n = domain.n
    xs = domain.x0 + np.arange(n + 1) * domain.cell
    ys = domain.y0 + np.arange(n + 1) * domain.cell
    X, Y = np.meshgrid(xs, ys)  # [iy, ix]
    return to_lonlat(X.ravel(), Y.ravel(), crs).reshape(n + 1, n + 1, 2)


def geojson_grid(density: np.ndarray, domain, crs: str, stamp: str | None = None) -> str:
    """A FeatureCollection of the non-empty cells (lon/lat polygons). ``value`` is the raw
    private estimate (counts per cell); a negative one (noise) is kept, with ``negative``
    true, rather than dropped. Cells of exactly zero, or with no estimate (NaN), are left out.
    ``stamp``: an ``"evaluation"`` member of the collection (a foreign member, RFC 7946 6.1)."""
    ll = np.round(_cell_corners(domain, crs), 6)
    area_km2 = domain.cell**2 / 1e6
    d = np.asarray(density, dtype=np.float64)
    feats = []
    iy, ix = np.nonzero((d != 0) & np.isfinite(d))
    for j, i in zip(iy.tolist(), ix.tolist()):
        ring = [ll[j, i], ll[j + 1, i], ll[j + 1, i + 1], ll[j, i + 1], ll[j, i]]
        v = float(d[j, i])
        feats.append(
            {
                "type": "Feature",
                "geometry": {"type": "Polygon", "coordinates": [[[float(a), float(b)] for a, b in ring]]},
                "properties": {"ix": i, "iy": j, "value": v, "negative": v < 0, "per_km2": v / area_km2},
            }
        )
    doc = {"type": "FeatureCollection", **({"evaluation": stamp} if stamp else {}), "features": feats}
    return json.dumps(doc, separators=(",", ":"))


def csv_grid(density: np.ndarray, domain, crs: str, stamp: str | None = None) -> str:
    """One row per cell: indices, centre in metres and lon/lat, estimate (counts) and per km².
    ``stamp``: a first line ``# evaluation: ...`` (read with ``pandas.read_csv(comment="#")``)."""
    import pandas as pd

    n = domain.n
    cx, cy = domain.cell_centers()
    X, Y = np.meshgrid(cx, cy)
    ll = to_lonlat(X.ravel(), Y.ravel(), crs)
    d = np.asarray(density, dtype=np.float64).ravel()
    iy, ix = np.divmod(np.arange(n * n), n)
    df = pd.DataFrame(
        {
            "ix": ix,
            "iy": iy,
            "x_m": X.ravel().round(2),
            "y_m": Y.ravel().round(2),
            "lon": ll[:, 0].round(6),
            "lat": ll[:, 1].round(6),
            "estimate": d,
            "per_km2": d / (domain.cell**2 / 1e6),
        }
    )
    return csv_text(df, stamp=stamp)


def geotiff_grid(
    density: np.ndarray, domain, crs: str, tags: dict | None = None, stamp: str | None = None, margin=None
) -> bytes:
    """The grid as a float32 GeoTIFF in the run's local CRS (azimuthal equidistant, metres) with the
    domain's affine transform, north up, so a GIS places it: band 1 the estimate, band 2 (with
    ``margin``) each cell's 95 % margin (:func:`engine.regions.margins.cell_margins`). Zero and negative
    estimates are values like any other; only cells with no estimate or margin (NaN) are nodata.
    ``stamp``: an ``evaluation`` tag."""
    from affine import Affine
    from rasterio.crs import CRS
    from rasterio.io import MemoryFile

    g = np.asarray(density, dtype=np.float64)
    if g.shape != (domain.n, domain.n):
        raise ValueError(f"a grid of shape {g.shape} does not fit the domain's {domain.n} x {domain.n} cells")
    data = np.ascontiguousarray(g[::-1], dtype=np.float32)  # grid row 0 is the south edge; a raster's is north
    bands = [data] + ([np.ascontiguousarray(np.asarray(margin)[::-1], dtype=np.float32)] if margin is not None else [])
    x0, _, _, y1 = domain.bounds
    profile = {
        "driver": "GTiff",
        "width": domain.n,
        "height": domain.n,
        "count": len(bands),
        "dtype": "float32",
        "crs": CRS.from_proj4(crs),
        "transform": Affine(domain.cell, 0.0, x0, 0.0, -domain.cell, y1),  # north-west corner, rows go south
        "nodata": None if all(np.isfinite(b).all() for b in bands) else np.nan,
        "compress": "deflate",
        "predictor": 3,  # floating-point predictor
    }
    tags = {**(tags or {}), **({"evaluation": stamp} if stamp else {})}
    with MemoryFile() as mf:
        with mf.open(**profile) as dst:
            dst.write(data, 1)
            dst.set_band_description(1, "private estimate")
            dst.set_band_unit(1, "count per cell")
            if margin is not None:
                dst.write(bands[1], 2)
                dst.set_band_description(2, "95 % margin of the estimate (nodata: none)")
                dst.set_band_unit(2, "count per cell")
            if tags:
                dst.update_tags(**{k: str(v) for k, v in tags.items()})
        return mf.read()


# ------------------------------------------------------------------------ release folder
def _finite(x):
    """JSON has no NaN or infinity: None in their place."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _require_release(result) -> None:
    if result.config.mode != "release":
        raise ParamError(
            "only a Release-mode run can be exported as a release: this run is an evaluation (seeded noise, "
            f"truth and metrics), whose exports say '{EVALUATION}'"
        )


REGION_FROM_DATA = "read off the data (coarse: never the extreme locations themselves)"


def side_information(result) -> list[str]:
    """What the run read off the private data without spending budget: the ledger's notes, and the
    region when it was read off the data. One list for the CLI, the manifest and the pages."""
    side = list(result.release.ledger.side_information)
    meta = result.dataset_meta
    if getattr(meta, "bbox_from_data", False):  # a DP frame was searched for within that region
        region = (getattr(meta, "extra", None) or {}).get("search_region") or region_frame(meta)
        side.append(f"the region: {region}, {REGION_FROM_DATA}")
    return side


def manifest(result, release_key: str | None = None) -> dict:
    """The JSON manifest of a Release-mode run: what was released and under which guarantee.

    Holds the engine version, the mechanism and its guarantee (neighbouring relation
    included), the parameters (the mechanism's, resolved with their defaults, a polygon file
    by its base name and hash; ε; the grid; the dataset's source and options, the analyst's
    own file by neither its path nor its name, :func:`dataset_name`), the ledger, the side
    information it declares (plus the region when it was read off the data), and the frame
    (CRS, domain, region). Nothing else computed from the data: no count, metric, diagnostic
    or seed. ``release_key``: the budget store's key of this release, when it was booked."""
    from ... import __version__
    from ...mechanisms import get
    from ._frame import neighbouring_of

    _require_release(result)
    cfg, rel, meta = result.config, result.release, result.dataset_meta
    cls = get(cfg.mechanism)
    relation = neighbouring_of(cfg)
    side = side_information(result)
    frame = region_frame(meta)
    dom = rel.domain
    params = {
        "mechanism": cfg.mechanism,
        "mechanism_params": _public_params(cls.schema().resolve(cfg.params), rel),
        "epsilon": float(cfg.epsilon),
        "depth": int(cfg.depth),
        # a session's upload key is a server handle, not a name
        "dataset": "an uploaded file" if cfg.dataset.startswith(UPLOAD_PREFIX) else cfg.dataset,
        "dataset_options": {k: v for k, v in cfg.dataset_options.items() if k != "path"},
    }
    if cfg.n_users is not None:
        params["users_sampled_at_most"] = int(cfg.n_users)
    doc = {
        "kind": "private heatmap release",
        "engine_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "release",
        "noise": "OpenDP samplers where the engine has them (secure mode); every other draw from fresh "
        "operating-system entropy; no seed",
        "mechanism": {
            "key": cls.key,
            "label": cls.label,
            "paper": cls.paper,
            "guarantee": cls.guarantee,
            "threat_model": cls.threat_model,
            "neighbouring": relation,
        },
        "parameters": params,
        "ledger": {**rel.ledger.to_dict(), "neighbouring": relation},
        "side_information": side,
        "quantity": rel.quantity,
        "grid": {
            "crs": result.crs,
            "x0_m": float(dom.x0),
            "y0_m": float(dom.y0),
            "side_m": float(dom.side),
            "cells_per_side": int(dom.n),
            "cell_m": float(dom.cell),
            "row_order": "row 0 is the south edge (the GeoTIFF is north up)",
            "unit": "estimated count per cell" if rel.quantity == "counts" else "estimated attribute mean",
        },
        "dataset": {
            "name": dataset_name(result),
            "source": params["dataset"] if own_file(cfg) else getattr(meta, "source", ""),
            "citation": getattr(meta, "citation", ""),
            "license": getattr(meta, "license", ""),
            "synthetic": bool(getattr(meta, "synthetic", False)),
            "coordinates": (
                "fictitious: a generated city placed at sea, where no one lives, so that maps have lon/lat"
                if getattr(meta, "synthetic", False)
                else "as the source gives them"
            ),
            "region_lonlat": [float(v) for v in getattr(meta, "bbox", ())],
            "region_from_data": bool(getattr(meta, "bbox_from_data", False)),
            "region_frame": frame,
        },
    }
    doc["margins"] = _margins_note(rel)
    if release_key:
        doc["release_key"] = release_key
    return _finite(json.loads(json.dumps(doc, default=float)))


OWN_FILE = "the analyst's own file (not named in a release)"


def own_file(config) -> bool:
    """Whether a run reads the analyst's own file: an upload, or a file source read by path."""
    from ...data.registry import source

    if config.dataset.startswith(UPLOAD_PREFIX):
        return True
    src = source(config.dataset)
    return src is not None and src.kind == "file"


def dataset_name(result) -> str:
    """The dataset's name as a file made from ``result`` gives it. A release of the analyst's own file names it
    :data:`OWN_FILE`: its name, its path or a hash of its bytes would let anyone holding a candidate copy confirm
    which file was released, and none of them is a DP output. An evaluation's files stay with the analyst and
    name it."""
    if result.config.mode == "release" and own_file(result.config):
        return OWN_FILE
    return getattr(result.dataset_meta, "name", "") or result.config.dataset


def _public_params(params: dict, rel) -> dict:
    """The mechanism's parameters as a release states them: a polygon file of regions by its base name and
    content hash, as the mechanism restated it (``Release.regions_counted``), never its server path."""
    from ...data.region_geometry import public_spec

    if "regions" not in params:
        return params
    return {**params, "regions": rel.regions_counted or public_spec(params["regions"])}


def region_frame(meta) -> str:
    """What the release's region is: stated by the analyst, the dataset's public region, or the data's box
    rounded outward to a public grid (``meta.extra["region_frame"]``)."""
    extra = getattr(meta, "extra", None) or {}
    if extra.get("region_frame"):
        return str(extra["region_frame"])
    if str(getattr(meta, "source", "")).startswith("file:"):
        return "the region the analyst stated"
    return "the dataset's public region (its catalogue entry)"


def _margins_note(rel) -> dict:
    """What each margin in the files rests on (a function of the release and public parameters only)."""
    from ...regions.margins import basis_of, no_margin_reason

    if no_margin_reason(rel) is not None:
        return {"cells": no_margin_reason(rel)}
    return {"cells": basis_of(rel), "level": 0.95}


def _formats(formats) -> tuple[str, ...]:
    fmts = tuple(formats)
    if not fmts:
        raise ParamError(f"choose at least one format of {', '.join(FORMATS)}")
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise ParamError(f"unknown export format(s) {', '.join(map(repr, bad))}; known: {', '.join(FORMATS)}")
    if len(set(fmts)) != len(fmts):
        raise ParamError("an export format is given twice")
    return fmts


def write_release(
    result, folder, formats=FORMATS, release_key: str | None = None, regions=None, people: bool = False
) -> dict[str, Path]:
    """Write a Release-mode run into ``folder`` (created if missing): the private grid in each
    of ``formats`` (:data:`FILE_NAMES`; the GeoTIFF and GeoParquet with each cell's 95 % margin),
    with ``regions`` (:class:`engine.data.region_geometry.Regions`) the regional table as ``regions.csv`` and
    ``regions.gpkg``, and :data:`MANIFEST` (:func:`manifest`, with each file's name and SHA-256 and
    the regions' description; ``people``: whether the release counts people, else records, as the regional
    files say). Refuses a folder that already holds one of these files, so a manifest
    never describes another release's grids. Returns the paths by format, and ``"manifest"``."""
    _require_release(result)
    fmts = _formats(formats)
    out = Path(folder)
    targets = {f: out / FILE_NAMES[f] for f in fmts} | {"manifest": out / MANIFEST}
    if regions is not None:
        from ...regions.margin_files import REGION_FILES

        targets |= {f"regions_{k}": out / v for k, v in REGION_FILES.items()}
    taken = [p.name for p in targets.values() if p.exists()]
    if taken:
        raise ParamError(f"{out} already holds {', '.join(taken)}: write each release to a folder of its own")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParamError(f"cannot create the folder {out} ({exc.strerror or exc})") from None
    rel = result.release
    doc = manifest(result, release_key)
    title = f"Private map: {doc['mechanism']['label'] or doc['mechanism']['key']}, epsilon {rel.ledger.total():g}"
    from ...regions.margin_files import geoparquet_grid, write_regions
    from ...regions.margins import grid_margin

    margin = grid_margin(rel)
    writers = {
        "geotiff": lambda: geotiff_grid(rel.density, rel.domain, result.crs, {"title": title}, margin=margin),
        "geoparquet": lambda: geoparquet_grid(rel.density, margin, rel.domain, result.crs),
        "geojson": lambda: geojson_grid(rel.density, rel.domain, result.crs).encode(),
        "csv": lambda: csv_grid(rel.density, rel.domain, result.crs).encode(),
    }
    doc["files"] = {}
    for f in fmts:
        data = writers[f]()
        targets[f].write_bytes(data)
        doc["files"][f] = {"name": targets[f].name, "sha256": hashlib.sha256(data).hexdigest()}
    if regions is not None:
        from ...regions.regional_table import regional_report

        report = regional_report(result, regions, people=people)
        doc["files"].update(write_regions(report, out))
        doc["regions"] = report.describe()
    targets["manifest"].write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return targets
