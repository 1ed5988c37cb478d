"""A table's columns: each role (latitude, longitude, user id, value, flag, weight; a file of regions' id and
name) found by name (:func:`find_columns`), coordinates read and converted to WGS84 (:func:`coord_column`,
:func:`to_wgs84_table`) and attributes read (:func:`table_attributes`). The CSV and Parquet readers share them;
the vector readers match and read their attribute columns with them."""

from __future__ import annotations

import re

import numpy as np

from ...core.errors import DataError, ParamError, shown, shown_list, shown_text
from .crs import CRS_FORMS, CRS_WHERE, is_wgs84

NAMES = {
    "lat": ("lat", "latitude", "y", "latdeg", "decimallatitude"),
    "lon": ("lon", "lng", "long", "longitude", "x", "londeg", "decimallongitude"),
    "user_id": ("userid", "user", "uid", "personid", "deviceid"),
    "value": ("value",),
    "flag": ("flag",),
    "weight": ("weight",),
}
ROLES = tuple(NAMES)
ATTRS = ("user_id", "value", "flag", "weight")
# a polygon file of regions: its id and name columns (read by :mod:`.polygons`, never by a point reader)
REGION_NAMES = {"region_id": ("id", "regionid", "code", "geoid", "fid"), "region_name": ("name", "regionname", "label")}
REGION_ROLES = tuple(REGION_NAMES)
ROLE_WORD = {"lat": "latitude", "lon": "longitude", "user_id": "user id", "region_id": "id", "region_name": "name"}
_TRUE = {"1", "true", "t", "yes", "y", "positive", "pos"}
_FALSE = {"0", "false", "f", "no", "n", "negative", "neg", ""}
_BLANK = {"", "na", "nan", "null", "none"}


def _norm(name) -> str:
    return re.sub(r"[\s_\-.]", "", str(name).strip().lower())


class MissingColumns(DataError):
    """The file has no column named like a latitude or a longitude; ``available`` lists its columns, so a
    caller can offer them to choose from."""

    def __init__(self, available: list, message: str):
        super().__init__(message)
        self.available = list(available)


def find_columns(
    available: list, columns: dict | None, roles=ROLES, notes: list | None = None, seen: list | None = None
) -> dict:
    """Map each role to a column name, or None. ``lat``/``lon`` are required when in ``roles``.
    ``seen``: filled with the available columns (a picker offers them)."""
    columns = dict(columns or {})
    known = ROLES + tuple(r for r in REGION_ROLES if r in roles)
    unknown = sorted(set(columns) - set(known), key=str)
    if unknown:
        raise ParamError(f"unknown column role(s) {shown_list(unknown)}; use some of: {', '.join(known)}")
    available = [str(c) for c in available]
    if seen is not None:
        seen[:] = available
    by_norm: dict[str, list] = {}
    for c in available:
        by_norm.setdefault(_norm(c), []).append(c)

    def one(cols: list, role: str) -> str:
        if len(cols) > 1:
            raise DataError(
                f"the file has {len(cols)} columns that could be the {ROLE_WORD.get(role, role)} ({shown_list(cols)}): "
                "rename or remove the extra one(s)"
            )
        return cols[0]

    out = {}
    for role in roles:
        given = columns.get(role)
        if given not in (None, ""):
            given = str(given)
            if given in available:
                out[role] = one([c for c in available if c == given], role)
            elif _norm(given) in by_norm:
                out[role] = one(by_norm[_norm(given)], role)
            else:
                raise DataError(
                    f"the {role} column {shown_text(given, 40)!r} is not in the file; its columns are: {shown_list(available)}"
                )
            continue
        found = [n for n in {**NAMES, **REGION_NAMES}[role] if n in by_norm]
        out[role] = one(by_norm[found[0]], role) if found else None
        if len(found) > 1 and notes is not None:
            others = [c for n in found[1:] for c in by_norm[n]]
            notes.append(
                f"Column {shown_text(out[role], 40)!r} was used as the {ROLE_WORD.get(role, role)}; "
                f"{shown_list(others)} also looked like one and {'was' if len(others) == 1 else 'were'} not used."
            )
    if "lat" in roles:
        missing = [r for r in ("lat", "lon") if out[r] is None]
        if missing:
            raise MissingColumns(
                available,
                "could not find the "
                + " and ".join(ROLE_WORD[r] for r in missing)
                + " column: looked for lat/latitude/y and lon/lng/long/longitude/x; the file's columns are: "
                + shown_list(available)
                + ". Name them explicitly (columns={'lat': ..., 'lon': ...}).",
            )
        if out["lat"] == out["lon"]:
            raise DataError(f"latitude and longitude cannot both be the column {shown_text(out['lat'], 40)!r}")
    for role in ROLES:
        out.setdefault(role, None)
    return out


