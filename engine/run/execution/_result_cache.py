"""The data-only disk cache of Evaluate runs.

One entry is one uncompressed .npz (read with allow_pickle=False) holding a JSON document
("doc", UTF-8 bytes), the arrays it names ("a0", "a1", ...) and a SHA-256 of all of them
("digest"). The document encodes values generically: JSON scalars as themselves,
{"__a": name} an array, {"__s": name} a numpy scalar (0-d array), {"__t": [...]} a tuple,
{"__d": [[key, value], ...]} a dict (any JSON-able keys, order kept), {"__o": [name, {field: value}]} one of
the typed release parts the mechanisms register by name (``engine.mechanisms.noise_model.PARTS``; a name not
registered is refused). Anything else (a callable, another object) makes the result uncacheable: it is simply
not stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
import zipfile
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import numpy as np

from ...core.cache import cache_dir
from ...mechanisms.noise_model import PARTS
from ._config import CACHE_VERSION, RunConfig, RunResult


def run_cache_path(config: RunConfig) -> Path:
    """Where the disk cache keeps ``config``'s result."""
    return cache_dir() / "runs" / f"{config.key()}.npz"


_ARRAY_KINDS = "biufcUS"  # dtypes numpy reads without pickle
_RESULT_FIELDS = {
    "evaluation",
    "config",
    "release",
    "truth",
    "metrics",
    "timings",
    "n_users",
    "n_points",
    "dataset_meta",
    "cached",
    "crs",
}
_RELEASE_FIELDS = {
    "density",
    "domain",
    "ledger",
    "communication",
    "server_view",
    "partition",
    "range_answerer",
    "diagnostics",
    "extras",
    "quantity",
    "noise",
    "measurements",
    "levels",
    "heat",
    "regional",
    "proportion",
    "warnings",
    "regions_counted",
}
_PARTS = ("noise", "measurements", "levels", "heat", "regional", "proportion", "warnings", "regions_counted")


class _NotData(Exception):
    """The result holds something the data-only cache cannot store."""


class _Corrupt(Exception):
    """A cache entry failed verification."""


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._names: dict[int, str] = {}  # an array referenced twice (a map also in extras) is stored once

    def _array(self, tag: str, a: np.ndarray) -> dict:
        if a.dtype.kind not in _ARRAY_KINDS or a.dtype.fields is not None:
            raise _NotData(f"array of dtype {a.dtype}")
        name = self._names.get(id(a))
        if name is None:
            name = self._names[id(a)] = f"a{len(self.arrays)}"
            self.arrays[name] = a
        return {tag: name}

    def __call__(self, x):
        if x is None or type(x) in (bool, int, float, str):
            return x
        if isinstance(x, np.ndarray):
            return self._array("__a", x)
        if isinstance(x, np.generic):
            return self._array("__s", np.asarray(x))
        if type(x) is list:
            return [self(v) for v in x]
        if type(x) is tuple:
            return {"__t": [self(v) for v in x]}
        if type(x) is dict:
            return {"__d": [[self(k), self(v)] for k, v in x.items()]}
        if is_dataclass(x) and PARTS.get(type(x).__name__) is type(x):
            return {"__o": [type(x).__name__, {f.name: self(getattr(x, f.name)) for f in fields(x)}]}
        raise _NotData(type(x).__name__)


def _decoder(arrays: dict[str, np.ndarray]):
    def dec(x):
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is list:
            return [dec(v) for v in x]
        if type(x) is dict and len(x) == 1:
            ((tag, v),) = x.items()
            if tag in ("__a", "__s") and type(v) is str and v in arrays:
                return arrays[v] if tag == "__a" else arrays[v][()]
            if tag == "__t" and type(v) is list:
                return tuple(dec(e) for e in v)
            if tag == "__d" and type(v) is list and all(type(kv) is list and len(kv) == 2 for kv in v):
                return {dec(k): dec(e) for k, e in v}
            if tag == "__o" and type(v) is list and len(v) == 2 and v[0] in PARTS and type(v[1]) is dict:
                cls = PARTS[v[0]]
                if set(v[1]) == {f.name for f in fields(cls)}:
                    return cls(**{k: dec(e) for k, e in v[1].items()})
        raise _Corrupt("unknown value in the document")

    return dec


