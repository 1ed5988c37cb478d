"""The runner: ``run(config)``, the one entry point used by the CLI, the benchmarks and the
dashboard: load the dataset, sample users, build the public domain, run the mechanism, compute
the metrics (Evaluate) or nothing computed from the truth (Release; see :mod:`engine.run.execution._config`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...core.cache import CacheUnavailable
from ...core.errors import EngineError, ParamError
from ._config import RunConfig, RunResult
from ._estimates import predict_seconds
from ._estimates import record as record_cost
from ._frame import Setup, choose, neighbouring_of
from ._release_files import region_frame
from ._result_cache import load as load_cached
from ._result_cache import run_cache_path
from ._result_cache import store as store_cached

# ----------------------------------------------------------------- dataset cache
_DATA_CACHE: dict[str, Any] = {}
_DATA_LOCK = threading.Lock()
_DATA_LOADING: dict[str, threading.Lock] = {}  # one lock per dataset being loaded


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
    from ...data import load
    from ...mechanisms import load_all

    ck = _dataset_key(key, options)
    with _DATA_LOCK:
        if ck in _DATA_CACHE:
            return _DATA_CACHE[ck]
        loading = _DATA_LOADING.setdefault(ck, threading.Lock())
    with loading:  # one load per dataset: sessions opening it at once wait for it instead of each reading it
        with _DATA_LOCK:
            if ck in _DATA_CACHE:
                return _DATA_CACHE[ck]
        load_all()
        ds = load(key, **options)
        with _DATA_LOCK:
            if len(_DATA_CACHE) > 8:
                _DATA_CACHE.pop(next(iter(_DATA_CACHE)))
            _DATA_CACHE[ck] = ds
            _DATA_LOADING.pop(ck, None)
    return ds


def _users_own_file(key: str) -> bool:
    """True for sources that are the user's own data (kind ``file``: uploads and paths)."""
    from ...data.registry import source
    from ...mechanisms import load_all

    load_all()
    src = source(key)
    return src is None or src.kind == "file"


@dataclass
class Prepared:
    """A run's data and domain as its mechanism sees them, its random streams, and the frame and grid steps
    of :func:`engine.run.execution._frame.choose` (their ledger entries, what they state, their exact values)."""

    data: Any
    domain: Any
    mech_seq: np.random.SeedSequence
    metric_seq: np.random.SeedSequence
    setup: Setup


def prepare_run(config: RunConfig, dataset=None) -> Prepared:
    """Dataset sampled to the configured users, inside the run's frame, on its grid (:mod:`engine.run.execution._frame`)."""
    config.validate()
    releasing = config.mode == "release"
    ds = dataset if dataset is not None else load_dataset(config.dataset, config.dataset_options)
    region = ds.public_domain(config.depth)
    # release mode: fresh operating-system entropy, so no one can recompute the draws
    ss = np.random.SeedSequence(config.seed if not releasing else None)
    sample_seq, mech_seq, metric_seq, frame_seq = ss.spawn(4)
    ds = ds.in_domain(region)
    if len(ds) == 0:
        raise EngineError("no location of this dataset falls inside its region")
    ds = ds.sample_users(config.n_users, np.random.default_rng(sample_seq))
    setup = choose(ds, region, config, neighbouring_of(config), np.random.default_rng(frame_seq), releasing)
    if not _users_own_file(config.dataset):  # a catalogue's published size is public: nothing to declare
        setup.declared.clear()
    if setup.frame is not None:  # the manifest and the pages say which frame the map is on
        meta = ds.meta
        extra = {**meta.extra, "search_region": region_frame(meta), "region_frame": setup.frame}
        setup.data = replace(setup.data, meta=replace(meta, extra=extra))
    return Prepared(setup.data, setup.domain, mech_seq, metric_seq, setup)


def prepare(config: RunConfig, dataset=None):
    """Dataset sampled to the configured users, inside the run's frame, and its domain (:func:`prepare_run`)."""
    p = prepare_run(config, dataset)
    return p.data, p.domain, p.mech_seq, p.metric_seq


def release_truth(ds, domain, params: dict) -> np.ndarray:
    """The true map in the unit the release counts, for every metric: each person
    counts once (a user's locations share weight 1, the user-level unit; identical to
    location counts without user ids) unless the mechanism counts records (``unit =
    "record"``), whose truth is the plain location count. Scoring a record-unit release
    against user-normalised truth (or the reverse) puts every range answer off by the
    mean number of locations per user, whatever the mechanism does."""
    if params.get("unit") == "record":
        return ds.true_histogram(domain)
    return ds.true_histogram(domain, per_user_normalised=True)


def truth_unit(config: RunConfig) -> str:
    """What one unit of the run's true map counts (:func:`release_truth`): "record" or "user"."""
    from ...mechanisms import get

    return "record" if get(config.mechanism).schema().resolve(config.params).get("unit") == "record" else "user"


def sample_key(config: RunConfig) -> str:
    """The key of :func:`prepared`'s answer for ``config``: :meth:`RunConfig.key`, the board's key, of the
    configuration without what changes neither the sample nor its true map: the metrics and, unless a DP frame
    or count chooses the grid (it draws from the seed with a share of ε under the mechanism's neighbouring
    relation), the mechanism but for the unit it counts, its other parameters, ε, and the seed when every user
    is kept."""
    if config.budgeted_share:
        return replace(config, metrics=(), emd_max_cells=0).key()
    return replace(
        config,
        mechanism="",
        params={"unit": truth_unit(config)},
        epsilon=1.0,
        secure=False,
        metrics=(),
        emd_max_cells=0,
        side_information=(),
        seed=config.seed if config.n_users else 0,
    ).key()


