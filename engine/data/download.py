"""Public files downloaded once into ``cache_dir()/downloads`` and checked against a known SHA-256.

:func:`pooch.retrieve` does the bookkeeping a well-kept data library does: it streams into a
temporary file beside the cache, compares the bytes' SHA-256 with the one the catalogue names
(:class:`Remote`), moves the file into place only when they match and, for a cached file that
does not match, downloads it anew. What pooch leaves to its downloaders is done here: the size
limit (a hostile or mistaken address cannot fill the disk), progress as
``progress(bytes_done, bytes_total_or_None)``, a format check (``validate``) and plain errors:
:class:`OfflineError` when the host cannot be reached, :class:`DataError` for anything refused.

A file whose publisher gives no checksum, and which could not be fetched when the catalogue was
written, has ``sha256=None``: its download is accepted after the format check alone, with an
:class:`UncheckedDownloadWarning` naming the SHA-256 it arrived with, so that the bytes can be
compared with a trusted copy and pinned (``sha256=``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import DataError, OfflineError, ParamError

Progress = Callable[[int, "int | None"], None]
MiB = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class UncheckedDownloadWarning(UserWarning):
    """A file was downloaded without a known SHA-256 to check it against."""


@dataclass(frozen=True)
class Remote:
    """A public file: where it is, the SHA-256 of the bytes expected there, and how that hash is known
    (or why none is)."""

    url: str
    sha256: str | None
    provenance: str

    def __post_init__(self):
        if self.sha256 is not None and not _SHA256.match(self.sha256):
            raise ValueError(f"not a lower-case hex SHA-256: {self.sha256!r}")
        if not self.provenance:
            raise ValueError("a remote file says how its hash is known, or why none is")

    @classmethod
    def unpublished(cls, url: str, publisher: str) -> Remote:
        """A file whose publisher prints no checksum and that could not be fetched to hash it here."""
        why = f"{publisher} publishes no checksum for this file, and it could not be fetched to hash when this entry was written"
        return cls(url, None, why)

    def checksum_note(self) -> str:
        """One sentence for the source's description: what a download of this file is checked against."""
        if self.sha256 is not None:
            return f"The download is checked against SHA-256 {self.sha256[:12]}…; other bytes are refused."
        return (
            "No SHA-256 is published for this file: a download is checked only for its format, and a "
            "warning names the hash it arrived with."
        )


def downloads_dir() -> Path:
    from ..core.cache import CacheUnavailable, cache_dir

    path = cache_dir() / "downloads"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheUnavailable(f"the download folder {path} cannot be created ({exc.strerror or exc})") from None
    return path


def cache_path(url: str) -> Path:
    """Where ``url`` is (or will be) cached: the URL's file name prefixed by a hash of the URL."""
    name = Path(urllib.parse.urlparse(url).path).name or "download"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[-80:]
    return downloads_dir() / f"{hashlib.sha256(url.encode()).hexdigest()[:12]}-{name}"


def is_cached(url: str) -> bool:
    from ..core.cache import CacheUnavailable

    try:
        return cache_path(url).is_file()
    except CacheUnavailable:  # no cache folder: nothing is cached, and the built-in data still works
        return False


