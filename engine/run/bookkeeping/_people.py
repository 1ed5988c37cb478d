"""The ledger's name for a set of people: a fingerprint of who is in a dataset, not of a file's bytes.

A release spends its ε on people, so every release of the same people must land in one ledger
(:mod:`engine.run.bookkeeping._ledger`), whichever file, format, session or door it came through, and whatever a copy did
to the last digits of the coordinates: a CSV written with 6 decimals moves a location by up to 5e-7°, a float32
copy (GeoParquet, NumPy) by up to 7.6e-6° at longitude 180. No rounding of each location survives that: a copy
moves some locations across the edge of any grid, and with thousands of people some always do (every one of 1,200
such copies of 2,000 people changed a 1e-4° rounding of the whole set, BENCHMARKS.md "Ledger copies"). So the
fingerprint (:func:`fingerprint_people`) is made of what such copies keep:

* exactly: the number of locations, the number of people, and how many locations each person has (the sorted
  counts; with user ids only which rows share an id enters, never the ids, which are pseudonyms; without ids
  every location is a person, the same as one location per id);
* within a tolerance: the people's centroid, the mean of their locations as unit vectors on the sphere (no
  longitude wrap, no pole), placed on a grid of :data:`CELL` (about 20 m). A copy that moves every location by
  less than :data:`TOLERANCE` (about 2.5 m; float32 moves one by at most 1.1e-5°, 1.2 m) moves each of the
  centroid's three coordinates by less than that, so it lands in the same cell or, within :data:`TOLERANCE` of
  an edge, in the next one. The fingerprint books under the centroid's own cell and reads every cell within
  :data:`TOLERANCE` of the centroid (one to eight, about two on average): two copies always read the cell the
  other books under, whichever side of an edge their centroids fall.

The fingerprint is a string ``"people:<booked>|people:<read>|..."`` (:func:`ledger_keys`): the first key is where
its releases are booked, the others are ledgers it also counts. The last is the exact key (:func:`exact_key`), a
hash of every location rounded to 1e-7°: the key of stores whose bookings carry no centroid key, read so that the ε
spent on the same file there counts too.

Coarse keys only make the ledger stricter: two uploads with the same numbers of people and locations per person
and centroids within about 20 m share one ledger even when their people differ. What they do not catch: a copy
with one location more or less, a row duplicated, a person split in two, or every location shifted by a few tens
of metres is another ledger (README, "The privacy ledger"). The keys are hashes of counts and a 20 m centroid, so anyone who
holds a fingerprint and guesses the counts can find the centroid by trying cells: fingerprints stay on the
server, in the ledger and the operator's output.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np

PREFIX = "people:"
SEP = "|"  # "A|B|C": booked under A; the ledger counts what A, B and C hold
TOLERANCE = 4e-7  # radians (~2.5 m): a copy moving every location by less keeps its ledger
CELL = 8 * TOLERANCE  # the centroid's grid, unit-sphere units (~20 m): a quarter of it lies near an edge
_VERSION = b"people-v2"
EXACT_PRECISION_DEG = 1e-7  # the exact key's rounding
_EXACT_VERSION = b"people-v1"


def ledger_keys(fp: str) -> list[str]:
    """The ledger keys of a fingerprint: the one it books under first, then the others it reads."""
    return fp.split(SEP)


def _shape(dataset) -> tuple[int, int, bytes]:
    """(locations, people, digest of the sorted locations-per-person counts)."""
    n = len(dataset.lonlat)
    uid = getattr(dataset, "user_id", None)
    if uid is None:
        counts = np.ones(n, dtype=np.int64)
    else:
        counts = np.unique(np.asarray(uid), return_counts=True)[1].astype(np.int64)
    counts = np.sort(counts)
    return n, len(counts), hashlib.sha256(counts.astype("<i8").tobytes()).digest()


def centroid(lonlat: np.ndarray) -> np.ndarray:
    """The mean of the locations as unit vectors (x, y, z) on the sphere (zeros for no location)."""
    ll = np.asarray(lonlat, dtype=np.float64).reshape(-1, 2)
    if not len(ll):
        return np.zeros(3)
    lon, lat = np.radians(ll[:, 0]), np.radians(ll[:, 1])
    c = np.cos(lat)
    return np.array([np.mean(c * np.cos(lon)), np.mean(c * np.sin(lon)), np.mean(np.sin(lat))])


def _cells(v: float) -> list[int]:
    """The centroid coordinate's own cell first, then the neighbour within :data:`TOLERANCE`, if any."""
    i = int(np.floor(v / CELL))
    out = [i]
    if v - i * CELL <= TOLERANCE:
        out.append(i - 1)
    if (i + 1) * CELL - v <= TOLERANCE:
        out.append(i + 1)
    return out


