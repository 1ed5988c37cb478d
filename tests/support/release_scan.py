"""The release scan: what identifies a private input file, searched for in every byte of a release.

A release (``python -m engine release``, the dashboard's Release downloads) may hold DP outputs, public
parameters and declared side information, nothing else. The statistics that identify the private input
(its number of people and of records, its extreme coordinates in degrees and in the run's local metres) and
what names it on the server (its path, folder, name and hashes) must appear in no release file, in any form
they could be written, raw or inside a container: :func:`scan` decodes zips (and their member names), JSON,
HTML (and the PNGs it embeds), PNG text chunks, GeoTIFF tags and pixels (rasterio), GeoParquet values and
metadata (pyarrow) and GeoPackage tables (sqlite) before searching. The statistical check
(:func:`equal_counts`, :func:`too_many_equal`) asks whether released cells or regions equal their true
counts more often than the noise allows.

Used by the tests of every door (``test_release_scan.py``, the browser test of ``test_browser_release.py``):
a new door builds its files as a dict name -> bytes and calls :func:`scan`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
import os
import re
import sqlite3
import struct
import tempfile
import urllib.parse
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
from scipy import stats

from tests.support import ROOT

ALPHA = 1e-3  # false-alarm rate of the statistical check, per release
# thousands separators: comma, spaces (normal, thin, narrow no-break, no-break), apostrophe, underscore
SEPARATORS = (",", " ", "\u2009", "\u202f", "\u00a0", "'", "_")


# ------------------------------------------------------------------ the private input and its statistics
@dataclass(frozen=True)
class Secrets:
    """What identifies a private input: ``counts`` (label -> whole number), ``degrees`` and ``metres`` (label ->
    coordinate), ``means`` (label -> an exact mean of an attribute), ``texts`` (label -> a path, name or hash:
    searched as it is, case-insensitively)."""

    counts: dict[str, int]
    degrees: dict[str, float]
    metres: dict[str, float] = field(default_factory=dict)
    means: dict[str, float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)


EXTREMES = (  # west, east, south, north: four people far from the rest, with ten decimals
    (-58.6127183946, -34.6051234567),
    (-58.2218364519, -34.6240987654),
    (-58.4217193846, -34.7794817263),
    (-58.4093817264, -34.4327163549),
)


def private_city(folder: Path, name: str, people: int = 1987, seed: int = 5) -> Path:
    """A CSV of ``people`` people (``user_id,lon,lat,value``: an age on each record), most with several records,
    around a made-up place at negative coordinates, written with ten decimals. Four people far from the rest hold
    the extreme coordinates (:data:`EXTREMES`), so that no public frame or DP quantile lands on them by chance."""
    rng = np.random.default_rng(seed)
    k = np.r_[rng.integers(2, 5, people // 3), rng.integers(1, 4, people - people // 3)]  # records per person
    who = np.repeat(np.arange(people), k)
    pts = rng.normal(0, 0.03, (people, 2))[who] + rng.normal(0, 0.004, (who.size, 2)) + (-58.4173, -34.6118)
    first = np.flatnonzero(np.r_[True, who[1:] != who[:-1]])  # each person's first row
    pts[first[[0, 7, 11, 13]]] = EXTREMES
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    age = rng.integers(18, 91, people)[who]
    rows = [f"v{u:05d},{a:.10f},{b:.10f},{v}" for u, (a, b), v in zip(who, pts, age)]
    path.write_text("user_id,lon,lat,value\n" + "\n".join(rows) + "\n")
    return path


REGION_GAP_M = 0.02 * 111_320 * math.cos(math.radians(34.7))  # the gap between two squares, in metres at least
REGION_NAMES = ("Alba", "Bruma", "Cierzo", "Dunas", "Escarcha", "Fresno", "Glaciar", "Helecho")


def region_file(folder: Path, name: str) -> Path:
    """A GeoJSON of 16 named squares (``code``, ``name``) of 0.02° on a 4 x 4 lattice over the bulk of
    :func:`private_city`, 0.02° apart: more than a cell of a depth-5 grid over its frame, so no cell meets two
    squares and the squares' noise is independent wherever the cells' is."""
    feats = []
    for i in range(16):
        cx = -58.4173 + 0.04 * (i % 4 - 1.5)
        cy = -34.6118 + 0.04 * (i // 4 - 1.5)
        ring = [[cx - 0.01, cy - 0.01], [cx + 0.01, cy - 0.01], [cx + 0.01, cy + 0.01], [cx - 0.01, cy + 0.01]]
        props = {"code": f"Q{i + 1:02d}", "name": f"Barrio {REGION_NAMES[i % 8]} {'Norte' if i < 8 else 'Sur'}"}
        feats.append(
            {"type": "Feature", "properties": props, "geometry": {"type": "Polygon", "coordinates": [ring + ring[:1]]}}
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
    return path


def _points(path: Path, column: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(person index of each row, lon/lat of each row or its ``column``) of a :func:`private_city` file, read
    without the engine."""
    import pandas as pd

    df = pd.read_csv(path)
    return pd.factorize(df["user_id"])[0], df[column or ["lon", "lat"]].to_numpy(np.float64)


