"""The steps shared by the vector readers (GeoJSON, GeoParquet, GeoPackage, Shapefile) once a
GeoDataFrame is built: its CRS, empty geometries dropped, polygons and lines to centroids or refused."""

from __future__ import annotations

import numpy as np

from ...core.errors import DataError, shown
from .columns import table_attributes
from .crs import CRS_FORMS, CRS_WHERE, is_wgs84
from .reading import ReadContext


# ------------------------------------------------------------------ vector files: shared steps
def read_vector(gdf, declared, used, c: ReadContext):
    if len(gdf) == 0:
        raise DataError(f"{c.name} holds no features")
    gdf = _drop_empty(gdf, c)
    gdf = _set_crs(gdf, declared, c)
    if c.polygons == "keep":  # a file of regions: its polygons, in WGS84 (engine.data.files.polygons)
        return _polygons_wgs84(gdf, c), used
    gdf = _points_only(gdf, c)
    if is_wgs84(gdf.crs):
        c.order = "coordinates (x read as longitude, y as latitude)"
    else:
        try:
            gdf = gdf.to_crs(4326)
        except Exception:
            raise DataError(f"{c.name}: could not convert from {gdf.crs.name} to WGS84") from None
        c.notes.append("Coordinates converted to WGS84.")
    lon = gdf.geometry.x.to_numpy(dtype=np.float64)
    lat = gdf.geometry.y.to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    if bad.any():
        raise DataError(f"{c.name}: {int(bad.sum())} feature(s) have coordinates that cannot be converted to WGS84")
    return lon, lat, table_attributes(gdf, used, csv_strings=False), used


def _set_crs(gdf, declared, c: ReadContext):
    crs = c.crs
    if crs is not None:
        if declared is not None and not declared.equals(crs):
            raise DataError(
                f"{c.name} declares the CRS {declared.name} but {crs.name} was given: remove one of the two"
            )
        if declared is None:
            c.notes.append(f"The file declares no CRS: read in {crs.name}, the CRS given.")
        return gdf.set_crs(crs, allow_override=True)
    if declared is not None:
        return gdf.set_crs(declared, allow_override=True)
    b = gdf.total_bounds
    in_degrees = (
        np.all(np.isfinite(b)) and abs(b[1]) <= 90 and abs(b[3]) <= 90 and abs(b[0]) <= 180 and abs(b[2]) <= 180
    )
    kind = {
        "geojson": 'GeoJSON without a "crs" member',
        "shapefile": f"{c.name} without a CRS (no .prj)",
    }.get(c.kind, f"{c.name} without a CRS")
    if not in_degrees:
        raise DataError(
            f"{kind}, and its coordinates are not degrees (x from {shown(b[0], 0)} to {shown(b[2], 0)}): the CRS is unknown. "
            f"Give the file's CRS ({CRS_WHERE['regions' if c.polygons == 'keep' else 'points']}): {CRS_FORMS}; or "
            "include it in the file (.prj for a Shapefile)."
        )
    if c.kind == "geojson":
        c.notes.append("The GeoJSON has no CRS: WGS84 longitude/latitude assumed (the GeoJSON standard, RFC 7946).")
    else:
        c.notes.append(f"{c.name} has no CRS: its coordinates are within degree ranges, so WGS84 was assumed.")
    return gdf.set_crs(4326, allow_override=True)


def _drop_empty(gdf, c: ReadContext):
    geom = gdf.geometry
    empty = (geom.isna() | geom.is_empty).to_numpy()
    if empty.all():
        raise DataError(f"{c.name}: every feature has an empty geometry")
    if empty.any():
        c.notes.append(f"{int(empty.sum())} feature(s) without geometry were dropped.")
        gdf = gdf[~empty]
    return gdf


def _points_only(gdf, c: ReadContext):
    types = gdf.geometry.geom_type
    multi = types == "MultiPoint"
    if multi.any():
        n0 = len(gdf)
        gdf = gdf.explode(index_parts=False, ignore_index=True)
        gdf = gdf[~gdf.geometry.is_empty]
        c.notes.append(
            f"{int(multi.sum())} MultiPoint feature(s) split into their points "
            f"({len(gdf) - n0 + int(multi.sum())} points; each keeps its feature's attributes)."
        )
        types = gdf.geometry.geom_type
    other = types != "Point"
    if other.any():
        kinds = ", ".join(sorted(set(types[other])))
        if c.polygons == "reject":
            raise DataError(
                f"{c.name} holds {int(other.sum()):,} non-point feature(s) ({kinds}); locations must be points. "
                "Convert them to points, or allow centroids."
            )
        # centroids in a local metric CRS (a centroid in degrees is distorted)
        metric = gdf.estimate_utm_crs() if gdf.crs.is_geographic else gdf.crs
        cent = gdf.geometry[other.to_numpy()].to_crs(metric).centroid.to_crs(gdf.crs)
        gdf = gdf.copy()
        gdf.loc[other.to_numpy(), gdf.geometry.name] = cent.to_numpy()
        c.notes.append(f"{int(other.sum()):,} {kinds} feature(s) were replaced by their centroids.")
    return gdf


def _polygons_wgs84(gdf, c: ReadContext):
    types = set(gdf.geometry.geom_type)
    if not types <= {"Polygon", "MultiPolygon"}:
        other = ", ".join(sorted(types - {"Polygon", "MultiPolygon"}))
        raise DataError(f"{c.name} holds {other} features; regions must be polygons")
    if not is_wgs84(gdf.crs):
        import geopandas as gpd
        from pyproj import Transformer

        from .reproject import check_size, reproject

        check_size(gdf.geometry.to_numpy(), c)
        try:
            to_wgs84 = Transformer.from_crs(gdf.crs, 4326, always_xy=True)
        except Exception:
            raise DataError(f"{c.name}: could not convert from {gdf.crs.name} to WGS84") from None

        def fn(xy):
            return np.column_stack(to_wgs84.transform(xy[:, 0], xy[:, 1]))

        # an edge is straight in the file's CRS: kept on that course in WGS84 to within 1e-7 degree (1 cm)
        geoms = reproject(gdf.geometry.to_numpy(), fn, 1e-7, c.name)
        gdf = gpd.GeoDataFrame(
            gdf.drop(columns=gdf.geometry.name), geometry=gpd.GeoSeries(geoms, index=gdf.index, crs=4326)
        )
    return gdf