def download(
    url: str,
    *,
    sha256: str | None,
    max_bytes: int,
    progress: Progress | None = None,
    timeout: float = 60.0,
    validate: Callable[[Path], None] | None = None,
    what: str = "file",
) -> Path:
    """Fetch ``url`` into the download cache once; later calls return the cached path.

    ``sha256``: the hash the bytes must have (None: none is known; the download is then accepted
    with an :class:`UncheckedDownloadWarning`). Raises OfflineError when the host cannot be reached,
    DataError on an HTTP error, a file over ``max_bytes``, a truncated transfer, a file ``validate``
    rejects or bytes that do not match ``sha256``; nothing refused is cached."""
    import pooch

    scheme = urllib.parse.urlparse(url).scheme
    if scheme not in ("http", "https"):
        raise ParamError(f"download address must start with http:// or https:// (got {url!r})")
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if not _SHA256.match(sha256):
            raise ParamError(f"a SHA-256 is 64 hexadecimal digits (got {sha256!r})")
    final = cache_path(url)
    pooch.get_logger().setLevel(logging.WARNING)  # it announces every download at INFO on stderr
    fetch = _Stream(max_bytes=max_bytes, progress=progress, timeout=timeout, validate=validate, what=what)
    try:
        pooch.retrieve(url, known_hash=sha256, fname=final.name, path=final.parent, downloader=fetch)
    except urllib.error.HTTPError as exc:
        raise DataError(f"{url} answered HTTP {exc.code} ({exc.reason}): the {what} is not available there") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        host = urllib.parse.urlparse(url).netloc
        raise OfflineError(
            f"could not download the {what} from {host} ({reason}): you seem to be offline. Connect to the "
            f"internet once (it is then cached), or put a copy at {final}"
        ) from None
    except _http_incomplete() as exc:  # the server closed the connection early
        raise DataError(f"the download of {url} was cut short ({exc}); try again") from None
    except ValueError:  # pooch: the bytes do not have the known hash (the temporary file is already gone)
        if sha256 is None or fetch.sha256 in (None, sha256):
            raise  # not a mismatch: a bug, not the user's file
        raise DataError(
            f"the {what} downloaded from {url} does not have the expected SHA-256 {sha256} (it has "
            f"{fetch.sha256}): it was refused and not cached. The file changed at its source or on the way; "
            "if the publisher changed it on purpose, compare it with a trusted copy before pinning the new hash."
        ) from None
    if sha256 is None and fetch.sha256 is not None:
        warnings.warn(
            f"the {what} downloaded from {url} could not be checked: no SHA-256 is known for it. It arrived "
            f"with SHA-256 {fetch.sha256}; compare it with a trusted copy and pass sha256= to pin it.",
            UncheckedDownloadWarning,
            stacklevel=2,
        )
    return final


class _Stream:
    """A pooch downloader: streams ``url`` into the temporary file pooch names, within ``max_bytes``,
    reporting progress, hashing as it goes, then lets ``validate`` look at the complete file."""

    def __init__(self, *, max_bytes: int, progress: Progress | None, timeout: float, validate, what: str):
        self.max_bytes = max_bytes
        self.progress = progress
        self.timeout = timeout
        self.validate = validate
        self.what = what
        self.sha256: str | None = None  # of the bytes received, once complete

    def __call__(self, url: str, output_file: str, pooch=None) -> None:
        limit = f"the limit of {self.max_bytes / MiB:,.0f} MB"
        req = urllib.request.Request(url, headers={"User-Agent": "private-heatmap-workbench/1 (python urllib)"})
        digest = hashlib.sha256()
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            if total is not None and total > self.max_bytes:
                raise DataError(f"the {self.what} at {url} is {total / MiB:,.1f} MB, over {limit}")
            done = 0
            if self.progress:
                self.progress(0, total)
            with open(output_file, "wb") as out:
                while chunk := resp.read(MiB):
                    done += len(chunk)
                    if done > self.max_bytes:
                        raise DataError(f"the {self.what} at {url} is over {limit}")
                    out.write(chunk)
                    digest.update(chunk)
                    if self.progress:
                        self.progress(done, total)
            if total is not None and done != total:
                raise DataError(f"the download of {url} was cut short ({done:,} of {total:,} bytes); try again")
        self.sha256 = digest.hexdigest()
        if self.validate is not None:
            try:
                self.validate(Path(output_file))
            except DataError as exc:
                raise DataError(f"the {self.what} downloaded from {url} is unusable and was discarded: {exc}") from None


# ------------------------------------------------------------------ files derived from downloads
def discard(path: Path, url: str | None, reason: str) -> DataError:
    """A cached file turned out corrupt: remove it and say so (``url=None``: the user's own copy, kept)."""
    if url is None:
        return DataError(f"{path} is unusable ({reason})")
    path.unlink(missing_ok=True)
    return DataError(f"the cached copy of {url} is corrupt ({reason}); it was removed: load again to download it anew")


def save_npz(path: Path, **arrays) -> None:
    """Write a derived file atomically (a half-written one is never read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_npz(path: Path) -> dict | None:
    """The arrays of a derived file, or None when it is missing or damaged (then it is rebuilt)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # a damaged derived file is just rebuilt
        path.unlink(missing_ok=True)
        return None


def derived_key(*parts) -> str:
    """A short hash naming a file derived from a download (a city's cut, a raster's window)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _http_incomplete() -> tuple[type[BaseException], ...]:
    import http.client

    return (http.client.IncompleteRead, http.client.RemoteDisconnected)