def _to_local(lonlat: np.ndarray, crs: str) -> np.ndarray:
    from pyproj import CRS, Transformer

    t = Transformer.from_crs(CRS.from_epsg(4326), CRS.from_proj4(crs), always_xy=True)
    return np.column_stack(t.transform(lonlat[:, 0], lonlat[:, 1]))


def hex_forms(label: str, hexdigest: str) -> dict[str, str]:
    """A hash in full and its first 12 hex digits (a shortened hash confirms a guess as well)."""
    return {label: hexdigest, f"{label} (first 12 hex digits)": hexdigest[:12]}


def _hash_forms(label: str, data: bytes) -> dict[str, str]:
    out = {}
    for algo in ("sha256", "sha1", "md5"):
        h = hashlib.new(algo, data)
        out |= hex_forms(f"{label} {algo}", h.hexdigest())
        out[f"{label} {algo} (base64)"] = base64.b64encode(h.digest()).decode().rstrip("=")
        out[f"{label} {algo} (base64url)"] = base64.urlsafe_b64encode(h.digest()).decode().rstrip("=")
    return out


def secrets_of(path: Path, crs: str | None = None, folders=(), texts: dict | None = None) -> Secrets:
    """The statistics that identify the private file ``path`` (read here, not by the engine): its people and
    records, its extreme longitudes and latitudes, and with ``crs`` (the release's local CRS) its extreme x and y
    in metres; the total and the means of its ``value`` column; its path, folder, name, stem and hashes, the
    server ``folders`` (the test's temporary folder, the system's, the repository, the cache), and ``texts``
    (label -> anything else that names it)."""
    who, ll = _points(path)
    value = _points(path, "value")[1]
    share = 1.0 / np.bincount(who)[who]  # each person's records weighted to total 1
    deg = {"west": ll[:, 0].min(), "east": ll[:, 0].max(), "south": ll[:, 1].min(), "north": ll[:, 1].max()}
    metres = {}
    if crs:
        xy = _to_local(ll, crs)
        metres = {"x min": xy[:, 0].min(), "x max": xy[:, 0].max(), "y min": xy[:, 1].min(), "y max": xy[:, 1].max()}
    named = {"file path": str(path.resolve()), "file folder": str(path.resolve().parent) + os.sep}
    named |= {"file name": path.name, "file stem": path.stem}
    named |= _hash_forms("file", path.read_bytes())
    server = [tempfile.gettempdir(), str(ROOT), os.environ.get("HEATMAP_CACHE_DIR", ""), *map(str, folders)]
    named |= {f"server folder {f}": f.rstrip(os.sep) + os.sep for f in server if f}
    named |= texts or {}
    return Secrets(
        counts={
            "number of people": int(who.max()) + 1,
            "number of records": int(who.size),
            "total of the values": int(value.sum()),
        },
        degrees={k: float(v) for k, v in deg.items()},
        metres={k: float(v) for k, v in metres.items()},
        means={
            "value over the records": float(value.mean()),
            "value over the people": float((value * share).sum() / share.sum()),
        },
        texts=named,
    )


def ledger_fingerprint(path: Path) -> dict[str, str]:
    """The ledger's fingerprint of the people in an uploaded ``path`` (a hash of them, as good as the file's)."""
    from engine.data.files import load_file
    from engine.run.bookkeeping import fingerprint_people

    fp = fingerprint_people(load_file(path.read_bytes(), path.name)).split(":")[-1]
    return hex_forms("the ledger's fingerprint of the file", fp)


