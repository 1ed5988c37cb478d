"""Comments and docstrings say why the code is as it is, never what it used to be, checked on the source.

Every comment (:mod:`tokenize`) and docstring (:mod:`ast`) of the engine, the dashboard (``ui/``, ``pages/``,
``app.py``), the scripts and the tests is scanned, and every test's name. The code's history is in git; in the
code it goes stale and makes the reader reconstruct a past they cannot see. Rules:

* no phrase that tells history ("used to show", "no longer", "the old formula", "the former default", "before
  the fix", "an earlier version", "as before", "is now the default");
* no issue reference (the word "issue", an issue number ``#12``), no commit hash;
* no test named after what the code used to do (``..._the_old_formula``, ``..._former_default_...``);
* no pointer to reading material outside the repository (the reference notes, ``papers/...``): a paper is cited
  by its reference, and what a note restated is stated where it is needed.

A phrase that matches but is not history ("a line no longer than 120 characters") goes in ``ALLOWED``, with
the file it is in and the reason.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    [p for d in ("engine", "ui", "pages", "scripts", "tests") for p in (ROOT / d).rglob("*.py")] + [ROOT / "app.py"]
)
HISTORY = re.compile(
    r"\bused to (?:be|show|draw|sum|rerun|read|have|take|list|book|give|run|print|count)\b"
    r"|\bno longer\b|\bany ?more\b|\bpreviously\b|\bformerly\b"
    r"|\b(?:the|an?|this) (?:old|former|earlier|previous) (?:code|formula|form|default|key|format|estimator|estimate"
    r"|claim|sizes?|floor|behaviou?r|rule|version|threshold|target)s?\b"
    r"|\bearlier versions?\b|\bas before\b|\b(?:before|after) (?:the|this) (?:fix|change|issue)\b"
    r"|\bfixed (?:in|by) (?:commit|version|PR|#)|\bcode before\b|\b(?:is|are) now (?:the|a|an)\b"
    r"|\bnow the default\b|\b(?:default|threshold) (?:is|was) now\b|\bis the default now\b|\bwas the default\b"
    r"|\((?:it )?(?:was|were) \w|\(before,",
    re.IGNORECASE,
)
# an issue's number: up to five digits (a colour such as #440154 has six)
ISSUE = re.compile(
    r"\bissues?\b|(?<![&\w])#\d{1,5}\b|\bcommit [0-9a-f]{7,40}\b|\b(?:PR|pull request) #?\d+", re.IGNORECASE
)
OUTSIDE = re.compile(r"REFERENCE_NOTES|shared/papers|\bpapers/\w")
TEST_NAME = re.compile(r"_(?:old|former|legacy)(?:_|$)|_issue_?\d|regression|_used_to_")
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/test_comments.py", ""): "this file names the phrases it forbids",
}


def texts(path: Path):
    """``(line, text)`` of every comment and docstring in ``path``."""
    src = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc


def named_tests(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            yield node.lineno, node.name


def allowed(rel: str, text: str) -> bool:
    return any(rel == f and phrase in text for f, phrase in ALLOWED)


def hits(pattern: re.Pattern) -> list[str]:
    out = []
    for p in FILES:
        rel = p.relative_to(ROOT).as_posix()
        for line, text in texts(p):
            flat = " ".join(text.split())  # a phrase may wrap across lines
            if not allowed(rel, flat):
                out += [f"{rel}:{line}: {m.group(0)!r}" for m in pattern.finditer(flat)]
    return out


def test_the_scan_sees_comments_docstrings_and_names(tmp_path):
    """The rules are not vacuous: they see a comment, a wrapped docstring and a test's name."""
    f = tmp_path / "x.py"
    f.write_text(
        '"""Module."""\n# the map used to show\n'
        'def test_the_old_formula():\n    """Kept at\n    the old\n    formula (issue 7)."""\n'
    )
    found = list(texts(f))
    assert (2, "# the map used to show") in found and any("formula (issue 7)" in t for _, t in found)
    assert [n for _, n in named_tests(f)] == ["test_the_old_formula"]
    assert any(HISTORY.search(" ".join(t.split())) for _, t in found if "Kept at" in t)
    assert OUTSIDE.search("see REFERENCE_NOTES section 6") and OUTSIDE.search("(papers/ghazi2023_*)")
    assert ISSUE.search("formula (issue 7)") and ISSUE.search("see #123") and not ISSUE.search("&#34; #fde725")
    assert TEST_NAME.search("test_the_old_formula") and not TEST_NAME.search("test_a_threshold_holds_in_the_fold")
    assert not HISTORY.search("parameters fixed in advance (before zipfile reads them); how slow a run is now than")
    assert not HISTORY.search("a value no larger than 650 lines; used to size a grid; the seed was drawn")
    assert len(FILES) > 250 and all(p.exists() for p in FILES)


def test_no_comment_or_docstring_tells_history():
    assert hits(HISTORY) == []


def test_no_issue_number_or_commit_in_comments_and_docstrings():
    assert hits(ISSUE) == []


def test_no_comment_or_docstring_points_to_notes_outside_the_repository():
    assert hits(OUTSIDE) == []


def test_no_test_is_named_after_history():
    bad = [
        f"{p.relative_to(ROOT).as_posix()}:{line}: {name}"
        for p in FILES
        if p.name.startswith("test_")
        for line, name in named_tests(p)
        if TEST_NAME.search(name)
    ]
    assert bad == []


@pytest.mark.parametrize("key", sorted(ALLOWED))
def test_every_allowance_is_still_needed(key):
    """An allowance that spares no comment or docstring of its file is taken off ``ALLOWED``."""
    rel, phrase = key
    spared = [
        text
        for _, text in texts(ROOT / rel)
        if phrase in " ".join(text.split()) and any(r.search(" ".join(text.split())) for r in (HISTORY, ISSUE, OUTSIDE))
    ]
    assert spared
