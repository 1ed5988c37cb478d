"""Public datasets of the papers, downloaded once into ``cache_dir()/downloads``.

* SNAP Gowalla and Brightkite check-ins (Cho, Myers & Leskovec, KDD 2011), cut to
  a city's public box from the catalogue (``gowalla:<city>``, ``brightkite:<city>``);
  used by SNH (Gowalla), sparse EMD and federated RFF KDE (both).
* San Francisco cab pick-ups (``sf_cabs``), the SNH paper's CABS dataset.
* Population rasters (``hdx:<place>``): a GeoTIFF of people per pixel sampled into
  one location per person, as Bagdasaryan et al. (2022, Section 6.1) did with HDX
  rasters of Lagos and Mayotte. Read with ``rasterio``.

Every URL is a parameter whose default is the real public address. Downloads are
atomic (a temporary file renamed into place once complete and checked), limited
in size, report progress as ``progress(bytes_done, bytes_total_or_None)``, and
raise :class:`OfflineError` when the host cannot be reached. A corrupt or
truncated file is removed and reported with a clear :class:`DataError`. The city
cut of a check-in file and the window of a raster are cached too (small ``.npz``),
so a second load reads neither the network nor the big file.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import DataError, OfflineError, ParamError
from ..core.params import Param
from . import catalogue
from .dataset import MAX_POINTS, Dataset, DatasetMeta, make_dataset

Progress = Callable[[int, "int | None"], None]

GOWALLA_URL = "https://snap.stanford.edu/data/loc-gowalla_totalCheckins.txt.gz"
BRIGHTKITE_URL = "https://snap.stanford.edu/data/loc-brightkite_totalCheckins.txt.gz"
SF_CABS_URL = "https://github.com/szeighami/SNH/raw/master/data/CABS_SFS.npy"
# Meta/CIESIN High Resolution Settlement Layer for Nigeria, as published on HDX (the source the paper names)
LAGOS_URL = (
    "https://data.humdata.org/dataset/62ec6c48-2f23-476b-8c1e-e924ad79908d/resource/"
    "ec1ac1b2-616e-43a7-ba8c-29eaf3479f24/download/population_nga_2018-10-01.zip"
)
# WorldPop 2020 people per pixel for Mayotte (also listed on HDX); see PLACES["mayotte"].note
MAYOTTE_URL = "https://data.worldpop.org/GIS/Population/Global_2000_2020/2020/MYT/myt_ppp_2020.tif"

MiB = 1 << 20
MAX_CHECKINS_BYTES = 400 * MiB  # the SNAP files are ~100 MB
MAX_CABS_BYTES = 64 * MiB  # 3.5 MB
MAX_RASTER_BYTES = 2048 * MiB  # a national HRSL archive is a few hundred MB

SNAP_CITATION = (
    "E. Cho, S. A. Myers, J. Leskovec. Friendship and Mobility: User Movement in Location-Based Social "
    "Networks. KDD 2011. Stanford Large Network Dataset Collection (SNAP), https://snap.stanford.edu/data/"
)
SNAP_LICENSE = "SNAP research dataset: no licence stated by the publisher; cite Cho et al. (2011)"
NETWORKS = {
    "gowalla": ("Gowalla", GOWALLA_URL, "https://snap.stanford.edu/data/loc-Gowalla.html"),
    "brightkite": ("Brightkite", BRIGHTKITE_URL, "https://snap.stanford.edu/data/loc-Brightkite.html"),
}


# ------------------------------------------------------------------ downloads
def downloads_dir() -> Path:
    from ..core.cache import cache_dir

    path = cache_dir() / "downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_path(url: str) -> Path:
    """Where ``url`` is (or will be) cached: the URL's file name prefixed by a hash of the URL."""
    name = Path(urllib.parse.urlparse(url).path).name or "download"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[-80:]
    return downloads_dir() / f"{hashlib.sha256(url.encode()).hexdigest()[:12]}-{name}"


def is_cached(url: str) -> bool:
    return cache_path(url).is_file()