def _digest(doc: bytes, arrays: dict[str, np.ndarray]) -> bytes:
    h = hashlib.sha256(doc)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest().encode()


def _encode(res: RunResult) -> tuple[bytes, dict[str, np.ndarray]]:
    """The result as (JSON document, arrays); raises :class:`_NotData` when it cannot be."""
    from ...data.dataset import DatasetMeta

    rel = res.release
    # a field added to RunResult or Release without teaching this encoder would be lost
    if {f.name for f in fields(res)} != _RESULT_FIELDS or {f.name for f in fields(rel)} != _RELEASE_FIELDS:
        raise _NotData("unknown fields")
    # the pages call these after a run (Attack: candidates/surface; Ranges: range_answerer)
    view = rel.server_view
    if rel.range_answerer is not None or view.candidates is not None or view.surface is not None:
        raise _NotData("callables in the release")
    if type(res.dataset_meta) is not DatasetMeta:
        raise _NotData("dataset meta")
    if res.n_users is None or res.n_points is None:
        raise _NotData("a release-mode result, which is fresh every run")
    enc = _Encoder()
    dom = rel.domain
    doc = {
        "schema": CACHE_VERSION,
        "key": res.config.key(),
        "truth": enc(res.truth),
        "metrics": enc(res.metrics),
        "timings": enc(res.timings),
        "evaluation": enc(res.evaluation),
        "n_users": int(res.n_users),
        "n_points": int(res.n_points),
        "crs": str(res.crs),
        "dataset_meta": enc({f.name: getattr(res.dataset_meta, f.name) for f in fields(DatasetMeta)}),
        "release": {
            "density": enc(rel.density),
            "domain": enc([dom.x0, dom.y0, dom.side, dom.depth]),
            "ledger": enc(
                {"entries": [asdict(e) for e in rel.ledger.entries], "side_information": rel.ledger.side_information}
            ),
            "communication": enc(asdict(rel.communication)),
            "server_view": enc({"kind": view.kind, "description": view.description}),
            "partition": enc(rel.partition),
            "diagnostics": enc(rel.diagnostics),
            "extras": enc(rel.extras),
            "quantity": enc(rel.quantity),
            **{name: enc(getattr(rel, name)) for name in _PARTS},
        },
    }
    return json.dumps(doc).encode(), enc.arrays


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise _Corrupt(what)


def _number(x) -> bool:
    return type(x) in (int, float)


def _decode(doc: dict, arrays: dict[str, np.ndarray], config: RunConfig) -> RunResult:
    """Rebuild the result, checking every key, type and shape a page relies on."""
    from ...core.accounting import Ledger, LedgerEntry
    from ...core.grid import Domain
    from ...data.dataset import DatasetMeta
    from ...mechanisms import load_all
    from ...mechanisms.base import Communication, Release, ServerView

    load_all()  # the families register their release parts (a tree's covariance)
    dec = _decoder(arrays)
    _expect(type(doc) is dict and doc.get("schema") == CACHE_VERSION and doc.get("key") == config.key(), "schema")
    r = doc.get("release")
    if type(r) is not dict or set(r) != _RELEASE_FIELDS - {"range_answerer"}:
        raise _Corrupt("release keys")
    n = 1 << config.depth
    density, truth = dec(r["density"]), dec(doc["truth"])
    for a in (density, truth):
        _expect(isinstance(a, np.ndarray) and a.shape == (n, n) and a.dtype.kind in "iuf", "map shape")
    x0, y0, side, depth = dec(r["domain"])
    _expect(all(_number(v) for v in (x0, y0, side)) and depth == config.depth, "domain")
    ledger = dec(r["ledger"])
    _expect(set(ledger) == {"entries", "side_information"}, "ledger")
    _expect(all(type(s) is str for s in ledger["side_information"]), "ledger")
    entries = [LedgerEntry(**e) for e in ledger["entries"]]
    _expect(all(_number(e.epsilon) and _number(e.delta) for e in entries), "ledger entries")
    comm = Communication(**dec(r["communication"]))
    _expect(_number(comm.elements_per_client) and type(comm.rounds) is int, "communication")
    view = ServerView(**dec(r["server_view"]))
    _expect(view.kind in ("clear", "aggregate", "per_user") and type(view.description) is str, "server view")
    partition = dec(r["partition"])
    _expect(partition is None or (isinstance(partition, np.ndarray) and partition.ndim == 2), "partition")
    _expect(partition is None or partition.shape[1] == 4, "partition")
    diagnostics, extras, quantity = dec(r["diagnostics"]), dec(r["extras"]), dec(r["quantity"])
    _expect(type(diagnostics) is dict and type(extras) is dict and quantity in ("counts", "attribute_mean"), "extras")
    metrics, timings = dec(doc["metrics"]), dec(doc["timings"])
    for d in (metrics, timings):
        _expect(type(d) is dict and all(type(k) is str and _number(v) for k, v in d.items()), "metrics")
    n_users, n_points = dec(doc["n_users"]), dec(doc["n_points"])
    _expect(type(n_users) is int and type(n_points) is int and 0 <= n_users <= n_points, "counts")
    meta = DatasetMeta(**dec(doc["dataset_meta"]))
    evaluation = dec(doc["evaluation"])
    _expect(type(evaluation) is dict, "evaluation")
    crs = doc.get("crs")
    if type(crs) is not str:
        raise _Corrupt("crs")
    release = Release(
        density=density,
        domain=Domain(x0, y0, side, depth),
        ledger=Ledger(entries=entries, side_information=list(ledger["side_information"])),
        communication=comm,
        server_view=view,
        partition=partition,
        diagnostics=diagnostics,
        extras=extras,
        quantity=quantity,
        **_parts(r, dec),
    )
    return RunResult(
        config, release, truth, metrics, timings, n_users, n_points, meta, cached=True, crs=crs, evaluation=evaluation
    )


