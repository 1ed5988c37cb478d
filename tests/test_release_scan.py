"""Only DP outputs and declared public inputs leave: the release scan (``release_scan.py``) on every door.

For each door (``python -m engine release``, run through the CLI's ``main``; the dashboard's Release, the bytes
the Explore page offers for download, made by the page's own download buttons) and each family of mechanism
that can be released, with regions off and on (a polygon file with names), a private file the test makes
(1,987 people, most with several records, extreme coordinates with ten decimals, a distinctive name and
folder) is released, and

* no release file holds, in any form or container, its number of people or records, its extreme coordinates
  (degrees, local metres), its path, folder, name or hashes, the ledger's fingerprint of it, or a server folder;
* no released cell or region equals its true count more often than its noise allows (a binomial test at the
  false-alarm rate ``release_scan.ALPHA``; never, for continuous noise).

The browser's download of the release zip is scanned in ``test_browser_release.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.__main__ import main
from tests.support import release_scan as R
from tests.support.app import click_run, open_app, upload

FAMILIES = {  # one mechanism of each family that can be released
    "central": "identity",
    "distributed": "flat_onehot",
    "local": "ldp_grid",
    "federated": "geoind_kde",
    "regions": "laplace_regions",
}
EPS = 1.0


def noise_mass(mechanism: str, eps: float) -> float:
    """The largest chance that the stated noise puts a released value on any one number. Flat one-hot: discrete
    Laplace of scale 1/ε per cell (its ledger: Pólya shares, sensitivity 1), whose mass at 0 is tanh(ε/2); a region
    of whole and partial cells moves with at least one cell's noise, so the bound holds for it too. The others:
    continuous noise (Laplace, planar Laplace), or the LDP grid's counts unbiased by dividing by p − q, which puts
    an estimate on a true count only by a rounding coincidence: 0."""
    return math.tanh(eps / 2) if mechanism == "flat_onehot" else 0.0


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    """The private file and the public polygon file, each in a folder of its own."""
    base = tmp_path_factory.mktemp("srv-qzx7")
    csv = R.private_city(base / "srv-private-qzx7", "clinic_visits_qzx.csv")
    regions = R.region_file(base / "srv-public-qzx7", "barrios_qzx.geojson")
    return SimpleNamespace(base=base, csv=csv, regions=regions)


def secrets(private, files: dict, folders=(), texts=None) -> R.Secrets:
    """What identifies the private file, with the local metres of the release's CRS (``manifest.json`` in
    ``files`` or in a zip there)."""
    manifest = _manifest(files)
    return R.secrets_of(
        private.csv,
        manifest["grid"]["crs"],
        folders=[private.base, private.csv.parent, private.regions.parent, *folders],
        texts=texts,
    )


def _manifest(files: dict) -> dict:
    import io
    import zipfile

    if "manifest.json" in files:
        return json.loads(files["manifest.json"])
    z = next(zipfile.ZipFile(io.BytesIO(v)) for k, v in files.items() if k.endswith(".zip"))
    return json.loads(z.read("manifest.json"))


def _release_folder(files: dict) -> dict:
    """The release files by name: those of a folder, or the members of the dashboard's zip."""
    import io
    import zipfile

    if "manifest.json" in files:
        return files
    z = next(zipfile.ZipFile(io.BytesIO(v)) for k, v in files.items() if k.endswith(".zip"))
    return {n: z.read(n) for n in z.namelist()}


def assert_clean(files: dict, secrets_: R.Secrets, case: str = "") -> None:
    found = R.scan(files, secrets_)
    head = f"the release ({case}) holds" if case else "the release holds"
    assert not found, f"{head} what identifies its private input:\n" + "\n".join(map(str, found))


