"""CSV files (.csv, .tsv, .txt): text split into fields, its columns found by name and read as coordinates and
attributes (:mod:`.columns`)."""

from __future__ import annotations

import csv
import io

from ...core.errors import DataError
from .columns import ATTRS, ROLES, coord_column, find_columns, table_attributes, to_wgs84_table
from .reading import LOOKS, ReadContext, looks_like
from .upload_limits import MAX_COLUMNS


def _line(i: int) -> str:
    return f"line {i + 2}"  # a CSV's data row i is on this line (after the header)


def read_csv(data: bytes, c: ReadContext):
    import pandas as pd

    looks = looks_like(data)
    if looks != "text":
        raise c.refuse(f"its bytes are {LOOKS[looks]}")
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
    used = find_columns(header, c.columns, notes=c.notes)
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
    lat = coord_column(df[used["lat"]], used["lat"], "latitude", _line)
    lon = coord_column(df[used["lon"]], used["lon"], "longitude", _line)
    lon, lat = to_wgs84_table(lon, lat, used, c, _line)
    return lon, lat, table_attributes(df, used, csv_strings=True), used


def _lines(text: str):
    """The lines of ``text`` with their endings, one at a time (a list of them all would double the memory)."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end + 1
        yield text[start:end]
        start = end


def _decode_text(data: bytes, c: ReadContext) -> tuple[str, str]:
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