# ------------------------------------------------------------------ the forms a number can be written in
def integer_forms(n: int) -> set[str]:
    """``n`` as a text may write it: 1987, 1,987 and the other thousands separators, 1987.0, 1.987e3,
    1.987e+03, 1.987E+3, 1.987000e+03, ..."""
    s = str(n)
    out = {s} | {f"{s}.{'0' * k}" for k in range(1, 4)}
    if n >= 1000:
        out |= {f"{n:,}".replace(",", sep) for sep in SEPARATORS}
    digits, exp = s.rstrip("0") or "0", len(s) - 1
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    for e in (f"{exp}", f"+{exp}", f"+{exp:02d}", f"{exp:02d}"):
        out |= {f"{mant}e{e}", f"{mant}E{e}"}
    for k in range(max(len(digits) - 1, 1), 8):
        out |= {f"{n:.{k}e}", f"{n:.{k}E}"}
    return out


def _decimals(v: float, d: int, rounding) -> str:
    return str(Decimal(repr(v)).quantize(Decimal(1).scaleb(-d), rounding=rounding))


def coordinate_forms(v: float, decimals=range(3, 11)) -> set[str]:
    """``|v|`` rounded (half up, half even) and truncated to each of ``decimals``, and in full. The sign is left
    out: -58.563, −58.563 (a minus sign) and 58.563° W all hold the unsigned form."""
    a = abs(v)
    out = {repr(a)}
    for d in decimals:
        out |= {_decimals(a, d, r) for r in (ROUND_HALF_UP, ROUND_HALF_EVEN, ROUND_DOWN)}
    return out


def binary_forms(v: float) -> set[bytes]:
    """``v`` as float64 and float32, little- and big-endian (whole numbers as integers are left out: a 4-byte
    1987 is as likely an offset inside a GeoTIFF or GeoPackage as a leak). The float32 forms are searched in
    :class:`Values` only (see there)."""
    return {struct.pack(f, v) for f in ("<d", ">d", "<f", ">f")}


class Values(bytes):
    """Bytes a decoder took out of a container: its pixels or its blobs, uncompressed. A file's own bytes are
    searched for the float64 forms of :func:`binary_forms` but not its float32 ones: most of those bytes are
    compressed streams, in effect random, where 26 four-byte forms would turn up by chance once in 2^32 / 26 (165
    million) bytes: once in about 1,300 of the dashboard's releases (130 kB of such bytes each). What the streams
    hold is searched here, decompressed."""


# ------------------------------------------------------------------ decoding release files
PNG = b"\x89PNG\r\n\x1a\n"
SQLITE = b"SQLite format 3\x00"
TIFF = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


def parts(name: str, data: bytes) -> Iterator[tuple[str, str | bytes]]:
    """Every piece of the file ``name`` the scan reads: its name, its raw bytes, and what its container holds
    (recursively). A file the scan cannot decode fails the test: an unread file is not a clean one."""
    yield f"{name} (its name)", name
    yield name, data
    try:
        yield from _decoded(name, data)
    except AssertionError:
        raise
    except Exception as exc:  # any library's error: the file went unread
        raise AssertionError(f"the release scan could not read {name}: {type(exc).__name__}: {exc}") from exc


def _decoded(name: str, data: bytes) -> Iterator[tuple[str, str | bytes]]:
    low = name.lower()
    if data[:4] == b"PK\x03\x04" or low.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            yield (
                f"{name} (member names and comments)",
                "\n".join(
                    [z.comment.decode("utf-8", "replace")]
                    + [f"{i.filename}\n{i.comment.decode('utf-8', 'replace')}" for i in z.infolist()]
                ),
            )
            for info in z.infolist():
                yield from parts(f"{name}!{info.filename}", z.read(info))
    elif data[:8] == PNG:
        yield from _png(name, data)
    elif data[:4] in TIFF:
        yield from _tiff(name, data)
    elif data[:4] == b"PAR1":
        yield from _parquet(name, data)
    elif data[:16] == SQLITE:
        yield from _sqlite(name, data)
    else:
        text = data.decode("utf-8")  # every text file the product writes is UTF-8
        if low.endswith((".html", ".htm")):
            yield from _html(name, text)
        elif low.endswith((".json", ".geojson")):
            yield f"{name} (decoded JSON)", "\n".join(_json_items(json.loads(text)))


