"""Run configurations, results, the disk cache, and a background job manager.

``run(config)`` is the one entry point used by the CLI, the benchmarks and the
dashboard: load the dataset, sample users, build the public domain, run the
mechanism, compute the metrics.

A run has one of two modes (issue 23), ``RunConfig.mode``:

* ``"evaluate"``: deterministic given the configuration (seed included), with the truth
  and metrics against it; results are cached on disk under the configuration's hash, in a
  data-only format (:func:`_encode`): nothing read from the cache can run code. Seeded
  numpy noise is neither floating-point safe nor secret, so what it makes is not a private
  release (its exports carry ``engine.export.EVALUATION``). Callers draw a fresh seed with
  :func:`fresh_seed` when the user did not fix one.
* ``"release"``: OpenDP samplers (secure mode) and fresh operating-system entropy for every
  other draw (user sampling, the mechanism's numpy stream); no seed is used or recorded,
  nothing is cached, and neither the truth nor any metric is computed: the result holds the
  release alone (``truth`` None, ``metrics`` empty, ``n_users``/``n_points`` None).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
import uuid
import weakref
import zipfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, costmodel
from .core.cache import cache_dir
from .core.errors import Cancelled, EngineError, ParamError
from .costmodel import record as record_cost

CACHE_VERSION = 2  # 2: data-only .npz entries (1 was pickled)
ROOT = Path(__file__).resolve().parents[1]
MIN_EPS, MAX_EPS = 1e-4, 100.0
MODES = ("evaluate", "release")
# Fresh seeds stay below 2^31: the dashboard's seed field and URL take at most 2^31 - 1 (and a
# browser holds integers exactly only to 2^53). An Evaluate seed is shown and exported, so its
# size is no privacy property; a Release has no seed at all.
FRESH_SEED_BITS = 31


def fresh_seed() -> int:
    """A seed drawn from the operating system's entropy, for an Evaluate run whose user did
    not fix one: the run is not seed 0 like every other, and the seed is recorded (shown,
    exported) so the run can be reproduced on purpose."""
    return secrets.randbits(FRESH_SEED_BITS)


@lru_cache(maxsize=4)
def source_fingerprint(root: Path = ROOT) -> str:
    """Digest of what decides a release: the engine's Python sources (benchmarks aside) and the
    tables shipped in ``data/`` (ParamSelect's). Part of every run's cache key, so a changed
    engine never serves a release that the old code computed."""
    h = hashlib.sha256()
    files = [p for p in sorted(root.glob("engine/**/*.py")) if "bench" not in p.relative_to(root).parts[:2]]
    for p in files + sorted((root / "data").glob("*.csv")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def run_cache_path(config: RunConfig) -> Path:
    """Where the disk cache keeps ``config``'s result."""
    return cache_dir() / "runs" / f"{config.key()}.npz"


def estimate_seconds(config: RunConfig, n_points: int | None = None) -> float:
    """The dashboard's estimate before Run: :func:`engine.costmodel.estimate_seconds` told whether
    the disk cache holds the result and which dataset this process has loaded."""
    try:
        cached = config.mode == "evaluate" and run_cache_path(config).is_file()
    except Exception:  # the cache folder is an optimisation only
        cached = False
    ds = loaded_dataset(config.dataset, config.dataset_options)
    return costmodel.estimate_seconds(config, n_points, dataset=ds, cached=cached)


@dataclass(frozen=True)
class RunConfig:
    dataset: str = "synthetic:polycentric"
    dataset_options: dict = field(default_factory=dict)
    mechanism: str = "identity"
    params: dict = field(default_factory=dict)
    epsilon: float = 1.0
    n_users: int | None = None  # users sampled; None = all
    depth: int = 8  # 2^depth cells per side
    seed: int = 0
    secure: bool = False  # OpenDP samplers for the noise that supports it (always on in release mode)
    mode: str = "evaluate"  # or "release": see the module docstring
    metrics: tuple[str, ...] = ()  # extra metrics beyond the default set
    emd_max_cells: int = 64  # EMD coarsened to at most this many cells per side in runs

    def to_dict(self) -> dict:
        d = asdict(self)
        d["metrics"] = list(self.metrics)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        d = dict(d)
        if "metrics" in d:
            d["metrics"] = tuple(d["metrics"])
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ParamError(f"unknown configuration field(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def key(self) -> str:
        """Stable hash of the configuration and of the engine that runs it (version, cache
        format and :func:`source_fingerprint`)."""
        payload = json.dumps(
            {"config": self.to_dict(), "engine": __version__, "cache": CACHE_VERSION, "source": source_fingerprint()},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def validate(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and MIN_EPS <= float(self.epsilon) <= MAX_EPS):
            raise ParamError(f"epsilon must be between {MIN_EPS} and {MAX_EPS} (got {self.epsilon})")
        if not (isinstance(self.depth, int) and 1 <= self.depth <= 10):
            raise ParamError(f"resolution depth must be 1..10 (2x2 to 1024x1024 cells), got {self.depth}")
        if self.n_users is not None and (not isinstance(self.n_users, int) or self.n_users < 1):
            raise ParamError(f"number of users must be a positive integer (got {self.n_users})")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ParamError(f"seed must be a non-negative integer (got {self.seed})")
        if self.mode not in MODES:
            raise ParamError(f"mode must be 'evaluate' or 'release' (got {self.mode!r})")
        if self.mode == "release":
            from .mechanisms import get

            if self.seed != 0:
                raise ParamError(
                    f"a release draws fresh noise from the operating system and takes no seed (got seed {self.seed})"
                )
            if self.metrics:
                raise ParamError("a release computes no metric against the true data (got metrics to compute)")
            cls = get(self.mechanism)
            if not cls.uses_epsilon:  # a non-private reference would publish the truth
                raise ParamError(f"{cls.label or cls.key} spends no epsilon and is not private: it cannot be released")


@dataclass
class RunResult:
    config: RunConfig
    release: Any  # mechanisms.Release
    truth: np.ndarray | None  # true map on the same grid in the release's unit (release_truth); None in release mode
    metrics: dict[str, float]  # empty in release mode
    timings: dict[str, float]
    n_users: int | None  # None in release mode
    n_points: int | None  # None in release mode
    dataset_meta: Any
    cached: bool = False
    # what the mechanism computed from the truth (RunContext.evaluation): errors against the true
    # data, exact counts, attacks on the true locations; never part of the release
    evaluation: dict = field(default_factory=dict)
    crs: str = ""  # PROJ string of the local CRS the release's domain is in

    def summary(self) -> dict:
        """The run as a JSON-able record. Evaluate: configuration, exact counts, metrics,
        diagnostics, stamped ``evaluation``. Release: the manifest of
        :func:`engine.export.manifest` (DP outputs, ledger, parameters, side information)."""
        from .export import EVALUATION, manifest, side_information

        if self.config.mode == "release":
            return manifest(self)
        rel = self.release
        return {
            "evaluation": EVALUATION,
            "mode": self.config.mode,
            "config": self.config.to_dict(),
            "key": self.config.key(),
            "n_users": self.n_users,
            "n_points": self.n_points,
            "metrics": self.metrics,
            "timings": self.timings,
            "ledger": {**rel.ledger.to_dict(), "side_information": side_information(self)},
            "communication": rel.communication.to_dict(),
            "server_view": rel.server_view.description,
            "diagnostics": _jsonable(rel.diagnostics),
        }


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist() if x.size <= 4096 else f"<array {x.shape}>"
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return x


# ----------------------------------------------------------------- dataset cache
_DATA_CACHE: dict[str, Any] = {}
_DATA_LOCK = threading.Lock()


def _dataset_key(key: str, options: dict) -> str:
    stamp = None
    if options.get("path"):  # a file read by path: an edited file is read again
        try:
            st = os.stat(options["path"])
            stamp = [st.st_mtime_ns, st.st_size]
        except OSError:
            pass  # the loader reports the missing file
    return json.dumps([key, options, stamp], sort_keys=True, default=str)


def loaded_dataset(key: str, options: dict):
    """The dataset if this process has it loaded already (see :func:`load_dataset`), else None."""
    with _DATA_LOCK:
        return _DATA_CACHE.get(_dataset_key(key, options))


def load_dataset(key: str, options: dict):
    """Load (and memoise in-process) a dataset from the registry (mechanism families loaded
    first: some register the datasets of their paper)."""
    from .data import load
    from .mechanisms import load_all

    ck = _dataset_key(key, options)
    with _DATA_LOCK:
        if ck in _DATA_CACHE:
            return _DATA_CACHE[ck]
    load_all()
    ds = load(key, **options)
    with _DATA_LOCK:
        if len(_DATA_CACHE) > 8:
            _DATA_CACHE.pop(next(iter(_DATA_CACHE)))
        _DATA_CACHE[ck] = ds
    return ds


def _users_own_file(key: str) -> bool:
    """True for sources that are the user's own data (kind ``file``: uploads and paths)."""
    from .data.registry import sources
    from .mechanisms import load_all

    load_all()
    src = sources().get(key)
    return src is None or src.kind == "file"


def prepare(config: RunConfig, dataset=None):
    """Dataset sampled to the configured users, clipped to the public domain."""
    config.validate()
    ds = dataset if dataset is not None else load_dataset(config.dataset, config.dataset_options)
    domain = ds.public_domain(config.depth)
    # release mode: fresh operating-system entropy, so no one can recompute the draws
    ss = np.random.SeedSequence(config.seed if config.mode == "evaluate" else None)
    sample_seq, mech_seq, metric_seq = ss.spawn(3)
    ds = ds.in_domain(domain)
    if len(ds) == 0:
        raise EngineError("no location of this dataset falls inside its region")
    ds = ds.sample_users(config.n_users, np.random.default_rng(sample_seq))
    return ds, domain, mech_seq, metric_seq


def release_truth(ds, domain, params: dict) -> np.ndarray:
    """The true map in the unit the release counts, for every metric (issue 22): each person
    counts once (a user's locations share weight 1, the user-level unit; identical to
    location counts without user ids) unless the mechanism counts records (``unit =
    "record"``), whose truth is the plain location count. Scoring a record-unit release
    against user-normalised truth (or the reverse) puts every range answer off by the
    mean number of locations per user, whatever the mechanism does."""
    if params.get("unit") == "record":
        return ds.true_histogram(domain)
    return ds.true_histogram(domain, per_user_normalised=True)


def run(
    config: RunConfig,
    progress: Callable[[float, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    use_cache: bool = True,
    dataset=None,
    registry_copy: bool = False,
) -> RunResult:
    """Run one configuration end to end (cached by ``config.key()`` in evaluate mode; a
    release-mode run is never cached, uses secure noise and computes no truth or metric).
    ``dataset``: a dataset object instead of the registry's (never cached), unless
    ``registry_copy`` says it is the registry's own for this configuration (a copy scattered to
    Dask workers by :mod:`engine.distributed`), so the cache applies as without it."""
    from . import metrics as M
    from .mechanisms import RunContext, get

    config.validate()
    releasing = config.mode == "release"
    mech_cls = get(config.mechanism)
    params = mech_cls.schema().resolve(config.params)
    # a user's own file never reaches the disk cache: the result holds its true map, and a
    # file read by path may change under the same configuration; a release is fresh every time
    given = dataset is not None and not registry_copy
    use_cache = use_cache and not given and not _users_own_file(config.dataset) and not releasing
    cache_file = run_cache_path(config) if use_cache else None
    if cache_file is not None:
        res = _load(cache_file, config)
        if res is not None:
            if progress:
                progress(1.0, "loaded from cache")
            return res

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if progress:
        progress(0.0, "loading data")
    ds, domain, mech_seq, metric_seq = prepare(config, dataset)
    for attr in mech_cls.needs:
        if getattr(ds, attr) is None:
            raise EngineError(
                f"{mech_cls.label or mech_cls.key} needs the dataset attribute '{attr}', which this dataset lacks"
            )
    timings["prepare_s"] = time.perf_counter() - t0

    def mech_progress(f, msg=""):
        if progress:
            progress(0.05 + 0.85 * f, msg)

    ctx = RunContext(
        rng=np.random.default_rng(mech_seq),
        secure=config.secure or releasing,
        progress_cb=mech_progress,
        cancel_cb=cancelled,
        evaluation=None if releasing else {},  # a release records nothing computed from the truth
    )
    t1 = time.perf_counter()
    ctx.check_cancelled()
    mech_progress(0.0, f"running {mech_cls.label or mech_cls.key}")
    release = mech_cls().run(ds, domain, float(config.epsilon), params, ctx)
    timings["mechanism_s"] = time.perf_counter() - t1
    ctx.check_cancelled()
    # the plan must fit the budget; under excess dropout a distributed sum spends more than planned and
    # the ledger books the epsilon actually spent (Ledger.planned_total vs total)
    if release.ledger.planned_total() > float(config.epsilon) * (1 + 1e-9) + 1e-12 and mech_cls.uses_epsilon:
        raise EngineError(f"{config.mechanism} spent {release.ledger.total()} > epsilon {config.epsilon} (a bug)")
    if releasing:  # nothing computed from the truth outside the mechanism
        timings["total_s"] = time.perf_counter() - t0
        record_cost(config, timings["total_s"], len(ds))
        if progress:
            progress(1.0, "done")
        return RunResult(config, release, None, {}, timings, None, None, ds.meta, crs=ds.crs)

    if progress:
        progress(0.92, "computing metrics")
    t2 = time.perf_counter()
    truth = release_truth(ds, domain, params)
    metrics = M.evaluate(
        truth,
        release,
        ds,
        domain,
        np.random.default_rng(metric_seq),
        emd_max_cells=config.emd_max_cells,
        extra=config.metrics,
        evaluation=ctx.evaluation,
    )
    timings["metrics_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - t0
    record_cost(config, timings["total_s"], len(ds))
    res = RunResult(
        config=config,
        release=release,
        truth=truth,
        metrics=metrics,
        timings=timings,
        n_users=ds.n_users,
        n_points=len(ds),
        dataset_meta=ds.meta,
        evaluation=ctx.evaluation,
        crs=ds.crs,
    )
    if cache_file is not None:
        _store(cache_file, res)
    if progress:
        progress(1.0, "done")
    return res


# ------------------------------------------------------------------- disk cache
# One entry is one uncompressed .npz (read with allow_pickle=False) holding a JSON document
# ("doc", UTF-8 bytes), the arrays it names ("a0", "a1", ...) and a SHA-256 of all of them
# ("digest"). The document encodes values generically: JSON scalars as themselves,
# {"__a": name} an array, {"__s": name} a numpy scalar (0-d array), {"__t": [...]} a tuple,
# {"__d": [[key, value], ...]} a dict (any JSON-able keys, order kept). Anything else (a
# callable, an object) makes the result uncacheable: it is simply not stored.
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
}


class _NotData(Exception):
    """The result holds something the data-only cache cannot store."""


class _Corrupt(Exception):
    """A cache entry failed verification."""


class _Encoder:
    def __init__(self):
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
    from .data.dataset import DatasetMeta

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
    from .core.accounting import Ledger, LedgerEntry
    from .core.grid import Domain
    from .data.dataset import DatasetMeta
    from .mechanisms.base import Communication, Release, ServerView

    dec = _decoder(arrays)
    _expect(type(doc) is dict and doc.get("schema") == CACHE_VERSION and doc.get("key") == config.key(), "schema")
    r = doc.get("release")
    _expect(type(r) is dict and set(r) == _RELEASE_FIELDS - {"range_answerer"}, "release keys")
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
    _expect(type(crs) is str, "crs")
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
    )
    return RunResult(
        config, release, truth, metrics, timings, n_users, n_points, meta, cached=True, crs=crs, evaluation=evaluation
    )


def _store(path: Path, res: RunResult) -> None:
    """Write ``res`` to the cache if it is data only (written aside, then renamed into place)."""
    try:
        doc, arrays = _encode(res)
    except _NotData:
        return  # e.g. a model answering range queries: kept in memory by the caller only
    members = dict(arrays)
    members["doc"] = np.frombuffer(doc, dtype=np.uint8)
    members["digest"] = np.frombuffer(_digest(doc, arrays), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{uuid.uuid4().hex}.tmp")
    try:
        with tmp.open("wb") as f:
            np.savez(f, **members)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk only costs the cache entry


def _load(path: Path, config: RunConfig) -> RunResult | None:
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


# ------------------------------------------------------------------- job manager
MAX_UNCOLLECTED = 50  # finished jobs whose outcome nobody read, kept for a late get()


@dataclass
class Job:
    id: str
    config: RunConfig
    future: Future  # set by JobManager.submit right after the job is made
    cancel_event: threading.Event
    started: float
    progress: float = 0.0
    message: str = "queued"
    finished: float | None = None
    on_collected: Callable[[Job], None] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.future.done()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.time()) - self.started

    def cancel(self) -> None:
        """Stop the job: a queued job never starts; a running one stops at its next check
        (the engine checks at least every second or so, noise draws included)."""
        self.cancel_event.set()
        if self.future.cancel() and self.finished is None:
            self.finished, self.message = time.time(), "cancelled"

    def outcome(self) -> tuple[str, Any]:
        """("ok", RunResult) | ("cancelled", msg) | ("error", user message) | ("running", None).
        Reading a finished job's outcome hands its result to the caller: the manager then
        stops holding it (see :class:`JobManager`)."""
        if not self.future.done():
            return "running", None
        out = self._outcome()
        if self.on_collected is not None:
            self.on_collected(self)
        return out

    def _outcome(self) -> tuple[str, Any]:
        if self.future.cancelled():
            return "cancelled", "the run was cancelled"
        exc = self.future.exception()
        if exc is None:
            return "ok", self.future.result()
        if isinstance(exc, Cancelled):
            return "cancelled", str(exc)
        if isinstance(exc, EngineError):
            return "error", str(exc)
        if isinstance(exc, MemoryError):
            return (
                "error",
                "the run needed more memory than this machine has; lower the resolution or the number of users",
            )
        return "error", f"the run failed unexpectedly ({type(exc).__name__}); the error was logged without data"


class JobManager:
    """Runs configurations in a thread pool; shared by all browser sessions.

    Jobs never touch the UI; the dashboard polls ``job.progress``. A failure is
    confined to its job. The manager holds a job (and so its result) only until its
    outcome is read, then only weakly: a finished result lives as long as its owner keeps
    the :class:`Job` (``get`` finds it until then), so the owner's own bounds (e.g. the
    dashboard's board) are the only ones that keep results. ``forget`` drops a job at once
    (cancelling it if it still runs); at most ``MAX_UNCOLLECTED`` finished jobs whose outcome
    nobody read are kept.
    """

    def __init__(self, workers: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heatmap-job")
        self._jobs: dict[str, Job] = {}  # running, or finished and not yet collected
        self._collected: weakref.WeakValueDictionary[str, Job] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def submit(self, config: RunConfig, use_cache: bool = True, dataset=None) -> Job:
        """Run ``config`` in the pool (``dataset``: a dataset object instead of the registry's, e.g. an upload)."""
        ev = threading.Event()
        # the job exists before its work starts, so no early progress message is lost (a
        # running job used to show "queued" until the mechanism's first report)
        job = Job(uuid.uuid4().hex[:12], config, None, ev, time.time(), on_collected=self._collected_cb)

        def prog(f, msg=""):
            job.progress, job.message = f, msg

        def work():
            try:
                res = run(config, progress=prog, cancelled=ev.is_set, use_cache=use_cache, dataset=dataset)
                if ev.is_set():  # cancelled after the last check: the user asked for no result
                    raise Cancelled("the run was cancelled")
                return res
            finally:
                job.finished = time.time()

        job.future = self._pool.submit(work)
        with self._lock:
            self._jobs[job.id] = job
            finished = [k for k, j in self._jobs.items() if j.done]
            for k in finished[: max(0, len(finished) - MAX_UNCOLLECTED)]:
                self._jobs.pop(k)
        return job

    def _collected_cb(self, job: Job) -> None:
        with self._lock:
            if self._jobs.pop(job.id, None) is not None:
                self._collected[job.id] = job

    def get(self, jid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(jid) or self._collected.get(jid)

    def forget(self, jid: str) -> None:
        """Drop the manager's hold on a job (cancelled first if it has not finished)."""
        with self._lock:
            job = self._jobs.pop(jid, None) or self._collected.pop(jid, None)
        if job is not None and not job.done:
            job.cancel()

    def shutdown(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for j in jobs:
            j.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
