"""The regional table of a run: per region its id, name, estimate, 95 % margin (None where there is none)
and, in Evaluate mode only, the true count; as JSON rows, CSV, and a GeoPackage of the regions. The files
carry on every row what a reader needs to use a figure alone (:data:`ABOUT`): the ε spent, the mechanism, the
date, what one unit counts (people, or records, and the dataset's own word for them: deaths, cases) and the
basis of the margin. A true count that is a whole number is written as one (65, not 65.00000000000058, the
sum of a person's shares 1/k).

The true count is an evaluation figure: the locations inside each region (point in polygon; a location in
regions that overlap counts in each), in the release's unit (each person counted once unless the mechanism
counts records), read from the data.
It never enters a release (:func:`regional_report` refuses a truth for a Release-mode run)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import ParamError
from .margins import Margins, region_margins

COLUMNS = ("id", "name", "estimate", "margin95")
ABOUT = ("unit", "recorded", "epsilon", "mechanism", "date", "margin_basis")  # the files' columns after COLUMNS
WHOLE = 1e-9  # a true count within this share of a whole number is that number (sums of 1/k shares)


def whole(v: float) -> float | int:
    """``v`` as an int where it is a whole number up to the rounding of sums of shares, else as it is."""
    r = round(float(v))
    return int(r) if abs(float(v) - r) <= WHOLE * max(1.0, abs(float(v))) else float(v)


def counted_word(meta) -> str:
    """The dataset's own word for what one location is, in the plural (John Snow's deaths), else "locations"."""
    unit = str((getattr(meta, "extra", None) or {}).get("unit") or "")
    return {"death": "deaths", "address": "addresses"}.get(unit, unit + "s" if unit else "locations")


def counts_people(dataset, params: dict) -> bool:
    """Whether a release of ``dataset`` with the mechanism's ``params`` counts people (each person's locations
    share a weight of 1): the dataset has user ids (its schema, public) and the mechanism does not count records."""
    return getattr(dataset, "user_id", None) is not None and params.get("unit") != "record"


@dataclass(frozen=True)
class RegionReport:
    regions: object  # engine.data.region_geometry.Regions
    margins: Margins
    true: np.ndarray | None = None  # Evaluate only
    about: dict = field(default_factory=dict)  # ABOUT: written on every row of the files

    def rows(self) -> list[dict]:
        """One dict per region: id, name, estimate, margin95 (None: no margin) and, in Evaluate, true."""
        out = []
        for i, (rid, name) in enumerate(zip(self.regions.ids, self.regions.names)):
            m = float(self.margins.margin95[i])
            row = {
                "id": rid,
                "name": name,
                "estimate": float(self.margins.estimate[i]),
                "margin95": m if math.isfinite(m) else None,
            }
            if self.true is not None:
                row["true"] = whole(self.true[i])
            out.append(row)
        return out

    def file_rows(self) -> list[dict]:
        """:meth:`rows` with :data:`ABOUT` on each, as the files hold them."""
        return [{**r, **{k: self.about.get(k) for k in ABOUT}} for r in self.rows()]

    def describe(self) -> dict:
        """How the table was made, for a manifest or a JSON record."""
        return {
            "kind": self.regions.kind,
            "spec": self.regions.public_spec,
            "count": len(self.regions),
            "margin_basis": self.margins.basis,
            "straddling_cells": "a cell crossing a region's boundary is split by area (its people taken as evenly "
            "spread over it); the margin's spreading bound covers the error this may make, which shrinks with the "
            "cells' size",
            "notes": list(self.regions.notes),
            **({"true": "evaluation only: locations inside each region, read from the data"} if self.has_true else {}),
        }

    @property
    def has_true(self) -> bool:
        return self.true is not None

    def as_csv(self, stamp: str | None = None) -> str:
        """The table as CSV (``regions.csv``; names and ids from an uploaded file are neutralised for spreadsheets,
        :mod:`engine.core.csvtext`); ``stamp``: a first line ``# evaluation: ...``."""
        import pandas as pd

        from ..core.csvtext import csv_text

        cols = COLUMNS + (("true",) if self.has_true else ()) + ABOUT
        df = pd.DataFrame(self.file_rows(), columns=list(cols))
        if self.has_true:  # whole counts as whole numbers beside fractional ones (a float column writes 65.0)
            df["true"] = pd.Series([r["true"] for r in self.rows()], dtype=object)
        return csv_text(df, cols, stamp)

    def to_gpkg(self, stamp: str | None = None) -> bytes:
        """The regions (WGS84, clipped to the map) with their columns, as a GeoPackage."""
        import tempfile
        from pathlib import Path

        import geopandas as gpd
        import pandas as pd

        df = pd.DataFrame(self.file_rows())
        if stamp:
            df["evaluation"] = stamp
        gdf = gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(self.regions.lonlat_geoms(), crs=4326))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "regions.gpkg"
            gdf.to_file(path, driver="GPKG", layer="regions")
            return path.read_bytes()


def true_counts(dataset, regions, unit: str = "user") -> np.ndarray:
    """Evaluation only: the locations inside each region, in the release's unit (each person's locations
    weighted to total 1 unless ``unit == "record"``, as :func:`engine.run.execution._runner.release_truth`)."""
    w = None if dataset.weight is None else dataset.weight.astype(np.float64)
    if unit != "record" and dataset.user_id is not None:
        inv, u = dataset.user_index()
        if w is None:
            w = 1.0 / np.bincount(inv, minlength=u)[inv]
        else:
            tot = np.bincount(inv, weights=w, minlength=u)[inv]
            w = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
    loc, reg = regions.members(dataset.xy)  # a location in several regions counts in each
    return np.bincount(reg, weights=None if w is None else w[loc], minlength=len(regions)).astype(np.float64)


def regional_report(result, regions, dataset=None, people: bool = False) -> RegionReport:
    """The regional table of a run (:class:`engine.run.execution.RunResult`). ``dataset``: the run's prepared data
    (Evaluate mode only) for the true counts; a Release-mode run never gets them. ``people``: whether the release
    counts people (:func:`counts_people`), else records."""
    rel = result.release
    if rel.quantity != "counts":
        raise ParamError("regions report counts: this release is an attribute mean")
    if dataset is not None and result.config.mode == "release":
        raise ParamError("a release carries no true counts")
    margins = region_margins(rel, regions)
    true = None if dataset is None else true_counts(dataset, regions, result.config.params.get("unit", "user"))
    about = {
        "unit": "people" if people else "records",
        "recorded": counted_word(result.dataset_meta),
        "epsilon": float(result.epsilon_spent),
        "mechanism": result.config.mechanism,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "margin_basis": margins.basis,
    }
    return RegionReport(regions, margins, true, about)
