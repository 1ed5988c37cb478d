"""The folder where the engine caches what it computes or fetches: runs (:mod:`engine.run`),
downloads (:mod:`engine.data.online`), JAX's compiled code (SNH), the release ledger
(:mod:`engine.run.bookkeeping._ledger`) and arrays computed from public inputs alone (:func:`data_free`: HDMM's
strategies, the workloads' lower bounds). ``HEATMAP_CACHE_DIR`` or ``data/cache`` in the project.

The cache is an optimisation: a folder that is read-only or full costs the cache (runs are recomputed,
entries are not stored), never a run. Only the ledger must be written, and Release refuses without it."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

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
    candidates += [*(path / DATA_FREE).glob("*/.*.tmp")]
    for p in candidates:
        try:
            if p.is_file() and (p.suffix == ".pkl" or p.lstat().st_mtime < cutoff):
                p.unlink()
                removed.append(p)
        except OSError:
            pass  # another process removed it first, or it is not ours to remove
    return removed


DATA_FREE = "data_free"  # cache_dir()'s folder of :func:`data_free`
_DATA_FREE_MEMO: dict[tuple, dict[str, np.ndarray]] = {}
_DATA_FREE_MEMO_SIZE = 64


def data_free(kind: str, key: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Float arrays computed from public inputs alone (parameters, the public domain, a public workload; never
    data), computed once per machine: kept in ``cache_dir()/data_free/<kind>/<key>.f64`` and in this process.
    ``key`` must name every input. A missing, unreadable or unwritable cache only costs the computation.

    The file is one line of JSON (each array's shape) and the arrays' float64 bytes: read without ``np.load``,
    whose header parser (``ast``) is not safe beside another thread's ``ast.parse`` on Python 3.11 (a Streamlit
    page compiling while a run reads its strategy raised "AST constructor recursion depth mismatch")."""
    path = _data_free_path(kind, key)
    memo = _DATA_FREE_MEMO.get((kind, key, path))
    if memo is not None:
        return memo
    arrays = _read_f64(path)
    if arrays is None:
        arrays = {k: np.array(v, dtype=np.float64) for k, v in compute().items()}
        _write_f64(path, arrays)
    for v in arrays.values():
        v.setflags(write=False)  # shared by every caller in the process
    if len(_DATA_FREE_MEMO) >= _DATA_FREE_MEMO_SIZE:
        _DATA_FREE_MEMO.pop(next(iter(_DATA_FREE_MEMO)))
    _DATA_FREE_MEMO[(kind, key, path)] = arrays
    return arrays


def _data_free_path(kind: str, key: str) -> Path | None:
    try:
        folder = cache_dir() / DATA_FREE / kind
        folder.mkdir(parents=True, exist_ok=True)
    except (CacheUnavailable, OSError):
        return None
    return folder / f"{key}.f64"


def _read_f64(path: Path | None) -> dict[str, np.ndarray] | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            shapes = json.loads(f.readline())
            raw = np.frombuffer(f.read(), dtype="<f8")
    except (OSError, TypeError, ValueError):
        return None  # absent, or a damaged entry: computed again and replaced
    out, at = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape, dtype=np.int64))
        if at + size > raw.size:
            return None
        out[name] = raw[at : at + size].reshape(shape).copy()
        at += size
    return out if at == raw.size else None


def _write_f64(path: Path | None, arrays: dict[str, np.ndarray]) -> None:
    if path is None:
        return
    tmp = path.parent / f".{path.stem}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps({k: list(v.shape) for k, v in arrays.items()}).encode() + b"\n")
            for v in arrays.values():
                f.write(np.ascontiguousarray(v, dtype="<f8").tobytes())
        os.replace(tmp, path)  # whole or absent: a concurrent reader never sees half a file
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