def _json_items(x) -> Iterator[str]:
    if isinstance(x, dict):
        for k, v in x.items():
            yield str(k)
            yield from _json_items(v)
    elif isinstance(x, list):
        for v in x:
            yield from _json_items(v)
    else:
        yield repr(x) if isinstance(x, float) else str(x)


def _html(name: str, text: str) -> Iterator[tuple[str, str | bytes]]:
    uri = re.compile(r"data:([\w/+.-]+);base64,([A-Za-z0-9+/=]+)")
    for i, m in enumerate(uri.finditer(text)):
        ext = {"image/png": ".png"}.get(m.group(1), "")
        yield from parts(f"{name}#embedded{i}{ext}", base64.b64decode(m.group(2)))
    yield f"{name} (unescaped, embedded files left out)", html.unescape(uri.sub("", text))


def _png(name: str, data: bytes) -> Iterator[tuple[str, str | bytes]]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img.load()  # text chunks after the image data are read with it
        chunks = [f"{k}={v}" for k, v in {**img.info, **getattr(img, "text", {})}.items()]
        chunks += [f"exif {k}={v}" for k, v in img.getexif().items()]
    yield f"{name} (text chunks, zTXt and iTXt decompressed)", "\n".join(chunks)


def _numbers_text(a) -> str:
    return " ".join(repr(float(v)) for v in np.asarray(a, dtype=np.float64).ravel())


def _tiff(name: str, data: bytes) -> Iterator[tuple[str, str | bytes]]:
    from rasterio.io import MemoryFile

    with MemoryFile(data) as mf, mf.open() as ds:
        here = mf.name  # the scan's own in-memory path, with a fresh random UUID on each read
        meta = [f"{k}={v}" for k, v in ds.tags().items()]
        for ns in ds.tag_namespaces() or []:
            meta += [f"{ns}:{k}={v}" for k, v in ds.tags(ns=ns).items()]
        for b in range(1, ds.count + 1):
            meta += [f"band {b} {k}={v}" for k, v in ds.tags(b).items()]
            for ns in ds.tag_namespaces(b) or []:
                meta += [f"band {b} {ns}:{k}={v}" for k, v in ds.tags(b, ns=ns).items()]
        meta += [str(x) for x in (*ds.descriptions, *ds.units, ds.nodata, ds.crs.to_wkt() if ds.crs else "")]
        meta.append(_numbers_text(list(ds.transform)[:6]))
        pixels = ds.read()
    # GDAL names the dataset by where it was opened (its DERIVED_SUBDATASETS domain), which no file holds: a
    # UUID's groups of four hex digits would match a four-digit count at random (1 in 4,096 reads for the third
    # group, always a 4 and three random digits). The file's name stands in for that path.
    yield f"{name} (tags, descriptions, units, CRS, transform)", "\n".join(meta).replace(here, name)
    yield f"{name} (pixel values, decompressed)", _numbers_text(pixels)
    yield f"{name} (pixel bytes, decompressed)", Values(pixels.tobytes())


def _parquet(name: str, data: bytes) -> Iterator[tuple[str, str | bytes]]:
    import pyarrow.parquet as pq

    f = pq.ParquetFile(io.BytesIO(data))
    md = f.metadata
    meta = [str(md.created_by)] + [f"{k!r}={v!r}" for k, v in (md.metadata or {}).items()]
    meta += [f"{k.decode()}={v.decode('utf-8', 'replace')}" for k, v in (md.metadata or {}).items()]
    for field_ in f.schema_arrow:
        meta += [field_.name] + [f"{k!r}={v!r}" for k, v in (field_.metadata or {}).items()]
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            st = md.row_group(g).column(c).statistics
            if st is not None and st.has_min_max:
                meta += [repr(st.min), repr(st.max)]
    yield f"{name} (schema, key-value metadata, statistics)", "\n".join(meta)
    table = f.read()
    values, blobs = [], []
    for col in table.columns:
        for v in col.to_pylist():
            (blobs if isinstance(v, bytes) else values).append(v)
    yield (
        f"{name} (column values, decompressed)",
        "\n".join(repr(v) if isinstance(v, float) else str(v) for v in values),
    )
    yield f"{name} (binary values: the geometries)", Values(b"".join(blobs))


