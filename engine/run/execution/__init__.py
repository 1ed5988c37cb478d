"""A run's execution: its configuration, the runner, and what a run reads and writes.

* ``_config.py``: :class:`RunConfig` (Evaluate or Release) and :class:`RunResult`; a fresh seed, a mechanism's
  parameters with the analysis's regions;
* ``_runner.py``: :func:`run`, the one entry point; the in-process dataset memo (:func:`load_dataset`);
  :func:`prepare` / :func:`prepared`: the sample and true map a run sees, for a page drawn before it;
  :func:`estimate_seconds`: the dashboard's estimate before Run;
* ``_frame.py``: the frame and grid where they depend on the data (DP count, DP quantiles), and the
  neighbouring relation a run is private under (:func:`neighbouring_of`);
* ``_estimates.py``: run-time predictions (:func:`predict_seconds`) and the machine's load;
* ``_result_cache.py``: the data-only disk cache of Evaluate runs;
* ``_pool.py``: background runs in a thread pool, cancellable (:class:`JobManager`);
* ``_cluster.py``: runs on a Dask cluster (:func:`connect`, :func:`run_many`);
* ``_release_files.py``: what leaves the workbench: grids as GeoTIFF, GeoJSON, CSV, a release folder and its
  manifest (:func:`write_release`); an uploaded file's dataset key (:data:`UPLOAD_PREFIX`), never named in a
  release;
* ``_published.py``: a published release folder read back (:func:`released_map`), and bounded file reads.
"""

from __future__ import annotations

from ._cluster import cluster_from_setting, connect, parse_cluster, run_many, sweep_row
from ._config import ROOT, RunConfig, RunResult, fresh_seed, with_regions
from ._estimates import (
    COEFFICIENTS,
    TABLE,
    features,
    forget_history,
    load_factor,
    model_seconds,
    predict_seconds,
    usable_cores,
)
from ._frame import (
    COUNT_SHARE,
    FRAME_SHARE,
    PER_CELL,
    UNKNOWN_SIDE,
    auto_depth,
    auto_side,
    grid_fields,
    neighbouring_of,
)
from ._pool import Job, JobManager
from ._published import read_regular, released_map
from ._release_files import (
    EVALUATION,
    FILE_NAMES,
    FORMATS,
    MANIFEST,
    OWN_FILE,
    REGION_FROM_DATA,
    UPLOAD_PREFIX,
    csv_grid,
    dataset_name,
    geojson_grid,
    geotiff_grid,
    region_frame,
    side_information,
    stamp_of,
    write_release,
)
from ._runner import PREPARED_KEPT, estimate_seconds, load_dataset, prepare, prepared, run

__all__ = [
    "auto_depth",
    "auto_side",
    "cluster_from_setting",
    "COEFFICIENTS",
    "connect",
    "COUNT_SHARE",
    "csv_grid",
    "dataset_name",
    "estimate_seconds",
    "EVALUATION",
    "features",
    "FILE_NAMES",
    "forget_history",
    "FORMATS",
    "FRAME_SHARE",
    "fresh_seed",
    "geojson_grid",
    "geotiff_grid",
    "grid_fields",
    "Job",
    "JobManager",
    "load_dataset",
    "load_factor",
    "MANIFEST",
    "model_seconds",
    "neighbouring_of",
    "OWN_FILE",
    "parse_cluster",
    "PER_CELL",
    "predict_seconds",
    "prepare",
    "prepared",
    "PREPARED_KEPT",
    "read_regular",
    "region_frame",
    "REGION_FROM_DATA",
    "released_map",
    "ROOT",
    "run",
    "run_many",
    "RunConfig",
    "RunResult",
    "side_information",
    "stamp_of",
    "sweep_row",
    "TABLE",
    "UNKNOWN_SIDE",
    "UPLOAD_PREFIX",
    "usable_cores",
    "with_regions",
    "write_release",
]
