"""What messages say: the settings they name exist and govern the limit they are named with, and numbers read as
numbers (a coordinate of 1e308 is ``1e+308``, not 309 digits)."""

from __future__ import annotations

import ast
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.core.errors import DataError, shown
from engine.data.files import load_file

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"HEATMAP_[A-Z0-9_]+")


# ------------------------------------------------------------------ settings named in messages and docs
def _sources():
    files = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"]
    return [*files, *ROOT.glob("scripts/*.py")]


def _names_used_and_mentioned() -> tuple[set[str], dict[str, set[str]]]:
    """(names the code uses as names: a string that is exactly one, as read from the environment; names mentioned
    inside text: messages, docstrings, the README and the configuration, by where)."""
    used, mentioned = set(), {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if NAME.fullmatch(node.value):
                    used.add(node.value)
                else:
                    for n in NAME.findall(node.value):
                        mentioned.setdefault(n, set()).add(str(path.relative_to(ROOT)))
    docs = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob(".streamlit/*.toml")]
    for path in docs:
        for n in NAME.findall(path.read_text()):
            mentioned.setdefault(n, set()).add(str(path.relative_to(ROOT)))
    return used, mentioned


def test_every_setting_a_message_or_the_readme_names_exists():
    used, mentioned = _names_used_and_mentioned()
    assert {"HEATMAP_MAX_POINTS", "HEATMAP_LEDGER_DB", "HEATMAP_RENDER_SLOTS"} <= used  # the scan sees the code
    assert {"HEATMAP_MAX_POINTS", "HEATMAP_MAX_UPLOAD_MB"} <= set(mentioned)  # and the messages and the README
    missing = {n: sorted(where) for n, where in mentioned.items() if n not in used}
    assert missing == {}, f"named but never read: {missing}"


def _points_csv(n: int) -> bytes:
    return (
        pd.DataFrame({"lon": np.linspace(-0.15, -0.07, n), "lat": np.linspace(51.5, 51.55, n)})
        .to_csv(index=False)
        .encode()
    )


def test_the_setting_a_location_refusal_names_raises_its_limit(monkeypatch):
    monkeypatch.setenv("HEATMAP_MAX_POINTS", "5")
    with pytest.raises(DataError, match=r"over the limit of 5 locations per file \(HEATMAP_MAX_POINTS\)"):
        load_file(_points_csv(6), "p.csv")
    monkeypatch.setenv("HEATMAP_MAX_POINTS", "10")
    assert len(load_file(_points_csv(6), "p.csv").lonlat) == 6


def test_a_region_refusal_names_no_setting_that_does_not_raise_it(monkeypatch):
    """The regions of a file are limited by the engine's fixed MAX_REGIONS, which HEATMAP_MAX_POINTS does not set."""
    from engine.data.files import polygons

    monkeypatch.setattr(polygons, "MAX_REGIONS", 3)
    feats = [
        {
            "type": "Feature",
            "properties": {"name": f"r{i}"},
            "geometry": {"type": "Polygon", "coordinates": [[[i, 0], [i + 1, 0], [i + 1, 1], [i, 0]]]},
        }  # fmt: skip
        for i in range(4)
    ]
    data = json.dumps({"type": "FeatureCollection", "features": feats}).encode()
    for limit in ("5", "100"):
        monkeypatch.setenv("HEATMAP_MAX_POINTS", limit)
        with pytest.raises(DataError) as err:
            polygons.load_polygons(data, "r.geojson")
        assert str(err.value) == "r.geojson holds 4 features, over the limit of 3 regions per file"


# ------------------------------------------------------------------ numbers in messages
def test_numbers_are_shown_as_numbers():
    assert shown(1e308) == "1e+308" and shown(-1.7e308, 2) == "-1.7e+308"
    assert shown(90.000001) == "90.000001" and shown(95.0) == "95" and shown(-0.12, 2) == "-0.12"
    assert shown(123456.789, 0) == "123,457" and shown(999_999_999_999.0, 0) == "999,999,999,999"
    assert shown(1e12, 0) == "1e+12" and shown(1.5e-9) == "1.5e-09" and shown(0.0) == "0"
    assert shown(float("nan")) == "nan" and shown(float("-inf")) == "-inf"


def _geojson(coords) -> bytes:
    feats = [{"type": "Feature", "properties": {}, "geometry": {"type": "Point", "coordinates": c}} for c in coords]
    return json.dumps({"type": "FeatureCollection", "features": feats}).encode()


def _parquet(lon, lat) -> bytes:
    buf = io.BytesIO()
    pd.DataFrame({"lon": lon, "lat": lat}).to_parquet(buf)
    return buf.getvalue()


HUGE = {
    "a CSV mixing degrees and 1e308": (b"lon,lat\n1e308,51\n0,51\n", "a.csv"),
    "a CSV of 1e308 only": (b"lon,lat\n1e308,1e308\n-1e308,5e307\n", "b.csv"),
    "a CSV with latitude 1e308 beside degrees": (b"lon,lat\n0.1,1e308\n0.2,51\n", "c.csv"),
    "a GeoJSON without a CRS": (_geojson([[1e308, 51], [0, 51]]), "d.geojson"),
    "a Parquet table": (_parquet([1e308, 0.0], [51.0, 51.0]), "e.parquet"),
}


@pytest.mark.parametrize("case", list(HUGE))
def test_a_1e308_coordinate_prints_as_1e308(case):
    data, name = HUGE[case]
    with pytest.raises(DataError) as err:
        load_file(data, name)
    msg = str(err.value)
    assert re.search(r"\b-?[15]e\+30[78]\b", msg), msg
    assert not re.search(r"\d[\d,]{15,}", msg), msg  # no run of digits longer than a phone number
    assert len(msg) < 400, msg


def test_a_dataset_made_in_code_says_1e308_too():
    from engine.data.dataset import DatasetMeta, make_dataset

    for lon, lat in (([1e308, 0.0], [51.0, 51.0]), ([0.0, 0.1], [-1e308, 51.0])):
        with pytest.raises(DataError, match=r"(longitude|latitude) -?1e\+308 at row 0 is beyond"):
            make_dataset(np.array(lon), np.array(lat), DatasetMeta(name="t", source="t"))
