"""What a mechanism knows about its noise lives in the mechanism (``engine/mechanisms``).

The rules, checked on the source with :mod:`ast`, over every module outside ``engine/mechanisms``: the engine,
``ui/``, ``pages/``, ``app.py`` and ``scripts/``, and the scripts they hold as strings (the benchmarks' runs in a
fresh interpreter):

* nothing reads a key of a release's ``extras`` or ``diagnostics`` with a string literal (``rel.extras["k"]``,
  ``.get("k")``, ``"k" in rel.diagnostics``, through an alias ``d = rel.diagnostics`` or ``getattr(rel,
  "extras", {})``): a mechanism states what others read as typed parts of its release
  (``Release.noise``, ``levels``, ``heat``, ...) or through functions of its own package;
* nothing compares a mechanism's key with a literal key or a collection of them (``key == "ug"``,
  ``cfg.mechanism in {"ug", "ag"}``, ``m in SIMULATED`` with ``SIMULATED`` a literal collection of keys), and no
  lookup table is keyed by literal mechanism keys (``PLANS = {"ug": ...}``): what differs between mechanisms is
  declared on their classes. A table of results a benchmark keys by the mechanisms it ran is data, not
  knowledge about them: reading one of its entries is allowed.

Then the noise model itself: the margins it gives every door are the ones a mechanism's noise has.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.mechanisms import registry

ROOT = Path(__file__).resolve().parents[1]
KEYS = frozenset(registry())


def _sources() -> list[Path]:
    files = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"]
    files += list(ROOT.glob("scripts/*.py"))
    return [p for p in files if not p.relative_to(ROOT).as_posix().startswith("engine/mechanisms/")]


def _is_str(e) -> bool:
    return isinstance(e, ast.Constant) and isinstance(e.value, str)


def _release_field(e, aliases: set[str]) -> bool:
    """``x.extras`` / ``x.diagnostics``, ``getattr(x, "extras", ...)``, or a name bound to one of them."""
    if isinstance(e, ast.Attribute) and e.attr in ("extras", "diagnostics"):
        return True
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr" and len(e.args) >= 2:
        return _is_str(e.args[1]) and e.args[1].value in ("extras", "diagnostics")
    if isinstance(e, ast.BoolOp):  # (rel.extras or {})
        return any(_release_field(v, aliases) for v in e.values)
    return isinstance(e, ast.Name) and e.id in aliases


def literal_reads(tree: ast.AST) -> list[int]:
    """Lines that index a release's extras or diagnostics with a string literal."""
    aliases = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and _release_field(n.value, set())
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    out = []
    for n in ast.walk(tree):
        target = None
        if isinstance(n, ast.Subscript) and _is_str(n.slice):
            target = n.value
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get":
            target = n.func.value if n.args and _is_str(n.args[0]) else None
        elif isinstance(n, ast.Compare) and _is_str(n.left) and isinstance(n.ops[0], (ast.In, ast.NotIn)):
            target = n.comparators[0]
        if target is not None and _release_field(target, aliases):
            out.append(n.lineno)
    return out


def _literal_keys(e, constants: dict[str, ast.expr]) -> bool:
    """A literal mechanism key, a literal collection holding one, or a module constant bound to either."""
    if isinstance(e, ast.Name) and e.id in constants:
        e = constants[e.id]
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("frozenset", "set", "tuple"):
        e = e.args[0] if e.args else e
    if _is_str(e):
        return e.value in KEYS
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_str(x) and x.value in KEYS for x in e.elts)
    return False


def _names_a_key(e) -> bool:
    """An expression that holds a mechanism's key by its name (``key``, ``cfg.mechanism``, ``mech``, ``m``...)."""
    return bool(re.search(r"(^|\.)(key|mechanism|mech|m|k)$", ast.unparse(e)))