def assert_noisy(files: dict, private, mechanism: str, regions: bool, counted: bool | None = None) -> None:
    """No released cell (nor region) equals its true count, in people or in records, more often than the noise
    allows: up to four binomial tests, each at a quarter of ``R.ALPHA``, so that a release is flagged by chance
    with probability at most ``R.ALPHA``. ``counted``: Laplace over regions counted the polygons themselves
    (the command line's ``--regions``); by default when regions are on."""
    release, manifest = _release_folder(files), _manifest(files)
    grid = manifest["grid"]
    people, records = R.true_cells(private.csv, grid)
    assert people.sum() == pytest.approx(1987) and records.sum() > 1987  # the truth covers every person
    released, centres = R.released_cells(release["heatmap.csv"], int(grid["cells_per_side"]))
    counted = regions if counted is None else counted
    if mechanism == "laplace_regions" and counted:  # it estimates the cells its regions cover; the rest are 0
        released = np.where(R.inside_regions(centres, private.regions), released, np.nan)
        assert np.isfinite(released).sum() >= 16
    p = noise_mass(mechanism, manifest["ledger"]["total_epsilon"])  # the ε the noise was drawn for, as stated
    for unit, truth in (("people", people), ("records", records)):
        k, n = R.equal_counts(released, truth)
        assert not R.too_many_equal(k, n, p, R.ALPHA / 4), f"{k} of {n} cells equal their true count of {unit}"
    if not regions:
        return
    assert grid["cell_m"] < R.REGION_GAP_M  # no cell meets two regions: their noises are independent
    truth = R.true_regions(private.csv, private.regions)
    est = R.released_regions(release["regions.csv"])
    assert set(est) == set(truth) and min(t[0] for t in truth.values()) > 0  # every region holds people
    ids = sorted(truth)
    for j, unit in enumerate(("people", "records")):
        k, n = R.equal_counts(np.array([est[i] for i in ids]), np.array([truth[i][j] for i in ids]))
        assert not R.too_many_equal(k, n, p, R.ALPHA / 4), f"{k} of {n} regions equal their true count of {unit}"


# ---------------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("regions", [False, True], ids=["regions off", "regions on"])
@pytest.mark.parametrize("family", FAMILIES)
def test_cli_release_holds_nothing_that_identifies_the_input(family, regions, private, tmp_path, capsys):
    mechanism = FAMILIES[family]
    out = tmp_path / "release"
    argv = ["release", "--dataset", "file", "--data-opt", f"path={private.csv}", "--mechanism", mechanism]
    argv += ["--epsilon", str(EPS), "--depth", "5", "--out", str(out), "--format", "geotiff,geoparquet,geojson,csv"]
    if regions:
        argv += ["--regions", f"{private.regions}:code", "--region-names", "name"]
    assert main(argv) == 0, capsys.readouterr().err
    printed = json.loads(capsys.readouterr().out)
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert {"manifest.json", "heatmap.csv", "heatmap.tif", "heatmap.parquet", "heatmap.geojson"} <= set(files)
    assert ("regions.gpkg" in files) is regions
    fingerprint = R.hex_forms("the ledger's fingerprint of the file", printed["dataset_fingerprint"].split(":")[-1])
    assert_clean(files, secrets(private, files, folders=[tmp_path], texts=fingerprint))
    assert_noisy(files, private, mechanism, regions)


def _others() -> list[str]:
    from engine.mechanisms import registry

    return sorted(k for k, c in registry().items() if c.uses_epsilon and k not in FAMILIES.values())


SMALL = {  # small sizes, and a releasable choice where the default has no floating-point-safe sampler
    "snh": ("preset=custom", "depth=1", "width=8", "epochs=1", "max_steps=5", "batch_size=4096", "k=1"),
    "ldp_mean_baseline": ("baseline=duchi",),
}


@pytest.mark.parametrize("mechanism", _others())
def test_cli_release_of_every_other_mechanism_holds_nothing_that_identifies_the_input(
    mechanism, private, tmp_path, capsys
):
    """The scan alone (each mechanism's noise differs) over every other mechanism that can be released."""
    out = tmp_path / "release"
    argv = ["release", "--dataset", "file", "--data-opt", f"path={private.csv}", "--mechanism", mechanism]
    argv += ["--depth", "5", "--out", str(out), "--format", "geotiff,geoparquet,geojson,csv"]
    argv += [a for p in SMALL.get(mechanism, ()) for a in ("--param", p)]
    assert main(argv) == 0, capsys.readouterr().err
    printed = json.loads(capsys.readouterr().out)
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    fingerprint = R.hex_forms("the ledger's fingerprint of the file", printed["dataset_fingerprint"].split(":")[-1])
    assert_clean(files, secrets(private, files, folders=[tmp_path], texts=fingerprint))


# ---------------------------------------------------------------------------------------------- the dashboard
@pytest.fixture
def downloads(monkeypatch):
    return R.record_downloads(monkeypatch)


def _released_on_the_page(private, mechanism: str, downloads, res: str = "32"):
    at = open_app(mode="release", eps=f"{EPS:g}", res=res, mech=mechanism, baselines="0")
    upload(at, private.csv.name, private.csv.read_bytes())
    click_run(at, "explore")
    assert "Release mode: this map was drawn" in " ".join(s.value for s in at.success)
    return at


