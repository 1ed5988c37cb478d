"""Run configurations, results, the disk cache, and a background job manager.

``run(config)`` is the one entry point used by the CLI, the benchmarks and the
dashboard: load the dataset, sample users, build the public domain, run the
mechanism, compute the metrics. It is deterministic given the configuration
(seed included); results are cached on disk under the configuration's hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .errors import Cancelled, EngineError, ParamError

CACHE_VERSION = 1
ROOT = Path(__file__).resolve().parents[1]
MIN_EPS, MAX_EPS = 1e-4, 100.0


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


def cache_dir() -> Path:
    """Run/download cache folder (``HEATMAP_CACHE_DIR`` or ``data/cache``)."""
    root = os.environ.get("HEATMAP_CACHE_DIR")
    path = Path(root) if root else Path(__file__).resolve().parent.parent / "data" / "cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    secure: bool = False  # OpenDP samplers for the noise that supports it
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


@dataclass
class RunResult:
    config: RunConfig
    release: Any  # mechanisms.Release
    truth: np.ndarray  # true map on the same grid, each user weighing 1 in total
    metrics: dict[str, float]
    timings: dict[str, float]
    n_users: int
    n_points: int
    dataset_meta: Any
    cached: bool = False

    def summary(self) -> dict:
        rel = self.release
        return {
            "config": self.config.to_dict(),
            "key": self.config.key(),
            "n_users": self.n_users,
            "n_points": self.n_points,
            "metrics": self.metrics,
            "timings": self.timings,
            "ledger": rel.ledger.to_dict(),
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


def load_dataset(key: str, options: dict):
    """Load (and memoise in-process) a dataset from the registry."""
    from .data import load

    stamp = None
    if options.get("path"):  # a file read by path: an edited file is read again
        try:
            st = os.stat(options["path"])
            stamp = [st.st_mtime_ns, st.st_size]
        except OSError:
            pass  # the loader reports the missing file
    ck = json.dumps([key, options, stamp], sort_keys=True, default=str)
    with _DATA_LOCK:
        if ck in _DATA_CACHE:
            return _DATA_CACHE[ck]
    ds = load(key, **options)
    with _DATA_LOCK:
        if len(_DATA_CACHE) > 8:
            _DATA_CACHE.pop(next(iter(_DATA_CACHE)))
        _DATA_CACHE[ck] = ds
    return ds


def _users_own_file(key: str) -> bool:
    """True for sources that are the user's own data (kind ``file``: uploads and paths)."""
    from .data.registry import sources

    src = sources().get(key)
    return src is None or src.kind == "file"


def prepare(config: RunConfig, dataset=None):
    """Dataset sampled to the configured users, clipped to the public domain."""
    config.validate()
    ds = dataset if dataset is not None else load_dataset(config.dataset, config.dataset_options)
    domain = ds.public_domain(config.depth)
    ss = np.random.SeedSequence(config.seed)
    sample_seq, mech_seq, metric_seq = ss.spawn(3)
    ds = ds.in_domain(domain)
    if len(ds) == 0:
        raise EngineError("no location of this dataset falls inside its region")
    ds = ds.sample_users(config.n_users, np.random.default_rng(sample_seq))
    return ds, domain, mech_seq, metric_seq


