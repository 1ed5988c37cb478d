"""ParamSelect (Zeighami et al. 2022, Section 5.1): features, the shipped table, and the
rule that its features come from public data only."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import engine.mechanisms.snh.paramselect as ps
from engine.core.accounting import Ledger
from engine.core.errors import ParamError
from engine.core.grid import Domain
from engine.mechanisms.snh.collection import choose_rho, synthetic_proxy
from engine.mechanisms.snh.mechanism import SNH


def _table(path, rows):
    with open(path, "w") as f:
        f.write("# test table\nn,eps,entropy,q_lo,q_hi,best_rho\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")
    return path


@pytest.fixture
def toy_table(tmp_path):
    # best rho shrinks with n * eps (exchangeability) and grows with the query size
    rows = []
    for n in (25_000, 100_000, 400_000):
        for eps in (0.05, 0.2, 0.8):
            for q in ((0.002, 0.008), (0.005, 0.02)):
                for ent in (7.0, 9.0):
                    rho = 0.05 * (q[0] + q[1]) / 2 / math.sqrt(n * eps / 1e4) * (1.1 if ent > 8 else 1.0)
                    rows.append((n, eps, ent, q[0], q[1], rho))
    return _table(tmp_path / "t.csv", rows)


def test_entropy_feature():
    dom = Domain(0.0, 0.0, 512.0, 4)
    centres = (np.stack(np.meshgrid(np.arange(512), np.arange(512)), -1).reshape(-1, 2) + 0.5).astype(float)
    assert ps.entropy_512(centres, dom) == pytest.approx(math.log(512 * 512))
    assert ps.entropy_512(np.full((100, 2), 3.2), dom) == 0.0
    with pytest.raises(ParamError):
        ps.entropy_512(np.full((10, 2), -5.0), dom)


def test_features_and_regressor(toy_table):
    f = ps.feature_vector(1e5, 0.2, 7.5, 0.01)
    assert f["inv_n_eps"] == pytest.approx(1 / 2e4) and f["inv_sqrt_n_eps"] == pytest.approx(1 / math.sqrt(2e4))
    small, info = ps.predict_rho(25_000, 0.05, 0.005, 0.02, 7.0, path=toy_table)
    large, _ = ps.predict_rho(400_000, 0.8, 0.005, 0.02, 7.0, path=toy_table)
    assert large < small  # more data or budget -> finer grid
    assert set(info["features"]) == set(ps.FEATURES)
    again, _ = ps.predict_rho(25_000, 0.05, 0.005, 0.02, 7.0, path=toy_table)
    assert again == small  # deterministic fit (random_state=0)
    no_ent, info2 = ps.predict_rho(25_000, 0.05, 0.005, 0.02, None, path=toy_table)
    assert "entropy" not in info2["features"] and ps.RHO_BOUNDS[0] <= no_ent <= ps.RHO_BOUNDS[1]
    with pytest.raises(ParamError, match="train_paramselect"):
        ps.predict_rho(1e5, 0.1, 0.005, 0.02, 7.0, path=toy_table.parent / "missing.csv")


def test_shipped_table_fits_and_predicts():
    rows = ps.read_table()
    assert len(rows) >= 40
    assert all(ps.RHO_BOUNDS[0] / 2 <= r.rho <= 0.2 for r in rows)
    a, _ = ps.predict_rho(1e5, 0.2, 0.005, 0.02, 9.0)
    b, _ = ps.predict_rho(1e5, 0.2, 0.002, 0.008, 9.0)
    assert ps.RHO_BOUNDS[0] <= min(a, b) and max(a, b) <= ps.RHO_BOUNDS[1]
    # the trends the table's labels carry (Section 5.1's premise): larger queries and less
    # signal (smaller n * eps) want wider cells
    assert a > b
    small, _ = ps.predict_rho(25_000, 0.05, 0.002, 0.008, 9.0)
    large, _ = ps.predict_rho(400_000, 0.8, 0.002, 0.008, 9.0)
    assert small > 1.5 * large
    # and concentrated public data (low entropy: the venue cities) wants a finer grid than the
    # spread synthetic presets (~10.3 nats)
    concentrated, _ = ps.predict_rho(1e5, 0.2, 0.005, 0.02, 7.3)
    spread, _ = ps.predict_rho(1e5, 0.2, 0.005, 0.02, 10.3)
    assert concentrated < 0.8 * spread


def test_paramselect_features_use_public_data_only(monkeypatch, toy_table):
    from engine.data.synthetic import generate

    monkeypatch.setattr(ps, "TABLE", toy_table)
    private_a = generate("monocentric", n=4000, seed=5)
    dom = private_a.public_domain(6)
    private_a = private_a.in_domain(dom)
    # a different private dataset of the same size and city: shuffled far from the first one
    moved = private_a.xy.copy()
    moved[:, 0] = np.random.default_rng(0).uniform(dom.x0, dom.x0 + dom.side, len(moved))
    private_b = replace(private_a, xy=moved)
    seen = []
    real = ps.entropy_512
    monkeypatch.setattr(ps, "entropy_512", lambda pts, d: seen.append(np.array(pts)) or real(pts, d))
    params = SNH.schema().resolve({"rho_m": 0.0})
    proxy, _ = synthetic_proxy(private_a, dom, params["aux_n"])
    out = []
    for data in (private_a, private_b):
        ledger = Ledger()
        rho, info = choose_rho(data, dom, 0.3, params, ledger, proxy)
        out.append((rho, info["features"]))
        assert any("treated as public" in s for s in ledger.side_information)  # n is side information
        assert ledger.total() == 0.0  # ParamSelect spends no budget
    assert out[0] == out[1]  # the private points do not move the prediction
    assert len(seen) == 2 and all(np.array_equal(s, proxy) for s in seen)
    # the proxy is not the private data: no private point is among its points
    assert not (np.isin(proxy[:, 0], private_a.xy[:, 0]).any())


def test_given_public_points_set_the_entropy_feature(monkeypatch, toy_table):
    """collect_step(aux_given=...) (scripts and benchmarks with their own public data): the
    given points, only those inside the domain, feed ParamSelect; the description is noted as
    side information and only the grid spends budget."""
    from engine.data.synthetic import generate
    from engine.mechanisms import RunContext
    from engine.mechanisms.snh.collection import collect_step

    monkeypatch.setattr(ps, "TABLE", toy_table)
    private = generate("polycentric", n=3000, seed=2)
    dom = private.public_domain(6)
    private = private.in_domain(dom)
    rng = np.random.default_rng(1)
    public = dom.x0 + rng.uniform(0, dom.side, (500, 2))
    outside = np.array([[dom.x0 - 10.0, dom.y0 - 10.0]] * 50)
    seen = []
    real = ps.entropy_512
    monkeypatch.setattr(ps, "entropy_512", lambda pts, d: seen.append(np.array(pts)) or real(pts, d))
    params = SNH.schema().resolve({"rho_m": 0.0})
    got = collect_step(
        private,
        dom,
        0.4,
        params,
        RunContext(rng=np.random.default_rng(0)),
        "grid",
        aux_given=(np.vstack([public, outside]), "test public points"),
    )
    assert len(seen) == 1 and np.array_equal(seen[0], public)
    assert np.array_equal(got["aux"], public)
    assert got["diagnostics"]["aux"] == "given"
    assert got["diagnostics"]["rho_choice"]["features"]["entropy"] == pytest.approx(real(public, dom))
    assert "test public points" in got["ledger"].side_information
    assert got["ledger"].total() == pytest.approx(0.4)


def test_training_venue_cities_are_concentrated_and_public_siblings_differ():
    import importlib.util
    from pathlib import Path

    from engine.data.synthetic import generate

    path = Path(__file__).resolve().parent.parent / "scripts" / "train_paramselect.py"
    spec = importlib.util.spec_from_file_location("train_paramselect", path)
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    dom = generate("polycentric", 1000, 105).public_domain(8)
    private = tp.venue_city("polycentric", 20_000, 105, 1000, 20.0)
    again = tp.venue_city("polycentric", 20_000, 105, 1000, 20.0)
    public = tp.venue_city("polycentric", 20_000, 105, 1000, 20.0, public=True)
    assert np.array_equal(private.xy, again.xy)  # deterministic
    assert not np.isin(public.xy[:, 0], private.xy[:, 0]).any()  # its own records
    spread = generate("polycentric", 20_000, 105)
    h_private, h_public, h_spread = (ps.entropy_512(d.xy, dom) for d in (private, public, spread))
    assert h_private < h_spread - 1.5 and abs(h_public - h_private) < 0.5
