"""The project's layout shows its architecture, checked on the source with :mod:`ast`.

The whole tree is scanned: the engine, the dashboard's ``ui/`` helpers, its ``pages/`` and ``app.py``.
Every import statement counts, the ones inside functions too: a lazy import still makes the
importing module depend on the imported one, and an import circle hidden in a function is still a
circle. Rules:

* no import circle anywhere (ui and pages included);
* ``engine/bench`` is imported only by the benchmarks themselves (the dashboard's, ``ui/benchmarks``, too) and the
  CLI (``engine/__main__.py``); nothing under ``engine/`` imports Playwright or starts the app;
* each layer imports only downward: core <- metrics, data <- mechanisms <- regions <- the run layer
  (``engine/run``);
* the engine never imports Streamlit, ``ui``, the pages or the app; ``ui`` never imports a page or the app;
* no module is longer than 650 lines and no function longer than 150, except the few listed in
  ``LONG`` with their reason;
* every ``from engine... import name`` (or ``ui...``) names a module that exists and a name it defines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 650
MAX_FUNCTION_LINES = 150
# what each layer may import (besides itself); anything above it may import it
LAYERS = {
    "engine.core": (),
    "engine.metrics": ("engine.core",),
    "engine.data": ("engine.core",),
    "engine.mechanisms": ("engine.core", "engine.metrics", "engine.data"),
    # regions: post-processing over any release (it reads the mechanisms' partitions)
    "engine.regions": ("engine.core", "engine.metrics", "engine.data", "engine.mechanisms"),
    "engine.run": ("engine.core", "engine.metrics", "engine.data", "engine.mechanisms", "engine.regions"),
}
BENCH_CLIENTS = ("engine.bench", "ui.benchmarks", "engine.__main__")
DASHBOARD = ("ui", "pages", "app")
# the few modules and functions allowed past the limits, with the reason
LONG: dict[str, str] = {
    "engine.metrics.emd:_primal_dual": "a numba-compiled min-cost-flow kernel: one primal-dual loop over a dozen "
    "work arrays; split, every piece would take them all and the compiled loop would lose its speed",
}


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    files = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"]
    for p in sorted(files):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (p, is_pkg)
    return out


MODULES = _modules()
TREES = {m: ast.parse(p.read_text(), filename=str(p)) for m, (p, _) in MODULES.items()}


def _base(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` statement reads from."""
    if node.level == 0:
        return node.module or ""
    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(mod: str) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every import in ``mod`` (name None for ``import x``); a name that is a
    submodule is reported as that module."""
    is_pkg = MODULES[mod][1]
    out = []
    for node in ast.walk(TREES[mod]):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(mod, is_pkg, node)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub, None) if sub in MODULES else (node.lineno, base, a.name))
    return out


def _engine_deps(mod: str) -> set[str]:
    return {m for _, m, _ in _imports(mod) if m in MODULES and m != mod}


def _defined(mod: str) -> set[str]:
    """Names bound at the top level of ``mod`` (inside if/try/with blocks too)."""
    names: set[str] = set()

    def visit(body):
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names.update(x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name))
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in n.names)
            elif isinstance(n, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                visit(n.body)
                visit(getattr(n, "orelse", []))
                visit(getattr(n, "finalbody", []))
                for h in getattr(n, "handlers", []):
                    visit(h.body)

    visit(TREES[mod].body)
    return names


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _within(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _engine(mod: str) -> bool:
    return _within(mod, "engine")


def _dashboard(mod: str) -> bool:
    return any(_within(mod, d) for d in DASHBOARD)


def _functions(tree: ast.AST, prefix: str = ""):
    """``(qualified name, lines)`` of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".")
        else:
            yield from _functions(node, prefix)


def test_the_checks_see_the_whole_tree():
    """The scan finds the engine's packages, the dashboard and their imports (so the rules below are not
    vacuous)."""
    assert {"engine.core.grid", "engine.metrics", "engine.data.registry", "engine.run.execution._runner"} <= set(
        MODULES
    )
    assert {"ui.jobs", "ui.uploads", "pages.explore", "app"} <= set(MODULES)
    assert "engine.core.grid" in _engine_deps("engine.metrics")
    assert "ui.session" in _engine_deps("ui.uploads") and "engine.run.server" in _engine_deps("ui.jobs")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert ("f.g", 2) in list(_functions(ast.parse("def f():\n    def g():\n        pass\n    return g\n")))


