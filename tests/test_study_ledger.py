"""The ledger keeps a study's plan: its ε is reserved, its products' releases book against the reservation,
releases outside it cannot crowd it out, and cancelling returns what was not spent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.errors import ParamError
from engine.run import RunConfig
from engine.run.bookkeeping import Bookkeeper, BudgetStore, Refused, fingerprint_source
from engine.run.planning import _study_file as F
from engine.run.planning import _study_plan as S

ROOT = Path(__file__).resolve().parents[1]
STUDY = """
[study]
dataset = "synthetic:polycentric"
users = 20000
name = "ledger test"
[[product]]
name = "map"
kind = "map"
depth = 5
target = 20
mechanisms = ["identity"]
[[product]]
name = "monthly"
kind = "map"
depth = 4
target = 40
repeat = 2
mechanisms = ["identity"]
"""


def spent() -> float:
    return BudgetStore().spent(fingerprint_source("synthetic:polycentric", {}))


def release(mechanism="identity", epsilon=1.0, depth=4) -> RunConfig:
    return RunConfig(dataset="synthetic:polycentric", mechanism=mechanism, epsilon=epsilon, depth=depth, mode="release")


def test_a_reservation_holds_its_epsilon_until_its_releases_are_made(monkeypatch):
    monkeypatch.setenv("HEATMAP_RELEASE_LIMIT", "1.0")
    plan = S.make_study_plan(F.parse_study(STUDY))
    doc = plan.to_dict()
    total = doc["total_epsilon"]
    assert 0 < total < 1
    S.reserve(plan)
    assert spent() == pytest.approx(total)
    with pytest.raises(ParamError, match="reserved already"):
        S.reserve(plan)

    # a release outside the study that would fit the limit without the reservation is refused with it
    outside = round(1.0 - total + 0.01, 6)
    with pytest.raises(Refused):
        Bookkeeper().book(release(epsilon=outside))
    Bookkeeper().book(release(epsilon=round(1.0 - total, 6)))  # what the reservation leaves
    assert spent() == pytest.approx(1.0)

    # the study's releases are booked against it, though the dataset is at its limit
    monthly = {p["name"]: p for p in doc["products"]}["monthly"]
    bk = Bookkeeper(reserved=(plan.study.key, "monthly"))
    first = bk.book(release(epsilon=monthly["epsilon"]))
    assert spent() == pytest.approx(1.0)
    bk.unbook(first)  # a run that published nothing: its release is held again
    assert [h.used for h in S.held(plan.study) if h.product == "monthly"] == [0]
    bk.book(release(epsilon=monthly["epsilon"]))
    bk.book(release(epsilon=monthly["epsilon"]))
    with pytest.raises(ParamError, match="all 2 release"):
        bk.book(release(epsilon=monthly["epsilon"]))
    with pytest.raises(ParamError, match="spends ε"):
        Bookkeeper(reserved=(plan.study.key, "map")).book(release(epsilon=1.0, depth=5))
    assert spent() == pytest.approx(1.0)

    # cancelling returns the map's unspent ε; the releases made stay booked
    map_eps = {p["name"]: p for p in doc["products"]}["map"]["epsilon"]
    assert S.cancel(plan.study) == pytest.approx(map_eps)
    assert spent() == pytest.approx(1.0 - map_eps)
    assert S.held(plan.study) == []


def test_a_reservation_past_the_limit_is_refused_and_books_nothing(monkeypatch):
    monkeypatch.setenv("HEATMAP_RELEASE_LIMIT", "0.05")
    plan = S.make_study_plan(F.parse_study(STUDY))
    with pytest.raises(Refused):
        S.reserve(plan)
    assert spent() == 0 and S.held(plan.study) == []


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_the_command_line_reserves_releases_and_cancels(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY, encoding="utf-8")
    p = _cli("release", "--study", str(path), "--product", "monthly", "--out", str(tmp_path / "r0"))
    assert p.returncode == 2 and "reserve the study's plan first" in p.stderr
    p = _cli("plan", "--study", str(path), "--reserve", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["reserved"] == pytest.approx(doc["total_epsilon"]) and spent() == pytest.approx(doc["total_epsilon"])
    monthly = {q["name"]: q for q in doc["products"]}["monthly"]
    for i in (1, 2):
        p = _cli("release", "--study", str(path), "--product", "monthly", "--out", str(tmp_path / f"r{i}"))
        assert p.returncode == 0, p.stderr
        manifest = json.loads((tmp_path / f"r{i}" / "manifest.json").read_text())
        assert manifest["parameters"]["epsilon"] == monthly["epsilon"] and manifest["mechanism"]["key"] == "identity"
    p = _cli("release", "--study", str(path), "--product", "monthly", "--out", str(tmp_path / "r3"))
    assert p.returncode == 2 and "all 2 release(s)" in p.stderr
    assert spent() == pytest.approx(doc["total_epsilon"])
    p = _cli("plan", "--study", str(path), "--cancel")
    assert p.returncode == 0, p.stderr
    left = doc["total_epsilon"] - 2 * monthly["epsilon"]
    assert json.loads(p.stdout)["returned_epsilon"] == pytest.approx(left)
    assert spent() == pytest.approx(2 * monthly["epsilon"])
