"""SNH's training (Zeighami et al. 2022, Algorithm 1 and Section 4.2): spatial data augmentation of
the noisy grid into range queries of ``k`` sizes, the workload weights of Eq. 6, the presets of the
networks and :func:`fit_snh`, the whole pipeline from the data to the released model."""

from __future__ import annotations

import math
import time

import numpy as np

from ...core.errors import ParamError
from ...core.grid import Domain, box_sums, integral_image
from .answers import NORM_SPAN, SNHModel
from .collection import collect_step, query_bounds, workload_mode

WEIGHT_QUAD = 4  # midpoint nodes over the workload query side

PRESETS = {
    # depth/width of the networks, first-layer frequency scale, Adam lr and its final fraction (cosine),
    # max epochs, batch, patience, cap on gradient steps per network
    "fast": dict(
        depth=4,
        width=64,
        sin_scale=2.5,
        lr=3e-3,
        lr_decay=0.05,
        epochs=300,
        batch_size=256,
        patience=20,
        max_steps=3000,
    ),
    "quality": dict(
        depth=4,
        width=64,
        sin_scale=2.5,
        lr=3e-3,
        lr_decay=0.05,
        epochs=300,
        batch_size=1024,
        patience=20,
        max_steps=1500,
    ),
    "paper": dict(
        depth=20, width=80, sin_scale=1.0, lr=1e-3, lr_decay=1.0, epochs=1000, batch_size=8192, patience=50, max_steps=0
    ),
}
CUSTOM_KEYS = ("depth", "width", "sin_scale", "lr", "lr_decay", "epochs", "batch_size", "patience", "max_steps")