def test_no_import_circle_anywhere():
    graph = {m: _engine_deps(m) for m in MODULES}
    assert _cycles(graph) == [], "import circles (lazy imports included)"


def test_benchmarks_are_imported_only_by_benchmarks_and_the_cli():
    bad = [
        f"{m} imports {dep}"
        for m in MODULES
        if not any(_within(m, c) for c in BENCH_CLIENTS)
        for dep in _engine_deps(m)
        if _within(dep, "engine.bench")
    ]
    assert bad == []


def _drives_the_app(mod: str) -> list[str]:
    """Where ``mod`` imports Playwright or names the app's command (``streamlit`` or ``app.py`` as a string of its
    own, as in ``[python, "-m", "streamlit", "run", "app.py"]``)."""
    out = [f"{mod}:{line} imports {dep}" for line, dep, _ in _imports(mod) if dep.split(".")[0] == "playwright"]
    return out + [
        f"{mod}:{n.lineno} names {n.value!r}"
        for n in ast.walk(TREES[mod])
        if isinstance(n, ast.Constant) and n.value in ("streamlit", "app.py")
    ]


def test_nothing_in_the_engine_drives_the_dashboard():
    """The benchmarks that drive the real app in a browser live beside the dashboard (``ui/benchmarks``), the load
    scripts in ``scripts/``: the engine neither imports Playwright nor starts the app. The check finds both in
    the dashboard's benchmark (so it is not vacuous)."""
    assert {"imports", "names"} <= {d.split()[1] for d in _drives_the_app("ui.benchmarks.app")}
    assert [d for m in MODULES if _engine(m) for d in _drives_the_app(m)] == []


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_lower_layers_import_only_downward(layer):
    allowed = (layer, *LAYERS[layer])
    bad = [
        f"{m} imports {dep}"
        for m in MODULES
        if _within(m, layer)
        for dep in _engine_deps(m)
        if dep != "engine" and not any(_within(dep, a) for a in allowed)  # engine/__init__: the version only
    ]
    assert bad == []


def test_code_outside_a_room_of_the_run_layer_imports_from_its_face():
    """A room of the run layer (a package of ``engine/run``) is entered by its ``__init__``, which names what it
    offers: code outside the room (the engine, the dashboard, the scripts) never imports one of its modules, so
    the modules behind the face can move. Tests may import them (they patch internals)."""
    rooms = [m for m, (_, is_pkg) in MODULES.items() if is_pkg and m.startswith("engine.run.") and m.count(".") == 2]
    imports = {m: [dep for _, dep, _ in _imports(m)] for m in MODULES}
    for p in sorted(ROOT.glob("scripts/*.py")):  # absolute imports only: the scripts are not a package
        tree = ast.parse(p.read_text(), filename=str(p))
        imports[f"scripts.{p.stem}"] = [
            *(a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names),
            *(
                f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in MODULES else n.module
                for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module
                for a in n.names
            ),
        ]
    bad = [
        f"{m} imports {dep}"
        for m, deps in imports.items()
        for dep in deps
        for room in rooms
        if _within(dep, room) and dep != room and not _within(m, room)
    ]
    assert len(rooms) >= 5 and bad == []


def test_engine_never_imports_streamlit():
    bad = [
        f"{m}:{line}" for m in MODULES if _engine(m) for line, dep, _ in _imports(m) if dep.split(".")[0] == "streamlit"
    ]
    assert bad == []