def key_matches(tree: ast.AST) -> list[int]:
    """Lines that compare a key with literal mechanism keys, or hold a lookup table keyed by them."""
    constants = {
        t.id: n.value
        for n in getattr(tree, "body", [])
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            ops = [n.left, *n.comparators]
            if any(_literal_keys(e, constants) for e in ops) and any(_names_a_key(e) for e in ops):
                out.append(n.lineno)
        elif isinstance(n, ast.Dict) and any(_is_str(k) and k.value in KEYS for k in n.keys if k is not None):
            out.append(n.lineno)
    return out


def _trees(tree: ast.AST) -> list[ast.AST]:
    """The module and each script it holds as a string (Python over several lines that imports something), with
    the script's lines numbered as in the module."""
    out = [tree]
    for n in ast.walk(tree):
        if _is_str(n) and "\n" in n.value and "import " in n.value:
            try:
                script = ast.parse(textwrap.dedent(n.value))
            except SyntaxError:  # prose
                continue
            out.append(ast.increment_lineno(script, n.lineno - 1))
    return out


def _scan(check) -> dict[str, list[int]]:
    found = {}
    for p in _sources():
        lines = [line for t in _trees(ast.parse(p.read_text(), filename=str(p))) for line in check(t)]
        if lines:
            found[p.relative_to(ROOT).as_posix()] = lines
    return found


def test_no_module_outside_the_mechanisms_reads_a_key_of_extras_or_diagnostics():
    assert not _scan(literal_reads)


def test_no_module_outside_the_mechanisms_matches_a_mechanism_key():
    assert not _scan(key_matches)


def test_the_scans_see_what_they_forbid():
    """Each form the rules name is found (so a clean scan means something), and the allowed forms are not."""
    reads = [
        'rel.extras["stderr"]',
        'result.release.diagnostics.get("warnings", [])',
        '"region_counts" in release.extras',
        'd = rel.diagnostics\nd["rho_m"]',
        'getattr(release, "extras", {}).get("heatmap")',
        '(rel.extras or {}).get("stderr")',
    ]
    for src in reads:
        assert literal_reads(ast.parse(src)), src
    script = 'RUN = textwrap.dedent("""\n    import json\n    print(res.release.diagnostics["levels"])\n""")'
    assert [line for t in _trees(ast.parse(script)) for line in literal_reads(t)] == [3], script
    matches = [
        'key == "hierarchical"',
        'if cfg.mechanism in ("sparse_emd", "sparse_emd_secagg"): pass',
        'DATA_FREE = frozenset({"identity", "uniform"})\nok = m in DATA_FREE',
        'PLANS = {"adaptive_hh": 1}',
    ]
    for src in matches:
        assert key_matches(ast.parse(src)), src
    allowed = ["rel.noise.basis", 'params["regions"]', 'key == "streets"', 'med["snh"][kind]', "x = cls.planner"]
    for src in allowed:
        tree = ast.parse(src)
        assert not literal_reads(tree) and not key_matches(tree), src


# ---------------------------------------------------------------------------------------- the noise model
def _release(key, depth=5, seed=0, **params):
    from engine.core.grid import Domain
    from engine.mechanisms import RunContext
    from tests.support.datasets import CRS, SIDE, square_dataset

    rng = np.random.default_rng(7)
    ds = square_dataset(rng.normal(SIDE / 2, 2500, (3000, 2)).clip(1, SIDE - 1), "stderr", CRS)
    cls = registry()[key]
    ctx = RunContext(rng=np.random.default_rng(seed))
    return cls().run(ds, Domain(0.0, 0.0, SIDE, depth), 1.0, cls.schema().resolve(params), ctx)


@pytest.mark.parametrize("key", sorted(k for k, c in registry().items() if c.margin == "closed form"))
def test_a_mechanism_that_claims_a_closed_form_states_a_noise_model_or_why_not(key):
    rel = _release(key, **({"rho_m": 700.0, "aux": "none"} if key == "identity_paramselect" else {}))
    assert rel.quantity == "counts"
    if isinstance(rel.noise, str):  # a setting without one (several locations per user, the threshold rule...)
        assert rel.noise.startswith("no margin: ")
        return
    model = rel.noise
    assert model.units >= 1 and model.sd.shape == model.count.shape == (model.units,)
    assert (model.label is None) != (model.weights is None)  # cells by label, or by area
    S = model.spread(rel.domain.n**2)
    assert np.allclose(np.asarray(S.sum(axis=0)).ravel(), 1.0)  # each unit's count is spread whole


def test_the_cell_margin_is_the_one_margin_for_independent_cells_and_a_share_for_larger_units():
    """Identity: each cell its own Laplace(1/eps) draw, so every margin is 2.118 sqrt(2) / eps exactly (no
    spreading); UG's cells lie inside UG cells of several: a share of the UG cell's noise and spreading."""
    from engine.regions.margins import LAPLACE95, cell_margins

    m = cell_margins(_release("identity"))
    assert np.allclose(m.margin95, LAPLACE95 * np.sqrt(2.0)) and np.all(m.spread_sd == 0)
    ug = _release("ug", total="public")
    q = (ug.domain.n // ug.measurements.grid.shape[0]) ** 2  # output cells per UG cell
    m = cell_margins(ug)
    assert q > 1 and np.allclose(m.noise_sd, np.sqrt(2.0) / ug.diagnostics["epsilon_cells"] / q)
    held = ug.noise.count[ug.noise.label] > 0  # the spreading term: a share of a UG cell that holds people
    assert held.any() and np.all(m.spread_sd[held] > 0) and np.all(m.spread_sd[~held] == 0)


def test_dawa_states_a_margin_inside_one_bucket_and_none_across_buckets():
    """DAWA's buckets share the measured tree's noise, which its release does not describe: a cell (inside one
    bucket) has its margin, a block that spans several buckets has none."""
    from engine.regions.margins import block_margins, cell_margins

    rel = _release("dawa")
    assert np.isfinite(cell_margins(rel).margin95).all()
    blocks = block_margins(rel, "", 8)
    lab = rel.noise.label.reshape(rel.domain.n, rel.domain.n)
    spans = np.array([np.unique(lab[y : y + 8, x : x + 8]).size > 1 for y in range(0, 32, 8) for x in range(0, 32, 8)])
    assert spans.any() and np.isnan(blocks.margin95[spans]).all() and np.isfinite(blocks.margin95[~spans]).all()


def test_the_planner_follows_the_mechanisms_capabilities():
    """Exact where the margin is fixed by public inputs, simulated where it depends on where people are, none
    where the release states no margin: Adaptive HH on data with user ids (a person may have several
    locations, and then the release has none)."""
    from engine.run.planning import _forecast as P

    assert P.exact("identity") and P.exact("hierarchical") and not P.exact("ug")
    assert P.planning("adaptive_hh")[0] == "simulated"
    mode, why = P.planning("adaptive_hh", user_ids=True)
    assert mode == "none" and "several locations" in why
    frame = P.default_frame()
    pred = P.predict(
        "adaptive_hh",
        1.0,
        P.Frame(frame.meta, frame.crs, frame.label, user_ids=True),
        P.stated_users(2000),
        depth=4,
        runs=1,
    )
    assert pred.cell_median is None or not np.isfinite(pred.cell_median)
    assert "several locations" in pred.margin_basis
    assert set(P.plannable()) == {k for k, c in registry().items() if c.planner != "none"}
