"""CSV files, and the table steps the plain Parquet reader shares: coordinate columns, reprojection
of a table's coordinates to WGS84, attribute columns."""

from __future__ import annotations

import csv
import io

import numpy as np

from ...core.errors import DataError, shown
from .common import (
    _BLANK,
    _FALSE,
    _LOOKS,
    _TRUE,
    ATTRS,
    CRS_FORMS,
    CRS_WHERE,
    MAX_COLUMNS,
    ROLE_WORD,
    ROLES,
    _Ctx,
    _find_columns,
    _is_wgs84,
    _looks_like,
    _norm,
    _short,
)


# ------------------------------------------------------------------ tables (CSV, plain Parquet)
def _line(i: int) -> str:
    return f"line {i + 2}"  # a CSV's data row i is on this line (after the header)


def _row(i: int) -> str:
    return f"row {i + 1}"


def _read_csv(data: bytes, c: _Ctx):
    import pandas as pd

    looks = _looks_like(data)
    if looks != "text":
        raise c.refuse(f"its bytes are {_LOOKS[looks]}")
    text, encoding = _decode_text(data, c)
    if not text.strip():
        raise DataError(f"{c.name} is empty")
    rows = text.rstrip("\r\n").count("\n")  # lines after the header: at least the number of rows
    if rows > c.max_points:
        raise c.too_many(rows, "lines after its header")
    first = text.split("\n", 1)[0]
    try:
        sep = csv.Sniffer().sniff(first[: 64 * 1024] + "\n", delimiters=",;\t|").delimiter
    except csv.Error:
        sep = "\t" if c.name.lower().endswith(".tsv") else ","
    reader = csv.reader(_lines(text), delimiter=sep, skipinitialspace=True)
    try:
        header = next(reader)
        if len(header) > MAX_COLUMNS:
            raise c.refuse(f"it has {len(header):,} columns, over the limit of {MAX_COLUMNS:,}")
        # a row with more fields than the header shifts its values into the wrong columns
        for row in reader:
            if len(row) > len(header):
                raise c.refuse(
                    f"line {reader.line_num} has {len(row)} fields where the header has {len(header)} "
                    "(check the separator and the quoting)"
                )
    except csv.Error:
        raise c.refuse(
            f"line {reader.line_num} cannot be split into fields (a field is over 131,072 characters or badly quoted)"
        ) from None
    except StopIteration:
        raise DataError(f"{c.name} has no header and no rows") from None
    used = _find_columns(header, c.columns, notes=c.notes)
    keep = sorted({header.index(used[r]) for r in ROLES if used[r] is not None})
    del text  # pandas reads the bytes: a StringIO would hold the text again at 4 bytes a character
    # coordinates are parsed as numbers (16 bytes a row, not a string object per value); a column that
    # is not all numbers comes back as text and gets its specific message below
    as_text = {header.index(used[r]) for r in ATTRS if used[r] is not None}
    try:
        df = pd.read_csv(
            io.BytesIO(data),
            encoding=encoding,
            sep=sep,
            dtype={i: str for i in as_text},
            keep_default_na=False,
            skipinitialspace=True,
            index_col=False,
            usecols=keep,
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{c.name} has no header and no rows") from None
    except (pd.errors.ParserError, ValueError, csv.Error):
        raise c.refuse("its rows cannot be split into fields (check the separator and the quoting)") from None
    df.columns = [header[i] for i in keep]
    if len(df) == 0:
        raise DataError(f"{c.name} has a header but no data rows")
    if len(df) > c.max_points:
        raise c.too_many(len(df), "rows")
    lat = _coord_column(df[used["lat"]], used["lat"], "latitude", _line)
    lon = _coord_column(df[used["lon"]], used["lon"], "longitude", _line)
    lon, lat = _to_wgs84_table(lon, lat, used, c, _line)
    return lon, lat, _attributes(df, used, csv_strings=True), used


def _lines(text: str):
    """The lines of ``text`` with their endings, one at a time (a list of them all would double the memory)."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end + 1
        yield text[start:end]
        start = end


def _decode_text(data: bytes, c: _Ctx) -> tuple[str, str]:
    """The text and the encoding it was read with."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise c.refuse("it starts like UTF-16 text but is not valid UTF-16") from None
        c.notes.append("The file is UTF-16: read as such.")
        return text, "utf-16"
    try:
        return data.decode("utf-8-sig"), "utf-8-sig"
    except UnicodeDecodeError:
        c.notes.append("The file is not UTF-8: read as Latin-1.")
        return data.decode("latin-1"), "latin-1"


def _coord_column(s, col, what, where) -> np.ndarray:
    import pandas as pd

    if s.dtype.kind in "iuf":
        out = s.to_numpy(dtype=np.float64)
        if np.isnan(out).any():
            i = int(np.argmax(np.isnan(out)))
            raise DataError(
                f"{int(np.isnan(out).sum()):,} row(s) have no {what} (column {_short(col, 40)!r}; first at {where(i)})"
            )
    else:
        raw = s.astype(str).str.strip()
        missing = raw.str.lower().isin(_BLANK)
        if missing.any():
            i = int(np.argmax(missing.to_numpy()))
            raise DataError(
                f"{int(missing.sum()):,} row(s) have no {what} (column {_short(col, 40)!r}; first at {where(i)}): "
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
                f"the {what} column {_short(col, 40)!r} has a non-numeric value {_short(raw.iloc[i], 40)!r} at {where(i)}"
            )
        out = num.to_numpy(dtype=np.float64)
    if not np.isfinite(out).all():
        i = int(np.argmax(~np.isfinite(out)))
        raise DataError(f"the {what} column {_short(col, 40)!r} has a non-finite value at {where(i)}")
    return out


def _degrees(lon, lat) -> np.ndarray:
    return (np.abs(lat) <= 90) & (np.abs(lon) <= 180)


def _to_wgs84_table(lon, lat, used, c: _Ctx, where):
    """Coordinates of a table: WGS84 degrees unless ``c.crs`` says otherwise; catch projected
    coordinates mistaken for degrees, swapped columns and mixed units with specific messages."""
    crs = c.crs
    if crs is not None and not _is_wgs84(crs):
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
        c.order = f"columns {_short(used['lat'], 40)!r} (latitude) and {_short(used['lon'], 40)!r} (longitude)"
        return lon, lat
    i = int(np.argmax(~ok))
    if (np.abs(lat) > 90).mean() > 0.5 and (np.abs(lat) <= 180).all() and (np.abs(lon) <= 90).all():
        raise DataError(
            f"latitude {shown(lat[i])} at {where(i)} is beyond ±90 degrees while every longitude is within ±90: "
            f"the columns {_short(used['lat'], 40)!r} and {_short(used['lon'], 40)!r} look swapped "
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
    if min(np.abs(lon).max(), np.abs(lat).max()) > 1000:
        kind = "they look like a projected CRS in metres (EPSG:27700 for British National Grid, EPSG:3857 for web Mercator)"
    else:
        kind = "they look like planar coordinates in small units, such as kilometres of a projection or a local grid"
    return (
        f"the coordinates are not longitude and latitude in degrees ({span}; a longitude is within ±180 and a "
        f"latitude within ±90): {kind}. Give the CRS they are in ({CRS_WHERE['points']}): {CRS_FORMS}. Coordinates "
        "on a local grid whose place on the Earth is unknown cannot be placed on a map: georeference them first"
    )


def _attributes(df, used, csv_strings: bool) -> dict:
    import pandas as pd

    attrs = {}
    for role in ATTRS:
        col = used.get(role)
        if col is None:
            continue
        s = df[col]
        label = f"the {ROLE_WORD.get(role, role)} column {_short(col, 40)!r}"
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
            raise DataError(f"{label} has a non-numeric value {_short(raw.iloc[i], 40)!r} at row {i + 1}")
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
        raise DataError(f"{label} must be 0/1, true/false or yes/no; row {i + 1} has {_short(s.iloc[i], 40)!r}")
    return t