_PREPARED: OrderedDict[str, tuple] = OrderedDict()
_PREPARED_LOCK = threading.Lock()
PREPARED_KEPT = 12  # samples and true maps this process keeps for pages drawn before a run


def prepared(config: RunConfig, dataset=None, memo: MutableMapping | None = None, kept: int = PREPARED_KEPT):
    """(sample, domain, true map) exactly as a run of ``config`` sees and scores them (:func:`prepare` and
    :func:`release_truth`, as :func:`run` calls them), memoised under :func:`sample_key` in ``memo`` (default:
    this process's, for every session), which keeps the ``kept`` latest. Evaluate only: a release draws its
    sample from fresh entropy and shows no true map."""
    if config.mode == "release":
        raise ParamError("a release shows no true map: its sample is drawn from fresh entropy at its run")
    key = sample_key(config)
    memo = _PREPARED if memo is None else memo
    with _PREPARED_LOCK:
        if key in memo:
            memo[key] = memo.pop(key)  # the latest used goes last
            return memo[key]
        while memo and len(memo) >= kept:  # before the new one is drawn: at most ``kept`` in memory at once
            memo.pop(next(iter(memo)))
    ds, domain, _, _ = prepare(config, dataset)
    out = (ds, domain, release_truth(ds, domain, {"unit": truth_unit(config)}))
    with _PREPARED_LOCK:
        memo[key] = out
        while len(memo) > kept:  # sessions preparing at once
            memo.pop(next(iter(memo)))
    return out


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
    Dask workers by :mod:`engine.run.execution._cluster`), so the cache applies as without it."""
    from ... import metrics as M
    from ...mechanisms import RunContext, get

    config.validate()
    releasing = config.mode == "release"
    mech_cls = get(config.mechanism)
    params = mech_cls.schema().resolve(config.params)
    # a user's own file never reaches the disk cache: the result holds its true map, and a
    # file read by path may change under the same configuration; a release is fresh every time
    given = dataset is not None and not registry_copy
    use_cache = use_cache and not given and not _users_own_file(config.dataset) and not releasing
    try:
        cache_file = run_cache_path(config) if use_cache else None
    except CacheUnavailable:  # a read-only or missing cache folder only costs the cache
        cache_file = None
    if cache_file is not None:
        res = load_cached(cache_file, config)
        if res is not None:
            if progress:
                progress(1.0, "loaded from cache")
            return res

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if progress:
        progress(0.0, "loading data")
    prep = prepare_run(config, dataset)
    ds, domain, mech_seq, metric_seq = prep.data, prep.domain, prep.mech_seq, prep.metric_seq
    for attr in mech_cls.needs:
        if getattr(ds, attr) is None:
            raise EngineError(
                f"{mech_cls.label or mech_cls.key} needs the dataset attribute '{attr}', which this dataset lacks"
            )
    timings["prepare_s"] = time.perf_counter() - t0

    def mech_progress(f, msg=""):
        if progress:
            progress(0.05 + 0.85 * f, msg)

    evaluation: dict = {}  # what the mechanism computes from the truth (the context's record in Evaluate)
    ctx = RunContext(
        rng=np.random.default_rng(mech_seq),
        secure=config.secure or releasing,
        progress_cb=mech_progress,
        cancel_cb=cancelled,
        evaluation=None if releasing else evaluation,  # a release records nothing computed from the truth
    )
    t1 = time.perf_counter()
    ctx.check_cancelled()
    mech_progress(0.0, f"running {mech_cls.label or mech_cls.key}")
    eps = config.mechanism_epsilon
    release = mech_cls().run(ds, domain, eps, params, ctx)
    timings["mechanism_s"] = time.perf_counter() - t1
    ctx.check_cancelled()
    # the plan must fit the budget; under excess dropout a distributed sum spends more than planned and
    # the ledger books the epsilon actually spent (Ledger.planned_total vs total)
    if release.ledger.planned_total() > eps * (1 + 1e-9) + 1e-12 and mech_cls.uses_epsilon:
        raise EngineError(f"{config.mechanism} spent {release.ledger.total()} > epsilon {eps} (a bug)")
    release.ledger.entries[:0] = prep.setup.steps  # the frame and grid's steps, then the mechanism's: sum ε
    # what the caller read off the data, and the public inputs the frame and grid used, declared in the ledger
    for note in (*config.side_information, *prep.setup.declared):
        release.ledger.note_side_information(note)
    if ctx.evaluation is not None:
        ctx.evaluation.update(prep.setup.evaluation)
    if releasing:  # nothing computed from the truth outside the mechanism
        timings["total_s"] = time.perf_counter() - t0
        record_cost(replace(config, depth=domain.depth), timings["total_s"], len(ds))
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
        epsilon=float(config.epsilon) if mech_cls.uses_epsilon else None,
    )
    timings["metrics_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - t0
    record_cost(replace(config, depth=domain.depth), timings["total_s"], len(ds))
    res = RunResult(
        config=config,
        release=release,
        truth=truth,
        metrics=metrics,
        timings=timings,
        n_users=ds.n_users,
        n_points=len(ds),
        dataset_meta=ds.meta,
        evaluation=evaluation,
        crs=ds.crs,
    )
    if cache_file is not None:
        store_cached(cache_file, res)
    if progress:
        progress(1.0, "done")
    return res


def estimate_seconds(config: RunConfig, n_points: int | None = None) -> float:
    """The dashboard's estimate before Run: :func:`engine.run.execution.predict_seconds` told whether
    the disk cache holds the result and which dataset this process has loaded."""
    try:
        cached = config.mode == "evaluate" and run_cache_path(config).is_file()
    except Exception:  # the cache folder is an optimisation only
        cached = False
    ds = loaded_dataset(config.dataset, config.dataset_options)
    return predict_seconds(config, n_points, dataset=ds, cached=cached)
