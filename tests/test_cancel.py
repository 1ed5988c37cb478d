"""Cancel stops the work within seconds and says "cancelled"; finished results are not held
by the job manager once their owner has them (engine side)."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from concurrent.futures import wait

import pytest

from engine.core.noise import NoiseSource
from engine.run import RunConfig
from engine.run.execution import JobManager
from engine.run.execution import _pool as jobs
from tests.support.waiting import wait_until

STOP_BOUND_S = 5.0  # the promise: Cancel ends the work within 5 s


class _Counted:
    """An OpenDP measurement that counts the values it noises."""

    def __init__(self, meas, stats):
        self.meas, self.stats = meas, stats

    def __call__(self, arg):
        out = self.meas(arg)
        self.stats["drawn"] += len(arg)
        return out

    def __getattr__(self, name):
        return getattr(self.meas, name)


@pytest.fixture
def opendp_draws(monkeypatch):
    stats = {"drawn": 0}
    orig = NoiseSource._opendp
    monkeypatch.setattr(NoiseSource, "_opendp", lambda self, kind, scale: _Counted(orig(self, kind, scale), stats))
    return stats


def secure(mechanism: str, depth: int) -> RunConfig:
    return RunConfig(
        dataset="synthetic:monocentric",
        dataset_options={"n": 20_000, "seed": 5},
        mechanism=mechanism,
        depth=depth,
        epsilon=1.0,
        seed=0,
        secure=True,
    )


# Secure mode sends at least one value per leaf cell through OpenDP (about 10-60 us each):
# Laplace per cell, a noisy quadtree, discrete Laplace per cell and SecAgg shard.
HEAVY = ["identity", "flat_onehot"]  # hierarchical sizes its tree from a noisy count: too quick to cancel


@pytest.mark.parametrize("mechanism", HEAVY)
def test_cancel_stops_a_secure_1024_run_within_seconds(mechanism, opendp_draws):
    from engine.run import run

    # the whole run noises at least 4^depth values with OpenDP (checked at a small depth) ...
    run(secure(mechanism, 4), use_cache=False)
    assert opendp_draws["drawn"] >= 4**4
    opendp_draws["drawn"] = 0

    jm = JobManager(workers=1)
    try:
        job = jm.submit(secure(mechanism, 10), use_cache=False)
        t0 = time.monotonic()
        wait_until(lambda: job.message != "queued", "the job to start", poll=0.02)
        time.sleep(1.0)  # cancel 1 s after it starts running
        assert not job.done
        t_cancel = time.monotonic()
        job.cancel()
        wait([job.future], timeout=60)
        stop_s = time.monotonic() - t_cancel
        drawn = opendp_draws["drawn"]
        state, msg = job.outcome()
    finally:
        jm.shutdown()
    assert job.done and stop_s < STOP_BOUND_S, f"{mechanism} took {stop_s:.1f} s to stop"
    assert state == "cancelled" and "cancelled" in msg
    # ... so a run that had noised fewer than 4^10 values had not finished and could not have:
    # at its measured rate the rest would take (4^10 - drawn) / rate more seconds
    rate = drawn / (t_cancel + stop_s - t0)
    assert drawn < 4**10, f"{mechanism}: {drawn} values drawn; projected {4**10 / max(rate, 1):.0f} s in all"


# ------------------------------------------------------------ job states, fake work
@pytest.fixture
def fake_run(monkeypatch):
    """``jobs.run`` replaced by work that ignores cancellation and ends when released."""
    release = threading.Event()
    started = threading.Event()

    def work(config, progress=None, cancelled=None, use_cache=True, dataset=None):
        started.set()
        progress(0.5, "working")
        release.wait(30)
        return object()

    monkeypatch.setattr(jobs, "run", work)
    return started, release


def test_a_job_cancelled_while_queued_is_cancelled_at_once(fake_run):
    started, release = fake_run
    jm = JobManager(workers=1)
    try:
        first = jm.submit(RunConfig())
        assert started.wait(10)
        queued = jm.submit(RunConfig(seed=1))
        assert queued.message == "queued" and queued.outcome()[0] == "running"
        queued.cancel()
        assert queued.done and queued.outcome()[0] == "cancelled" and queued.finished is not None
        elapsed = queued.elapsed
        time.sleep(0.05)
        assert queued.elapsed == elapsed  # its clock stopped
        release.set()
        assert first.future.result(10) is not None and first.outcome()[0] == "ok"
    finally:
        release.set()
        jm.shutdown()


def test_a_job_cancelled_while_running_reports_cancelled_once_it_stops(fake_run):
    """Even work that ends normally after the cancel (it had passed its last check) reports
    "cancelled", not a result the user asked not to see."""
    started, release = fake_run
    jm = JobManager(workers=1)
    try:
        job = jm.submit(RunConfig())
        assert started.wait(10)
        job.cancel()
        assert job.outcome()[0] == "running"  # still busy: not yet "cancelled"
        release.set()
        wait([job.future], timeout=10)
        assert job.outcome() == ("cancelled", "the run was cancelled")
    finally:
        release.set()
        jm.shutdown()


# ------------------------------------------------------------------ memory held
def _quick() -> RunConfig:
    return RunConfig(dataset="synthetic:monocentric", dataset_options={"n": 2000, "seed": 1}, depth=4, seed=9)


def test_the_manager_lets_go_of_a_collected_result():
    jm = JobManager(workers=1)
    try:
        job = jm.submit(_quick(), use_cache=False)
        jid = job.id
        job.future.result(60)
        del job
        gc.collect()
        job = jm.get(jid)  # not yet collected: kept for its owner
        assert job is not None
        state, res = job.outcome()
        assert state == "ok"
        assert jm.get(jid) is job  # found while the owner holds it
        ref = weakref.ref(res)
        del job, res, state
        gc.collect()
        assert jm.get(jid) is None and ref() is None  # nothing in the manager kept the result
    finally:
        jm.shutdown()


def test_forget_drops_a_finished_job_and_cancels_a_running_one(fake_run):
    started, release = fake_run
    jm = JobManager(workers=2)
    try:
        running = jm.submit(RunConfig())
        assert started.wait(10)
        jm.forget(running.id)
        assert jm.get(running.id) is None and running.cancel_event.is_set()
        release.set()
        wait([running.future], timeout=10)
        assert running.outcome()[0] == "cancelled"
        done = jm.submit(RunConfig(seed=2))
        done.future.result(10)
        jm.forget(done.id)
        assert jm.get(done.id) is None
    finally:
        release.set()
        jm.shutdown()


def test_uncollected_finished_jobs_are_bounded(fake_run, monkeypatch):
    _, release = fake_run
    release.set()
    monkeypatch.setattr(jobs, "MAX_UNCOLLECTED", 3)
    jm = JobManager(workers=1)
    try:
        made = []
        for s in range(6):
            made.append(jm.submit(RunConfig(seed=s)))
            made[-1].future.result(10)
        held = [j for j in made if jm.get(j.id) is not None]
        made.clear()
        assert len(held) == 4  # the newest (just finished) plus MAX_UNCOLLECTED older ones
        assert [j.config.seed for j in held] == [2, 3, 4, 5]
    finally:
        jm.shutdown()


# ------------------------------------------------------------- the noise source
@pytest.mark.parametrize("draw", ["add_laplace", "add_gaussian", "add_discrete_laplace", "randomized_response"])
def test_secure_noise_checks_cancel_between_batches(draw, monkeypatch):
    """Secure mode noises long vectors in batches and asks the run's cancel callback before
    each: a cancel during a 1024^2-cell draw stops it after the current batch."""
    import numpy as np

    from engine.core.errors import Cancelled
    from engine.core.noise import source

    monkeypatch.setattr(source, "SECURE_BATCH", 64)  # many batches in a short vector
    checks = []
    ns = NoiseSource(np.random.default_rng(0), secure=True, cancel_cb=lambda: checks.append(1) or len(checks) > 2)
    dtype = bool if draw == "randomized_response" else np.int64 if "discrete" in draw else float
    x = np.zeros(4**10, dtype=dtype)
    call = getattr(ns, draw)
    with pytest.raises(Cancelled):
        call(x, 1.0)
    assert len(checks) == 3  # two batches drawn, stopped before the third of many
    ns.cancel_cb = lambda: False
    small = x[: 64 * 16 * 8 * 2 + 5]  # several batches (RR: of bits) and a partial one
    # secure mode is not seeded; false alarms below 1e-6 per case
    if draw == "randomized_response":  # keep probability e/(1+e) = 0.731 on 16,389 bits; 5 sigma
        out = call(small, 1.0)
        assert out.shape == small.shape and abs((~out).mean() - np.e / (1 + np.e)) < 5 * 0.0035
    else:  # every value noised, the last partial batch too (scale 100: P(0) <= 0.005 per value)
        out = call(small, 100.0)
        assert out.shape == small.shape and out.dtype == np.dtype(dtype)
        assert np.count_nonzero(out[:-5]) > 0.9 * (small.size - 5) and np.count_nonzero(out[-5:]) >= 3
