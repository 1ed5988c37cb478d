"""Population rasters (``hdx:<place>``): a GeoTIFF of people per pixel sampled into one location per
person, as Bagdasaryan et al. (2022, Section 6.1) did with HDX rasters of Lagos and Mayotte. Read
with ``rasterio``; downloaded once and checked like every online source (:mod:`.download`), and the
window over the place's box cached as a small ``.npz``.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import DataError, ParamError
from . import catalogue
from .dataset import MAX_POINTS, Dataset, DatasetMeta, make_dataset
from .download import MiB, Progress, Remote, derived_key, discard, download, downloads_dir, load_npz, save_npz

# Meta/CIESIN High Resolution Settlement Layer for Nigeria, as published on HDX (the source the paper names)
LAGOS_URL = (
    "https://data.humdata.org/dataset/62ec6c48-2f23-476b-8c1e-e924ad79908d/resource/"
    "ec1ac1b2-616e-43a7-ba8c-29eaf3479f24/download/population_nga_2018-10-01.zip"
)
# WorldPop 2020 people per pixel for Mayotte (also listed on HDX); see PLACES["mayotte"].note
MAYOTTE_URL = "https://data.worldpop.org/GIS/Population/Global_2000_2020/2020/MYT/myt_ppp_2020.tif"
# neither HDX nor WorldPop prints a checksum, and these files could not be fetched when this was written
LAGOS = Remote.unpublished(LAGOS_URL, "HDX")
MAYOTTE = Remote.unpublished(MAYOTTE_URL, "WorldPop")
MAX_RASTER_BYTES = 2048 * MiB  # a national HRSL archive is a few hundred MB


@dataclass(frozen=True)
class RasterPlace:
    key: str
    label: str
    remote: Remote
    citation: str
    license: str
    note: str = ""


HRSL_CITATION = (
    "Facebook Connectivity Lab and Center for International Earth Science Information Network (CIESIN), "
    "Columbia University. 2016. High Resolution Settlement Layer (HRSL). Source imagery for HRSL (c) 2016 "
    "DigitalGlobe. Published on the Humanitarian Data Exchange (HDX), data.humdata.org"
)
WORLDPOP_CITATION = (
    "WorldPop (www.worldpop.org). 2018. Global High Resolution Population Denominators Project, Bill and "
    "Melinda Gates Foundation (OPP1134076). doi:10.5258/SOTON/WP00645"
)

PLACES = {
    "lagos": RasterPlace(
        "lagos",
        "Lagos population (HRSL)",
        LAGOS,
        HRSL_CITATION,
        "CC BY 4.0",
        "Nigeria-wide HRSL archive (large, a few hundred MB); the Lagos box is read from it.",
    ),
    "mayotte": RasterPlace(
        "mayotte",
        "Mayotte population (WorldPop)",
        MAYOTTE,
        WORLDPOP_CITATION,
        "CC BY 4.0",
        "The paper used Meta's HRSL raster of Mayotte from HDX; its download address is not stable, so the "
        "default is WorldPop's 100 m people-per-pixel raster of Mayotte (pass url= for an HRSL GeoTIFF or zip).",
    ),
}


def _rasterio():
    try:
        import rasterio
    except ImportError:  # pragma: no cover - rasterio is a requirement
        raise DataError("reading population rasters needs the 'rasterio' package: pip install rasterio") from None
    return rasterio


def _raster_member(path: Path, verify: bool = False) -> str | None:
    """The GeoTIFF inside a zip archive (None for a bare GeoTIFF); ``verify`` checks every CRC."""
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(4)
        if head not in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
            raise DataError("neither a GeoTIFF nor a zip archive")
        return None
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip() if verify else None
            tifs = [n for n in z.namelist() if n.lower().endswith((".tif", ".tiff"))]
    except (zipfile.BadZipFile, OSError, zlib.error, EOFError) as exc:
        raise DataError(f"corrupt zip archive ({exc})") from None
    if bad is not None:
        raise DataError(f"corrupt zip archive (member {bad} fails its CRC check)")
    if not tifs:
        raise DataError("the zip archive holds no .tif raster")
    return sorted(tifs, key=len)[0]


def _raster_uri(path: Path, member: str | None = None) -> str:
    member = member or _raster_member(path)
    # braces mark where the archive's path ends, so GDAL needs no .zip in its name (a download's temporary has none)
    return str(path) if member is None else f"/vsizip/{{{path}}}/{member}"


def _read_window(path: Path, bbox) -> dict:
    """People-per-pixel values of the raster window covering ``bbox`` and its geotransform."""
    rio = _rasterio()
    from rasterio.warp import transform_bounds
    from rasterio.windows import Window

    with rio.open(_raster_uri(path)) as src:
        b = bbox
        if src.crs is not None and not src.crs.is_geographic:
            b = transform_bounds("EPSG:4326", src.crs, *bbox)
        inv = ~src.transform
        cols, rows = zip(*(inv @ (x, y) for x in (b[0], b[2]) for y in (b[1], b[3])), strict=True)
        c0, c1 = max(0, int(np.floor(min(cols)))), min(src.width, int(np.ceil(max(cols))))
        r0, r1 = max(0, int(np.floor(min(rows)))), min(src.height, int(np.ceil(max(rows))))
        if c1 <= c0 or r1 <= r0:
            raise DataError(
                f"the raster (bounds {tuple(round(v, 4) for v in src.bounds)}) does not cover the box {bbox}"
            )
        win = Window(c0, r0, c1 - c0, r1 - r0)
        arr = src.read(1, window=win, masked=True).astype(np.float64).filled(0.0)
        t = src.transform  # the window's geotransform: shift the origin by (c0, r0) pixels
        tr = (t.a, t.b, t.a * c0 + t.b * r0 + t.c, t.d, t.e, t.d * c0 + t.e * r0 + t.f)
        crs = src.crs.to_wkt() if src.crs is not None else ""
        geographic = bool(src.crs is None or src.crs.is_geographic)
    arr[~np.isfinite(arr) | (arr < 0)] = 0.0
    return {
        "values": arr.astype(np.float32),
        "transform": np.array(tr, dtype=np.float64),
        "crs": np.array(crs),
        "geographic": np.array(geographic),
    }


def load_population_raster(
    place: str,
    *,
    url: str | None = None,
    path: str | os.PathLike | None = None,
    n: int = 0,
    seed: int = 0,
    sha256: str | None = None,
    progress: Progress | None = None,
    max_bytes: int = MAX_RASTER_BYTES,
    timeout: float = 60.0,
) -> Dataset:
    """People drawn from a population raster (a GeoTIFF of people per pixel, or a zip of one).

    As Bagdasaryan et al. (Section 6.1) read a heatmap, a pixel's value is the number of
    people located there. ``n = 0``: everyone, each pixel's fractional count rounded
    stochastically (floor plus a Bernoulli of the fraction); ``n > 0``: ``n`` people
    drawn with probability proportional to the pixel values. One location per person,
    uniform inside its pixel (the paper used the pixel itself). Deterministic by ``seed``.
    ``sha256``: the hash the downloaded file must have (None: the catalogue's, if it knows one)."""
    if place not in PLACES:
        raise ParamError(f"unknown population raster {place!r}; known: {', '.join(PLACES)}")
    if n < 0:
        raise ParamError(f"number of people must be 0 (everyone) or positive (got {n})")
    pl = PLACES[place]
    c = catalogue.city(place)
    if path:
        file = Path(path)
        if not file.is_file():
            raise DataError(f"no raster file at {file}")
        origin, sha256 = str(file), None
    else:
        origin, sha256 = url or pl.remote.url, sha256 or pl.remote.sha256
        file = None
    derived = downloads_dir() / "derived" / f"raster-{place}-{derived_key(origin, sha256, c.bbox)}.npz"
    win = load_npz(derived)
    if win is None:
        if file is None:
            file = download(
                origin,
                sha256=sha256,
                max_bytes=max_bytes,
                progress=progress,
                timeout=timeout,
                validate=check_raster,
                what="raster",
            )
            try:
                win = _read_window(file, c.bbox)
            except DataError as exc:
                if "does not cover" in str(exc):
                    raise
                raise discard(file, origin, str(exc)) from None
        else:
            try:
                win = _read_window(file, c.bbox)
            except DataError as exc:
                raise DataError(f"{file.name}: {exc}") from None
            except _rasterio().errors.RasterioIOError as exc:
                raise DataError(f"{file.name} is not a readable raster ({exc})") from None
        save_npz(derived, **win)
    values = win["values"].astype(np.float64)
    total = float(values.sum())
    if total <= 0:
        raise DataError(f"the raster has no population inside the {c.name} box")
    rng = np.random.default_rng([int(seed), 7])
    flat = values.ravel()
    if n == 0:
        base = np.floor(flat)
        counts = base.astype(np.int64) + (rng.random(flat.size) < flat - base)
        if counts.sum() > MAX_POINTS:
            raise DataError(f"{int(counts.sum()):,} people is over the limit of {MAX_POINTS:,}: choose n")
    else:
        if n > MAX_POINTS:
            raise ParamError(f"n must be at most {MAX_POINTS:,}")
        counts = rng.multinomial(n, flat / flat.sum())
    cells = np.repeat(np.arange(flat.size, dtype=np.int64), counts)
    rng.shuffle(cells)
    if cells.size == 0:
        raise DataError("no person was drawn from the raster (the population rounds to zero)")
    row, col = np.divmod(cells, values.shape[1])
    u = rng.random((cells.size, 2))
    a, b, c0, d, e, f = win["transform"]
    fx, fy = col + u[:, 0], row + u[:, 1]
    x = a * fx + b * fy + c0
    y = d * fx + e * fy + f
    if bool(win["geographic"]):
        lon, lat = x, y
    else:
        from pyproj import CRS, Transformer

        t = Transformer.from_crs(CRS.from_wkt(str(win["crs"])), CRS.from_epsg(4326), always_xy=True)
        lon, lat = t.transform(x, y)
    lon0, lat0, lon1, lat1 = c.bbox
    inside = (lon >= lon0) & (lon <= lon1) & (lat >= lat0) & (lat <= lat1)
    meta = DatasetMeta(
        name=pl.label,
        source=f"hdx:{place}",
        citation=pl.citation,
        license=pl.license,
        description=f"People sampled from a population raster inside {c.name} ({c.source}). {pl.note}",
        bbox=c.bbox,
        extra={
            "origin": origin,
            "sha256": sha256,
            "raster_people": total,
            "pixels": list(values.shape),
            "n": int(n),
            "seed": int(seed),
            "box_source": c.source,
        },
    )
    return make_dataset(np.asarray(lon)[inside], np.asarray(lat)[inside], meta)


def check_raster(path: Path) -> None:
    member = _raster_member(path, verify=True)
    rio = _rasterio()
    try:
        with rio.open(_raster_uri(path, member)) as src:
            if src.count < 1:
                raise DataError("the raster has no band")
    except rio.errors.RasterioIOError as exc:
        raise DataError(f"not a readable GeoTIFF ({exc})") from None
