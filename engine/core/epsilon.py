"""The one rule for a run's privacy budget ε, and for the ε a step of it spends.

Every door checks a run's ε here and nowhere else: the configuration (:class:`engine.run.execution.RunConfig`),
the planner, every mechanism, the command line and the dashboard's links. A widget's range (the
dashboard's ε slider) is a choice of presentation: a value this rule accepts is accepted everywhere.
A mechanism that cannot honour part of this range says so as a constraint of its own parameters, with
its reason, never with a second range for ε.
"""

from __future__ import annotations

import math

from .errors import ParamError

EPS_MIN, EPS_MAX = 1e-4, 100.0


def check_epsilon(value) -> float:
    """``value`` as a run's ε: a finite number in [:data:`EPS_MIN`, :data:`EPS_MAX`]; else a ParamError whose
    message is the same at every door."""
    try:
        eps = float(value)
    except (TypeError, ValueError):
        raise ParamError(f"epsilon {str(value).strip()!r} is not a number") from None
    if not math.isfinite(eps):
        raise ParamError(f"epsilon must be a finite number (got {value})")
    if not EPS_MIN <= eps <= EPS_MAX:
        raise ParamError(f"epsilon must be between {EPS_MIN:g} and {EPS_MAX:g} (got {value})")
    return eps


def check_spent(value, what: str = "a step's epsilon") -> float:
    """``value`` as the ε one step of a run spends, or one booked release: a finite number, 0 allowed (a step
    that spends nothing, a non-private run)."""
    eps = float(value)
    if not (math.isfinite(eps) and eps >= 0):
        raise ParamError(f"{what} must be a finite number >= 0 (got {value})")
    return eps
