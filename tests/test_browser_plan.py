"""The planner in a real browser: plan a release, take the suggested ε, release, and find the release's own
stated margin where the plan said it would be."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import READY, Watch, save

pytestmark = pytest.mark.browser

FACTOR = 1.25  # the planner's promise for a closed-form mechanism (BENCHMARKS.md, "plan")


def _number(text: str) -> float:
    return float(re.search(r"±\s*([0-9][0-9,]*\.?[0-9]*)", text).group(1).replace(",", ""))


def test_plan_then_release_at_the_suggested_epsilon(page, app_url, tmp_path):
    watch = Watch(page)
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(app_url + "/?ds=synthetic:coastal&d.n=4000&res=32&mode=release&eps=1")
    page.wait_for_selector(READY, timeout=60_000)
    page.wait_for_selector("text=State the number of users", timeout=60_000)
    page.get_by_role("spinbutton", name="Users (a public bound you state)").fill("4000")
    page.keyboard.press("Enter")
    page.wait_for_selector(READY, timeout=60_000)
    page.get_by_role("spinbutton", name="Target ± per cell (people)").fill("4")
    page.keyboard.press("Enter")
    page.wait_for_selector(READY, timeout=60_000)
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_selector("text=Predicted 95 % margin per cell", timeout=120_000)
    page.wait_for_selector(READY, timeout=120_000)
    predicted_now = _number(page.locator('[data-testid="stMetricValue"]').first.inner_text())
    suggestion = page.get_by_role("button", name=re.compile(r"Use ε = "))
    eps = float(re.search(r"Use ε = ([0-9.]+)", suggestion.inner_text()).group(1))
    assert predicted_now == pytest.approx(2.9957, rel=0.01)  # identity at eps 1: ln(20), to 3 figures
    save(page, tmp_path, "plan_panel")
    suggestion.click()
    page.wait_for_selector(READY, timeout=60_000)
    page.click(".st-key-run_explore button")
    page.wait_for_selector("text=Stated 95 % margin per cell", timeout=120_000)
    page.wait_for_selector(READY, timeout=60_000)
    stated = _number(page.get_by_text("Stated 95 % margin per cell").first.locator("xpath=..").inner_text())
    assert stated <= 4.0 * FACTOR and 4.0 / FACTOR <= stated  # the target the plan was asked for
    assert stated == pytest.approx(2.9957 / eps, rel=0.01)  # and exactly what it predicted at that epsilon
    save(page, tmp_path, "plan_release")
    watch.check()
