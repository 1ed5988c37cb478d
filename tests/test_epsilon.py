"""One rule for a run's ε (:mod:`engine.core.epsilon`), the same at every door.

The configuration, the planner, the mechanisms, the command line and the dashboard's links all accept
[1e-4, 100] and refuse what lies outside with one message; the ε slider's stops are presentation (a link
with ε = 50 is accepted and shown). The rule is defined once: no other module compares an ε with a number
to refuse it.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import numpy as np
import pytest

from engine.core.epsilon import EPS_MAX, EPS_MIN, check_epsilon
from engine.core.errors import ParamError

ROOT = Path(__file__).resolve().parents[1]
RULE = "engine/core/epsilon.py"
ACCEPTED = (1e-4, 100.0)
REFUSED = (1e-5, 101.0)


def _sources():
    files = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"]
    return [*files, *ROOT.glob("scripts/*.py")]


def _names_epsilon(e: ast.expr) -> bool:
    return bool(re.search(r"(^|[._(])(eps|epsilon)(_[a-z]+)?\)?$", ast.unparse(e)))


def _is_number(e: ast.expr) -> bool:
    if isinstance(e, ast.UnaryOp):
        e = e.operand
    if isinstance(e, ast.Constant):
        return isinstance(e.value, (int, float)) and not isinstance(e.value, bool)
    return isinstance(e, ast.Name) and e.id.isupper()  # a module constant such as EPS_MAX


def _refuses(node: ast.AST) -> bool:
    """A raise of an input error (an internal invariant raises something else)."""
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    name = exc.attr if isinstance(exc, ast.Attribute) else getattr(exc, "id", "")
    return name in ("ParamError", "ValueError", "TypeError", "ArgumentTypeError")


def epsilon_checks(tree: ast.AST) -> list[int]:
    """Lines where an ``if`` that raises compares an ε (a name or attribute ending in eps / epsilon, or any value
    inside a parser of ε: a function named eps, epsilon, check_eps...) with a number or an upper-case constant."""
    out = []
    in_eps_function = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and re.fullmatch(r"_?(check_)?eps(ilon)?", f.name)
        for n in ast.walk(f)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        if not any(_refuses(b) for stmt in node.body for b in ast.walk(stmt)):
            continue
        for c in ast.walk(node.test):
            if isinstance(c, ast.Compare):
                ops = [c.left, *c.comparators]
                about_eps = any(_names_epsilon(o) for o in ops) or id(c) in in_eps_function
                if about_eps and any(_is_number(o) for o in ops):
                    out.append(c.lineno)
                    break
    return out


def test_the_rule_is_defined_once():
    found = {
        p.relative_to(ROOT).as_posix(): lines for p in _sources() if (lines := epsilon_checks(ast.parse(p.read_text())))
    }
    assert set(found) == {RULE}, f"ε compared with a number to refuse it outside {RULE}: {found}"


def test_the_check_finds_a_second_rule():
    """The scan above sees the forms a second rule takes (a copied check, a range in a widget's parser)."""
    copied = "def _check_eps(epsilon):\n    eps = float(epsilon)\n    if not (eps > 0):\n        raise ValueError\n"
    widget = "def _eps(raw):\n    v = float(raw)\n    if not EPS_MIN <= v <= EPS_MAX:\n        raise ValueError\n"
    capped = "def run(self, epsilon):\n    if epsilon > 50:\n        raise ParamError('too large')\n"
    for src in (copied, widget, capped):
        assert epsilon_checks(ast.parse(src)), src
    assert not epsilon_checks(ast.parse("def f(eps):\n    return 2 / eps if eps > 0 else 0\n"))


def _refusals(value) -> dict[str, str]:
    """The message each door gives for ``value`` ('' where it is accepted)."""
    from engine.__main__ import _epsilon
    from engine.mechanisms import RunContext, get
    from engine.run import RunConfig
    from ui.widgets import _eps

    out = {}

    def door(name, call):
        try:
            call()
            out[name] = ""
        except (ParamError, argparse.ArgumentTypeError) as exc:
            out[name] = str(exc)

    door("rule", lambda: check_epsilon(value))
    door("config", lambda: RunConfig(dataset="synthetic:polycentric", mechanism="identity", epsilon=value).validate())
    door("command line", lambda: _epsilon(repr(value)))
    door("link", lambda: _eps(repr(value)))
    ds, dom = _tiny()
    for key, params in (("identity", {}), ("hierarchical", {}), ("adaptive_hh", {}), ("snh", _SNH)):
        cls = get(key)
        ctx = RunContext(rng=np.random.default_rng(0))
        door(key, lambda cls=cls, ctx=ctx, params=params: cls().run(ds, dom, value, cls.schema().resolve(params), ctx))
    cls = get("bitpush_mean_ldp")
    ctx = RunContext(rng=np.random.default_rng(0))
    door("bitpush_mean_ldp", lambda: cls().run(ds, dom, value, cls.schema().resolve({"min_cohort": 1}), ctx))
    door("plan", lambda: _plan(value))
    return out


_SNH = {"preset": "custom", "depth": 1, "width": 8, "epochs": 1, "max_steps": 2, "batch_size": 4096, "k": 1}


def _tiny():
    from engine.core.grid import Domain
    from engine.data.dataset import Dataset, DatasetMeta

    side = 8000.0
    rng = np.random.default_rng(2)
    xy = rng.uniform(1, side - 1, (300, 2))
    deg = 1.0 / 111_320.0
    meta = DatasetMeta(name="eps", source="test", synthetic=True, bbox=(0.0, 0.0, side * deg, side * deg))
    crs = "+proj=aeqd +lat_0=0 +lon_0=0 +datum=WGS84 +units=m +no_defs"
    ds = Dataset(xy=xy, lonlat=xy * deg, crs=crs, meta=meta, value=rng.integers(0, 100, 300).astype(float))
    return ds, Domain(0.0, 0.0, side, 3)


def _plan(value):
    from engine.run.planning import _forecast as P

    P.predict("identity", value, P.default_frame(), P.stated_users(500), depth=3)


@pytest.mark.parametrize("value", ACCEPTED)
def test_the_ends_of_the_range_are_accepted_at_every_door(value):
    got = _refusals(value)
    assert got == dict.fromkeys(got, "")


@pytest.mark.parametrize("value", REFUSED)
def test_outside_the_range_every_door_refuses_with_the_same_message(value):
    got = _refusals(value)
    expected = f"epsilon must be between {EPS_MIN:g} and {EPS_MAX:g} (got {value})"
    assert got == dict.fromkeys(got, expected)


def test_the_mechanisms_share_of_epsilon_is_checked_when_the_run_is_configured():
    """ε spent on a DP frame or a DP count leaves the mechanism the rest, which the same rule checks: a
    configuration whose shares leave less than the smallest ε is refused before it runs, saying why."""
    from engine.run import RunConfig

    base = dict(dataset="synthetic:polycentric", mechanism="identity", frame="dp", frame_share=0.1)
    with pytest.raises(ParamError, match=r"shares leave the mechanism ε = 9e-05"):
        RunConfig(epsilon=EPS_MIN, **base).validate()
    RunConfig(epsilon=EPS_MIN / 0.8, **base).validate()


def test_a_link_with_epsilon_50_is_accepted_and_shown():
    from tests.support.app import open_app

    at = open_app(eps="50", baselines="0")
    assert not [w.value for w in at.warning if "eps" in w.value], [w.value for w in at.warning]
    slider = next(s for s in at.select_slider if s.label == "Privacy budget ε")
    assert slider.value == 50.0


def test_a_link_outside_the_range_is_refused_with_the_rules_message():
    from tests.support.app import open_app

    at = open_app(eps="101", baselines="0")
    assert any("epsilon must be between 0.0001 and 100 (got 101)" in w.value for w in at.warning)


def test_randomized_response_keeps_noise_at_any_epsilon():
    """Seeded randomized response: at epsilon 50 the keep probability rounds to 1.0, and without the cap a
    draw below 1.0 would keep every report; with it, numpy's last draw still changes a report."""
    from engine.core.noise.samplers import LAST_DRAW, randomized_response, randomized_response_kary, rr_keep_probability

    class LastDraw:  # a generator whose every uniform draw is numpy's largest
        def random(self, shape):
            return np.full(shape, LAST_DRAW)

        def integers(self, lo, hi, shape):
            return np.zeros(shape, dtype=np.int64)

    bits = np.ones(4, dtype=bool)
    assert not randomized_response(LastDraw(), bits, 50.0).any()
    assert (randomized_response_kary(LastDraw(), np.full(4, 2), 4, 100.0) != 2).all()
    # below eps 37.4 the cap changes nothing: the same draws give the same reports
    many = np.ones(1000, dtype=bool)
    for eps in (1.0, 30.0):
        plain = many ^ (np.random.default_rng(0).random(many.shape) >= rr_keep_probability(eps))
        assert np.array_equal(randomized_response(np.random.default_rng(0), many, eps), plain)