def _parts(r: dict, dec) -> dict:
    """The release's typed parts, each of the type its field holds."""
    from ...mechanisms.noise_model import Measurements, NoiseModel
    from ...mechanisms.outputs import Heat, Level, Proportions, RegionalMeans

    out = {name: dec(r[name]) for name in _PARTS}
    _expect(isinstance(out["noise"], (NoiseModel, str)), "noise")
    for name, cls in (("measurements", Measurements), ("heat", Heat), ("regional", RegionalMeans)):
        _expect(out[name] is None or isinstance(out[name], cls), name)
    _expect(out["proportion"] is None or isinstance(out["proportion"], Proportions), "proportion")
    _expect(type(out["levels"]) is tuple and all(isinstance(v, Level) for v in out["levels"]), "levels")
    _expect(type(out["warnings"]) is tuple and all(type(w) is str for w in out["warnings"]), "warnings")
    _expect(out["regions_counted"] is None or type(out["regions_counted"]) is str, "regions")
    return out


def store(path: Path, res: RunResult) -> None:
    """Write ``res`` to the cache if it is data only (written aside, then renamed into place)."""
    try:
        doc, arrays = _encode(res)
    except _NotData:
        return  # e.g. a model answering range queries: kept in memory by the caller only
    members = dict(arrays)
    members["doc"] = np.frombuffer(doc, dtype=np.uint8)
    members["digest"] = np.frombuffer(_digest(doc, arrays), dtype=np.uint8)
    tmp = path.with_name(f"{path.stem}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            np.savez(f, allow_pickle=False, **members)  # plain arrays only, as load reads them
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):  # a full or read-only disk only costs the cache entry
            tmp.unlink(missing_ok=True)


def load(path: Path, config: RunConfig) -> RunResult | None:
    """The cached result of ``config``, or None. An entry that fails any check (not an
    uncompressed npz of plain arrays, digest, schema, keys, types, shapes) is deleted."""
    if not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as zf:  # stored members only: nothing expands beyond the file
            _expect(all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist()), "compressed member")
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        doc, digest = arrays.pop("doc", None), arrays.pop("digest", None)
        _expect(doc is not None and digest is not None and doc.dtype == np.uint8, "members")
        _expect(digest.tobytes() == _digest(doc.tobytes(), arrays), "digest")
        return _decode(json.loads(doc.tobytes()), arrays, config)
    except Exception:  # anything unexpected in a cache file means: recompute
        path.unlink(missing_ok=True)
        return None