def _choose_polygons(at, private) -> None:
    at.segmented_control(key="regions.kind").set_value("Your polygons").run()
    at.file_uploader(key="regions.file").set_value(
        (private.regions.name, private.regions.read_bytes(), "application/geo+json")
    ).run()
    at.selectbox(key="regions.id").set_value("code").run()
    at.selectbox(key="regions.name").set_value("name").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]


def _page_secrets(private, files):
    return secrets(private, files, texts=R.ledger_fingerprint(private.csv))


@pytest.mark.parametrize("family", FAMILIES)
def test_dashboard_release_holds_nothing_that_identifies_the_input(family, private, downloads):
    """Regions off, then on in the same session (one run: the dashboard reports the run over the uploaded
    polygons). Laplace over regions is never without regions: it counts the analysis's, H3 hexagons until the
    polygons are chosen, so its release holds a regional table both times."""
    mechanism = FAMILIES[family]
    at = _released_on_the_page(private, mechanism, downloads)
    for regions in (False, True):
        if regions:
            _choose_polygons(at, private)
        files = R.page_downloads(at, downloads)
        stem = f"{mechanism}_release"
        assert {f"{stem}.zip", f"{stem}.png", f"{stem}_report.html"} <= set(files)
        tabled = regions or family == "regions"
        assert ({"regions.csv", "regions.gpkg"} <= set(files)) is tabled
        assert ("regions.csv" in _release_folder(files)) is tabled  # the zip holds the regional table too
        assert_clean(files, _page_secrets(private, files), f"regions {'on' if regions else 'off'}")
        assert_noisy(files, private, mechanism, regions, counted=False)


def test_dashboard_release_with_the_automatic_resolution_holds_nothing_that_identifies_the_input(private, downloads):
    """The resolution the page chooses by itself (res=auto) must not come from the exact number of people."""
    at = _released_on_the_page(private, "identity", downloads, res="auto")
    files = R.page_downloads(at, downloads)
    assert_clean(files, _page_secrets(private, files))


# ------------------------------------------------------------------------------------- the scan itself
PLANTED = R.Secrets(
    counts={"number of people": 1987, "number of records": 4632},
    degrees={"west": -58.6127183946, "north": -34.4327163549},
    metres={"y max": 12345.678},
    texts={"file stem": "clinic_visits_qzx", **R.hex_forms("file sha256", "9f2c4e0a7b1d" + "0" * 52)},
)


def _png(text: dict, compressed: bool) -> bytes:
    import io

    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    for k, v in text.items():
        info.add_text(k, v, zip=compressed)
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def _planted(tmp: Path) -> dict[str, bytes]:
    """One file per container, each with one statistic of :data:`PLANTED` in one form (see the test)."""
    import base64
    import io
    import sqlite3
    import zipfile

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from affine import Affine
    from rasterio.io import MemoryFile

    files = {
        "manifest.json": json.dumps({"note": "chosen from 1\u2009987 people"}, ensure_ascii=True).encode(),
        "heatmap.csv": b"ix,estimate\n0,4.632e+03\n",
        "figure.png": _png({"Source": "the west edge at 58.61272"}, compressed=True),
        "report.html": (
            "<p>1&#8239;987 people</p><img src='data:image/png;base64,"
            + base64.b64encode(_png({"Title": "clinic_visits_qzx"}, compressed=False)).decode()
            + "'>"
        ).encode(),
    }
    pixels = np.zeros((1, 8, 8), dtype=np.float32)
    pixels[0, 3, 3] = 1987.0
    with MemoryFile() as mf:
        profile = {"driver": "GTiff", "width": 8, "height": 8, "count": 1, "dtype": "float32"}
        with mf.open(**profile, transform=Affine(1.0, 0.0, 0.0, 0.0, -1.0, 8.0), compress="deflate") as dst:
            dst.write(pixels)
            dst.update_tags(note="drawn from 4632 records")
        files["heatmap.tif"] = mf.read()
    table = pa.table({"estimate": [0.5, 1.5, -34.4327163549]}).replace_schema_metadata({"made": "sha 9F2C4E0A7B1D"})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    files["heatmap.parquet"] = buf.getvalue()
    db = tmp / "r.gpkg"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE regions (id TEXT, note TEXT)")
    con.execute("INSERT INTO regions VALUES ('a', 'the top edge is at y = 12345.7 m')")
    con.commit()
    con.close()
    files["regions.gpkg"] = db.read_bytes()
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("clinic_visits_qzx.csv", b"")
        z.writestr("inner.csv", pd.DataFrame({"n": [1.987e3]}).to_csv(index=False))
    files["release.zip"] = zbuf.getvalue()
    return files


