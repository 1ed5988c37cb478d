"""Every CSV table the product writes is made here: files people open in a spreadsheet.

A spreadsheet reads a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula, and some read a leading
tab or carriage return the same way; so a region named ``=HYPERLINK("http://...")`` in an uploaded file would be
a live formula in a published ``regions.csv`` (OWASP, "CSV Injection"). OWASP's rule: such a cell gets a leading
single quote, which spreadsheets take as the start of text.

Lines end in CRLF (RFC 4180), so a cell holding a carriage return or a line feed is always quoted: with a bare
``\n`` line end, pandas leaves a cell ``a\r=cmd`` unquoted, and a reader that ends lines at ``\r`` would see a
new row beginning with ``=cmd``.

Numbers stay numbers. A cell holding a number (a column of numbers, or a number in a mixed column) is written as
the number it is: a negative estimate ``-3.2`` is a value, not a formula, and no number can carry one. A text cell
that is exactly a decimal number (an id ``-12``, ``+3.5e2``) is left as it is for the same reason: every
spreadsheet reads it as that number. Every other text cell beginning with one of :data:`TRIGGERS`, column names
included, is neutralised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def safe_cell(value):
    """``value`` as a spreadsheet may read it safely: text beginning with a formula character gets a leading
    single quote (unless it is exactly a decimal number); anything else is returned unchanged."""
    if isinstance(value, str) and value.startswith(TRIGGERS) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(table, columns: Iterable[str] | None = None, stamp: str | None = None) -> str:
    """``table`` as CSV text, every text cell and column name passed through :func:`safe_cell`.

    ``table``: a pandas DataFrame, or rows (dicts, or sequences with ``columns``); ``columns``: the columns of
    rows, in order (a key a row lacks, or None, is an empty cell). ``stamp``: a first line ``# evaluation: ...``
    (read back with ``pandas.read_csv(comment="#")``)."""
    import pandas as pd
    from pandas.api import types

    if isinstance(table, pd.DataFrame):
        df = table.copy()
    else:
        df = pd.DataFrame(list(table), columns=None if columns is None else list(columns))
    for i in range(df.shape[1]):
        col = df.iloc[:, i]
        if not (types.is_numeric_dtype(col) or types.is_datetime64_any_dtype(col)):
            # built as objects: Series.map would make a column of whole and fractional numbers floats (65.0)
            df.isetitem(i, pd.Series([safe_cell(v) for v in col], index=col.index, dtype=object))
    df.columns = [safe_cell(str(c)) for c in df.columns]
    return (f"# evaluation: {stamp}\r\n" if stamp else "") + df.to_csv(index=False, lineterminator="\r\n")
