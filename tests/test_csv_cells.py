"""Every CSV the product writes is safe to open in a spreadsheet (OWASP's CSV-injection rule).

A text cell beginning with = + - @, a tab or a carriage return gets a leading single quote; numbers stay numbers
(a negative estimate is a value, not a formula). The rule lives in one helper (engine/core/csvtext.py): the source
is scanned so that no other module writes CSV, and each writer is fed hostile text (region names and ids from an
uploaded file, mechanism and dataset names) and read back.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from engine.__main__ import main
from engine.core.csvtext import TRIGGERS, csv_text, safe_cell

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / "engine" / "core" / "csvtext.py"
HOSTILE = [
    '=HYPERLINK("http://example.invalid/?leak=1","click")',
    "+SUM(1,2)",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1)",
    "\t@TAB",
    "\r=CR",
    "=1+1",
    "Old Town",
]
HOSTILE_IDS = ["=A1", "@id", "+7", "-12", "-x", "plain", "\tid", "=cmd|x"]  # "+7" and "-12" are numbers
SYNTH = ["--dataset", "synthetic:monocentric", "--data-opt", "n=3000", "--data-opt", "seed=4", "--depth", "5"]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO("".join(line for line in io.StringIO(text) if not line.startswith("#")))))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def assert_neutral(text: str) -> list[list[str]]:
    """No cell a spreadsheet would run as a formula: every cell beginning with a trigger is a number."""
    rows = _rows(text)
    assert rows, "an empty table tests nothing"
    bad = [c for r in rows for c in r if c.startswith(TRIGGERS) and not _is_number(c)]
    assert bad == [], bad
    return rows


def assert_quoted(rows: list[list[str]], values) -> None:
    """Each hostile value is kept, behind one single quote (numbers as they are; a reader of region files strips
    the blanks around a name, so a tab or carriage return there may be gone)."""
    cells = {c for r in rows for c in r}
    for v in values:
        want = {v if _is_number(v) or not v.startswith(TRIGGERS) else "'" + v}
        want |= {s if _is_number(s) or not s.startswith(TRIGGERS) else "'" + s for s in [v.strip()]}
        assert want & cells, (v, sorted(cells)[:20])


# ------------------------------------------------------------------ the rule
def test_the_rule_neutralises_text_and_keeps_numbers():
    for v in HOSTILE[:-1]:
        assert safe_cell(v) == "'" + v
    assert safe_cell("Old Town") == "Old Town" and safe_cell("'=x") == "'=x" and safe_cell("") == ""
    for v in ("-12", "+7", "-3.25", "-1e-05", "+.5", "-2.E3"):
        assert safe_cell(v) == v  # text that is a decimal number is read as that number
    for v in (-3.2, -7, np.float64(-1e308), np.int64(-4), None, float("-inf"), True):
        assert safe_cell(v) is v
    text = csv_text(
        pd.DataFrame({"=name": ["=x", "-12", "ok"], "estimate": [-3.2, -0.0, 1e-7], "mixed": ["@a", -5, None]})
    )
    df = pd.read_csv(io.StringIO(text), dtype={"'=name": str})
    assert list(df.columns) == ["'=name", "estimate", "mixed"] and df["'=name"].tolist() == ["'=x", "-12", "ok"]
    assert df["estimate"].dtype == np.float64 and df["estimate"].tolist() == [-3.2, -0.0, 1e-7]
    assert _rows(text)[1:] == [["'=x", "-3.2", "'@a"], ["-12", "-0.0", "-5"], ["ok", "1e-07", ""]]


def test_a_line_break_inside_a_cell_cannot_start_a_row():
    """A cell ``a<CR>=cmd`` is quoted: a reader ending lines at a carriage return sees no row beginning ``=cmd``."""
    names = ["a\r=cmd|' /C calc'!A0", "b\n@SUM(1)", "c\r\n+1+1"]
    text = csv_text([{"name": n, "estimate": -1.0} for n in names])
    assert _rows(text) == [["name", "estimate"], *([n, "-1.0"] for n in names)]
    inside = False  # every CR or LF outside a quoted cell is a line end
    for i, ch in enumerate(text):
        if ch == '"':
            inside = not inside
        elif ch in "\r\n" and not inside:
            assert text[i : i + 2] == "\r\n" or text[i - 1 : i + 1] == "\r\n", repr(text[max(0, i - 5) : i + 5])


# ------------------------------------------------------------------ no writer bypasses the helper
def _tree():
    files = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"]
    return {p: ast.parse(p.read_text(), filename=str(p)) for p in sorted(files)}


def test_no_module_but_the_helper_writes_csv():
    """A new writer that does not go through engine.core.csvtext fails here: pandas' to_csv or the csv module's
    writers anywhere but in the helper."""
    found = []
    for path, tree in _tree().items():
        if path == HELPER:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("to_csv", "writer", "DictWriter"):
                if node.attr == "to_csv" or (isinstance(node.value, ast.Name) and node.value.id == "csv"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "csv":
                if {a.name for a in node.names} & {"writer", "DictWriter", "*"}:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} from csv import a writer")
    assert found == [], "CSV written without engine.core.csvtext.csv_text: " + ", ".join(found)
    assert "to_csv" in HELPER.read_text()  # the scan looks for what the helper itself uses


# every place in the dashboard that offers a CSV download, and the writer it calls (each tested below)
DOWNLOADS = {
    ("ui/region_panel.py", "_caption_and_downloads"): "RegionReport.as_csv",
    ("ui/views.py", "export_block"): "csv_grid",
    ("ui/attack.py", "curve_section"): "csv_text",
    ("pages/compare.py", "<module>"): "metrics_csv, seeds_csv",
    ("pages/attributes.py", "<module>"): "regions_csv",
    ("pages/reproduce.py", "<module>"): "csv_text",
    ("pages/attack.py", "<module>"): "figures_csv",
    ("pages/ranges.py", "<module>"): "csv_text",
    ("pages/tradeoffs.py", "<module>"): "csv_text",
}


def _function_of(tree, lineno: int) -> str:
    """The innermost function holding line ``lineno`` ("<module>" outside any)."""
    inside = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= lineno <= n.end_lineno
    ]
    return max(inside, key=lambda n: n.lineno).name if inside else "<module>"


def test_every_csv_download_is_a_known_writer():
    """A new CSV download in the dashboard is listed here with its writer, and so gets a test."""
    sites = set()
    for path, tree in _tree().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == "text/csv":
                sites.add((str(path.relative_to(ROOT)), _function_of(tree, node.lineno)))
    assert sites == set(DOWNLOADS)


# ------------------------------------------------------------------ each writer, fed hostile text
@pytest.fixture(scope="module")
def region_file(tmp_path_factory):
    """Eight strips over the synthetic city, with hostile names and ids (as an uploaded file may have)."""
    import geopandas as gpd
    from shapely.geometry import box

    from engine.run import load_dataset

    x0, y0, x1, y1 = load_dataset("synthetic:monocentric", {"n": 3000, "seed": 4}).meta.bbox
    xs = np.linspace(x0, x1, len(HOSTILE) + 1)
    gdf = gpd.GeoDataFrame(
        {"code": HOSTILE_IDS, "name": HOSTILE},
        geometry=[box(a, y0, b, y1) for a, b in zip(xs[:-1], xs[1:])],
        crs=4326,
    )
    path = tmp_path_factory.mktemp("regions") / "districts.geojson"
    gdf.to_file(path, driver="GeoJSON")
    return path


def _cli(capsys, *args) -> str:
    assert main(list(args)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_regions_csv_of_run_format_csv(region_file, capsys):
    out = _cli(capsys, "run", *SYNTH, "--mechanism", "ug", "--seed", "3", "--regions", f"{region_file}:code",
               "--region-names", "name", "--format", "csv")  # fmt: skip
    rows = assert_neutral(out)
    assert_quoted(rows, HOSTILE + HOSTILE_IDS)
    df = pd.read_csv(io.StringIO(out), comment="#")
    assert len(df) == len(HOSTILE) and df["estimate"].dtype == np.float64 and df["true"].sum() == 3000


def test_regions_csv_of_a_release_folder(region_file, capsys, tmp_path):
    out = tmp_path / "release"
    _cli(capsys, "release", *SYNTH, "--mechanism", "ug", "--epsilon", "1", "--regions", f"{region_file}:code",
         "--region-names", "name", "--out", str(out))  # fmt: skip
    text = (out / "regions.csv").read_bytes().decode()
    assert_quoted(assert_neutral(text), HOSTILE + HOSTILE_IDS)
    assert_neutral((out / "heatmap.csv").read_bytes().decode())
    man = json.loads((out / "manifest.json").read_text())
    assert man["files"]["regions_csv"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()


def test_regions_csv_of_the_dashboard_download(region_file):
    """The download button of ui/region_panel.py offers RegionReport.as_csv, stamped in Evaluate."""
    from engine.data.region_geometry import build
    from engine.regions import regional_report
    from engine.run import RunConfig, prepare, run

    cfg = RunConfig(dataset="synthetic:monocentric", dataset_options={"n": 3000, "seed": 4}, mechanism="ug",
                    epsilon=1.0, seed=2, depth=5)  # fmt: skip
    res = run(cfg)
    regions = build(f"{region_file}:code", res.release.domain, res.crs, name_column="name")
    text = regional_report(res, regions, prepare(cfg)[0]).as_csv("Evaluate run, not a release")
    assert text.startswith("# evaluation: ")
    assert_quoted(assert_neutral(text), HOSTILE + HOSTILE_IDS)


def test_the_grid_csv_keeps_negative_estimates_as_numbers():
    from engine.core.grid import Domain
    from engine.run.execution import csv_grid

    dom = Domain.around(0.0, 0.0, 1000.0, 1000.0, 2)
    dens = np.array([[-3.2, 0.0, 1.5, -1e-9]] * 4)
    text = csv_grid(dens, dom, "+proj=aeqd +lat_0=51.5 +lon_0=-0.1 +units=m")
    assert_neutral(text)
    df = pd.read_csv(io.StringIO(text))
    assert df["estimate"].dtype == np.float64 and sorted(df["estimate"].unique()) == [-3.2, -1e-9, 0.0, 1.5]
    assert (df["lon"] < 0).all() and df["lon"].dtype == np.float64


def test_sweep_and_run_csv_keep_their_numbers(capsys):
    sweep = _cli(capsys, "sweep", *SYNTH, "--mechanisms", "identity,ug", "--epsilons", "0.5", "--seeds", "2",
                 "--format", "csv")  # fmt: skip
    assert_neutral(sweep)
    df = pd.read_csv(io.StringIO(sweep))
    assert len(df) == 4 and df["epsilon"].tolist() == [0.5] * 4 and df["mse"].dtype == np.float64
    run = _cli(capsys, "run", *SYNTH, "--mechanism", "identity", "--seed", "1", "--format", "csv")
    assert_neutral(run)
    m = pd.read_csv(io.StringIO(run))
    assert list(m.columns) == ["metric", "value"] and "mse" in set(m["metric"])


def _result(name='=HYPERLINK("http://x")', dataset="@evil.csv", metrics=None):
    cfg = SimpleNamespace(mechanism=name, epsilon=1.0, seed=3, dataset=dataset)
    return SimpleNamespace(config=cfg, metrics=metrics or {"emd": -0.5, "mse": 2.0}, n_users=10)


def test_the_compare_tables():
    from ui import tables

    rows = assert_neutral(tables.metrics_csv({"+evil": _result(), "fine": _result("ug", "ok")}, 1.0))
    assert_quoted(rows, ["+evil", '=HYPERLINK("http://x")', "@evil.csv", "fine"])
    per = {"-x": [_result(metrics={k: -1.0 for k in tables.RANK_METRICS})]}
    assert_quoted(assert_neutral(tables.seeds_csv(per, 1.0)), ["-x", "-1.0"])


def test_the_attribute_regions_table():
    from ui import attributes

    df = pd.DataFrame({"region": HOSTILE, "true mean": np.linspace(-1, 1, len(HOSTILE)), "private mean": 0.0,
                       "std. error": 1.0, "error": -0.5, "suppressed": False})  # fmt: skip
    rel = SimpleNamespace(regional=SimpleNamespace(rects=np.zeros((len(HOSTILE), 4))))
    res = SimpleNamespace(release=rel, config=SimpleNamespace(mechanism="@mech"))
    rows = assert_neutral(attributes.regions_csv(res, df, "=value"))
    assert_quoted(rows, HOSTILE + ["@mech", "true mean [=value]"])


def test_the_attack_figures():
    from ui import attack

    res = _result(metrics={"privacy_distance_m": 5.0, "privacy_ratio": -1.0})
    assert_quoted(assert_neutral(attack.figures_csv(res)), ['=HYPERLINK("http://x")', "@evil.csv", "-1.0"])
