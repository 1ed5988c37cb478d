"""In the dashboard: Trade-offs runs its sweep on the Dask cluster named in the setting (a
LocalCluster of processes on 127.0.0.1 here), says so, and gets the numbers the in-process sweep gets."""

from __future__ import annotations

import pytest

from tests.support.app import frame_with, open_app, rerun_until, running, texts


@pytest.mark.slow
def test_tradeoffs_sweep_on_a_local_cluster_equals_in_process(monkeypatch):
    query = dict(mechs="identity,uniform", eps_list="0.5,2", trials="2", seed="3")
    here = open_app("tradeoffs", **query)
    assert "Runs on this machine, in the app's own process" in texts(here)
    here.button(key="run_sweep").click().run()
    rerun_until(here, lambda a: not running(a), "the sweep in process", poll=0.2)
    local = frame_with(here, "eps_x_n").sort_values(["mechanism", "epsilon", "seed"]).reset_index(drop=True)

    monkeypatch.setenv("HEATMAP_DASK_SCHEDULER", "local:2")
    at = open_app("tradeoffs", **query)
    assert "Runs on the Dask cluster on this machine (2 workers)" in texts(at)
    from ui import jobs

    jobs.board()._light.clear()  # the cluster must compute them, not this process's summaries
    jobs.board()._results.clear()
    at.button(key="run_sweep").click().run()
    rerun_until(at, lambda a: not running(a), "the sweep on the cluster", poll=0.3)
    assert "sweep" in at.session_state["_cluster"]  # this sweep went to the cluster
    dist = frame_with(at, "eps_x_n").sort_values(["mechanism", "epsilon", "seed"]).reset_index(drop=True)
    assert len(dist) == len(local) == 8
    assert (dist["emd_m"].to_numpy() == local["emd_m"].to_numpy()).all()  # same seeds, same numbers
