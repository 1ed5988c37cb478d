"""Parquet and GeoParquet, read with pyarrow (no GDAL): the ``geo`` metadata, and the decoded size
checked from the file's metadata before any column is read."""

from __future__ import annotations

import io
import json

from ...core.errors import DataError, shown_bytes, shown_text
from .columns import ROLES, coord_column, find_columns, row_label, table_attributes, to_wgs84_table
from .crs import named_crs, safe_crs
from .geojson import attr_columns
from .reading import LOOKS, ReadContext, looks_like
from .upload_limits import EXPANSION, MAX_COLUMNS, MiB
from .vector import read_vector

# ------------------------------------------------------------------ Parquet (pyarrow, no GDAL)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}
DECODE_FACTOR = 3  # decoded columns: at most this many times the file, plus DECODE_FLOOR
DECODE_FLOOR = 150 * MiB
_GEO_ENCODINGS = {"wkb", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon"}


def read_parquet(data: bytes, c: ReadContext):
    import geopandas as gpd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data[:4] != b"PAR1":
        raise c.refuse(f"its bytes are {LOOKS[looks_like(data)]}")
    if data[-4:] == b"PARE":
        raise c.refuse("it is an encrypted Parquet file")
    if len(data) < 12 or data[-4:] != b"PAR1":
        raise c.refuse("it has no Parquet footer (truncated or corrupt)")
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        md, schema = pf.metadata, pf.schema_arrow
    except Exception:
        raise c.refuse("its footer cannot be read (corrupt)") from None
    # sizes from the footer, before any row is read
    if md.num_rows > c.max_points:
        raise c.too_many(md.num_rows, "rows")
    if md.num_rows == 0:
        raise DataError(f"{c.name} has no rows")
    if len(schema.names) > MAX_COLUMNS:
        raise c.refuse(f"it has {len(schema.names):,} columns, over the limit of {MAX_COLUMNS:,}")
    geo = _geo_metadata(schema, c)
    if geo is None:
        if c.polygons == "keep":
            raise c.refuse("it has no GeoParquet geometry column, so it holds no polygons")
        used = find_columns(schema.names, c.columns, notes=c.notes)
        read = [used[r] for r in ROLES if used[r] is not None]
    else:
        geom_col, declared = geo
        used = find_columns(
            [n for n in schema.names if n != geom_col], attr_columns(c), roles=c.roles, notes=c.notes, seen=c.fields
        )
        read = list(dict.fromkeys([geom_col] + [used[r] for r in c.roles if used[r] is not None]))  # one per column
    _check_decoded_size(data, pf, read, c)
    if geo is not None and c.max_vertices:  # a file of regions: its WKB bounds its vertices (with 4-byte lengths)
        most = c.wkb_most(md.num_rows) + 4 * md.num_rows + MiB
        c.check_geometry_bytes(_decoded_size(data, pf, [geo[0]], c), most, "its geometry column, from the footer")
    if geo is None:
        try:
            df = pf.read(columns=read).to_pandas()
        except Exception:
            raise c.refuse("its columns cannot be decoded") from None
        c.notes.append("Parquet file without GeoParquet metadata: read as a table of coordinates.")
        lat = coord_column(df[used["lat"]], used["lat"], "latitude", row_label)
        lon = coord_column(df[used["lon"]], used["lon"], "longitude", row_label)
        lon, lat = to_wgs84_table(lon, lat, used, c, row_label)
        return lon, lat, table_attributes(df, used, csv_strings=False), used
    try:
        gdf = gpd.read_parquet(io.BytesIO(data), columns=read)
    except Exception:
        raise c.refuse("its geometry column cannot be decoded") from None
    attrs = gdf.drop(columns=[gdf.geometry.name])
    gdf = gpd.GeoDataFrame(attrs, geometry=gpd.GeoSeries(gdf.geometry.to_numpy(), index=attrs.index))
    return read_vector(gdf, declared, used, c)


def _geo_metadata(schema, c: ReadContext):
    """(primary geometry column, declared CRS or None) from GeoParquet's "geo" metadata, or None without it."""
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    raw = (schema.metadata or {}).get(b"geo")
    if raw is None:
        return None
    try:
        geo = json.loads(raw)
    except (ValueError, RecursionError):
        raise c.refuse('its GeoParquet "geo" metadata is not valid JSON') from None
    col = geo.get("primary_column") if isinstance(geo, dict) else None
    meta = geo["columns"].get(col) if isinstance(col, str) and isinstance(geo.get("columns"), dict) else None
    if not isinstance(meta, dict) or col not in schema.names:
        raise c.refuse('its GeoParquet "geo" metadata does not name a geometry column of the file')
    enc = meta.get("encoding", "WKB")
    if not isinstance(enc, str) or enc.lower() not in _GEO_ENCODINGS:
        raise c.refuse(f"its geometry encoding {shown_text(enc, 30)!r} is not one of GeoParquet's")
    if "crs" not in meta:
        return col, CRS.from_user_input("OGC:CRS84")  # the GeoParquet default
    crs = meta["crs"]
    if crs is None:
        return col, None  # "unknown" in GeoParquet's terms
    try:
        if isinstance(crs, dict):
            return col, safe_crs(crs, f"{c.name}'s GeoParquet metadata")
        if isinstance(crs, str):
            return col, named_crs(crs) or safe_crs(crs, f"{c.name}'s GeoParquet metadata")
    except (CRSError, ValueError, TypeError, KeyError):
        pass
    raise DataError(
        f"{c.name} declares a CRS in its GeoParquet metadata that is not understood: write the file again "
        "with a known CRS (e.g. EPSG:4326)"
    )


def _check_decoded_size(data: bytes, pf, read: list, c: ReadContext) -> None:
    """Refuse a Parquet file whose read columns would decode to more than EXPANSION times the
    file limit, from the footer (fixed-width values) and, for dictionary-encoded strings
    (where a short file can repeat a long value), from the dictionary and its indices."""
    # relative to the file as well: a small file that decodes to gigabytes is refused from its footer
    budget = min(EXPANSION * c.max_bytes, DECODE_FACTOR * len(data) + DECODE_FLOOR)
    _decoded_size(data, pf, read, c, budget)


def _decoded_size(data: bytes, pf, read: list, c: ReadContext, budget: int | None = None) -> int:
    """Bytes the columns ``read`` decode to (see :func:`_check_decoded_size`; over ``budget``: refused)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    md, total, dict_cols = pf.metadata, 0, set()
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for j in range(rg.num_columns):
            col = rg.column(j)
            top = next((r for r in read if col.path_in_schema == r or col.path_in_schema.startswith(r + ".")), None)
            if top is None:
                continue
            kind = col.physical_type
            if kind == "BYTE_ARRAY":
                if "DELTA_BYTE_ARRAY" in col.encodings:
                    raise c.refuse(
                        f"the column {shown_text(top, 40)!r} uses the DELTA_BYTE_ARRAY encoding, whose decoded size "
                        "cannot be checked before reading: write the file again with default settings"
                    )
                if col.has_dictionary_page:
                    if top != col.path_in_schema:
                        raise c.refuse(f"the nested column {shown_text(top, 40)!r} holds dictionary-encoded strings")
                    dict_cols.add(top)
                total += col.total_uncompressed_size
            elif kind == "FIXED_LEN_BYTE_ARRAY":
                total += col.num_values * max(pf.schema.column(j).length, 1)
            else:
                total += col.num_values * _WIDTH.get(kind, 8)
    if budget is not None and total > budget:  # before any page is read: a dictionary page's size is in the footer
        raise DataError(
            f"{c.name} would take over {shown_bytes(total)} once decoded, over the limit of {shown_bytes(budget)} "
            f"({DECODE_FACTOR} times the file plus {shown_bytes(DECODE_FLOOR)}, at most {EXPANSION} times the file limit)"
        )
    if dict_cols:
        names = sorted(dict_cols)
        t = pq.ParquetFile(pa.BufferReader(data), read_dictionary=names).read(columns=names)
        for name in names:
            for chunk in t.column(name).chunks:
                if pa.types.is_dictionary(chunk.type):
                    lengths = pc.binary_length(chunk.dictionary)
                    total += pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0
    if budget is not None and total > budget:
        raise DataError(
            f"{c.name} would take {shown_bytes(total)} once decoded, over the limit of {shown_bytes(budget)} "
            f"({DECODE_FACTOR} times the file plus {shown_bytes(DECODE_FLOOR)}, at most {EXPANSION} times the file limit)"
        )
    return total
