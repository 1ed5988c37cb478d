"""The Study panel of Release mode: a study planned in the background with progress and Cancel, its table and
totals, its ε reserved in the dataset's ledger, a product released against the reservation, and the rest
returned."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from engine.run.bookkeeping import BudgetStore, fingerprint_source
from tests.support.app import APP, SMALL, rerun_until

STUDY = """
[study]
dataset = "synthetic:polycentric"
users = 20000
[[product]]
name = "city map"
kind = "map"
depth = 5
target = 20
mechanisms = ["identity", "hdmm"]
[[product]]
name = "monthly"
kind = "map"
depth = 4
target = 40
repeat = 3
mechanisms = ["identity"]
"""
SLOW = STUDY.replace('["identity", "hdmm"]', '["identity", "privtree", "ug", "hierarchical"]').replace(
    "depth = 5", "depth = 9"
)


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({**SMALL, "mode": "release"})
    at.run()
    return at


def _buttons(at: AppTest) -> set:
    return {b.key for b in at.button}


def _spent() -> float:
    return BudgetStore().spent(fingerprint_source("synthetic:polycentric", {}))


def test_the_study_panel_plans_reserves_and_cancels():
    at = _app()
    at.text_area(key="study.text").set_value(STUDY).run()
    at.button(key="study.go").click().run()
    rerun_until(at, lambda a: "study.reserve" in _buttons(a), "the study plan", poll=0.5)
    assert not at.exception, [e.value for e in at.exception]
    df = at.dataframe[-1].value
    assert list(df["product"]) == ["city map", "monthly"]
    assert list(df["mechanism"]) == ["identity", "identity"]
    total = float(next(m for m in at.metric if m.label == "Total ε").value)
    assert total == pytest.approx(float((df["ε each"] * df["releases"]).sum()))
    assert _spent() == 0
    at.button(key="study.reserve").click().run()
    assert _spent() == pytest.approx(total)
    assert "still held" in "\n".join(str(s.value) for s in at.success)
    # a product released from the panel is booked against the reservation: the total stays what was reserved
    at.button(key="study.release.monthly").click().run()
    booked = "booked against the study's reservation"
    rerun_until(at, lambda a: booked in "\n".join(str(s.value) for s in a.success), "the study's run", poll=0.5)
    assert not at.exception, [e.value for e in at.exception]
    assert _spent() == pytest.approx(total)
    monthly = float(df["ε each"][1])
    at.button(key="study.unreserve").click().run()
    assert _spent() == pytest.approx(monthly)  # the release made stays booked, the rest returns
    assert "returned to the dataset" in "\n".join(str(s.value) for s in at.info)


def test_the_study_panel_cancels_a_plan_and_tells_a_bad_file():
    at = _app()
    at.text_area(key="study.text").set_value(STUDY.replace('"hdmm"', '"nosuch"')).run()
    at.button(key="study.go").click().run()
    assert "unknown mechanism" in "\n".join(str(e.value) for e in at.error) and "nosuch" in at.error[0].value
    assert not at.exception
    at.text_area(key="study.text").set_value(SLOW).run()
    at.button(key="study.go").click().run()
    assert "study.cancel_plan" in _buttons(at)
    at.button(key="study.cancel_plan").click().run()
    rerun_until(at, lambda a: "study.cancel_plan" not in _buttons(a), "the plan's cancel", ceiling=60, poll=0.5)
    assert "cancelled" in "\n".join(str(i.value) for i in at.info)
    assert not at.exception
