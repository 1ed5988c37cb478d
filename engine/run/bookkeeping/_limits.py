"""The operator's limit on the ε released per dataset.

The limit is the server's setting, not a session's: ``$HEATMAP_RELEASE_LIMIT`` for every dataset
(10 when unset), and ``$HEATMAP_LIMITS_FILE``, a TOML file whose ``[limits]`` table gives the limits
of named datasets (registry keys, e.g. ``snow_cholera = 2.0``; ``default = ...`` replaces the
environment's). The dashboard shows it read-only; the command line's ``--limit`` may only lower it.
"""

from __future__ import annotations

import math
import os
import tomllib

from ...core.errors import EngineError

ENV_LIMIT = "HEATMAP_RELEASE_LIMIT"
ENV_FILE = "HEATMAP_LIMITS_FILE"
DEFAULT_LIMIT = 10.0


def _limit(value, where: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v >= 0):
        raise EngineError(f"the release limit in {where} must be a number >= 0 (got {value!r}); ask the operator")
    return v


def _file_limits() -> dict:
    path = os.environ.get(ENV_FILE)
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f).get("limits", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise EngineError(f"cannot read the release limits file {path} ({exc}); ask the operator") from None
    if not isinstance(table, dict):
        raise EngineError(f"the release limits file {path} needs a [limits] table; ask the operator")
    return {str(k): _limit(v, f"{path} ({k})") for k, v in table.items()}


def release_limit(dataset: str) -> float:
    """The most ε the releases of ``dataset`` (a registry key) may spend together."""
    limits = _file_limits()
    if dataset in limits:
        return limits[dataset]
    if "default" in limits:
        return limits["default"]
    env = os.environ.get(ENV_LIMIT)
    return _limit(env, f"${ENV_LIMIT}") if env else DEFAULT_LIMIT


def lowered(limit: float | None, dataset: str) -> float:
    """The operator's limit, or ``limit`` where that is lower: a caller may be stricter, never looser."""
    op = release_limit(dataset)
    return op if limit is None else min(float(limit), op)
