"""Public datasets of the papers, downloaded once into ``cache_dir()/downloads``.

* SNAP Gowalla and Brightkite check-ins (Cho, Myers & Leskovec, KDD 2011), cut to
  a city's public box from the catalogue (``gowalla:<city>``, ``brightkite:<city>``);
  used by SNH (Gowalla), sparse EMD and federated RFF KDE (both).
* San Francisco cab pick-ups (``sf_cabs``), the SNH paper's CABS dataset.
* Population rasters (``hdx:<place>``) of Lagos and Mayotte, as Bagdasaryan et al.
  (2022, Section 6.1) used them: read in :mod:`.rasters`, registered here with the rest.

Every URL is a parameter whose default is the real public address; each file is a
:class:`~engine.data.download.Remote` naming the SHA-256 its bytes must have, or saying
why none is known. Downloads (:func:`~engine.data.download.download`, through pooch)
are atomic, checked against that hash, limited in size, report progress as
``progress(bytes_done, bytes_total_or_None)``, and raise :class:`OfflineError` when the
host cannot be reached. A corrupt or truncated file is removed and reported with a
clear :class:`DataError`. The city cut of a check-in file and the window of a raster
are cached too (small ``.npz``), so a second load reads neither the network nor the
big file.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from pathlib import Path

import numpy as np

from ..core.errors import DataError, ParamError
from ..core.params import Param
from . import catalogue
from .dataset import MAX_POINTS, Dataset, DatasetMeta, make_dataset
from .download import (
    MiB,
    Progress,
    Remote,
    derived_key,
    discard,
    download,
    downloads_dir,
    is_cached,
    load_npz,
    save_npz,
)
from .rasters import MAX_RASTER_BYTES, PLACES, check_raster, load_population_raster

GOWALLA_URL = "https://snap.stanford.edu/data/loc-gowalla_totalCheckins.txt.gz"
BRIGHTKITE_URL = "https://snap.stanford.edu/data/loc-brightkite_totalCheckins.txt.gz"
SF_CABS_URL = "https://github.com/szeighami/SNH/raw/master/data/CABS_SFS.npy"
# How each file's hash is known. The SF cabs file is the one the project's reference copy was taken from:
# that copy's git blob id equals the one of data/CABS_SFS.npy in github.com/szeighami/SNH
# (60f7aa887f0206737259f32dafc84de0f17d11fb, 3,479,136 bytes), so its SHA-256 is the SHA-256 of the bytes
# GitHub serves at SF_CABS_URL. The others could not be fetched when the catalogue was written (no
# network) and their publishers print no checksum: they are downloaded with a warning naming the hash
# they arrived with, to be compared with a trusted copy and pinned here.
GOWALLA = Remote.unpublished(GOWALLA_URL, "SNAP")
BRIGHTKITE = Remote.unpublished(BRIGHTKITE_URL, "SNAP")
SF_CABS = Remote(
    SF_CABS_URL,
    "be294708eb24dff0e3e2a68055b3b1165ebc25f0c0a0f353b6471e5b063273f7",
    "the SHA-256 of a copy whose git blob id is that of data/CABS_SFS.npy in github.com/szeighami/SNH "
    "(60f7aa887f0206737259f32dafc84de0f17d11fb), the bytes served at this address",
)

MAX_CHECKINS_BYTES = 400 * MiB  # the SNAP files are ~100 MB
MAX_CABS_BYTES = 64 * MiB  # 3.5 MB

SNAP_CITATION = (
    "E. Cho, S. A. Myers, J. Leskovec. Friendship and Mobility: User Movement in Location-Based Social "
    "Networks. KDD 2011. Stanford Large Network Dataset Collection (SNAP), https://snap.stanford.edu/data/"
)
SNAP_LICENSE = "SNAP research dataset: no licence stated by the publisher; cite Cho et al. (2011)"
NETWORKS = {
    "gowalla": ("Gowalla", GOWALLA, "https://snap.stanford.edu/data/loc-Gowalla.html"),
    "brightkite": ("Brightkite", BRIGHTKITE, "https://snap.stanford.edu/data/loc-Brightkite.html"),
}


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
    sha256: str | None = None,
    progress: Progress | None = None,
    max_bytes: int = MAX_CHECKINS_BYTES,
    timeout: float = 60.0,
) -> Dataset:
    """Check-ins of a SNAP network inside a catalogue city's box, one row per check-in,
    ``user_id`` = the SNAP user. ``start``/``end`` (YYYY-MM-DD, end exclusive) keep a period,
    e.g. Ghazi et al. used January 2010 for Gowalla and Nov-Dec 2008 for Brightkite.
    ``path``: a local copy of the SNAP .txt.gz instead of the download. ``sha256``: the hash
    the downloaded file must have (None: the catalogue's, which a mirror at ``url`` must match)."""
    if network not in NETWORKS:
        raise ParamError(f"unknown check-in network {network!r}; known: {', '.join(NETWORKS)}")
    label, remote, page = NETWORKS[network]
    url = url or remote.url
    sha256 = sha256 or remote.sha256
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
    derived = downloads_dir() / "derived" / f"{network}-{city}-{derived_key(origin, sha256, c.bbox, start, end)}.npz"
    cut = load_npz(derived)
    if cut is None:
        if local is not None:
            cut = _cut_checkins(local, None, c.bbox, start, end)
        else:
            file = download(
                url,
                sha256=sha256,
                max_bytes=max_bytes,
                progress=progress,
                timeout=timeout,
                validate=check_gzip,
                what=f"{label} file",
            )
            cut = _cut_checkins(file, url, c.bbox, start, end)
        save_npz(derived, **cut)
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
            "sha256": None if local is not None else sha256,
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
        raise discard(path, url, f"gzip error: {exc}") from None
    except (ValueError, pd.errors.ParserError) as exc:
        raise discard(
            path, url, f"not a SNAP check-in file (user, time, lat, lon, location id, tab separated): {exc}"
        ) from None
    if rows == 0:
        raise discard(path, url, "the file has no rows")
    return {
        "user": np.concatenate(users) if users else np.zeros(0, np.int64),
        "lon": np.concatenate(lons) if lons else np.zeros(0),
        "lat": np.concatenate(lats) if lats else np.zeros(0),
        "rows_read": np.int64(rows),
        "dropped": np.int64(dropped),
    }


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
    sha256: str | None = None,
    progress: Progress | None = None,
    max_bytes: int = MAX_CABS_BYTES,
    timeout: float = 60.0,
) -> Dataset:
    """San Francisco cab pick-ups (SNH's CABS): a local ``path`` to the .npy (e.g. a copy of
    ``data/CABS_SFS.npy`` of github.com/szeighami/SNH) or else a download from ``url``, cached and checked
    against ``sha256`` (None: the catalogue's, which a mirror must match).
    Columns (latitude, longitude); the public region is SNH's San Francisco box."""
    sha256 = sha256 or SF_CABS.sha256
    if path:
        p = Path(path)
        if not p.is_file():
            raise DataError(f"no SF cabs file at {p}")
        try:
            arr = _read_points_npy(p)
        except DataError as exc:
            raise DataError(f"{p.name}: {exc}") from None
        origin, sha256 = str(p), None
    else:
        p = download(
            url,
            sha256=sha256,
            max_bytes=max_bytes,
            progress=progress,
            timeout=timeout,
            validate=check_npy,
            what="SF cabs file",
        )
        try:
            arr = _read_points_npy(p)
        except DataError as exc:
            raise discard(p, url, str(exc)) from None
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
        extra={"origin": origin, "sha256": sha256, "outside_box": int((~inside).sum()), "columns_swapped": swapped},
    )
    return make_dataset(lon[inside], lat[inside], meta)