def download(
    url: str,
    *,
    max_bytes: int,
    progress: Progress | None = None,
    timeout: float = 60.0,
    validate: Callable[[Path], None] | None = None,
    what: str = "file",
) -> Path:
    """Fetch ``url`` into the download cache once; later calls return the cached path.

    Raises OfflineError when the host cannot be reached, DataError on an HTTP error,
    a file over ``max_bytes``, a truncated transfer or a file ``validate`` rejects."""
    final = cache_path(url)
    if final.is_file():
        return final
    scheme = urllib.parse.urlparse(url).scheme
    if scheme not in ("http", "https"):
        raise ParamError(f"download address must start with http:// or https:// (got {url!r})")
    # keep the real extension last: GDAL recognises archives (/vsizip/) by it
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part{final.suffix}")
    req = urllib.request.Request(url, headers={"User-Agent": "private-heatmap-workbench/1 (python urllib)"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            if total is not None and total > max_bytes:
                raise DataError(
                    f"the {what} at {url} is {total / MiB:,.1f} MB, over the limit of {max_bytes / MiB:,.0f} MB"
                )
            done = 0
            if progress:
                progress(0, total)
            with open(tmp, "wb") as out:
                while True:
                    chunk = resp.read(MiB)
                    if not chunk:
                        break
                    done += len(chunk)
                    if done > max_bytes:
                        raise DataError(f"the {what} at {url} is over the limit of {max_bytes / MiB:,.0f} MB")
                    out.write(chunk)
                    if progress:
                        progress(done, total)
            if total is not None and done != total:
                raise DataError(f"the download of {url} was cut short ({done:,} of {total:,} bytes); try again")
        if validate is not None:
            try:
                validate(tmp)
            except DataError as exc:
                raise DataError(f"the {what} downloaded from {url} is unusable and was discarded: {exc}") from None
        os.replace(tmp, final)
        return final
    except urllib.error.HTTPError as exc:
        raise DataError(f"{url} answered HTTP {exc.code} ({exc.reason}): the {what} is not available there") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        host = urllib.parse.urlparse(url).netloc
        raise OfflineError(
            f"could not download the {what} from {host} ({reason}): you seem to be offline. Connect to the "
            f"internet once (it is then cached), or put a copy at {final}"
        ) from None
    except http_incomplete() as exc:  # the server closed the connection early
        raise DataError(f"the download of {url} was cut short ({exc}); try again") from None
    finally:
        if tmp.exists():
            tmp.unlink(missing_ok=True)


def http_incomplete() -> tuple[type[BaseException], ...]:
    import http.client

    return (http.client.IncompleteRead, http.client.RemoteDisconnected)


def _discard(path: Path, url: str | None, reason: str) -> DataError:
    """A cached file turned out corrupt: remove it and say so (``url=None``: the user's own copy, kept)."""
    if url is None:
        return DataError(f"{path} is unusable ({reason})")
    path.unlink(missing_ok=True)
    return DataError(f"the cached copy of {url} is corrupt ({reason}); it was removed: load again to download it anew")


def _save_npz(path: Path, **arrays) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _load_npz(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # a damaged derived file is just rebuilt
        path.unlink(missing_ok=True)
        return None


def _key(*parts) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ validators
def check_gzip(path: Path) -> None:
    """Decompress the whole file (checks the CRC and that it is complete)."""
    try:
        with gzip.open(path, "rb") as f:
            while f.read(8 * MiB):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"not a complete gzip file ({exc})") from None


def check_npy(path: Path) -> None:
    _read_points_npy(path)


def _read_points_npy(path: Path) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise DataError(f"not a readable .npy array ({type(exc).__name__}: {exc})") from None
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.dtype.kind not in "fi" or arr.shape[0] == 0:
        raise DataError(f"expected an (n, 2) numeric array of (latitude, longitude), got {arr.dtype} {arr.shape}")
    return arr


def check_raster(path: Path) -> None:
    member = _raster_member(path, verify=True)
    rio = _rasterio()
    try:
        with rio.open(_raster_uri(path, member)) as src:
            if src.count < 1:
                raise DataError("the raster has no band")
    except rio.errors.RasterioIOError as exc:
        raise DataError(f"not a readable GeoTIFF ({exc})") from None


# ------------------------------------------------------------------ check-ins
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def load_checkins(
    network: str,
    city: str,
    *,
    url: str | None = None,
    path: str | os.PathLike | None = None,
    start: str = "",
    end: str = "",
    progress: Progress | None = None,
    max_bytes: int = MAX_CHECKINS_BYTES,
    timeout: float = 60.0,
) -> Dataset:
    """Check-ins of a SNAP network inside a catalogue city's box, one row per check-in,
    ``user_id`` = the SNAP user. ``start``/``end`` (YYYY-MM-DD, end exclusive) keep a period,
    e.g. Ghazi et al. used January 2010 for Gowalla and Nov-Dec 2008 for Brightkite.
    ``path``: a local copy of the SNAP .txt.gz instead of the download."""
    if network not in NETWORKS:
        raise ParamError(f"unknown check-in network {network!r}; known: {', '.join(NETWORKS)}")
    label, default_url, page = NETWORKS[network]
    url = url or default_url
    c = catalogue.city(city)
    for name, d in (("start", start), ("end", end)):
        if d and not _DATE.match(d):
            raise ParamError(f"{name} date must look like 2010-01-31 (got {d!r})")
    if start and end and end <= start:
        raise ParamError(f"the end date {end} must be after the start date {start}")
    local = Path(path) if path else None
    if local is not None:
        if not local.is_file():
            raise DataError(f"no {label} file at {local}")
        st = local.stat()
        origin = (str(local.resolve()), st.st_size, st.st_mtime_ns)
    else:
        origin = url
    derived = downloads_dir() / "derived" / f"{network}-{city}-{_key(origin, c.bbox, start, end)}.npz"
    cut = _load_npz(derived)
    if cut is None:
        if local is not None:
            cut = _cut_checkins(local, None, c.bbox, start, end)
        else:
            file = download(
                url, max_bytes=max_bytes, progress=progress, timeout=timeout, validate=check_gzip, what=f"{label} file"
            )
            cut = _cut_checkins(file, url, c.bbox, start, end)
        _save_npz(derived, **cut)
    user, lon, lat = cut["user"], cut["lon"], cut["lat"]
    period = f" from {start or 'the start'} to {end or 'the end'}" if (start or end) else ""
    if user.size == 0:
        raise DataError(f"no {label} check-ins inside the {c.name} box{period}")
    meta = DatasetMeta(
        name=f"{label} check-ins: {c.name}",
        source=f"{network}:{city}",
        citation=f"{SNAP_CITATION} ({page})",
        license=SNAP_LICENSE,
        description=f"{label} check-ins{period} inside the box {c.bbox}: {c.source}.",
        bbox=c.bbox,
        extra={
            "url": str(local) if local is not None else url,
            "box_source": c.source,
            "rows_read": int(cut["rows_read"]),
            "dropped_no_location": int(cut["dropped"]),
            "start": start,
            "end": end,
        },
    )
    return make_dataset(lon, lat, meta, user_id=user)


def _cut_checkins(path: Path, url: str | None, bbox, start: str, end: str) -> dict:
    import pandas as pd

    lon0, lat0, lon1, lat1 = bbox
    names = ["user", "time", "lat", "lon", "loc"]
    use = ["user", "time", "lat", "lon"] if (start or end) else ["user", "lat", "lon"]
    users, lons, lats = [], [], []
    rows = dropped = 0
    try:
        reader = pd.read_csv(
            path,
            sep="\t",
            header=None,
            names=names,
            usecols=use,
            dtype={"user": "int64", "time": "str", "lat": "float64", "lon": "float64"},
            compression="gzip" if url is not None else "infer",  # a local copy may be unpacked
            chunksize=1 << 20,
            engine="c",
            on_bad_lines="skip",
        )
        for df in reader:
            rows += len(df)
            lat = df["lat"].to_numpy()
            lon = df["lon"].to_numpy()
            # SNAP files mark unknown positions with empty fields or (0, 0)
            located = np.isfinite(lat) & np.isfinite(lon) & ~((lat == 0) & (lon == 0))
            dropped += int((~located).sum())
            keep = located & (lon >= lon0) & (lon <= lon1) & (lat >= lat0) & (lat <= lat1)
            if start or end:
                t = df["time"].to_numpy(dtype=str)
                if start:
                    keep &= t >= start
                if end:
                    keep &= t < end
            users.append(df["user"].to_numpy()[keep])
            lons.append(lon[keep])
            lats.append(lat[keep])
    except (OSError, EOFError, zlib.error) as exc:
        raise _discard(path, url, f"gzip error: {exc}") from None
    except (ValueError, pd.errors.ParserError) as exc:
        raise _discard(
            path, url, f"not a SNAP check-in file (user, time, lat, lon, location id, tab separated): {exc}"
        ) from None
    if rows == 0:
        raise _discard(path, url, "the file has no rows")
    return {
        "user": np.concatenate(users) if users else np.zeros(0, np.int64),
        "lon": np.concatenate(lons) if lons else np.zeros(0),
        "lat": np.concatenate(lats) if lats else np.zeros(0),
        "rows_read": np.int64(rows),
        "dropped": np.int64(dropped),
    }


def load_gowalla(city: str, **options) -> Dataset:
    return load_checkins("gowalla", city, **options)


# ------------------------------------------------------------------ SF cabs
CABS_CITATION = (
    "M. Piorkowski, N. Sarafijanovic-Djukic, M. Grossglauser. CRAWDAD dataset epfl/mobility (v. 2009-02-24), "
    "2009; start points of the traces as redistributed with the SNH code (Zeighami et al., PVLDB 2022, "
    "data/CABS_SFS.npy in github.com/szeighami/SNH)"
)


def load_sf_cabs(
    path: str | os.PathLike | None = None,
    url: str = SF_CABS_URL,
    *,
    progress: Progress | None = None,
    max_bytes: int = MAX_CABS_BYTES,
    timeout: float = 60.0,
) -> Dataset:
    """San Francisco cab pick-ups (SNH's CABS): a local ``path`` to the .npy (e.g.
    ``../shared/data/sf_cabs_pickups.npy``) or else a download from ``url``, cached.
    Columns (latitude, longitude); the public region is SNH's San Francisco box."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise DataError(f"no SF cabs file at {p}")
        try:
            arr = _read_points_npy(p)
        except DataError as exc:
            raise DataError(f"{p.name}: {exc}") from None
        origin = str(p)
    else:
        p = download(
            url, max_bytes=max_bytes, progress=progress, timeout=timeout, validate=check_npy, what="SF cabs file"
        )
        try:
            arr = _read_points_npy(p)
        except DataError as exc:
            raise _discard(p, url, str(exc)) from None
        origin = url
    lat = arr[:, 0].astype(np.float64)
    lon = arr[:, 1].astype(np.float64)
    swapped = bool(np.nanmedian(np.abs(lat)) > 90)  # (lon, lat) order by mistake
    if swapped:
        lat, lon = lon, lat
    c = catalogue.city("san_francisco")
    lon0, lat0, lon1, lat1 = c.bbox
    inside = (lon >= lon0) & (lon <= lon1) & (lat >= lat0) & (lat <= lat1)
    if not inside.any():
        raise DataError(f"none of the {lat.size:,} SF cab points lies in the San Francisco box {c.bbox}")
    meta = DatasetMeta(
        name="San Francisco cab pick-ups (CABS)",
        source="sf_cabs",
        citation=CABS_CITATION,
        license="CRAWDAD terms of use (research and education)",
        description=f"Taxi pick-up locations in San Francisco (about 250 cabs, 30 days); box: {c.source}.",
        bbox=c.bbox,
        extra={"origin": origin, "outside_box": int((~inside).sum()), "columns_swapped": swapped},
    )
    return make_dataset(lon[inside], lat[inside], meta)


# ------------------------------------------------------------------ population rasters
@dataclass(frozen=True)
class RasterPlace:
    key: str
    label: str
    url: str
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
        LAGOS_URL,
        HRSL_CITATION,
        "CC BY 4.0",
        "Nigeria-wide HRSL archive (large, a few hundred MB); the Lagos box is read from it.",
    ),
    "mayotte": RasterPlace(
        "mayotte",
        "Mayotte population (WorldPop)",
        MAYOTTE_URL,
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
    return str(path) if member is None else f"/vsizip/{path}/{member}"


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
    progress: Progress | None = None,
    max_bytes: int = MAX_RASTER_BYTES,
    timeout: float = 60.0,
) -> Dataset:
    """People drawn from a population raster (a GeoTIFF of people per pixel, or a zip of one).

    As Bagdasaryan et al. (Section 6.1) read a heatmap, a pixel's value is the number of
    people located there. ``n = 0``: everyone, each pixel's fractional count rounded
    stochastically (floor plus a Bernoulli of the fraction); ``n > 0``: ``n`` people
    drawn with probability proportional to the pixel values. One location per person,
    uniform inside its pixel (the paper used the pixel itself). Deterministic by ``seed``."""
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
        origin = str(file)
    else:
        origin = url or pl.url
        file = None
    derived = downloads_dir() / "derived" / f"raster-{place}-{_key(origin, c.bbox)}.npz"
    win = _load_npz(derived)
    if win is None:
        if file is None:
            file = download(
                origin, max_bytes=max_bytes, progress=progress, timeout=timeout, validate=check_raster, what="raster"
            )
            try:
                win = _read_window(file, c.bbox)
            except DataError as exc:
                if "does not cover" in str(exc):
                    raise
                raise _discard(file, origin, str(exc)) from None
        else:
            try:
                win = _read_window(file, c.bbox)
            except DataError as exc:
                raise DataError(f"{file.name}: {exc}") from None
            except _rasterio().errors.RasterioIOError as exc:
                raise DataError(f"{file.name} is not a readable raster ({exc})") from None
        _save_npz(derived, **win)
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
            "raster_people": total,
            "pixels": list(values.shape),
            "n": int(n),
            "seed": int(seed),
            "box_source": c.source,
        },
    )
    return make_dataset(np.asarray(lon)[inside], np.asarray(lat)[inside], meta)


# ------------------------------------------------------------------ registry
def prefetch(key: str, progress: Progress | None = None, url: str | None = None) -> Path | None:
    """Download the file behind a registry key now, reporting progress (None: nothing to download)."""
    net = key.split(":")[0]
    if net in NETWORKS:
        return download(
            url or NETWORKS[net][1],
            max_bytes=MAX_CHECKINS_BYTES,
            progress=progress,
            validate=check_gzip,
            what=f"{NETWORKS[net][0]} file",
        )
    if key == "sf_cabs":
        return download(
            url or SF_CABS_URL, max_bytes=MAX_CABS_BYTES, progress=progress, validate=check_npy, what="SF cabs file"
        )
    if key.startswith("hdx:") and key[4:] in PLACES:
        return download(
            url or PLACES[key[4:]].url,
            max_bytes=MAX_RASTER_BYTES,
            progress=progress,
            validate=check_raster,
            what="raster",
        )
    return None


def _register() -> None:
    from .registry import Source, add

    url_help = "download address (the public default; change it to use a mirror)"
    for net, (label, default_url, page) in NETWORKS.items():
        for key, c in catalogue.cities().items():
            if key in catalogue.RASTER_ONLY:
                continue
            add(
                Source(
                    key=f"{net}:{key}",
                    label=f"{label} check-ins: {c.name}",
                    kind="online",
                    description=f"{label} check-ins (SNAP) inside {c.name}; box from {c.source}. {c.note}".strip(),
                    loader=(
                        lambda n, k: (
                            lambda url, path, start, end: load_checkins(
                                n, k, url=url, path=path or None, start=start, end=end
                            )
                        )
                    )(net, key),
                    params=(
                        Param("url", "str", default_url, url_help),
                        Param("path", "str", "", "local copy of the SNAP .txt.gz (empty: download from the URL)"),
                        Param("start", "str", "", "first day kept, YYYY-MM-DD (empty: all)"),
                        Param("end", "str", "", "day after the last kept, YYYY-MM-DD (empty: all)"),
                    ),
                    citation=SNAP_CITATION,
                    license=SNAP_LICENSE,
                    offline=is_cached(default_url),
                    extra={"cached": (lambda u: lambda: is_cached(u))(default_url), "url": default_url, "page": page},
                )
            )
    add(
        Source(
            key="sf_cabs",
            label="San Francisco cab pick-ups (SNH's CABS)",
            kind="online",
            description="217k taxi pick-ups in San Francisco, the SNH paper's CABS dataset.",
            loader=lambda path, url: load_sf_cabs(path or None, url),
            params=(
                Param(
                    "path",
                    "str",
                    "",
                    "local copy of the .npy (e.g. ../shared/data/sf_cabs_pickups.npy); empty: download",
                ),
                Param("url", "str", SF_CABS_URL, url_help),
            ),
            citation=CABS_CITATION,
            license="CRAWDAD terms of use (research and education)",
            offline=is_cached(SF_CABS_URL),
            extra={"cached": lambda: is_cached(SF_CABS_URL), "url": SF_CABS_URL},
        )
    )
    for key, pl in PLACES.items():
        add(
            Source(
                key=f"hdx:{key}",
                label=pl.label,
                kind="online",
                description=f"People drawn from a population raster ({pl.note})",
                loader=(lambda k: lambda url, n, seed: load_population_raster(k, url=url, n=n, seed=seed))(key),
                params=(
                    Param("url", "str", pl.url, url_help),
                    Param(
                        "n",
                        "int",
                        1_000_000,
                        "people drawn (0 = everyone, each pixel's count rounded, as in the paper)",
                        min=0,
                        max=MAX_POINTS,
                    ),
                    Param("seed", "int", 0, "seed of the draw", min=0, max=2**31 - 1),
                ),
                citation=pl.citation,
                license=pl.license,
                offline=is_cached(pl.url),
                extra={"cached": (lambda u: lambda: is_cached(u))(pl.url), "url": pl.url},
            )
        )


_register()
