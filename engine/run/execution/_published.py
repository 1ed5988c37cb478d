"""A published release read back: the planner's ``--users-from`` and ``--proxy-from`` folders.

The folder is the analyst's input, so it is read as untrusted. Each file must be a regular file: a named
pipe would block the read for ever and a link to a device such as ``/dev/zero`` would never end, so the
file's type is checked before it is opened (:func:`os.stat`, which follows a link to what it names), it is
opened without blocking and checked again on the open descriptor (it may have been swapped in between),
and it is read in chunks up to a byte limit: the manifest :data:`MANIFEST_BYTES`, the map what the
manifest's grid needs (:data:`CSV_ROW_BYTES` a cell). The manifest's fields are checked (a JSON object,
finite numbers, a grid of 2 to 1,024 cells a side) before any array is made from them. Every problem is a
one-line :class:`~engine.core.errors.ParamError` that names the file.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
from pathlib import Path

import numpy as np

from ...core.errors import ParamError, shown_bytes, shown_text
from ...core.grid import MAX_DEPTH, Domain

MANIFEST_BYTES = 4 * 2**20  # a release's manifest is a few kB
CSV_ROW_BYTES = 160  # a heatmap.csv row: indices, centre, lon/lat, estimate, per km²; about 80 bytes, at most ~110
CHUNK = 2**20

_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; a ParamError otherwise."""
    where = shown_text(path, 200)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ParamError(f"cannot read {where} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise ParamError(f"{where} is {_kind(mode)}, not a regular file: only regular files are read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ParamError(f"cannot read {where} ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced between the check and the open
            raise ParamError(f"{where} is {_kind(info.st_mode)}, not a regular file: only regular files are read")
        if info.st_size > limit:
            raise ParamError(
                f"{where} is {shown_bytes(info.st_size)}, over the limit of {shown_bytes(limit)} for this file"
            )
        chunks, total = [], 0
        while chunk := os.read(fd, min(CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise ParamError(f"{where} is over the limit of {shown_bytes(limit)} for this file")
        return b"".join(chunks)
    except OSError as exc:
        raise ParamError(f"cannot read {where} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _number(doc: dict, key: str, where: str, positive: bool = False) -> float:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        kind = "a positive number" if positive else "a finite number"
        raise ParamError(f"{where} is not a release manifest: {key} must be {kind} (got {shown_text(repr(v), 40)})")
    return float(v)


def read_manifest(folder: Path) -> tuple[dict, Domain]:
    """A release folder's ``manifest.json``, checked: a Release of counts over a grid, and that grid."""
    path = Path(folder) / "manifest.json"
    where = shown_text(path, 200)
    raw = read_regular(path, MANIFEST_BYTES)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ParamError(f"{where} is not valid JSON ({shown_text(exc, 80)})") from None
    if not isinstance(doc, dict):
        raise ParamError(f"{where} is not a release manifest (it holds {type(doc).__name__}, not a JSON object)")
    if doc.get("mode") != "release" or doc.get("quantity", "counts") != "counts":
        raise ParamError(f"{where}: only a Release of counts can be planned from (not an evaluation)")
    grid, params = doc.get("grid"), doc.get("parameters")
    if not isinstance(grid, dict) or not isinstance(params, dict):
        raise ParamError(f"{where} is not a release manifest: it needs the objects grid and parameters")
    x0, y0 = _number(grid, "x0_m", where), _number(grid, "y0_m", where)
    side = _number(grid, "side_m", where, positive=True)
    n = grid.get("cells_per_side")
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 1 << MAX_DEPTH or n & (n - 1):
        raise ParamError(
            f"{where} is not a release manifest: cells_per_side must be a power of 2 from 2 to {1 << MAX_DEPTH:,} "
            f"(got {shown_text(repr(n), 40)})"
        )
    _number(params, "epsilon", where, positive=True)
    return doc, Domain(x0, y0, side, n.bit_length() - 1)


def released_map(folder) -> tuple[np.ndarray, Domain, dict]:
    """A published release's map (``heatmap.csv``), its domain and its manifest: DP outputs only."""
    import pandas as pd

    folder = Path(folder)
    path = folder / "heatmap.csv"
    if not (folder.is_dir() and os.path.lexists(folder / "manifest.json") and os.path.lexists(path)):
        raise ParamError(f"{shown_text(folder, 200)} is not a release folder with manifest.json and heatmap.csv")
    doc, dom = read_manifest(folder)
    data = read_regular(path, dom.n * dom.n * CSV_ROW_BYTES + 4096)
    try:
        df = pd.read_csv(io.BytesIO(data), comment="#", usecols=["ix", "iy", "estimate"])
        ix, iy = df["ix"].to_numpy(np.int64), df["iy"].to_numpy(np.int64)
        est = df["estimate"].to_numpy(np.float64)
    except (ValueError, TypeError, KeyError, pd.errors.ParserError) as exc:
        raise ParamError(f"{shown_text(path, 200)} is not a release's heatmap.csv ({shown_text(exc, 120)})") from None
    if len(df) and not (ix.min() >= 0 and iy.min() >= 0 and max(ix.max(), iy.max()) < dom.n):
        raise ParamError(f"{shown_text(path, 200)} names cells outside the manifest's {dom.n} x {dom.n} grid")
    grid = np.zeros((dom.n, dom.n))
    grid[iy, ix] = est
    return np.nan_to_num(grid, posinf=0.0, neginf=0.0), dom, doc
