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