def row_label(i: int) -> str:
    return f"row {i + 1}"


def coord_column(s, col, what, where) -> np.ndarray:
    import pandas as pd

    if s.dtype.kind in "iuf":
        out = s.to_numpy(dtype=np.float64)
        if np.isnan(out).any():
            i = int(np.argmax(np.isnan(out)))
            raise DataError(
                f"{int(np.isnan(out).sum()):,} row(s) have no {what} (column {shown_text(col, 40)!r}; first at {where(i)})"
            )
    else:
        raw = s.astype(str).str.strip()
        missing = raw.str.lower().isin(_BLANK)
        if missing.any():
            i = int(np.argmax(missing.to_numpy()))
            raise DataError(
                f"{int(missing.sum()):,} row(s) have no {what} (column {shown_text(col, 40)!r}; first at {where(i)}): "
                "remove them or fill them in"
            )
        # a decimal comma (European spreadsheets) is read as a point when nothing else is ambiguous
        num = pd.to_numeric(raw, errors="coerce")
        if num.isna().any() and raw.str.fullmatch(r"-?\d+,\d+").any():
            num = pd.to_numeric(raw.str.replace(",", ".", regex=False), errors="coerce")
        bad = num.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(
                f"the {what} column {shown_text(col, 40)!r} has a non-numeric value {shown_text(raw.iloc[i], 40)!r} at {where(i)}"
            )
        out = num.to_numpy(dtype=np.float64)
    if not np.isfinite(out).all():
        i = int(np.argmax(~np.isfinite(out)))
        raise DataError(f"the {what} column {shown_text(col, 40)!r} has a non-finite value at {where(i)}")
    return out


def _degrees(lon, lat) -> np.ndarray:
    return (np.abs(lat) <= 90) & (np.abs(lon) <= 180)


def to_wgs84_table(lon, lat, used, c, where):
    """Coordinates of a table: WGS84 degrees unless ``c.crs`` (``c``: the :class:`.reading.ReadContext`) says
    otherwise; catch projected coordinates mistaken for degrees, swapped columns and mixed units with specific
    messages."""
    crs = c.crs
    if crs is not None and not is_wgs84(crs):
        from pyproj import Transformer

        t = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
        # for a projected CRS the "lon" column holds eastings (x) and "lat" northings (y)
        lon, lat = t.transform(lon, lat)
        lon, lat = np.asarray(lon, float), np.asarray(lat, float)
        if not np.isfinite(lon).all() or not np.isfinite(lat).all():
            raise DataError(f"some coordinates are outside the area of {crs.name} and cannot be converted")
        c.notes.append(f"Coordinates converted from {crs.name} to WGS84.")
        return lon, lat
    ok = _degrees(lon, lat)
    if ok.all():
        if _norm(used["lat"]) == "y" or _norm(used["lon"]) == "x":
            c.notes.append("Columns x/y read as longitude/latitude in WGS84 degrees.")
        c.order = f"columns {shown_text(used['lat'], 40)!r} (latitude) and {shown_text(used['lon'], 40)!r} (longitude)"
        return lon, lat
    i = int(np.argmax(~ok))
    if (np.abs(lat) > 90).mean() > 0.5 and (np.abs(lat) <= 180).all() and (np.abs(lon) <= 90).all():
        raise DataError(
            f"latitude {shown(lat[i])} at {where(i)} is beyond ±90 degrees while every longitude is within ±90: "
            f"the columns {shown_text(used['lat'], 40)!r} and {shown_text(used['lon'], 40)!r} look swapped "
            "(map them with columns=...)"
        )
    if not ok.any():  # not one row reads as degrees: planar coordinates, of a projection or a local grid
        raise DataError(_not_degrees(lon, lat))
    big = (np.abs(lon) > 360) | (np.abs(lat) > 360)
    if big.any():
        i = int(np.argmax(big))
        raise DataError(
            f"the coordinates mix units: {int(ok.sum()):,} rows look like degrees but {where(i)} has "
            f"({shown(lon[i], 2)}, {shown(lat[i], 2)}); a file must use one CRS throughout"
        )
    if np.abs(lat[i]) > 90:
        raise DataError(f"latitude {shown(lat[i])} at {where(i)} is beyond ±90 degrees")
    raise DataError(f"longitude {shown(lon[i])} at {where(i)} is beyond ±180 degrees")