def fingerprint_people(dataset) -> str:
    """``"people:<hex>|..."``: who is in ``dataset`` (its numbers of locations and people, each person's count of
    locations, and their centroid within :data:`TOLERANCE`), whatever the order, format, user pseudonyms,
    other columns or last digits of the coordinates (see the module docstring)."""
    n, u, shape = _shape(dataset)
    head = hashlib.sha256(_VERSION + b"\0" + f"{n}\0{u}\0{CELL!r}\0".encode() + shape).digest()
    cells = [_cells(float(v)) for v in centroid(dataset.lonlat)]
    keys = []
    for ijk in itertools.product(*cells):  # the own cell first: every coordinate's first choice
        keys.append(PREFIX + hashlib.sha256(head + ",".join(map(str, ijk)).encode()).hexdigest())
    return SEP.join([*keys, exact_key(dataset)])


# ------------------------------------------------------------------ the exact key, which stores may hold ε under
def canonical_points(lonlat: np.ndarray) -> np.ndarray:
    """(n, 2) int64: each (lon, lat) wrapped to [-180, 180) and rounded to multiples of 1e-7 degrees."""
    ll = np.asarray(lonlat, dtype=np.float64).reshape(-1, 2)
    lon = np.mod(ll[:, 0] + 180.0, 360.0) - 180.0
    q = np.rint(np.column_stack([lon, ll[:, 1]]) / EXACT_PRECISION_DEG).astype(np.int64)
    q[q[:, 0] == round(180.0 / EXACT_PRECISION_DEG), 0] = -round(180.0 / EXACT_PRECISION_DEG)  # 180° is -180°
    return q


def exact_key(dataset) -> str:
    """The exact key of these people, which stores without centroid keys booked under: a hash of every location
    rounded to 1e-7° and of which locations belong to one person, sorted (the same file finds the ε spent on it
    there)."""
    q = canonical_points(dataset.lonlat)
    h = hashlib.sha256(_EXACT_VERSION + b"\0" + str(EXACT_PRECISION_DEG).encode())
    uid = getattr(dataset, "user_id", None)
    inv = None if uid is None else np.unique(np.asarray(uid), return_inverse=True)[1].reshape(-1)
    if inv is None or inv.max(initial=-1) + 1 == len(q):  # every location its own person
        order = np.lexsort((q[:, 1], q[:, 0]))
        h.update(b"\0points\0" + str(len(q)).encode() + b"\0")
        h.update(np.ascontiguousarray(q[order]).astype("<i8").tobytes())
        return PREFIX + h.hexdigest()
    order = np.lexsort((q[:, 1], q[:, 0], inv))  # each user's locations together, sorted
    rows = np.ascontiguousarray(q[order]).astype("<i8")
    starts = np.flatnonzero(np.r_[True, inv[order][1:] != inv[order][:-1]])
    ends = np.r_[starts[1:], len(rows)]
    buf = memoryview(rows.tobytes())
    width = rows.itemsize * 2
    people = sorted(hashlib.blake2b(buf[s * width : e * width], digest_size=20).digest() for s, e in zip(starts, ends))
    h.update(b"\0users\0" + str(len(people)).encode() + b"\0")
    h.update(b"".join(people))
    return PREFIX + h.hexdigest()
