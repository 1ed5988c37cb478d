"""The folder where the engine caches what it computes or fetches: runs (:mod:`engine.run`),
downloads (:mod:`engine.data.online`), JAX's compiled code (SNH) and the release ledger
(:mod:`engine.run.ledger`). ``HEATMAP_CACHE_DIR`` or ``data/cache`` in the project.

The cache is an optimisation: a folder that is read-only or full costs the cache (runs are recomputed,
entries are not stored), never a run. Only the ledger must be written, and Release refuses without it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .errors import EngineError

STALE_TMP_S = 600.0  # a temporary file untouched this long was left by a writer that died
_SWEPT: set[Path] = set()


class CacheUnavailable(EngineError):
    """The cache folder cannot be created: what only speeds things up goes without it; the ledger refuses."""


DEFAULT_DIR = Path(__file__).resolve().parents[2] / "data" / "cache"  # resolved once: pages ask on every rerun


def cache_dir() -> Path:
    """Run/download cache folder (``HEATMAP_CACHE_DIR`` or ``data/cache``). The first use of a
    folder in a process removes what interrupted writers left there (:func:`clean_cache_dir`)."""
    root = os.environ.get("HEATMAP_CACHE_DIR")
    path = Path(root) if root else DEFAULT_DIR
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheUnavailable(
            f"the cache folder {path} cannot be created ({exc.strerror or exc}): set HEATMAP_CACHE_DIR to a "
            "writable folder"
        ) from None
    if path not in _SWEPT:
        _SWEPT.add(path)
        clean_cache_dir(path)
    return path


def clean_cache_dir(path: Path, max_age: float = STALE_TMP_S) -> list[Path]:
    """Remove stale temporaries (older than ``max_age`` seconds, so a concurrent writer is left
    alone): the runs' ``*.tmp`` and the downloads' ``.*.part*`` files (see
    ``engine.data.online``), and the runs' ``*.pkl`` entries, a pickled format that is never
    read (unpickling runs code). Returns what was removed."""
    cutoff = time.time() - max_age
    removed = []
    candidates = [*(path / "runs").glob("*.tmp"), *(path / "downloads").glob(".*.part*")]
    candidates += [*(path / "downloads" / "derived").glob(".*.part*"), *(path / "runs").glob("*.pkl")]
    for p in candidates:
        try:
            if p.is_file() and (p.suffix == ".pkl" or p.lstat().st_mtime < cutoff):
                p.unlink()
                removed.append(p)
        except OSError:
            pass  # another process removed it first, or it is not ours to remove
    return removed