def _not_degrees(lon, lat) -> str:
    """Why coordinates none of which is a longitude and latitude in degrees cannot be read without their CRS."""
    span = (
        f"x from {shown(lon.min(), 0)} to {shown(lon.max(), 0)}, y from {shown(lat.min(), 0)} to {shown(lat.max(), 0)}"
    )
    if max(np.abs(lon).max(), np.abs(lat).max()) > 1e9:  # beyond any projection of the Earth, in metres or feet
        return (
            f"the coordinates ({span}) are not on the Earth in any CRS: no projection reaches a billion units "
            "from its origin. Check that the columns hold coordinates"
        )
    if min(np.abs(lon).max(), np.abs(lat).max()) > 1000:
        kind = "they look like a projected CRS in metres (EPSG:27700 for British National Grid, EPSG:3857 for web Mercator)"
    else:
        kind = "they look like planar coordinates in small units, such as kilometres of a projection or a local grid"
    return (
        f"the coordinates are not longitude and latitude in degrees ({span}; a longitude is within ±180 and a "
        f"latitude within ±90): {kind}. Give the CRS they are in ({CRS_WHERE['points']}): {CRS_FORMS}. Coordinates "
        "on a local grid whose place on the Earth is unknown cannot be placed on a map: georeference them first"
    )


def table_attributes(df, used, csv_strings: bool) -> dict:
    import pandas as pd

    attrs = {}
    for role in ATTRS:
        col = used.get(role)
        if col is None:
            continue
        s = df[col]
        label = f"the {ROLE_WORD.get(role, role)} column {shown_text(col, 40)!r}"
        if role == "user_id":
            if s.dtype.kind == "f" and not np.isfinite(s.to_numpy()).all():
                raise DataError(f"{label} has missing or non-finite values")
            attrs[role] = s.to_numpy() if s.dtype.kind in "iuf" else s.astype(str).to_numpy()
            continue
        if role == "flag":
            attrs[role] = _flag(s, label)
            continue
        if s.dtype.kind in "iufb" and not csv_strings:
            raw, blank = s, s.isna()
        else:  # text (pandas' object or string dtypes)
            raw = s.astype(str).str.strip()
            blank = s.isna() | raw.str.lower().isin(_BLANK)
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & ~blank
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise DataError(f"{label} has a non-numeric value {shown_text(raw.iloc[i], 40)!r} at row {i + 1}")
        v = num.to_numpy(dtype=np.float64)
        if np.isinf(v).any():
            raise DataError(f"{label} has an infinite value at row {int(np.argmax(np.isinf(v))) + 1}")
        if role == "weight":
            if np.isnan(v).any():
                raise DataError(f"{label} has missing values (first at row {int(np.argmax(np.isnan(v))) + 1})")
            if (v < 0).any():
                raise DataError(f"{label} has negative values")
            if not (v > 0).any():
                raise DataError(f"every weight in {label} is 0: the map would be empty")
        attrs[role] = v
    return attrs


def _flag(s, label) -> np.ndarray:
    if s.dtype == bool:
        return s.to_numpy()
    if s.dtype.kind in "iuf":
        v = s.to_numpy(dtype=np.float64)
        ok = np.isnan(v) | np.isin(v, (0, 1))
        if not ok.all():
            i = int(np.argmax(~ok))
            raise DataError(f"{label} must be 0/1 or true/false; row {i + 1} has {v[i]}")
        return np.nan_to_num(v, nan=0) == 1
    low = s.astype(str).str.strip().str.lower()
    t = low.isin(_TRUE).to_numpy()
    f = low.isin(_FALSE | _BLANK).to_numpy()
    if not (t | f).all():
        i = int(np.argmax(~(t | f)))
        raise DataError(f"{label} must be 0/1, true/false or yes/no; row {i + 1} has {shown_text(s.iloc[i], 40)!r}")
    return t