def _sqlite(name: str, data: bytes) -> Iterator[tuple[str, str | bytes]]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "scan.sqlite"
        db.write_bytes(data)
        con = sqlite3.connect(db)
        try:
            objects = con.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
            values, blobs = [f"{t} {n} {s}" for t, n, s in objects], []
            for kind, table, sql in objects:
                if kind != "table" or "VIRTUAL TABLE" in (sql or "").upper():
                    continue  # a virtual table (the R-tree index) reads its shadow tables, scanned themselves
                for row in con.execute(f'SELECT * FROM "{table}"'):
                    blobs += [v for v in row if isinstance(v, bytes)]
                    values += [repr(v) if isinstance(v, float) else str(v) for v in row if not isinstance(v, bytes)]
        finally:
            con.close()
    yield f"{name} (tables, schema and values)", "\n".join(values)
    yield f"{name} (binary values: the geometries)", Values(b"".join(blobs))


# ------------------------------------------------------------------ the search
BEFORE = r"(?<![0-9A-Za-z_.])"  # not inside a longer number or word, nor the decimals of one
AFTER = r"(?![0-9A-Za-z_])(?!\.[0-9])(?!,[0-9]{3}(?![0-9]))"  # nor followed by more digits or a thousands group


@dataclass(frozen=True)
class Finding:
    where: str
    what: str
    form: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} written as {self.form!r}"


def _patterns(secrets: Secrets):
    numeric: dict[str, str] = {}
    binary: dict[bytes, str] = {}
    for label, n in secrets.counts.items():
        numeric |= {f: f"the {label} ({n:,})" for f in integer_forms(n)}
        binary |= {b: f"the {label} ({n:,}) in binary" for b in binary_forms(float(n))}
    for label, v in secrets.degrees.items():
        numeric |= {f: f"the {label}most coordinate ({v!r}°)" for f in coordinate_forms(v)}
        binary |= {b: f"the {label}most coordinate ({v!r}°) in binary" for b in binary_forms(v)}
    for label, v in secrets.means.items():
        numeric |= {f: f"the true mean of the {label} ({v!r})" for f in coordinate_forms(v)}
        binary |= {b: f"the true mean of the {label} ({v!r}) in binary" for b in binary_forms(v)}
    for label, v in secrets.metres.items():
        numeric |= {f: f"the {label} in metres ({v!r})" for f in coordinate_forms(v, range(0, 4))}
        binary |= {b: f"the {label} in metres ({v!r}) in binary" for b in binary_forms(v)}
    forms = sorted(numeric, key=len, reverse=True)  # the longest form first where several start at one place
    regex = re.compile(BEFORE + "(" + "|".join(map(re.escape, forms)) + ")" + AFTER)
    texts = {}
    for label, t in secrets.texts.items():
        for form in {t, json.dumps(t)[1:-1], urllib.parse.quote(t)}:
            texts[form.lower()] = label
    return regex, numeric, binary, texts


def scan(files: dict[str, bytes], secrets: Secrets) -> list[Finding]:
    """Every place in ``files`` (name -> bytes, as released) where something of ``secrets`` is written."""
    regex, numeric, binary, texts = _patterns(secrets)
    wide = {b: label for b, label in binary.items() if len(b) == 8}
    found: list[Finding] = []
    for name, data in files.items():
        for where, piece in parts(name, data):
            if isinstance(piece, bytes):
                forms = binary if isinstance(piece, Values) else wide
                found += [Finding(where, label, repr(b)) for b, label in forms.items() if b in piece]
                piece = piece.decode("utf-8", "replace")
            found += [Finding(where, numeric[m.group(1)], m.group(1)) for m in regex.finditer(piece)]
            low = piece.lower()
            found += [Finding(where, label, form) for form, label in texts.items() if form in low]
    return list(dict.fromkeys(found))


# ------------------------------------------------------------------ the statistical check
def true_cells(path: Path, grid: dict) -> tuple[np.ndarray, np.ndarray]:
    """The true count of every cell of a release's ``grid`` (its manifest's ``grid``), read off ``path``: each
    person counted once (a person's records weighted to total 1) and each record counted once."""
    who, ll = _points(path)
    n, cell = int(grid["cells_per_side"]), float(grid["cell_m"])
    xy = _to_local(ll, grid["crs"])
    ix = np.floor((xy[:, 0] - grid["x0_m"]) / cell).astype(np.int64)
    iy = np.floor((xy[:, 1] - grid["y0_m"]) / cell).astype(np.int64)
    ok = (ix >= 0) & (ix < n) & (iy >= 0) & (iy < n)
    per_person = 1.0 / np.bincount(who)[who]
    flat = iy[ok] * n + ix[ok]
    people = np.bincount(flat, weights=per_person[ok], minlength=n * n).reshape(n, n)
    records = np.bincount(flat, minlength=n * n).reshape(n, n).astype(np.float64)
    return people, records


