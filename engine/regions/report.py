"""The regional table of a run: per region its id, name, estimate, 95 % margin (None where there is none)
and, in Evaluate mode only, the true count; as JSON rows, CSV, and a GeoPackage of the regions.

The true count is an evaluation figure: the locations inside each region (point in polygon; a location in
regions that overlap counts in each), in the release's unit (each person counted once unless the mechanism
counts records), read from the data.
It never enters a release (:func:`regional_report` refuses a truth for a Release-mode run)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import ParamError
from .margins import Margins, region_margins

COLUMNS = ("id", "name", "estimate", "margin95")


@dataclass(frozen=True)
class RegionReport:
    regions: object  # engine.data.regions.Regions
    margins: Margins
    true: np.ndarray | None = None  # Evaluate only

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
                row["true"] = float(self.true[i])
            out.append(row)
        return out

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
        from ..core.csvtext import csv_text

        cols = COLUMNS + (("true",) if self.has_true else ())
        return csv_text(self.rows(), cols, stamp)

    def to_gpkg(self, stamp: str | None = None) -> bytes:
        """The regions (WGS84, clipped to the map) with their columns, as a GeoPackage."""
        import tempfile
        from pathlib import Path

        import geopandas as gpd
        import pandas as pd

        df = pd.DataFrame(self.rows())
        if stamp:
            df["evaluation"] = stamp
        gdf = gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(self.regions.lonlat_geoms(), crs=4326))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "regions.gpkg"
            gdf.to_file(path, driver="GPKG", layer="regions")
            return path.read_bytes()


def true_counts(dataset, regions, unit: str = "user") -> np.ndarray:
    """Evaluation only: the locations inside each region, in the release's unit (each person's locations
    weighted to total 1 unless ``unit == "record"``, as :func:`engine.run.runner.release_truth`)."""
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


def regional_report(result, regions, dataset=None) -> RegionReport:
    """The regional table of a run (:class:`engine.run.config.RunResult`). ``dataset``: the run's prepared data
    (Evaluate mode only) for the true counts; a Release-mode run never gets them."""
    rel = result.release
    if rel.quantity != "counts":
        raise ParamError("regions report counts: this release is an attribute mean")
    if dataset is not None and result.config.mode == "release":
        raise ParamError("a release carries no true counts")
    margins = region_margins(rel, regions)
    true = None if dataset is None else true_counts(dataset, regions, result.config.params.get("unit", "user"))
    return RegionReport(regions, margins, true)