def test_the_scan_finds_every_form_in_every_container(tmp_path):
    """Each statistic planted in one form and one container is found there, compressed ones included."""
    found = {(f.where.split(" (")[0], f.what.split(" (")[0]) for f in R.scan(_planted(tmp_path), PLANTED)}
    expected = {
        ("manifest.json", "the number of people"),  # 1 987 with a thin space, escaped as \u2009 in the JSON
        ("heatmap.csv", "the number of records"),  # 4.632e+03
        ("figure.png", "the westmost coordinate"),  # rounded to 5 decimals in a compressed text chunk
        ("report.html", "the number of people"),  # 1 987 with a narrow no-break space, as an HTML entity
        ("report.html#embedded0.png", "file stem"),  # in a PNG embedded in the page
        ("heatmap.tif", "the number of people"),  # a pixel of a deflated GeoTIFF: 1987.0 in float32
        ("heatmap.tif", "the number of records"),  # 4632 in one of its tags
        ("heatmap.parquet", "the northmost coordinate"),  # a zstd-compressed column value
        ("heatmap.parquet", "file sha256"),  # its first 12 hex digits, in capitals, in the schema's metadata
        ("regions.gpkg", "the y max in metres"),  # rounded to 1 decimal in a GeoPackage table
        ("release.zip", "file stem"),  # a member's name
        ("release.zip!inner.csv", "the number of people"),  # 1987.0 in a deflated member
    }
    assert expected <= found, sorted(expected - found)


def test_the_scan_finds_nothing_in_numbers_that_only_look_alike():
    text = (
        "19870 0.1987 1987.5 21,987 1,987,000 1.9871e3 11987 x1987 1987px 58.61 58.612718394612 34.4327163550 "
        "12345.68x 9f2c4e0a7b1e clinic_visits_qzy"
    )
    assert R.scan({"clean.txt": text.encode()}, PLANTED) == []


def test_the_scan_takes_no_four_bytes_of_a_compressed_stream_for_a_float32():
    """A file's own bytes are searched for the float64 forms only, its decompressed pixels and blobs for the float32
    ones too (``R.Values``): four bytes of a stream (here an image's one pixel, stored) spell one of 26 float32
    forms once in 165 million, at random."""
    import io
    import struct

    from PIL import Image

    colour = struct.pack("<f", 1987.0)  # (0, 96, 248, 68): a blue, a quarter opaque
    buf = io.BytesIO()
    Image.new("RGBA", (1, 1), tuple(colour)).save(buf, format="PNG", compress_level=0)
    assert colour in buf.getvalue()
    assert R.scan({"figure.png": buf.getvalue()}, PLANTED) == []


def test_the_scan_reads_what_a_file_holds_and_nothing_of_its_own(tmp_path):
    """Every piece the scan searches is a function of the file's bytes: read twice, the same. What a reader adds
    at random (GDAL's name for an in-memory GeoTIFF holds a fresh UUID, whose groups of four hex digits match a
    four-digit count once in about 4,096 reads) would be a finding no release holds, at random."""
    for name, data in _planted(tmp_path).items():
        assert list(R.parts(name, data)) == list(R.parts(name, data)), name


def test_the_noise_check_flags_the_truth_and_passes_noisy_counts():
    """At a fixed seed: noisy counts pass under their noise's allowance (discrete Laplace: exact equality in
    about tanh(ε/2) of the cells), the truth itself is flagged under every mechanism's allowance."""
    rng = np.random.default_rng(11)
    truth = rng.poisson(rng.choice([0.0, 3.0], size=1024, p=[0.8, 0.2])).astype(np.float64)
    alpha = math.exp(-EPS)
    discrete = rng.geometric(1 - alpha, 1024) - rng.geometric(1 - alpha, 1024)  # discrete Laplace of scale 1/ε
    laplace = rng.laplace(0, 1 / EPS, 1024)
    assert not R.too_many_equal(*R.equal_counts(truth + discrete, truth), noise_mass("flat_onehot", EPS))
    assert not R.too_many_equal(*R.equal_counts(truth + laplace, truth), noise_mass("identity", EPS))
    for mechanism in FAMILIES.values():
        assert R.too_many_equal(*R.equal_counts(truth, truth), noise_mass(mechanism, EPS)), mechanism
    # a quarter of the cells left exact, among discrete noise: flagged too
    leaky = np.where(np.arange(1024) % 4 == 0, truth, truth + discrete)
    assert R.too_many_equal(*R.equal_counts(leaky, truth), noise_mass("flat_onehot", EPS))
