"""The user's own files: CSV, GeoJSON, GeoParquet, zipped Shapefile and GeoPackage.

``load_file(path_or_bytes, filename, columns=None, crs=None, ...)`` is used by the
dashboard's upload widget (bytes + file name) and by the CLI (a path). Any CRS a file
declares is reprojected to WGS84. Every problem becomes a :class:`DataError` whose
message says what is wrong and how to fix it; whatever was *assumed* (a CRS, centroids
for polygons, dropped empty geometries) is listed in ``meta.extra["notes"]`` and in the
description.

Columns are found by name (case and spaces ignored): latitude ``lat``, ``latitude``,
``y``; longitude ``lon``, ``lng``, ``long``, ``longitude``, ``x``; optional ``user_id``
(also ``user``, ``userid``, ``uid``), ``value``, ``flag`` and ``weight``; or
mapped explicitly with ``columns={"lat": ..., "lon": ..., "user_id": ..., ...}``.
Two columns that name the same role the same way (``lat`` and ``LAT``) are refused;
when several synonyms are present (``lat`` and ``y``) the first in that list is used
and the others are named in a note.
The public region of a user's file is read off its points unless ``bbox`` (or, through the registry,
``place`` and ``radius_km``: a square around a place of the offline gazetteer) is given: the points'
bounding box rounded outward to a coarse grid (:func:`engine.data.projection.public_frame`), never the
exact box, whose edges are four people's coordinates; ``meta.bbox_from_data`` is then True, which the
engine reports as side information, and ``meta.extra["region_frame"]`` says which grid. A run may fit a
smaller frame inside the region with DP quantiles (:mod:`engine.run.execution._frame`).

Files come from possibly hostile users of a shared server, so:

- each file's type is verified from its bytes before it is parsed (GeoJSON: JSON whose
  top-level ``type`` is a FeatureCollection, Feature or geometry; GeoPackage: the SQLite
  header and a ``gpkg_contents`` table; Parquet: ``PAR1`` at both ends; zipped
  Shapefile: a zip whose ``.shp`` starts with the file code 9994; CSV: text), and a file
  whose bytes are not what its name says (e.g. an OGR VRT named ``.gpkg``) is refused;
- GDAL never picks a reader. GeoJSON is parsed with :mod:`json`, Parquet with pyarrow,
  GeoPackage with :mod:`sqlite3` (read-only queries under an authorizer, no views);
  only the Shapefile goes through GDAL, via fiona with ``driver="ESRI Shapefile"``, on
  members extracted under fixed names to a private directory, with GDAL's network
  and VRT access off (:data:`.shapefile.GDAL_SAFE`);
- sizes are checked before anything is expanded (Parquet metadata, zip headers, feature
  counts), and messages never carry a library's own text, which could quote a line of a
  file or a server path.

Limits, read from the environment at each call:

- ``HEATMAP_MAX_UPLOAD_MB`` (default 200, Streamlit's own default): the largest file;
- ``HEATMAP_MAX_POINTS`` (default 5,000,000; at most the engine's 20,000,000): the most
  locations in one file.

Unpacked zip members and decoded Parquet columns may take at most :data:`EXPANSION`
times the file limit; a zip member over 16 MiB may be at most :data:`MAX_RATIO` times
its compressed size.

Silently wrong inputs get a note: when every coordinate is within ±90° a swap of
latitude and longitude cannot be detected, so the note gives the median location to
check; a cluster across the antimeridian gets a region that crosses it (see
:func:`engine.data.projection.lon_extent`).

Layout: this module is the registry's ``file`` source; :mod:`.load` the entry point
(:func:`load_file`) and :mod:`.isolate` the same in a child process under memory and time limits
(:func:`~.isolate.load_file_isolated`, what the dashboard and the CLI use); one reader per format
(:mod:`.delimited` for CSV, :mod:`.geojson`, :mod:`.parquet`, :mod:`.gpkg`, :mod:`.shapefile`), the
steps the vector readers share (:mod:`.vector`), a table's columns found by name and read as coordinates and
attributes (:mod:`.columns`), CRS definitions and the CRS an analyst gives (:mod:`.crs`), the limits
(:mod:`.upload_limits`), a read's type checks and context (:mod:`.reading`); a file of regions
(:mod:`.polygons`) and its edges carried to another CRS on course (:mod:`.reproject`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...core.errors import ParamError, shown_text
from ...core.params import Param
from .load import READERS, load_file
from .reading import SUPPORTED

__all__ = ["READERS", "load_file"]


# ------------------------------------------------------------------ registry
def _load_registered(
    path, lat, lon, user_id, value, flag, weight, crs, polygons, layer, bbox="", place="", radius_km=10.0
):
    if not path:
        raise ParamError("give the path of the file to load (path=...)")
    if bbox and place:
        raise ParamError("give the region once: bbox=... or place=...")
    frame, stated = (_parse_frame(bbox), None) if bbox else (None, None)
    if place:
        from ..geography import place_frame

        frame, stated = place_frame(place, radius_km)
    cols = {
        k: v for k, v in dict(lat=lat, lon=lon, user_id=user_id, value=value, flag=flag, weight=weight).items() if v
    }
    from .isolate import load_file_isolated

    ds = load_file_isolated(
        path, columns=cols or None, crs=crs or None, polygons=polygons, layer=layer or None, bbox=frame
    )
    if stated is None:
        return ds
    return replace(ds, meta=replace(ds.meta, extra={**ds.meta.extra, "region_frame": stated}))


def _parse_frame(text: str) -> tuple[float, float, float, float]:
    try:
        vals = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        vals = ()
    if len(vals) != 4 or not np.isfinite(vals).all():
        raise ParamError(f"bbox is lon_min,lat_min,lon_max,lat_max in degrees (got {shown_text(text, 60)!r})")
    return vals


def _register() -> None:
    from ..registry import Source, add

    add(
        Source(
            key="file",
            label="Your own file",
            kind="file",
            description=f"Read your own locations: {SUPPORTED}, in any CRS (converted to WGS84).",
            loader=_load_registered,
            params=(
                Param("path", "str", "", "path of the file"),
                Param("lat", "str", "", "latitude column (empty: found by name)"),
                Param("lon", "str", "", "longitude column (empty: found by name)"),
                Param("user_id", "str", "", "user id column (optional)"),
                Param("value", "str", "", "numeric attribute column (optional)"),
                Param("flag", "str", "", "binary attribute column (optional)"),
                Param("weight", "str", "", "weight column (optional)"),
                Param("crs", "str", "", "CRS of the coordinates when the file does not say (e.g. EPSG:27700)"),
                Param(
                    "polygons",
                    "choice",
                    "centroid",
                    "polygons and lines: use centroids or reject",
                    choices=("centroid", "reject"),
                ),
                Param("layer", "str", "", "GeoPackage layer to read when the file holds several"),
                Param(
                    "bbox",
                    "str",
                    "",
                    "public region lon_min,lat_min,lon_max,lat_max (empty: the locations' box rounded outward to a "
                    "coarse grid)",
                ),
                Param("place", "str", "", "public region: a place of the offline gazetteer ('Name' or 'Name, CC')"),
                Param(
                    "radius_km", "float", 10.0, "with place: half the side of the square around it", min=0.1, max=500
                ),
            ),
            citation="the user's own file",
            license="the user's own data",
        )
    )


_register()