def test_the_mechanisms_share_their_toolkit_through_its_face():
    """``engine.mechanisms.common``'s modules are private: every other module takes the toolkit's names from the
    package, whose ``__all__`` lists exactly the names it gathers."""
    toolkit = "engine.mechanisms.common"
    bad = [
        f"{m}:{line} imports {dep}"
        for m in MODULES
        if not _within(m, toolkit)
        for line, dep, _ in _imports(m)
        if _within(dep, toolkit) and dep != toolkit
    ]
    assert bad == []
    face = TREES[toolkit]
    gathered = {a.asname or a.name for n in face.body if isinstance(n, ast.ImportFrom) for a in n.names}
    listed = next(n.value for n in face.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__")
    assert {ast.literal_eval(e) for e in listed.elts} == gathered


def test_engine_never_imports_the_dashboard_and_ui_never_imports_a_page():
    bad = [f"{m} imports {dep}" for m in MODULES if _engine(m) for dep in _engine_deps(m) if _dashboard(dep)]
    bad += [
        f"{m} imports {dep}"
        for m in MODULES
        if _within(m, "ui")
        for dep in _engine_deps(m)
        if _within(dep, "pages") or dep == "app"
    ]
    assert bad == []


def test_the_exceptions_to_the_size_limits_are_few_and_still_needed():
    assert len(LONG) <= 4 and all(reason.strip() for reason in LONG.values())
    sizes = {m: len(p.read_text().splitlines()) for m, (p, _) in MODULES.items()}
    funcs = {f"{m}:{f}": n for m in MODULES for f, n in _functions(TREES[m])}
    stale = [k for k in LONG if not (sizes.get(k, 0) > MAX_LINES or funcs.get(k, 0) > MAX_FUNCTION_LINES)]
    assert stale == [], "listed as too long but no longer is: take it off LONG"


def test_no_module_over_650_lines():
    sizes = {m: len(p.read_text().splitlines()) for m, (p, _) in MODULES.items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES and m not in LONG} == {}


def test_no_function_over_150_lines():
    long = {
        f"{m}:{f}": n
        for m in MODULES
        for f, n in _functions(TREES[m])
        if n > MAX_FUNCTION_LINES and f"{m}:{f}" not in LONG
    }
    assert long == {}


def test_every_import_of_the_project_names_something_that_exists():
    """A moved module or name breaks an import that only runs later (inside a function): caught here."""
    bad = []
    for m in MODULES:
        for line, dep, name in _imports(m):
            if dep.split(".")[0] not in ("engine", "ui"):
                continue
            if dep not in MODULES:
                bad.append(f"{m}:{line} no module {dep}")
            elif name is not None and name != "*" and name not in _defined(dep):
                bad.append(f"{m}:{line} {dep} has no {name}")
    assert bad == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_module_owner(mod: str) -> str | None:
    """The package a private module (``pkg._x``, or anything inside ``pkg._x``) belongs to, or None."""
    parts = mod.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:i])
    return None


def _repeated_names(modules: list[str]) -> dict[str, list[str]]:
    """Module and package names of ``engine`` and ``ui`` that occur more than once (a leading underscore
    ignored), except the names every paper's package shares by design and the benchmark suites, which are
    named by the command line (``python -m engine bench regions``)."""
    seen: dict[str, list[str]] = {}
    for m in modules:
        parts = m.split(".")
        if parts[0] not in ("engine", "ui") or len(parts) == 1 or parts[-1].startswith("__"):
            continue  # __main__: a package's command, named by Python
        if parts[:-1] == ["engine", "bench"] and not MODULES.get(m, (None, False))[1]:
            continue
        name = parts[-1].lstrip("_")
        if name not in FAMILY_NAMES:
            seen.setdefault(name, []).append(m)
    return {n: ms for n, ms in seen.items() if len(ms) > 1}


# the modules every paper's package has, behind the one protocol
FAMILY_NAMES = ("mechanism", "readings", "baselines")


def test_no_module_imports_another_modules_private_names():
    """A name another module needs is public. What a package's modules share and nobody outside needs lives
    in a private module (``_x.py``) with public names."""
    bad = [
        f"{m}:{line} imports {name} from {dep}"
        for m in MODULES
        for line, dep, name in _imports(m)
        if name is not None and _private(name)
    ]
    assert bad == []


def test_private_modules_are_imported_only_inside_their_package():
    bad = [
        f"{m} imports {dep}"
        for m in MODULES
        for dep in _engine_deps(m)
        if (owner := _private_module_owner(dep)) is not None and not _within(m, owner)
    ]
    assert bad == []


def test_every_module_name_says_its_role_once():
    """Two modules of one name (``regions`` in the data, the regions layer, a family and the dashboard) make
    a reader ask which one is meant: each name is used once in the engine and the dashboard's helpers (a
    page and its ``ui`` helper share one on purpose: pages are not in the count)."""
    assert _repeated_names(
        ["engine.a.plan", "ui.plan", "engine.x.mechanism", "engine.y.mechanism", "ui.b.__main__", "engine.__main__"]
    ) == {"plan": ["engine.a.plan", "ui.plan"]}
    assert _private_module_owner("engine.mechanisms.common._rects") == "engine.mechanisms.common"
    assert _private_module_owner("engine.run.runner") is None
    assert _repeated_names(sorted(MODULES)) == {}


