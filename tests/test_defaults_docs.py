"""What the README and Methods say about SNH is what the benches measured."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_methods_guide_states_snh_against_its_grid_and_the_best_baseline():
    from ui.methods import GUIDE, SNH_EVIDENCE

    rows = [r for r in GUIDE if r[3] == "snh"]
    assert rows and rows[0][2] == SNH_EVIDENCE
    assert "IDENTITY@ParamSelect" in SNH_EVIDENCE and "UG, AG and PrivTree" in SNH_EVIDENCE
    # the figures quoted are the ones BENCHMARKS.md's snh section records
    bench = (ROOT / "BENCHMARKS.md").read_text()
    start = bench.index("\n### snh — ")
    snh = bench[start : re.search(r"\n#{2,3} ", bench[start + 5 :]).start() + start + 5]
    for figure in re.findall(r"\d\.\d\d-\d\.\d\d", SNH_EVIDENCE):
        lo, hi = figure.split("-")
        assert lo in snh and hi in snh, figure


def test_readme_states_snhs_measured_time_and_its_load():
    readme = (ROOT / "README.md").read_text()
    sentence = readme[readme.index("*SNH* trains") :][:400]
    assert "about 15 s" not in sentence  # a round figure, not the measured median
    assert "median" in sentence and "load" in sentence
    bench = (ROOT / "BENCHMARKS.md").read_text()
    seconds = re.findall(r"(\d+(?:\.\d)?) s at a load", sentence)
    assert seconds and all(f"{s} s" in bench for s in seconds)
