"""SNH (Zeighami et al. 2022): augmentation, workload weights, ledger, determinism, the
released model, IDENTITY@ParamSelect. Tiny grids and networks so the file stays fast."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from engine.core.errors import Cancelled, ParamError
from engine.core.grid import Domain
from engine.mechanisms import RunContext, get
from engine.mechanisms.snh.answers import GridAnswerer
from engine.mechanisms.snh.collection import CellGrid
from engine.mechanisms.snh.mechanism import SNH, IdentityParamSelect
from engine.mechanisms.snh.training import augment, fit_snh, workload_weights


def forward_numpy(params, x: np.ndarray) -> np.ndarray:
    """The network in numpy, to check the jitted path: sin, swish layers, linear output."""
    w, b = params[0]
    h = np.sin(x @ w + b)
    for w, b in params[1:-1]:
        z = h @ w + b
        h = z / (1.0 + np.exp(-z))
    w, b = params[-1]
    return (h @ w + b)[..., 0]


TINY = dict(
    rho_m=625.0,  # 32 cells over the 20 km synthetic city
    k=2,
    query_min_pct=5.0,
    query_max_pct=10.0,
    preset="custom",
    depth=1,
    width=8,
    epochs=3,
    batch_size=256,
    patience=5,
    lr=1e-2,
)


@pytest.fixture(scope="module")
def city():
    from engine.data.synthetic import generate

    ds = generate("polycentric", n=5000, seed=3)
    dom = ds.public_domain(6)
    return ds.in_domain(dom), dom


def _overlap(a0, a1, b0, b1):
    return max(0.0, min(a1, b1) - max(a0, b0))


@pytest.mark.parametrize("per_cell", [1, 2])
def test_augmentation_equals_brute_force_sums(per_cell):
    # Algorithm 1, line 6: Y_A^r[c] = sum_c' |(c, r) ∩ (c', rho)| / rho^2 * Y_D[c'], here by brute force
    rng = np.random.default_rng(0)
    m, rho, r, pad = 5, 2.0, 3.3, 2
    noisy = rng.normal(3.0, 2.0, (m, m))
    corners, labels = augment(noisy, rho, r, pad, per_cell)
    assert len(corners) > (m * per_cell) ** 2  # the padded corners beyond the west/south edges are there
    # corners on the cell corners (paper) or also every rho / per_cell
    assert np.allclose(corners * per_cell, np.round(corners * per_cell))
    xs = np.arange(-pad * per_cell, m * per_cell) / per_cell
    assert np.allclose(np.unique(corners[:, 0]), xs[xs + r / rho > 0])  # queries fully outside the grid dropped
    for (cx, cy), y in zip(corners, labels):
        x0, y0 = cx * rho, cy * rho
        want = 0.0
        for iy in range(m):
            for ix in range(m):
                a = _overlap(x0, x0 + r, ix * rho, (ix + 1) * rho) * _overlap(y0, y0 + r, iy * rho, (iy + 1) * rho)
                want += a / rho**2 * noisy[iy, ix]
        assert y == pytest.approx(want, abs=1e-9)
    # every query meets the grid (fully outside ones are dropped)
    assert np.all(corners * rho + r > 0)


def test_workload_weights_count_overlapping_workload_squares():
    # with cell-aligned boxes (rho = 1, r = 2, workload side 2) the uniformity assumption is exact:
    # w = number of auxiliary points whose workload square (side 2, centred on it) overlaps (c, r)
    rng = np.random.default_rng(1)
    m = 8
    pts = rng.uniform(0, m, (300, 2))
    dom = Domain(0.0, 0.0, float(m), 3)
    grid = CellGrid(dom, 1.0)
    corners, _ = augment(np.zeros((m, m)), 1.0, 2.0, 2)
    w = workload_weights(grid.counts(pts), corners, 1.0, 2.0, 2.0, 2.0)
    for (cx, cy), wi in zip(corners, w):
        inside = (pts[:, 0] >= cx - 1) & (pts[:, 0] < cx + 3) & (pts[:, 1] >= cy - 1) & (pts[:, 1] < cy + 3)
        assert wi == pytest.approx(inside.sum(), abs=1e-9)
    assert np.all(workload_weights(None, corners, 1.0, 2.0, 1.0, 3.0) == 1.0)


def test_ledger_is_exactly_epsilon_and_release_contract(city):
    ds, dom = city
    params = SNH.schema().resolve(TINY)
    messages = []
    rel = SNH().run(
        ds, dom, 0.37, params, RunContext(rng=np.random.default_rng(5), progress_cb=lambda f, m: messages.append(m))
    )
    assert rel.ledger.total() == 0.37
    assert len(rel.ledger.entries) == 1 and rel.ledger.entries[0].composition == "parallel"
    # the synthetic proxy is public side information, and said so
    assert any("treated as public" in s for s in rel.ledger.side_information)
    assert "PUBLIC" in rel.diagnostics["public_note"]
    assert rel.density.shape == (dom.n, dom.n) and np.all(rel.density >= 0)
    assert rel.range_answerer is not None
    # progress says in plain words how far training is, no raw losses
    training = [m for m in messages if m.startswith("training 2 neural networks together, ")]
    assert training and training[-1].split(", ")[1].startswith("100%")
    assert not any("loss" in m for m in messages)
    d = rel.diagnostics
    assert len(d["epochs_run"]) == 2 and d["model_bytes"] < 10_000_000


def test_predictions_are_deterministic_by_seed(city):
    ds, dom = city
    params = SNH.schema().resolve(TINY)
    rects = dom.random_square_queries(np.random.default_rng(2), 50, (0.05, 0.1))

    def answers(seed):
        rel = SNH().run(ds, dom, 1.0, params, RunContext(rng=np.random.default_rng(seed)))
        return rel.answer_range(rects), rel.density

    a1, d1 = answers(11)
    a2, d2 = answers(11)
    a3, _ = answers(12)
    assert np.array_equal(a1, a2) and np.array_equal(d1, d2)
    assert not np.array_equal(a1, a3)


def test_model_utilisation_rule_pickling_and_jit_match_numpy(city):
    ds, dom = city
    params = SNH.schema().resolve(TINY)
    fit = fit_snh(ds, dom, 1.0, params, RunContext(rng=np.random.default_rng(3)))
    model = fit["model"]
    lo, hi = fit["diagnostics"]["query_side_m"]
    # Section 4.3: a square of side r in [l, u] is the nearest network's output scaled by (r / r*)^2
    x, y, r = np.array([-3000.0, 1000.0]), np.array([-2000.0, 500.0]), np.array([lo * 1.01, hi * 0.99])
    rects = np.column_stack([x, y, x + r, y + r])
    direct = model.squares(x, y, r)
    js = model.model_index(r)
    assert list(js) == [0, 1]
    for i, j in enumerate(js):
        inp = model._norm(x[i : i + 1], y[i : i + 1])
        pj = [(w[j], b[j]) for w, b in model.params]
        want = model.scales[j] * forward_numpy(pj, inp.astype(np.float32))[0] * (r[i] / model.sizes[j]) ** 2
        assert direct[i] == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert np.allclose(model(rects), np.maximum(direct, 0))
    clone = pickle.loads(pickle.dumps(model))
    assert np.array_equal(clone(rects), model(rects))
    # a rectangle is cut into pieces; a query outside the domain is 0
    assert model(np.array([[dom.x0 - 500, dom.y0 - 500, dom.x0 - 10, dom.y0 - 10]]))[0] == 0.0
    big = model(np.array([dom.bounds]))[0]
    assert big > 0


def test_models_share_one_compiled_forward_pass_with_their_own_weights():
    """The jitted forward takes the weights as arguments (one compilation per architecture
    and batch size, not per model); each model still answers with its own weights, exactly as the
    numpy forward pass and as a predictor that compiles its weights in."""
    from engine.mechanisms.snh.networks import (
        BatchPredictor,
        NetConfig,
        _predict_fn,
        init_params_np,
        jax_modules,
    )

    jax, jnp, _ = jax_modules()
    cfg = NetConfig(depth=2, width=16, sin_scale=2.0)
    x = np.random.default_rng(0).uniform(-5, 5, (37, 2)).astype(np.float32)
    answers, compiled = [], []
    for seed in (1, 2):
        params = init_params_np(seed, cfg, 3)
        pred = BatchPredictor(params)
        dev = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
        baked = jax.jit(lambda xx, d=dev: _forward_of(jnp, jax, d, 2, xx))  # weights compiled in as constants
        got = pred(2, x)
        want = forward_numpy([(w[2], b[2]) for w, b in params], x)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5)
        former = np.asarray(baked(np.pad(x, ((0, 64 - 37), (0, 0)))))[:37]
        assert np.allclose(got, former, rtol=1e-6, atol=1e-6)
        answers.append(got)
        compiled.append(_predict_fn()._cache_size())
    assert not np.allclose(answers[0], answers[1])  # two models, two answers
    assert compiled[1] == compiled[0]  # the second model compiled nothing new


def _forward_of(jnp, jax, dev, j, x):
    from engine.mechanisms.snh.networks import _forward

    return _forward(jnp, jax, [(w[j], b[j]) for w, b in dev], x)


def test_snh_qs_variant_and_cancel(city):
    ds, dom = city
    params = SNH.schema().resolve(dict(TINY, variant="snh_qs", qs_sizes=2, workload="uniform"))
    rel = SNH().run(ds, dom, 1.0, params, RunContext(rng=np.random.default_rng(0)))
    assert rel.range_answerer.variant == "snh_qs" and rel.diagnostics["workload"] == "uniform"
    assert np.isfinite(rel.answer_range(np.array([[0, 0, 1500, 1500]]))).all()
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        SNH().run(ds, dom, 1.0, SNH.schema().resolve(TINY), RunContext(rng=np.random.default_rng(0), cancel_cb=cancel))


def test_bad_parameters_raise_clear_errors(city):
    ds, dom = city
    with pytest.raises(ParamError, match="smaller than"):
        SNH().run(
            ds,
            dom,
            1.0,
            SNH.schema().resolve(dict(TINY, query_min_pct=5, query_max_pct=4)),
            RunContext(rng=np.random.default_rng(0)),
        )
    with pytest.raises(ParamError, match="cells per side"):
        SNH().run(ds, dom, 1.0, SNH.schema().resolve(dict(TINY, rho_m=1.0)), RunContext(rng=np.random.default_rng(0)))
    with pytest.raises(ParamError, match="aux_dataset"):
        SNH().run(
            ds, dom, 1.0, SNH.schema().resolve(dict(TINY, aux="dataset")), RunContext(rng=np.random.default_rng(0))
        )
    with pytest.raises(ParamError, match="private dataset itself"):
        SNH().run(
            ds,
            dom,
            1.0,
            SNH.schema().resolve(dict(TINY, aux="dataset", aux_dataset=ds.meta.source)),
            RunContext(rng=np.random.default_rng(0)),
        )
    with pytest.raises(ParamError, match="public auxiliary data"):
        SNH().run(
            ds,
            dom,
            1.0,
            SNH.schema().resolve(dict(TINY, aux="none", workload="aux")),
            RunContext(rng=np.random.default_rng(0)),
        )


def test_identity_paramselect_is_the_noisy_grid(city):
    ds, dom = city
    assert get("identity_paramselect") is IdentityParamSelect
    params = IdentityParamSelect.schema().resolve({"rho_m": 1250.0})
    rel = IdentityParamSelect().run(ds, dom, 0.5, params, RunContext(rng=np.random.default_rng(4)))
    assert rel.ledger.total() == 0.5
    grid = CellGrid(dom, 1250.0)
    counts = grid.counts(ds.xy)
    # a cell-aligned rectangle is the sum of its noisy cells; the noise is Laplace(1/eps) around the counts
    rect = np.array([[dom.x0 + 2 * 1250.0, dom.y0 + 3 * 1250.0, dom.x0 + 6 * 1250.0, dom.y0 + 5 * 1250.0]])
    got = rel.answer_range(rect)[0]
    assert GridAnswerer(counts, grid)(rect)[0] == counts[3:5, 2:6].sum()
    true = counts[3:5, 2:6].sum()
    # 8 cells of Laplace(2): |sum| < 60 fails with probability far below 1e-6
    assert abs(got - true) < 60
    assert rel.density.min() >= 0.0  # answers are clipped at 0 by default, as SNH's
    raw_params = IdentityParamSelect.schema().resolve({"rho_m": 1250.0, "clip_answers": False})
    raw = IdentityParamSelect().run(ds, dom, 0.5, raw_params, RunContext(rng=np.random.default_rng(4)))
    # the same noise: clipping is post-processing of the same grid, and only touches negatives
    assert raw.density.min() < 0.0
    assert np.array_equal(rel.density, np.maximum(raw.density, 0.0))
    assert raw.density.sum() == pytest.approx(raw.answer_range(np.array([dom.bounds]))[0], rel=1e-9)


def test_grid_answerer_clips_negative_answers():
    grid = CellGrid(Domain(0.0, 0.0, 4.0, 2), 1.0)
    noisy = np.array([[-3.0, 1.0, 0.5, 0.0]] * 4)
    rects = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 1.0], [1.0, 0.0, 3.0, 2.0]])
    assert GridAnswerer(noisy, grid, clip=False)(rects).tolist() == [-3.0, -2.0, 3.0]
    assert GridAnswerer(noisy, grid)(rects).tolist() == [0.0, 0.0, 3.0]


def test_secure_mode_and_user_level_unit(city):
    """Secure mode passes the grid counts through OpenDP (fresh noise, not the seeded stream);
    unit = user bounds a user with k locations to 1/k per location."""
    from dataclasses import replace

    ds, dom = city
    params = IdentityParamSelect.schema().resolve({"rho_m": 1250.0})
    grid = CellGrid(dom, 1250.0)
    counts = grid.counts(ds.xy)
    runs = [
        IdentityParamSelect().run(ds, dom, 0.5, params, RunContext(rng=np.random.default_rng(4), secure=True))
        for _ in range(2)
    ]
    seeded = IdentityParamSelect().run(ds, dom, 0.5, params, RunContext(rng=np.random.default_rng(4)))
    full = np.array([dom.bounds])
    a, b, c = (r.answer_range(full)[0] for r in (*runs, seeded))
    assert a != b and a != c  # OpenDP draws its own noise
    # total noise of m^2 Laplace(2) cells: sd 2 * sqrt(2) * m; 10 sd is a 1e-6-level false alarm
    assert abs(a - counts.sum()) < 10 * 2 * np.sqrt(2) * grid.m
    assert all(r.ledger.total() == 0.5 for r in runs)
    # one user holding every location counts 1 in total under unit = user, n under unit = record (at the
    # largest epsilon, 100, the total's noise has sd sqrt(2) m / 100: 7 of them is a 1e-6-level false alarm)
    one = replace(ds, user_id=np.zeros(len(ds), dtype=np.int64))
    for unit, total in (("user", 1.0), ("record", float(len(ds)))):
        p = IdentityParamSelect.schema().resolve({"rho_m": 1250.0, "unit": unit})
        rel = IdentityParamSelect().run(one, dom, 100.0, p, RunContext(rng=np.random.default_rng(0)))
        assert rel.answer_range(full)[0] == pytest.approx(total, abs=7 * np.sqrt(2) / 100 * grid.m)
        assert rel.diagnostics["unit"] == unit


def test_initialisation_is_the_reference_he_uniform():
    # reference code: VarianceScaling(2.0, fan_in, uniform) on every layer, biases 0;
    # Kolmogorov-Smirnov against U(-a, a), a = sqrt(6 / fan_in) (x sin_scale on the sin layer),
    # false-alarm rate 1e-3 per layer
    from scipy import stats

    from engine.mechanisms.snh.networks import NetConfig, init_params_np

    cfg = NetConfig(depth=3, width=64, sin_scale=2.5)
    params = init_params_np(0, cfg, k=4)
    assert len(params) == cfg.depth + 2
    for layer, (w, b) in enumerate(params):
        fan_in = w.shape[1]
        a = np.sqrt(6.0 / fan_in) * (cfg.sin_scale if layer == 0 else 1.0)
        assert np.all(b == 0) and np.abs(w).max() <= a
        assert stats.kstest(w.ravel(), stats.uniform(-a, 2 * a).cdf).pvalue > 1e-3
    assert not np.array_equal(params[1][0][0], params[1][0][1])  # the k networks start apart