def _calls(tree: ast.AST) -> set[str]:
    """The dotted names a module calls (``page``, ``boot.ensure_router``, ``st.sidebar.button``...)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                out.add(".".join([f.id, *reversed(parts)]))
    return out


PAGES = sorted(m for m in MODULES if m.startswith("pages."))


@pytest.mark.parametrize("name", PAGES)
def test_every_page_is_framed_by_the_one_page_helper(name):
    """Each page runs inside ``with page(...)`` (ui/page.py: the router, the title, the sidebar and its errors,
    the Run button's panel and messages, the URL), never by typing those calls out again."""
    tree = TREES[name]
    framed = [
        item
        for node in ast.walk(tree)
        if isinstance(node, ast.With)
        for item in node.items
        if isinstance(item.context_expr, ast.Call) and getattr(item.context_expr.func, "id", "") == "page"
    ]
    assert ("ui.page", "page") in {(m, n) for _, m, n in _imports(name)} and len(framed) == 1
    skeleton = {"boot.ensure_router", "state.sync_url", "views.header", "controls.sidebar", "jobs.progress_panel"}
    assert _calls(tree) & skeleton == set()


def test_the_page_checks_see_every_page():
    assert len(PAGES) >= 9 and "pages.explore" in PAGES
    assert _calls(ast.parse("with page('t', 'b') as p:\n    boot.ensure_router()\n")) == {"page", "boot.ensure_router"}


# ---------------------------------------------------------------------- the tests' own layout
TESTS = ROOT / "tests"


def _test_trees(tests: Path = TESTS) -> dict[str, ast.AST]:
    return {str(p.relative_to(tests)): ast.parse(p.read_text(), filename=str(p)) for p in sorted(tests.rglob("*.py"))}


def _test_module_imports(trees: dict[str, ast.AST]) -> list[str]:
    """``file:line module`` of every import of a test module (``test_*``, under any package), lazy ones too."""
    out = []
    for file, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            out += [f"{file}:{node.lineno} {n}" for n in names if n.rpartition(".")[2].startswith("test_")]
    return sorted(out)


def _sys_path_uses(trees: dict[str, ast.AST]) -> list[str]:
    return sorted(
        f"{file}:{node.lineno}"
        for file, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys"
    )


def test_no_test_module_imports_another():
    """What several test files share lives in tests/support: a test module imported by another is loaded twice
    (as pytest's and as the import's) and ties the other file to its tests."""
    trees = _test_trees()
    assert len(trees) > 100 and not _test_module_imports(trees), _test_module_imports(trees)


def test_no_sys_path_edits_under_tests():
    """The repository is on the path by pytest's ``pythonpath`` (pyproject.toml): tests and the scripts they
    test are imported as ``tests.support.*`` and ``scripts.*``, not found by a path edited at import."""
    assert not _sys_path_uses(_test_trees())


def test_the_support_package_is_not_collected_as_tests():
    """Helpers only: no module pytest would collect (``test_*.py``, ``*_test.py``), no ``test_`` function, no
    ``Test`` class."""
    support = {f: t for f, t in _test_trees().items() if f.startswith("support/")}
    assert "support/__init__.py" in support and len(support) >= 5
    names = [Path(f).name for f in support]
    assert not [n for n in names if n.startswith("test_") or n.endswith("_test.py")], names
    tests_in = [
        f"{f}:{node.name}"
        for f, tree in support.items()
        for node in ast.walk(tree)
        if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"))
        or (isinstance(node, ast.ClassDef) and node.name.startswith("Test"))
    ]
    assert not tests_in, tests_in


def test_the_tests_layout_checks_find_what_they_look_for():
    trees = {
        "test_a.py": ast.parse("import sys\nfrom test_b import x\n\ndef f():\n    import tests.test_c\n"),
        "test_d.py": ast.parse("from tests import test_e\nsys.path.insert(0, 'scripts')\nsys.path[:0] = ['.']\n"),
        "test_f.py": ast.parse("from tests.support.app import open_app\nimport conftest\nfrom os import path\n"),
    }
    assert _test_module_imports(trees) == ["test_a.py:2 test_b", "test_a.py:5 tests.test_c", "test_d.py:1 tests.test_e"]
    assert _sys_path_uses(trees) == ["test_d.py:2", "test_d.py:3"]
