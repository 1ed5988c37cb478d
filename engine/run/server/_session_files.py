"""Users' uploaded files: private to the session that uploaded them, released when it goes.

An upload is parsed by the engine in a child process under memory and time limits
(``engine.data.files.isolate.load_file_isolated``) and kept in a server-side :class:`UploadStore` under the uploading session's *owner id* (a random
secret held in that session's state) and a random dataset key (``upload:…``). It is
never put in the process-wide dataset registry: another session cannot list it,
load it, or run on it, even with the key (it gets "unknown dataset"). Runs on an
upload are held by the job board for their owner only (:mod:`engine.run.server._board`) and never reach
the disk cache.

Memory is bounded: a session keeps at most ``HEATMAP_SESSION_MAX_FILES`` uploads and
``HEATMAP_SESSION_MAX_MB`` of parsed data (the oldest go first, with a message); a
session's uploads and runs are released when its browser session has been closed for
``HEATMAP_SESSION_GRACE_S`` seconds, or after ``HEATMAP_SESSION_IDLE_MIN`` minutes
without a page view. A daemon thread sweeps every few seconds.
"""

from __future__ import annotations

import ctypes
import gc
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..execution import UPLOAD_PREFIX


def env_float(name: str, default: float) -> float:
    try:
        v = float(os.environ.get(name, default))
    except ValueError:
        return default
    return v if v > 0 else default


@dataclass(frozen=True)
class Limits:
    max_files: int = 5
    max_bytes: float = 1024 * 2**20
    idle_s: float = 3600.0
    grace_s: float = 120.0

    @classmethod
    def from_env(cls) -> Limits:
        return cls(
            max_files=int(env_float("HEATMAP_SESSION_MAX_FILES", 5)),
            max_bytes=env_float("HEATMAP_SESSION_MAX_MB", 1024) * 2**20,
            idle_s=env_float("HEATMAP_SESSION_IDLE_MIN", 60) * 60,
            grace_s=env_float("HEATMAP_SESSION_GRACE_S", 120),
        )


@dataclass
class Upload:
    key: str
    filename: str
    dataset: object  # engine.data.Dataset
    nbytes: int
    added: float = field(default_factory=time.time)
    fingerprint: str = ""  # the ledger's key: the fingerprint of the people in it, shared by every session
    memo: dict = field(default_factory=dict)  # the page's prepared sample and true map, released with the upload

    @property
    def label(self) -> str:
        return f"{self.filename} (your file)"


@dataclass
class _Owner:
    uploads: OrderedDict = field(default_factory=OrderedDict)  # key -> Upload, oldest first
    seen: float = field(default_factory=time.time)
    st_session: str | None = None  # Streamlit's session id, to notice a closed tab
    gone_since: float | None = None


def dataset_nbytes(ds) -> int:
    return int(sum(a.nbytes for a in (ds.xy, ds.lonlat, ds.user_id, ds.weight, ds.value, ds.flag) if a is not None))


class UploadStore:
    """Uploaded datasets by owner (one per browser session). Thread-safe."""

    def __init__(self, limits: Limits | None = None, is_alive: Callable[[str], bool] | None = None):
        self.limits = limits or Limits.from_env()
        self._is_alive = is_alive
        self._owners: dict[str, _Owner] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []
        self._session_listeners: list[Callable[[str], None]] = []
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ owners
    def on_release(self, fn: Callable[[str], None]) -> None:
        """``fn(owner)`` is called after an owner's uploads are released (the job board drops its runs)."""
        self._listeners.append(fn)

    def on_release_session(self, fn: Callable[[str], None]) -> None:
        """``fn(streamlit_session_id)`` is called when a released owner had a browser session."""
        self._session_listeners.append(fn)

    def touch(self, owner: str, st_session: str | None = None) -> None:
        with self._lock:
            o = self._owners.setdefault(owner, _Owner())
            o.seen = time.time()
            o.gone_since = None
            if st_session:
                o.st_session = st_session

    # ------------------------------------------------------------ uploads
    def add(self, owner: str, filename: str, dataset) -> tuple[str, list[str]]:
        """Keep ``dataset`` for ``owner``; returns its key and the file names dropped to stay in the limits.
        The budget ledger's key is the fingerprint of the people in it (:mod:`engine.run.bookkeeping._people`), shared by
        every session and the CLI: the same people in another file, format or tab are the same ledger."""
        from ..bookkeeping import fingerprint_people

        key = UPLOAD_PREFIX + secrets.token_urlsafe(18)
        up = Upload(key, filename, dataset, dataset_nbytes(dataset), fingerprint=fingerprint_people(dataset))
        dropped: list[str] = []
        with self._lock:
            o = self._owners.setdefault(owner, _Owner())
            o.seen = time.time()
            o.uploads[key] = up
            while len(o.uploads) > 1 and (
                len(o.uploads) > self.limits.max_files
                or sum(u.nbytes for u in o.uploads.values()) > self.limits.max_bytes
            ):
                _, old = o.uploads.popitem(last=False)
                dropped.append(old.filename)
        if dropped:
            _release_memory()
        return key, dropped

    def get(self, owner: str | None, key: str) -> Upload | None:
        with self._lock:
            o = self._owners.get(owner or "")
            return None if o is None else o.uploads.get(key)

    def uploads(self, owner: str | None) -> list[Upload]:
        with self._lock:
            o = self._owners.get(owner or "")
            return [] if o is None else list(o.uploads.values())

    def nbytes(self) -> int:
        with self._lock:
            return sum(u.nbytes for o in self._owners.values() for u in o.uploads.values())

    # ------------------------------------------------------------ release
    def release(self, owner: str) -> None:
        with self._lock:
            gone = self._owners.pop(owner, None)
        if gone is not None:
            for fn in self._listeners:
                fn(owner)
            if gone.st_session:
                for fn in self._session_listeners:
                    fn(gone.st_session)
            gone.uploads.clear()
            _release_memory()

    def reap(self, now: float | None = None) -> list[str]:
        """Release owners whose browser session closed ``grace_s`` ago or who were idle ``idle_s``."""
        now = time.time() if now is None else now
        lim = self.limits
        dead = []
        with self._lock:
            for owner, o in self._owners.items():
                if now - o.seen > lim.idle_s:
                    dead.append(owner)
                    continue
                if o.st_session and self._is_alive is not None and not self._is_alive(o.st_session):
                    if o.gone_since is None:
                        o.gone_since = now
                    elif now - o.gone_since >= lim.grace_s:
                        dead.append(owner)
                else:
                    o.gone_since = None
        for owner in dead:
            self.release(owner)
        return dead

    def start_reaper(self, every_s: float = 5.0) -> None:
        if self._thread is not None:
            return

        def loop():
            while True:
                time.sleep(every_s)
                try:
                    self.reap()
                except Exception:  # a sweep failure must not kill the sweeper
                    pass

        self._thread = threading.Thread(target=loop, name="heatmap-upload-reaper", daemon=True)
        self._thread.start()


def _release_memory() -> None:
    """Hand freed memory back to the OS (glibc keeps freed small blocks otherwise)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
