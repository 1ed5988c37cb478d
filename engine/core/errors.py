"""User-facing errors.

Everything the engine raises because of bad input or absurd parameters derives
from :class:`EngineError`; its message is written for the analyst and is shown
as is by the dashboard and the CLI (never a traceback).
"""


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
