"""User-facing errors.

Everything the engine raises because of bad input or absurd parameters derives
from :class:`EngineError`; its message is written for the analyst and is shown
as is by the dashboard and the CLI (never a traceback). A message shows a number with :func:`shown`, a
user-supplied name with :func:`shown_text` (control characters replaced, at most :data:`NAME_CHARS` long), a size
with :func:`shown_bytes`.
"""

import re

NAME_CHARS = 80  # the most characters of a user-supplied name a message quotes


class EngineError(Exception):
    """An error whose message is meant for the user."""


class DataError(EngineError):
    """A dataset could not be read or is unusable (bad file, columns, coordinates)."""


class ParamError(EngineError):
    """A parameter is missing, of the wrong type, or outside its allowed range."""


class OfflineError(DataError):
    """An online source is not cached and could not be downloaded."""


class Cancelled(EngineError):
    """The run was cancelled by the user."""


def shown(x, decimals: int = 6) -> str:
    """A number as a message shows it: digits grouped, at most ``decimals`` decimals (trailing zeros dropped); in
    scientific notation with three significant digits where that would take more than 12 digits or show a
    non-zero as zero (``1e+308``, not 309 digits; ``1.5e-09``); ``nan``, ``inf`` and ``-inf`` as such."""
    v = float(x)
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if v != 0 and (abs(v) >= 1e12 or abs(v) < 0.5 * 10.0**-decimals):
        return f"{v:.3g}"
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def shown_text(s, n: int = NAME_CHARS) -> str:
    """A user-supplied string for a message: control characters replaced, at most ``n`` characters."""
    s = re.sub(r"[\x00-\x1f\x7f]", "?", str(s))
    return s if len(s) <= n else s[: n - 16] + "…" + s[-15:]


def shown_bytes(b: int) -> str:
    """A size in bytes for a message: in MB from 100,000 bytes."""
    return f"{b / (1 << 20):,.1f} MB" if b >= 100_000 else f"{b:,} bytes"


def shown_list(cols) -> str:
    """Names (a file's columns, layers) for a message: each quoted and shortened, at most 30 of them."""
    cols = [repr(shown_text(c, 40)) for c in cols]
    return ", ".join(cols[:30]) + (f" ... ({len(cols)} in all)" if len(cols) > 30 else "") if cols else "(none)"
