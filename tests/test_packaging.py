"""The project installs as a package (``pip install -e .``) whose ``heatmap`` command is the engine's command line,
with the dependencies the README's install command reads: ``pyproject.toml`` and ``requirements.txt`` list the
same packages with the same version ranges, each once."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TEST_SECTION = "# tests and lint"  # requirements.txt's heading of what only the tests and the lint need


def _requirements_txt() -> tuple[list[str], list[str]]:
    """The runtime and the test requirements of requirements.txt, comments dropped."""
    runtime, test = [], []
    part = runtime
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() == TEST_SECTION:
            part = test
        elif line.split("#")[0].strip():
            part.append(line.split("#")[0].strip())
    return runtime, test


def _by_name(specs: list[str]) -> dict[str, tuple[frozenset, str]]:
    reqs = [Requirement(s) for s in specs]
    names = [canonicalize_name(r.name) for r in reqs]
    assert len(names) == len(set(names)), f"listed twice: {sorted(n for n in names if names.count(n) > 1)}"
    return {n: (frozenset(r.extras), str(r.specifier)) for n, r in zip(names, reqs, strict=True)}


def test_requirements_txt_lists_every_package_once():
    runtime, test = _requirements_txt()
    assert runtime and test
    _by_name(runtime + test)


def test_pyproject_and_requirements_txt_list_the_same_runtime_packages():
    runtime, _ = _requirements_txt()
    assert _by_name(PYPROJECT["project"]["dependencies"]) == _by_name(runtime)
    assert {"numpy", "streamlit", "opendp", "colorcet"} <= set(_by_name(runtime))


def test_the_test_extra_holds_the_test_and_lint_packages():
    _, test = _requirements_txt()
    assert _by_name(PYPROJECT["project"]["optional-dependencies"]["test"]) == _by_name(test)
    assert {"pytest", "ruff"} <= set(_by_name(test))


def test_the_heatmap_command_is_the_engines_command_line(capsys):
    assert PYPROJECT["project"]["scripts"] == {"heatmap": "engine.__main__:main"}
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["engine*"]  # what the CLI needs
    from engine.__main__ import main

    assert main(["mechanisms"]) == 0
    assert "identity" in capsys.readouterr().out


def test_the_package_version_is_the_engines():
    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "engine.__version__"}
