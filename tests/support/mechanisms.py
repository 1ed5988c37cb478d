"""Tiny test mechanisms for the pages that are generic over releases (attack, attributes, levels, failures):
registered for a test module by the ``test_mechanisms`` fixture of ``conftest.py``, removed afterwards."""

from __future__ import annotations

import time

import numpy as np

from engine.core.accounting import Ledger
from engine.core.errors import EngineError
from engine.core.params import Param
from engine.mechanisms.base import Communication, Mechanism, Release, ServerView, aggregate_view
from engine.mechanisms.outputs import Level, RegionalMeans


def _release(data, domain, epsilon, ctx, **kw):
    truth = data.true_histogram(domain)
    led = Ledger()
    led.spend("cells", epsilon, composition="parallel", group="cells")
    base = dict(
        density=truth + ctx.rng.laplace(0, 1 / epsilon, truth.shape),
        domain=domain,
        ledger=led,
        communication=Communication(2.0, 64.0),
        server_view=aggregate_view("test"),
    )
    base.update(kw)
    return Release(**base)


class _Fails(Mechanism):
    """Test only: fails on purpose, with a user-facing message or an unexpected crash."""

    key = "_test_fails"
    label = "Test: fails"
    params = (Param("how", "choice", "engine", "kind of failure", choices=("engine", "crash")),)

    def run(self, data, domain, epsilon, params, ctx):
        if params["how"] == "engine":
            raise EngineError("the test mechanism refuses this dataset")
        raise RuntimeError("secret internal detail 12345")


class _PerUser(Mechanism):
    """Test only: the server sees each user's location moved 100 m east (a per-user view)."""

    key = "_test_per_user"
    label = "Test: per-user view"
    family = "local"

    def run(self, data, domain, epsilon, params, ctx):
        inv, _ = data.user_index()
        xy = data.xy

        def candidates(users):
            out = []
            for u in np.asarray(users).ravel():
                p = xy[inv == u][:1] + np.array([100.0, 0.0])
                out.append((np.vstack([p, p + 500.0]), np.array([0.75, 0.25])))
            return out

        def surface(u):
            g = np.zeros((domain.n, domain.n))
            ix, iy = domain.cell_index(xy[inv == u][:1])
            g[iy, ix] = 1.0
            return g

        view = ServerView("per_user", "each user's shifted location", candidates=candidates, surface=surface)
        return _release(data, domain, epsilon, ctx, server_view=view)


class _Regions(Mechanism):
    """Test only: mean of ``value`` in the four quadrants, the last one suppressed."""

    key = "_test_regions"
    label = "Test: regional means"
    needs = ("value",)

    def run(self, data, domain, epsilon, params, ctx):
        x0, y0, x1, y1 = domain.bounds
        xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
        rects = np.array([[x0, y0, xm, ym], [xm, y0, x1, ym], [x0, ym, xm, y1], [xm, ym, x1, y1]])
        true = []
        for r in rects:
            m = (data.xy[:, 0] >= r[0]) & (data.xy[:, 0] < r[2]) & (data.xy[:, 1] >= r[1]) & (data.xy[:, 1] < r[3])
            true.append(float(data.value[m].mean()) if m.any() else np.nan)
        true = np.array(true)
        ctx.record_evaluation(region_true_mean=true)  # computed from the truth: evaluation, not release
        suppressed = np.array([False, False, False, True])
        regional = RegionalMeans(rects, true + 1.0, np.full(4, 0.5), np.full(4, 10), suppressed)
        return _release(data, domain, epsilon, ctx, regional=regional)


class _Levels(Mechanism):
    """Test only: a two-level 'adaptive tree' snapshot in ``Release.levels``."""

    key = "_test_levels"
    label = "Test: levels"

    def run(self, data, domain, epsilon, params, ctx):
        x0, y0, x1, y1 = domain.bounds
        xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
        quads = np.array([[x0, y0, xm, ym], [xm, y0, x1, ym], [x0, ym, xm, y1], [xm, ym, x1, y1]])
        levels = (
            Level(np.array([[x0, y0, x1, y1]]), counts=np.array([len(data)]), threshold=5.0, epsilon=0.5),
            Level(quads, counts=np.full(4, len(data) / 4), threshold=3.0, epsilon=0.5),
        )
        return _release(data, domain, epsilon, ctx, partition=quads, levels=levels)


class _Slow(Mechanism):
    """Test only: takes up to 30 s in small steps, checking for cancellation between them
    (long enough that a Cancel on a loaded CI machine always lands before it ends)."""

    key = "_test_slow"
    label = "Test: slow"

    def run(self, data, domain, epsilon, params, ctx):
        for i in range(300):
            ctx.progress(i / 300, f"step {i}")
            ctx.check_cancelled()
            time.sleep(0.1)
        return _release(data, domain, epsilon, ctx)


TEST_MECHS = (_Fails, _PerUser, _Regions, _Levels, _Slow)