# ------------------------------------------------------------------ registry
def prefetch(
    key: str, progress: Progress | None = None, url: str | None = None, sha256: str | None = None
) -> Path | None:
    """Download the file behind a registry key now, reporting progress (None: nothing to download).
    ``url``/``sha256``: a mirror and the hash its file must have (None: the catalogue's)."""
    net = key.split(":")[0]
    if net in NETWORKS:
        label, remote, _ = NETWORKS[net]
        limit, validate, what = MAX_CHECKINS_BYTES, check_gzip, f"{label} file"
    elif key == "sf_cabs":
        remote, limit, validate, what = SF_CABS, MAX_CABS_BYTES, check_npy, "SF cabs file"
    elif key.startswith("hdx:") and key[4:] in PLACES:
        remote, limit, validate, what = PLACES[key[4:]].remote, MAX_RASTER_BYTES, check_raster, "raster"
    else:
        return None
    return download(
        url or remote.url,
        sha256=sha256 or remote.sha256,
        max_bytes=limit,
        progress=progress,
        validate=validate,
        what=what,
    )


def _remote_extra(remote: Remote, **more) -> dict:
    """What a source tells about its file: the address, whether it is cached, its hash and how it is known."""
    return {
        "cached": lambda: is_cached(remote.url),
        "url": remote.url,
        "sha256": remote.sha256,
        "sha256_provenance": remote.provenance,
        **more,
    }


