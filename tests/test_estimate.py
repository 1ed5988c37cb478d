"""Before Run the page says how long the run should take, and warns above 10 s."""

from __future__ import annotations

from tests.support.app import click_run, open_app, texts


def test_estimate_comes_from_measured_runs_and_warns_when_slow(monkeypatch):
    from ui import jobs

    at = open_app(mech="ug", baselines="0", seed="31")
    click_run(at, "explore")  # a measured run of this mechanism at this resolution
    at.sidebar.number_input(key="cfg.seed").set_value(32).run()
    assert "Estimated time: about" in texts(at)
    assert not [w for w in at.warning if "should take" in w.value]
    board = jobs.board()
    assert board.estimate(_cfg(at)) is not None  # the measured run answers for this mechanism
    monkeypatch.setattr(type(board), "estimate", lambda self, cfg: 40.0)
    at.sidebar.number_input(key="cfg.seed").set_value(33).run()
    warn = " ".join(w.value for w in at.warning)
    assert "should take about 40 s" in warn and "Cancel" in warn


def _cfg(at):
    from engine.run import RunConfig

    return RunConfig.from_dict(at.session_state["_groups"]["explore"]["configs"][0])