def released_cells(csv_bytes: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The estimates of a release's grid CSV (``ix``, ``iy``, ``estimate``, ``lon``, ``lat``) as an n x n array,
    and the cells' centres (n x n x 2, lon/lat)."""
    import pandas as pd

    df = pd.read_csv(io.BytesIO(csv_bytes), comment="#")
    iy, ix = df["iy"].to_numpy(), df["ix"].to_numpy()
    est, centre = np.full((n, n), np.nan), np.full((n, n, 2), np.nan)
    est[iy, ix] = df["estimate"].to_numpy(np.float64)
    centre[iy, ix] = df[["lon", "lat"]].to_numpy(np.float64)
    return est, centre


def inside_regions(lonlat: np.ndarray, regions: Path) -> np.ndarray:
    """Whether each point (..., 2: lon, lat) lies in one of the polygons of the GeoJSON ``regions``."""
    import shapely

    geoms = [shapely.geometry.shape(f["geometry"]) for f in json.loads(regions.read_text())["features"]]
    flat = lonlat.reshape(-1, 2)
    hit = np.zeros(len(flat), dtype=bool)
    for g in geoms:
        hit |= shapely.contains_xy(g, flat[:, 0], flat[:, 1])
    return hit.reshape(lonlat.shape[:-1])


def true_regions(path: Path, regions: Path) -> dict[str, tuple[float, float]]:
    """Each region's true count read off ``path`` (id -> (people, records)): a location counts in the first
    region holding it, a person's records weighted to total 1."""
    import shapely

    who, ll = _points(path)
    per_person = 1.0 / np.bincount(who)[who]
    feats = json.loads(regions.read_text())["features"]
    taken = np.zeros(len(ll), dtype=bool)
    out = {}
    for f in feats:
        inside = shapely.contains_xy(shapely.geometry.shape(f["geometry"]), ll[:, 0], ll[:, 1]) & ~taken
        taken |= inside
        out[f["properties"]["code"]] = (float(per_person[inside].sum()), float(inside.sum()))
    return out


def released_regions(csv_bytes: bytes) -> dict[str, float]:
    import pandas as pd

    df = pd.read_csv(io.BytesIO(csv_bytes), comment="#", dtype={"id": str})
    return dict(zip(df["id"], df["estimate"].astype(np.float64)))


def equal_counts(released: np.ndarray, truth: np.ndarray) -> tuple[int, int]:
    """(how many released values equal their true count exactly, how many values there are)."""
    r = np.asarray(released, dtype=np.float64).ravel()
    ok = np.isfinite(r)
    return int((ok & (r == np.asarray(truth, dtype=np.float64).ravel())).sum()), int(ok.sum())


def too_many_equal(k: int, n: int, p: float, alpha: float = ALPHA) -> bool:
    """Whether ``k`` exact equalities in ``n`` independent values are more than noise that puts a value on any
    given number with probability at most ``p`` allows: a one-sided binomial test at false-alarm rate ``alpha``
    (for continuous noise, ``p = 0``: any equality)."""
    if p <= 0:
        return k > 0
    return bool(stats.binom.sf(k - 1, n, p) < alpha)


# ------------------------------------------------------------------ the dashboard's downloads (AppTest)
def record_downloads(monkeypatch) -> list:
    """Keep the media file manager of every AppTest run: the page's download data lives there."""
    from streamlit.runtime.media_file_manager import MediaFileManager
    from streamlit.testing.v1 import app_test

    made = []

    class Recording(MediaFileManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(app_test, "MediaFileManager", Recording)
    return made


def page_downloads(at, managers: list) -> dict[str, bytes]:
    """The files the page's download buttons offer after its last run, by file name, made as the server makes
    them when a browser asks: a deferred button's callable run by the media file manager, a static button's
    stored bytes."""
    mgr = managers[-1]
    out = {}
    for b in at.get("download_button"):
        p = b.proto
        url = mgr.execute_deferred(p.deferred_file_id) if p.deferred_file_id else p.url
        f = mgr._storage.get_file(url.rsplit("/", 1)[-1])
        out[f.filename or str(p.label)] = f.content
    return out