def augment(noisy: np.ndarray, rho: float, r: float, pad: int, per_cell: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 for one size ``r``: corners ``c = (i rho, j rho)`` for ``i, j`` in
    ``[-pad, m)`` (cell units from the grid origin) and ``Y_A^r[c]``. ``per_cell > 1`` also
    takes corners at ``rho / per_cell`` steps (a departure, see the module docstring).

    Returns ``(corners (P, 2) in cell units, labels (P,))``, row-major over (j, i)."""
    m = noisy.shape[0]
    s = integral_image(noisy)
    idx = np.arange(-pad * per_cell, m * per_cell, dtype=np.float64) / per_cell
    cx, cy = np.meshgrid(idx, idx)
    cx, cy = cx.ravel(), cy.ravel()
    rr = r / rho
    keep = (cx + rr > 0) & (cy + rr > 0)  # the query meets the grid
    cx, cy = cx[keep], cy[keep]
    return np.stack([cx, cy], axis=1), box_sums(s, cx, cy, cx + rr, cy + rr)


def workload_weights(
    aux_grid: np.ndarray | None, corners: np.ndarray, rho: float, r: float, lo: float, hi: float
) -> np.ndarray:
    """``w_(c,r)`` of Eq. 6: expected number of workload squares (one per auxiliary point,
    centred on it, side uniform in ``[lo, hi]``) that overlap the training query ``(c, r)``.
    A square of side ``t`` centred at p overlaps ``(c, r)`` iff p lies in ``(c, r)`` grown
    by ``t/2`` on every side. ``aux_grid=None``: uniform weights."""
    if aux_grid is None:
        return np.ones(len(corners))
    s = integral_image(aux_grid)
    rr = r / rho
    out = np.zeros(len(corners))
    for q in range(WEIGHT_QUAD):
        half = (lo + (hi - lo) * (q + 0.5) / WEIGHT_QUAD) / 2 / rho
        out += box_sums(
            s, corners[:, 0] - half, corners[:, 1] - half, corners[:, 0] + rr + half, corners[:, 1] + rr + half
        )
    return np.maximum(out / WEIGHT_QUAD, 0.0)


RHO_FRAC = 0.01  # typical ParamSelect cell width, as a fraction of the side (sets the queries per epoch)


def training_work(params: dict) -> float:
    """SNH's training work in 1e9 multiply-adds (gradient steps x batch x networks x per-query work), with the
    step count :func:`engine.mechanisms.snh.networks.train` will run (``rho`` from ParamSelect is approximated
    by :data:`RHO_FRAC` of the side, its typical value: it only matters when the preset does not cap the
    steps). The time estimate's ``W`` (:mod:`engine.run.execution._estimates`)."""
    cfg = train_config(params)
    queries = (1.0 / RHO_FRAC + 2) ** 2 * int(params.get("corners_per_cell", 1)) ** 2
    if params.get("variant") == "snh_qs":
        queries *= int(params.get("qs_sizes", 4))
    batch = min(cfg.batch_size, queries) if cfg.batch_size > 0 else queries
    n_batches = math.ceil(queries / batch)
    per_epoch = math.ceil(n_batches / min(n_batches, 16)) * min(n_batches, 16)
    epochs = cfg.epochs if cfg.max_steps <= 0 else max(1, min(cfg.epochs, cfg.max_steps // per_epoch))
    w = cfg.net.width
    macs = cfg.net.in_dim * w + cfg.net.depth * w * w + w
    return epochs * per_epoch * batch * int(params.get("k", 8)) * macs / 1e9


def train_config(params: dict):
    from .networks import NetConfig, TrainConfig

    p = dict(PRESETS[params["preset"]]) if params["preset"] in PRESETS else {k: params[k] for k in CUSTOM_KEYS}
    in_dim = 3 if params["variant"] == "snh_qs" else 2
    return TrainConfig(
        net=NetConfig(depth=int(p["depth"]), width=int(p["width"]), in_dim=in_dim, sin_scale=float(p["sin_scale"])),
        lr=float(p["lr"]),
        epochs=int(p["epochs"]),
        batch_size=int(p["batch_size"]),
        patience=int(p["patience"]),
        max_steps=int(p["max_steps"]),
        decay=float(p["lr_decay"]),
    )


def _training_queries(noisy, rho, sizes, params, aux_grid, lo, hi, psi, domain, interval, mid) -> tuple:
    """One network's augmented training queries (Algorithm 1; SNH-QS: the query size as an extra input, the
    label the count at the interval's mid size): inputs, labels scaled to RMS 1 under the loss weights,
    weights of mean 1 (Eq. 6) and the label scale."""
    xs, ys, ws = [], [], []
    for r in sizes:
        pad = int(math.ceil(r / rho))
        corners, y = augment(noisy, rho, r, pad, int(params["corners_per_cell"]))
        if params["clip_labels"]:
            y = np.maximum(y, 0.0)
        wq = workload_weights(aux_grid, corners, rho, r, lo, hi)
        if params["weight_floor"] > 0:
            wq = wq + float(params["weight_floor"]) * wq.mean()
        wt = wq / np.maximum(y, psi)  # Eq. 6
        inp = ((corners * rho) / domain.side - 0.5) * NORM_SPAN
        if interval is not None:
            a, b = interval
            z = np.full((len(inp), 1), (r - mid) / (b - a) * 2.0)
            inp = np.hstack([inp, z])
            y = y / (r / mid) ** 2  # the network learns the count at the interval's mid size
        keep = wt > 0  # zero-weight queries do not enter Eq. 6
        xs.append(inp[keep])
        ys.append(y[keep])
        ws.append(wt[keep])
    x, y, wt = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    if len(y) == 0:
        raise ParamError("no training query has a positive workload weight; check the auxiliary data")
    sw = float(np.sum(wt))
    scale = float(max(np.sqrt(np.sum(wt * y**2) / sw), 1e-3))  # RMS label under the loss weights
    return x, y / scale, wt / (sw / len(wt)), scale  # mean weight 1


def fit_snh(
    data,
    domain: Domain,
    eps: float,
    params: dict,
    ctx,
    sizes_subset: list[int] | None = None,
    on_epoch=None,
    every: int = 0,
    aux_given=None,
) -> dict:
    """Data collection, augmentation, training; returns the model, ledger and diagnostics.

    ``sizes_subset`` trains only some of the k networks (benchmarks of one model);
    ``on_epoch(epoch, model)`` sees the model every ``every`` epochs (learning curves);
    ``aux_given``: see :func:`collect_step`."""
    from .networks import train

    t0 = time.perf_counter()
    lo, hi = query_bounds(params, domain)
    k = int(params["k"])
    # workload_mode: fail before spending budget on an impossible combination
    got = collect_step(
        data,
        domain,
        eps,
        params,
        ctx,
        "data collection grid Q_D (Section 4.1)",
        check=lambda a: workload_mode(params, a),
        aux_given=aux_given,
    )
    ledger, aux, aux_text, grid, noisy = got["ledger"], got["aux"], got["aux_text"], got["grid"], got["noisy"]
    rho = grid.rho
    ctx.check_cancelled()

    # ---------------------------------------------------------------- augmentation
    variant = params["variant"]
    if variant == "snh_qs":
        edges = lo + (hi - lo) * np.arange(k + 1) / k
        intervals = np.stack([edges[:-1], edges[1:]], axis=1)
        mids = intervals.mean(axis=1)
        T = int(params["qs_sizes"])
        train_sizes = [[a + (b - a) * (t + 0.5) / T for t in range(T)] for a, b in intervals]
    else:
        intervals = None
        mids = lo + (hi - lo) / k * (np.arange(k) + 0.5)  # Algorithm 1, line 1
        train_sizes = [[r] for r in mids]
    models = list(range(k)) if sizes_subset is None else [int(j) for j in sizes_subset]
    total = float(max(noisy.sum(), 1.0))
    psi = float(params["psi_pct"]) / 100.0 * total
    wmode = workload_mode(params, aux)
    if wmode == "aux":
        aux_grid = grid.counts(aux)
    elif wmode == "noisy":
        aux_grid = noisy  # signed: the noise cancels in the box sums; workload_weights clips the sums at 0
    else:
        aux_grid = None
    Xs, Ys, Ws, scales, counts_used = [], [], [], [], []
    for j in models:
        interval = None if intervals is None else intervals[j]
        x, y, w, scale = _training_queries(
            noisy, rho, train_sizes[j], params, aux_grid, lo, hi, psi, domain, interval, mids[j]
        )
        scales.append(scale)
        Xs.append(x)
        Ys.append(y)
        Ws.append(w)
        counts_used.append(len(y))
        ctx.check_cancelled()
    P = max(counts_used)
    kk = len(models)
    in_dim = Xs[0].shape[1]
    X = np.zeros((kk, P, in_dim), np.float32)
    Y = np.zeros((kk, P), np.float32)
    W = np.zeros((kk, P), np.float32)
    for i in range(kk):
        c = counts_used[i]
        X[i, :c], Y[i, :c], W[i, :c] = Xs[i], Ys[i], Ws[i]
    t_aug = time.perf_counter() - t0
    ctx.progress(0.08, f"augmented {sum(counts_used):,} training queries for {kk} networks")

    # ---------------------------------------------------------------- training
    cfg = train_config(params)
    seed = int(ctx.rng.integers(0, 2**31 - 1))

    def prog(f, msg):
        ctx.progress(0.08 + 0.87 * f, msg)

    sizes_out = np.asarray(mids)[models]

    def make(p):
        return SNHModel(
            p,
            sizes_out,
            np.asarray(scales),
            domain,
            anchor=params["anchor"],
            variant=variant,
            intervals=None if intervals is None else intervals[models],
            bounds=(lo, hi),
        )

    hook = None if on_epoch is None else (lambda e, p: on_epoch(e, make(p)))
    res = train(
        X,
        Y,
        W,
        np.array(counts_used),
        cfg,
        seed,
        progress=prog,
        check_cancelled=ctx.check_cancelled,
        on_epoch=hook,
        every=every,
    )
    model = make(res.params)
    diag = {
        **got["diagnostics"],
        "query_side_m": [lo, hi],
        "model_sizes_m": [float(v) for v in sizes_out],
        "variant": variant,
        "anchor": params["anchor"],
        "aux_points": None if aux is None else int(len(aux)),
        "workload": wmode,
        "public_note": (
            "The auxiliary data is treated as PUBLIC: it sets the loss weights and ParamSelect's entropy feature "
            "and never spends budget; it must not be derived from the private dataset."
            if aux is not None
            else aux_text
        ),
        "psi": psi,
        "training_queries_per_model": counts_used,
        "preset": params["preset"],
        "network": {"depth": cfg.net.depth, "width": cfg.net.width, "in_dim": cfg.net.in_dim},
        "lr": cfg.lr,
        "batch_size": cfg.batch_size,
        "epochs_run": [int(v) for v in res.epochs_run],
        "stopped_early": [bool(v) for v in res.stopped_early],
        "best_training_loss": [float(v) for v in res.best_loss],
        "gradient_steps": int(res.steps),
        "augmentation_seconds": t_aug,
        "training_seconds": res.seconds,
        "model_bytes": model.nbytes,
        "output_scales": [float(s) for s in scales],
    }
    return {"model": model, "ledger": ledger, "diagnostics": diag, "noisy": noisy, "grid": grid, "train": res}
