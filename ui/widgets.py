"""Widgets built from typed parameter schemas (:class:`engine.core.params.Param`).

A mechanism or dataset source that lands later gets its controls from its
``params`` tuple; nothing here names a particular mechanism.
"""

from __future__ import annotations

import math
from typing import Any

import streamlit as st

from engine.core.epsilon import check_epsilon
from engine.core.errors import EngineError
from engine.core.params import Param

from . import state

# the ε slider's stops: a choice of presentation. A link or a setting may hold any ε the engine's rule accepts
# (engine.core.epsilon); the slider then shows that value among its stops
EPS_GRID = (0.01, 0.015, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0)


def log_grid(lo: float, hi: float, extra=()) -> list[float]:
    """A 1-2-5 series between ``lo`` and ``hi`` (inclusive), plus ``extra`` values."""
    out = {float(lo), float(hi)}
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = float(f"{m * 10.0**e:.12g}")
            if lo <= v <= hi:
                out.add(v)
    out.update(float(x) for x in extra if x is not None and lo <= float(x) <= hi)
    return sorted(out)


def param_widget(p: Param, key: str, url_name: str | None = None, container=None) -> tuple[Any, str | None]:
    """Render the widget for ``p``; return (coerced value, error message or None)."""
    c = container or st
    state.seed(key, p.default, url_name, coerce=p.coerce_remote)
    label, help_ = p.title.capitalize(), p.help or None
    try:
        if p.kind == "bool":
            raw = c.toggle(label, **state.bind(key), help=help_)
        elif p.kind == "choice":
            raw = c.selectbox(label, list(p.choices), **state.bind(key), help=help_)
        elif p.kind == "str":
            raw = c.text_input(label, **state.bind(key), help=help_)
        elif p.kind == "float" and p.log and p.min is not None and p.min > 0 and p.max is not None:
            opts = log_grid(p.min, p.max, (p.default, state.get(key)))
            if state.get(key) not in opts:
                state.put(key, min(opts, key=lambda v: abs(math.log(v / float(p.default or opts[0])))))
            raw = c.select_slider(label, opts, **state.bind(key), help=help_, format_func=lambda v: f"{v:g}")
        elif p.kind == "float":
            raw = c.number_input(
                label,
                min_value=None if p.min is None else float(p.min),
                max_value=None if p.max is None else float(p.max),
                step=_float_step(p),
                format="%g",
                **state.bind(key),
                help=help_,
            )
        else:  # int
            step = 1
            if p.log and isinstance(p.default, int) and p.default >= 100:
                step = 10 ** (len(str(abs(p.default))) - 2)
            raw = c.number_input(
                label,
                min_value=None if p.min is None else int(p.min),
                max_value=None if p.max is None else int(p.max),
                step=step,
                **state.bind(key),
                help=help_,
            )
    except Exception as exc:  # a stale value of the wrong type: reset to the default once
        state.put(key, p.default)
        return p.default, f"{p.title}: {exc}"
    try:
        return p.coerce_remote(raw), None
    except EngineError as exc:
        return p.default, str(exc)


def _float_step(p: Param) -> float:
    if p.min is not None and p.max is not None and p.max > p.min:
        return float(f"{(p.max - p.min) / 100:.1g}")
    d = abs(float(p.default or 1.0))
    return float(f"{10 ** math.floor(math.log10(d)) / 10:.1g}") if d > 0 else 0.1


def schema_widgets(params: tuple[Param, ...], prefix: str, url_prefix: str, container=None) -> tuple[dict, list[str]]:
    """Widgets for a whole schema; returns (values, errors)."""
    values, errors = {}, []
    for p in params:
        if any(values.get(other, v) != v for other, v in p.shown_if):  # irrelevant under the others' values
            values[p.name] = p.default
            continue
        v, err = param_widget(p, f"{prefix}.{p.name}", f"{url_prefix}.{p.name}", container)
        values[p.name] = v
        if err:
            errors.append(err)
    return values, errors


def non_default(params: tuple[Param, ...], values: dict, url_prefix: str) -> dict:
    """URL entries for the values that differ from their defaults (keeps links short)."""
    return {
        f"{url_prefix}.{p.name}": values[p.name] for p in params if p.name in values and values[p.name] != p.default
    }


# --------------------------------------------------------------- run controls
def _eps(raw) -> float:
    """A link's ε, checked by the engine's one rule (:func:`engine.core.epsilon.check_epsilon`)."""
    return check_epsilon(str(raw).strip())


def epsilon_widget(key: str = "cfg.eps", url_name: str = "eps", container=None, label="Privacy budget ε") -> float:
    c = container or st
    state.seed(key, 1.0, url_name, coerce=_eps)
    opts = sorted(set(EPS_GRID) | {float(state.get(key))})
    return c.select_slider(
        label,
        opts,
        **state.bind(key),
        format_func=lambda v: f"{v:g}",
        help=f"Smaller ε = stronger privacy and more noise. Log scale from {EPS_GRID[0]:g} to {EPS_GRID[-1]:g}.",
    )


def _nonneg_int(raw, max_value: int = 2**31 - 1) -> int:
    """A URL's integer: digits only (no 1e30, no 2.5), within the widget's range (never clamped silently)."""
    text = str(raw).strip()
    if not text.isdigit():
        raise ValueError("expected a non-negative whole number")
    v = int(text)
    if v > max_value:
        raise ValueError(f"at most {max_value:,}")
    return v


def int_widget(label, key, url_name, default, container=None, help=None, step=1, max_value=2**31 - 1) -> int:
    c = container or st
    state.seed(key, default, url_name, coerce=lambda raw: _nonneg_int(raw, max_value))
    return int(c.number_input(label, min_value=0, max_value=max_value, step=step, **state.bind(key), help=help))
