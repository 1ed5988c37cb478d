"""Typed parameter schemas.

Every mechanism (and every dataset source) declares its parameters as a tuple of
:class:`Param`. The CLI parses ``key=value`` pairs with them and the dashboard
builds its widgets from them, so a mechanism that lands later needs no UI change.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import ParamError

KINDS = ("int", "float", "bool", "choice", "str")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: Any
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple = ()
    log: bool = False  # widgets use a log scale
    label: str = ""
    # ((other parameter, value), ...): the parameter matters only when every other one has that value; the
    # dashboard shows its widget then only (elsewhere it keeps its default)
    shown_if: tuple = ()
    # the values a remote user (the dashboard, a link) may give, as a regular expression ("": any); a value
    # outside it, such as the path of a file on the machine that runs the engine, only from the command line
    remote: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown param kind {self.kind!r}")
        if self.kind == "choice" and self.default not in self.choices:
            raise ValueError(f"default of {self.name} not among its choices")

    @property
    def title(self) -> str:
        """The label, or the name in words with its unit suffix spelled out (spread_m -> "spread (metres)")."""
        if self.label:
            return self.label
        for suffix, unit in (("_m", " (metres)"), ("_km", " (km)"), ("_pct", " (%)"), ("_s", " (seconds)")):
            if self.name.endswith(suffix):
                return self.name[: -len(suffix)].replace("_", " ") + unit
        return self.name.replace("_", " ")

    def coerce_remote(self, value: Any) -> Any:
        """:meth:`coerce` for a value a remote user gave (the dashboard's widgets, a link): also within
        :attr:`remote`, so nobody reads a file of the server by typing its path."""
        v = self.coerce(value)
        if self.remote and not re.fullmatch(self.remote, str(v).strip()):
            raise ParamError(
                f"{self.title}: {str(v)[:60]!r} is not one of the values the dashboard takes here (a path on the "
                "server is read only from the command line)"
            )
        return v

    def coerce(self, value: Any) -> Any:
        """Return ``value`` converted to this parameter's type, or raise ParamError."""
        if value is None:
            return self.default
        try:
            if self.kind == "int":
                if isinstance(value, bool):
                    raise ValueError
                if isinstance(value, str):
                    value = float(value)
                if isinstance(value, float):
                    if not value.is_integer():
                        raise ValueError
                v: Any = int(value)
            elif self.kind == "float":
                if isinstance(value, bool):
                    raise ValueError
                v = float(value)
                if not math.isfinite(v):
                    raise ValueError
            elif self.kind == "bool":
                if isinstance(value, str):
                    low = value.strip().lower()
                    if low in ("1", "true", "yes", "on"):
                        v = True
                    elif low in ("0", "false", "no", "off"):
                        v = False
                    else:
                        raise ValueError
                else:
                    v = bool(value)
            elif self.kind == "choice":
                matches = [c for c in self.choices if str(c) == str(value)]
                if not matches:
                    raise ParamError(
                        f"{self.title}: {value!r} is not one of " + ", ".join(str(c) for c in self.choices)
                    )
                v = matches[0]
            else:
                v = str(value)
        except ParamError:
            raise
        except (TypeError, ValueError):
            raise ParamError(f"{self.title}: {value!r} is not a valid {self.kind}") from None
        if self.kind in ("int", "float"):
            if self.min is not None and v < self.min:
                raise ParamError(f"{self.title} must be at least {self.min} (got {v})")
            if self.max is not None and v > self.max:
                raise ParamError(f"{self.title} must be at most {self.max} (got {v})")
        return v

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "default": self.default,
            "help": self.help,
            "min": self.min,
            "max": self.max,
            "choices": list(self.choices),
            "log": self.log,
            "label": self.title,
        }


@dataclass(frozen=True)
class Schema:
    params: tuple[Param, ...] = field(default_factory=tuple)

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    def resolve(self, values: dict | None) -> dict:
        """Fill defaults, coerce types and reject unknown names."""
        values = dict(values or {})
        known = {p.name for p in self.params}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ParamError(
                f"unknown parameter(s) {', '.join(unknown)}; expected some of: {', '.join(sorted(known)) or '(none)'}"
            )
        return {p.name: p.coerce(values.get(p.name)) for p in self.params}

    def __iter__(self):
        return iter(self.params)
