"""The fast tier (``pytest -m "not slow and not browser"``) leaves out the tests tests/slow_tests.txt lists:
every entry there names a test the suite holds, so a renamed or removed test cannot leave the list stale."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import pytest_collection_modifyitems, slow_ids

TESTS = Path(__file__).parent


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_slow_entry_names_a_test_that_exists():
    ids = slow_ids()
    assert len(ids) > 50  # the list is the last full run's, not an empty file
    missing = []
    for nodeid in sorted(ids):
        file, _, rest = nodeid.partition("::")
        name = rest.split("::")[-1].split("[")[0]
        path = TESTS.parent / file
        if not path.exists() or name not in _functions(path):
            missing.append(nodeid)
    assert not missing, f"tests/slow_tests.txt names tests that do not exist: {missing[:5]}"


def test_listed_tests_are_marked_slow_and_others_are_not():
    listed = next(iter(slow_ids()))
    items = [SimpleNamespace(nodeid=n, marks=[]) for n in (listed, "tests/test_tiers.py::not_listed")]
    for it in items:
        it.add_marker = it.marks.append
    pytest_collection_modifyitems(None, items)
    assert [m.name for m in items[0].marks] == ["slow"] and items[1].marks == []
    assert pytest.mark.slow.name == "slow"