def run(
    config: RunConfig,
    progress: Callable[[float, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    use_cache: bool = True,
    dataset=None,
) -> RunResult:
    """Run one configuration end to end (cached by ``config.key()``)."""
    from . import metrics as M
    from .mechanisms import RunContext, get

    mech_cls = get(config.mechanism)
    params = mech_cls.schema().resolve(config.params)
    cache_file = cache_dir() / "runs" / f"{config.key()}.pkl"
    # a user's own file never reaches the disk cache: the result holds its true map, and a
    # file read by path may change under the same configuration
    use_cache = use_cache and dataset is None and not _users_own_file(config.dataset)
    if use_cache and cache_file.exists():
        try:
            with cache_file.open("rb") as f:
                res = pickle.load(f)
            res.cached = True
            if progress:
                progress(1.0, "loaded from cache")
            return res
        except Exception:
            cache_file.unlink(missing_ok=True)  # a corrupt entry is recomputed

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
        rng=np.random.default_rng(mech_seq), secure=config.secure, progress_cb=mech_progress, cancel_cb=cancelled
    )
    t1 = time.perf_counter()
    ctx.check_cancelled()
    release = mech_cls().run(ds, domain, float(config.epsilon), params, ctx)
    timings["mechanism_s"] = time.perf_counter() - t1
    ctx.check_cancelled()
    if release.ledger.total() > float(config.epsilon) * (1 + 1e-9) + 1e-12 and mech_cls.uses_epsilon:
        raise EngineError(f"{config.mechanism} spent {release.ledger.total()} > epsilon {config.epsilon} (a bug)")

    if progress:
        progress(0.92, "computing metrics")
    t2 = time.perf_counter()
    # Each person counts once: a user's locations share weight 1, matching the
    # user-level privacy unit; identical to location counts without user ids.
    truth = ds.true_histogram(domain, per_user_normalised=True)
    metrics = M.evaluate(
        truth,
        release,
        ds,
        domain,
        np.random.default_rng(metric_seq),
        emd_max_cells=config.emd_max_cells,
        extra=config.metrics,
    )
    timings["metrics_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - t0
    res = RunResult(
        config=config,
        release=release,
        truth=truth,
        metrics=metrics,
        timings=timings,
        n_users=ds.n_users,
        n_points=len(ds),
        dataset_meta=ds.meta,
    )
    if use_cache:
        _store(cache_file, res)
    if progress:
        progress(1.0, "done")
    return res


def _store(path: Path, res: RunResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
    try:
        # callables in the release (model answerers, server-view closures) may not pickle
        with tmp.open("wb") as f:
            pickle.dump(res, f, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)
    except Exception:
        tmp.unlink(missing_ok=True)


# ------------------------------------------------------------------- job manager
@dataclass
class Job:
    id: str
    config: RunConfig
    future: Future
    cancel_event: threading.Event
    started: float
    progress: float = 0.0
    message: str = "queued"
    finished: float | None = None

    @property
    def done(self) -> bool:
        return self.future.done()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.time()) - self.started

    def cancel(self) -> None:
        self.cancel_event.set()
        self.future.cancel()

    def outcome(self) -> tuple[str, Any]:
        """("ok", RunResult) | ("cancelled", msg) | ("error", user message) | ("running", None)."""
        if not self.future.done():
            return "running", None
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
    confined to its job.
    """

    def __init__(self, workers: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heatmap-job")
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def submit(self, config: RunConfig, use_cache: bool = True, dataset=None) -> Job:
        """Run ``config`` in the pool (``dataset``: a dataset object instead of the registry's, e.g. an upload)."""
        ev = threading.Event()
        jid = uuid.uuid4().hex[:12]
        holder: dict[str, Job] = {}

        def prog(f, msg=""):
            j = holder.get("job")
            if j is not None:
                j.progress, j.message = f, msg

        def work():
            try:
                return run(config, progress=prog, cancelled=ev.is_set, use_cache=use_cache, dataset=dataset)
            finally:
                j = holder.get("job")
                if j is not None:
                    j.finished = time.time()

        fut = self._pool.submit(work)
        job = Job(jid, config, fut, ev, time.time())
        holder["job"] = job
        with self._lock:
            self._jobs[jid] = job
            # forget old finished jobs
            if len(self._jobs) > 200:
                for k in [k for k, j in self._jobs.items() if j.done][:100]:
                    self._jobs.pop(k, None)
        return job

    def get(self, jid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(jid)

    def shutdown(self) -> None:
        for j in list(self._jobs.values()):
            j.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
