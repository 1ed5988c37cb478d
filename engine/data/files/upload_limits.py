"""How much a user's file may hold: its size, its locations, a file of regions' vertices and polygons, what
unpacking and parsing it may take. The limits the environment sets are read at each call."""

from __future__ import annotations

import math
import os

from ...core.errors import ParamError, shown_text
from ..dataset import MAX_POINTS

MiB = 1 << 20
DEFAULT_MAX_MB = 200  # Streamlit's default upload limit
DEFAULT_MAX_POINTS = 5_000_000
DEFAULT_REGION_VERTICES = 1_000_000  # a polygon file of regions: vertices in all (HEATMAP_MAX_REGION_VERTICES)
DEFAULT_REGION_PARTS = 50_000  # polygons in all, each part of a MultiPolygon one (HEATMAP_MAX_REGION_PARTS)
EXPANSION = 10  # unpacked zip members / decoded Parquet columns: at most this many times the file limit
MAX_RATIO = 200  # a zip member over RATIO_FLOOR may expand at most this many times
RATIO_FLOOR = 16 * MiB
MAX_COLUMNS = 1000
MAX_ZIP_ENTRIES = 1000
GPKG_STEPS = 10_000  # SQLite may run 10,000 x (GPKG_STEPS + max_points / 10) instructions on a GeoPackage


def env_number(var: str, default: float) -> float:
    """The positive number the environment variable ``var`` sets (``default`` when it is unset or empty)."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        v = float(raw.replace("_", ""))
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise ParamError(f"the environment variable {var} must be a positive number (it is {shown_text(raw, 40)!r})")
    return v


def upload_limits() -> tuple[int, int]:
    """(largest file in bytes, most locations per file) from ``HEATMAP_MAX_UPLOAD_MB`` and ``HEATMAP_MAX_POINTS``."""
    max_bytes = int(env_number("HEATMAP_MAX_UPLOAD_MB", DEFAULT_MAX_MB) * MiB)
    max_points = min(int(env_number("HEATMAP_MAX_POINTS", DEFAULT_MAX_POINTS)), MAX_POINTS)
    return max_bytes, max(max_points, 1)


def region_limits() -> tuple[int, int]:
    """(most vertices, most polygon parts) of a file of regions, from ``HEATMAP_MAX_REGION_VERTICES`` and
    ``HEATMAP_MAX_REGION_PARTS``: its area weights cost time in proportion to them."""
    vertices = int(env_number("HEATMAP_MAX_REGION_VERTICES", DEFAULT_REGION_VERTICES))
    parts = int(env_number("HEATMAP_MAX_REGION_PARTS", DEFAULT_REGION_PARTS))
    return max(vertices, 4), max(parts, 1)


def memory_budget(size: int) -> int:
    """Bytes parsing a file of ``size`` bytes may take: ``HEATMAP_PARSE_MEMORY_FACTOR`` (default 4) times the
    file plus ``HEATMAP_PARSE_MEMORY_MB`` (default 200)."""
    factor = env_number("HEATMAP_PARSE_MEMORY_FACTOR", 4.0)
    return int(factor * size + env_number("HEATMAP_PARSE_MEMORY_MB", 200.0) * MiB)