def _register() -> None:
    from .registry import Source, add

    url_help = "download address (the public default; change it to use a mirror)"
    for net, (label, remote, page) in NETWORKS.items():
        for key, c in catalogue.cities().items():
            if key in catalogue.RASTER_ONLY:
                continue
            add(
                Source(
                    key=f"{net}:{key}",
                    label=f"{label} check-ins: {c.name}",
                    kind="online",
                    description=" ".join(
                        t for t in (f"{label} check-ins (SNAP) inside {c.name}; box from {c.source}.", c.note) if t
                    )
                    + f" {remote.checksum_note()}",
                    loader=(
                        lambda n, k: (
                            lambda url, path, start, end: load_checkins(
                                n, k, url=url, path=path or None, start=start, end=end
                            )
                        )
                    )(net, key),
                    params=(
                        Param("url", "str", remote.url, url_help),
                        Param("path", "str", "", "local copy of the SNAP .txt.gz (empty: download from the URL)"),
                        Param("start", "str", "", "first day kept, YYYY-MM-DD (empty: all)"),
                        Param("end", "str", "", "day after the last kept, YYYY-MM-DD (empty: all)"),
                    ),
                    citation=SNAP_CITATION,
                    license=SNAP_LICENSE,
                    offline=is_cached(remote.url),
                    extra={
                        **_remote_extra(remote, page=page),
                        "not_people": ("url", "path"),
                    },  # where the same file comes from
                )
            )
    add(
        Source(
            key="sf_cabs",
            label="San Francisco cab pick-ups (SNH's CABS)",
            kind="online",
            description=f"217k taxi pick-ups in San Francisco, the SNH paper's CABS dataset. {SF_CABS.checksum_note()}",
            loader=lambda path, url: load_sf_cabs(path or None, url),
            params=(
                Param(
                    "path",
                    "str",
                    "",
                    "local copy of the .npy (e.g. data/CABS_SFS.npy of github.com/szeighami/SNH); empty: download",
                ),
                Param("url", "str", SF_CABS_URL, url_help),
            ),
            citation=CABS_CITATION,
            license="CRAWDAD terms of use (research and education)",
            offline=is_cached(SF_CABS_URL),
            extra=_remote_extra(SF_CABS, not_people=("path", "url")),
        )
    )
    for key, pl in PLACES.items():
        add(
            Source(
                key=f"hdx:{key}",
                label=pl.label,
                kind="online",
                description=f"People drawn from a population raster ({pl.note}) {pl.remote.checksum_note()}",
                loader=(lambda k: lambda url, n, seed: load_population_raster(k, url=url, n=n, seed=seed))(key),
                params=(
                    Param("url", "str", pl.remote.url, url_help),
                    Param(
                        "n",
                        "int",
                        1_000_000,
                        "people drawn (0 = everyone, each pixel's count rounded, as in the paper)",
                        min=0,
                        max=MAX_POINTS,
                    ),
                    Param(
                        "seed",
                        "int",
                        0,
                        "seed of the people's draw from the raster",
                        min=0,
                        max=2**31 - 1,
                        label="draw seed",
                    ),
                ),
                citation=pl.citation,
                license=pl.license,
                offline=is_cached(pl.remote.url),
                extra=_remote_extra(pl.remote, not_people=("url",)),
            )
        )


_register()
