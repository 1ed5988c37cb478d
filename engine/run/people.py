"""The ledger's name for a set of people: a fingerprint of who is in a dataset, not of a file's bytes.

A release spends its ε on people, so every release of the same people must land in one ledger
(:mod:`engine.run.ledger`), whichever file, format, session or door it came through. The fingerprint
(:func:`fingerprint_people`) is a SHA-256 hash of a canonical form of the dataset's people:

* each location in WGS84 degrees, longitude wrapped to [-180, 180), rounded to
  :data:`PRECISION_DEG` (1e-7 degrees, about 1 cm) and kept as integers, so number formatting
  (``51.5133`` and ``51.51330000``), a parser's last bit and a reprojection's round-off all vanish;
* with user ids, a person is the multiset of their rounded locations: the ids themselves are
  pseudonyms and do not enter (renaming every user, or reading ids as text or numbers, is the same
  people), but which locations belong together does;
* the people are sorted (a multiset of people), so row order, line endings, extra columns (values,
  weights, flags, notes) and the file's format (CSV, GeoJSON, GeoParquet, ...) do not change it.

What it does not do: it is a hash, not a similarity. Moving one point by more than the rounding,
dropping or adding one person, or splitting one user into two gives another fingerprint, hence a
fresh ledger. It keeps honest analysts and accidental re-releases within one budget; it cannot stop
an uploader who alters the data on purpose (README, "The privacy ledger").
"""

from __future__ import annotations

import hashlib

import numpy as np

PRECISION_DEG = 1e-7  # ~1.1 cm of latitude: far below any location's accuracy, far above float round-off
PREFIX = "people:"
_VERSION = b"people-v1"


def canonical_points(lonlat: np.ndarray) -> np.ndarray:
    """(n, 2) int64: each (lon, lat) wrapped to [-180, 180) and rounded to multiples of :data:`PRECISION_DEG`."""
    ll = np.asarray(lonlat, dtype=np.float64).reshape(-1, 2)
    lon = np.mod(ll[:, 0] + 180.0, 360.0) - 180.0
    q = np.rint(np.column_stack([lon, ll[:, 1]]) / PRECISION_DEG).astype(np.int64)
    q[q[:, 0] == round(180.0 / PRECISION_DEG), 0] = -round(180.0 / PRECISION_DEG)  # 180° rounded up is -180°
    return q


class _Points:
    def __init__(self, lonlat):
        self.lonlat, self.user_id = lonlat, None


def fingerprint_people(dataset) -> str:
    """``"people:<hex>"``: who is in ``dataset`` (its locations, and which belong to one user), whatever the
    order, format, user pseudonyms or other columns (see the module docstring)."""
    q = canonical_points(dataset.lonlat)
    h = hashlib.sha256(_VERSION + b"\0" + str(PRECISION_DEG).encode())
    uid = getattr(dataset, "user_id", None)
    if uid is None:  # every location is its own person
        order = np.lexsort((q[:, 1], q[:, 0]))
        h.update(b"\0points\0" + str(len(q)).encode() + b"\0")
        h.update(np.ascontiguousarray(q[order]).astype("<i8").tobytes())
        return PREFIX + h.hexdigest()
    _, inv = np.unique(np.asarray(uid), return_inverse=True)
    inv = inv.reshape(-1)
    if inv.max(initial=-1) + 1 == len(q):  # one location per user: the same people as a file without ids
        return fingerprint_people(_Points(dataset.lonlat))
    order = np.lexsort((q[:, 1], q[:, 0], inv))  # each user's locations together, sorted
    rows = np.ascontiguousarray(q[order]).astype("<i8")
    starts = np.flatnonzero(np.r_[True, inv[order][1:] != inv[order][:-1]])
    ends = np.r_[starts[1:], len(rows)]
    buf = memoryview(rows.tobytes())
    width = rows.itemsize * 2
    # one digest per person (their sorted locations), then the people sorted: ids never enter
    people = sorted(hashlib.blake2b(buf[s * width : e * width], digest_size=20).digest() for s, e in zip(starts, ends))
    h.update(b"\0users\0" + str(len(people)).encode() + b"\0")
    h.update(b"".join(people))
    return PREFIX + h.hexdigest()
