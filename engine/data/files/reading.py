"""One read of a user's file: its kind from its name, what its first bytes say it is, and the reading
context :class:`ReadContext` (name, limits, notes, the messages that refuse a file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.errors import DataError, shown_bytes
from .columns import ATTRS

KINDS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".geojson": "geojson",
    ".json": "geojson",
    ".parquet": "parquet",
    ".geoparquet": "parquet",
    ".zip": "shapefile",
    ".gpkg": "gpkg",
}
WHAT = {
    "csv": "CSV table",
    "geojson": "GeoJSON",
    "parquet": "GeoParquet or Parquet file",
    "shapefile": "zipped Shapefile",
    "gpkg": "GeoPackage",
}
SUPPORTED = (
    "CSV (.csv/.tsv/.txt), GeoJSON (.geojson/.json), GeoParquet (.parquet), zipped Shapefile (.zip), GeoPackage (.gpkg)"
)

# what a file's first bytes say it is (for the message when they are not what its name says)
LOOKS = {
    "sqlite": "a SQLite database (a GeoPackage is named .gpkg)",
    "parquet": "a Parquet file (named .parquet)",
    "zip": "a zip archive (named .zip)",
    "gzip": "gzip-compressed data (unpack it first)",
    "pdf": "a PDF document",
    "png": "a PNG image",
    "xml": "XML or HTML (for example an OGR VRT or KML file), which is not read",
    "json": "JSON (a GeoJSON file is named .geojson)",
    "binary": "binary data",
    "text": "text",
}


def looks_like(data: bytes) -> str:
    if data.startswith(b"SQLite format 3\0"):
        return "sqlite"
    if data[:4] == b"PAR1":
        return "parquet"
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:5] == b"%PDF-":
        return "pdf"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "text"  # UTF-16 with a byte-order mark
    head = data[:4096]
    if b"\0" in head:
        return "binary"
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if head[:1] == b"<":
        return "xml"
    if head[:1] in (b"{", b"["):
        return "json"
    return "text"


@dataclass
class ReadContext:
    """One load: the file's name and kind, the caller's options and what was noted."""

    name: str
    kind: str
    columns: dict | None
    crs: object  # pyproj CRS or None
    polygons: str  # "centroid" or "reject" (points), "keep" (a file of regions)
    layer: str | None
    max_bytes: int
    max_points: int
    notes: list = field(default_factory=list)
    order: str = ""  # how degrees were read, for the swap note ("" after a CRS conversion)
    roles: tuple = ATTRS  # the attribute columns a vector reader looks for
    fields: list = field(default_factory=list)  # the file's attribute columns, as read
    unit: str = "locations"  # what max_points counts
    setting: str = "HEATMAP_MAX_POINTS"  # the variable that sets max_points ("": a fixed limit)
    max_vertices: int = 0  # a file of regions (:func:`.upload_limits.region_limits`); 0 for a file of locations
    max_parts: int = 0

    def refuse(self, why: str) -> DataError:
        return DataError(f"{self.name} is not a readable {WHAT[self.kind]}: {why}")

    def too_many(self, n: int, what: str) -> DataError:
        setting = f" ({self.setting})" if self.setting else ""
        return DataError(
            f"{self.name} holds {n:,} {what}, over the limit of {self.max_points:,} {self.unit} per file{setting}"
        )

    def check_region_size(self, vertices: int, parts: int, how: str = "") -> None:
        """Refuse a file of regions over :func:`.upload_limits.region_limits` (``how``: how the figures were found)."""
        note = f"; {how}" if how else ""
        if vertices > self.max_vertices:
            raise DataError(
                f"{self.name} holds {vertices:,} vertices ({how or 'in all'}), over the limit of "
                f"{self.max_vertices:,} for a file of regions (HEATMAP_MAX_REGION_VERTICES): simplify its polygons"
            )
        if parts > self.max_parts:
            raise DataError(
                f"{self.name} holds {parts:,} polygons (each part of a MultiPolygon counts{note}), over the limit of "
                f"{self.max_parts:,} for a file of regions (HEATMAP_MAX_REGION_PARTS): merge or drop the small ones"
            )

    def check_geometry_bytes(self, nbytes: int, most: int, where: str) -> None:
        """Refuse a file of regions whose encoded geometries (``nbytes`` in ``where``) take more than the
        ``most`` bytes the limits allow, before they are decoded."""
        if self.max_vertices and nbytes > most:
            raise DataError(
                f"{self.name}: its geometries take {shown_bytes(nbytes)} ({where}), more than {self.max_vertices:,} "
                f"vertices in {self.max_parts:,} polygons can (HEATMAP_MAX_REGION_VERTICES, "
                "HEATMAP_MAX_REGION_PARTS): simplify its polygons"
            )

    def wkb_most(self, rows: int) -> int:
        """The most bytes of WKB the region limits allow for ``rows`` geometries: a header of 9 bytes per
        geometry and per polygon, 4 per ring and up to 32 per vertex (x, y, z, m), a ring holding at least 4."""
        return 9 * rows + 9 * self.max_parts + 33 * self.max_vertices
