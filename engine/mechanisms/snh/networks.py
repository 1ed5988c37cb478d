"""Neural networks of Spatial Neural Histograms (Zeighami et al., PVLDB 2022), in JAX + optax on CPU.

Only :mod:`engine.mechanisms.snh` uses this module, and JAX is imported lazily
(first training or first model evaluation), so the rest of the engine never pays
its import cost. Before the import we set ``JAX_PLATFORMS=cpu`` and limit XLA's
intra-op thread pool to ``HEATMAP_JAX_THREADS`` threads (default: the number of
cores, at most 4) so a dashboard server is not swamped; a persistent compilation
cache lives under the engine's cache folder.

Network (Section 6.1.2 and the reference code): ``Linear(width) + sin``, then
``depth`` x ``(Linear(width) + swish)``, then ``Linear(1)``; the paper uses
depth 20 and width 80. Weights are initialised as in the reference code (He uniform:
``U(-a, a)``, ``a = sqrt(6 / fan_in)``, i.e. variance ``2 / fan_in``, every layer; the
first layer's limit times ``sin_scale``), biases at zero. (A smaller ``1/fan_in``
variance made the depth-20 network train more slowly: 0.112 vs 0.100 relative error
after 400 epochs of the SF reference run.) The ``k`` networks (one per query
size, Section 4.2) are stacked on a leading axis and trained together with
``jax.vmap``; each keeps its own Adam state, stops early on its own training loss
and keeps its best parameters.

Everything is deterministic given the integer seed: the JAX PRNG key (weights)
and the numpy Generator (mini-batch order) both derive from it.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_LOCK = threading.Lock()
_JAX = None


def _threads() -> int:
    raw = os.environ.get("HEATMAP_JAX_THREADS", "")
    if raw.strip().isdigit() and int(raw) > 0:
        return int(raw)
    return max(1, min(os.cpu_count() or 1, 4))


def jax_modules():
    """Import jax, jax.numpy and optax once (configured for CPU), return them."""
    global _JAX
    if _JAX is not None:
        return _JAX
    with _LOCK:
        if _JAX is not None:
            return _JAX
        if "jax" not in sys.modules:  # flags only act before the first import
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
            flags = os.environ.get("XLA_FLAGS", "")
            if "intra_op_parallelism_threads" not in flags:
                n = _threads()
                extra = f"--xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'} intra_op_parallelism_threads={n}"
                os.environ["XLA_FLAGS"] = (flags + " " + extra).strip()
        import jax
        import jax.numpy as jnp
        import optax

        try:  # reuse compiled training steps across processes (bench repeats, dashboard restarts)
            from ...core.cache import cache_dir

            jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "jax"))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
        except Exception:  # pragma: no cover - the cache is an optimisation only
            pass
        _JAX = (jax, jnp, optax)
        return _JAX


# ------------------------------------------------------------------ network
@dataclass(frozen=True)
class NetConfig:
    depth: int = 20  # swish hidden layers after the sin layer
    width: int = 80
    in_dim: int = 2  # query location (x, y); 3 with the query size (SNH+QS)
    sin_scale: float = 1.0  # first (sin) layer weights: He uniform times sin_scale


def init_params_np(seed: int, cfg: NetConfig, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stacked parameters of ``k`` networks: a list of ``(W (k, a, b), b (k, b))``."""
    jax, jnp, _ = jax_modules()
    sizes = [cfg.in_dim] + [cfg.width] * (cfg.depth + 1) + [1]
    key = jax.random.PRNGKey(int(seed) % (2**31))
    out = []
    for layer, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        key, sub = jax.random.split(key)
        lim = math.sqrt(6.0 / a) * (cfg.sin_scale if layer == 0 else 1.0)
        w = jax.random.uniform(sub, (k, a, b), jnp.float32, -lim, lim)
        out.append((np.asarray(w), np.zeros((k, b), np.float32)))
    return out


def _forward(jnp, jax, params, x):
    """One network: ``x (B, in_dim)`` -> ``(B,)``."""
    w, b = params[0]
    h = jnp.sin(x @ w + b)
    for w, b in params[1:-1]:
        h = jax.nn.swish(h @ w + b)
    w, b = params[-1]
    return (h @ w + b)[..., 0]


def param_bytes(params) -> int:
    return int(sum(w.nbytes + b.nbytes for w, b in params))


# ------------------------------------------------------------------ training
@dataclass(frozen=True)
class TrainConfig:
    net: NetConfig = field(default_factory=NetConfig)
    lr: float = 1e-3
    epochs: int = 1000
    batch_size: int = 8192
    patience: int = 50  # epochs without a relative improvement > tol before a model stops
    tol: float = 1e-4
    max_steps: int = 0  # > 0: cap on gradient steps per model (the interactive budget)
    decay: float = 1.0  # final learning rate / initial (cosine schedule over the planned steps); 1 = constant


@dataclass
class TrainResult:
    params: list[tuple[np.ndarray, np.ndarray]]  # best parameters per model (stacked)
    epochs_run: np.ndarray  # (k,) epochs trained before stopping
    best_loss: np.ndarray  # (k,) best training loss (weighted, labels normalised)
    stopped_early: np.ndarray  # (k,) bool
    seconds: float
    steps: int
    history: list[list[float]]  # per epoch, loss of each model


_COMPILED: dict = {}


def _compiled(net: NetConfig, lr: float, decay: float, total_steps: int):
    """Jitted training chunk and best-parameter update for one configuration (cached:
    repeated runs in a process reuse them; XLA caches each input shape)."""
    key = (net, float(lr), float(decay), int(total_steps) if decay < 1 else 0)
    if key in _COMPILED:
        return _COMPILED[key]
    jax, jnp, optax = jax_modules()
    sched = lr if decay >= 1 else optax.cosine_decay_schedule(lr, max(int(total_steps), 1), alpha=decay)
    opt = optax.adam(sched)

    def loss_fn(p, x, y, w):
        f = _forward(jnp, jax, p, x)
        return jnp.sum(w * (f - y) ** 2) / x.shape[0]

    def step(p, s, x, y, w, act):
        val, g = jax.value_and_grad(loss_fn)(p, x, y, w)
        upd, s2 = opt.update(g, s, p)
        p2 = optax.apply_updates(p, upd)
        # a stopped model keeps its parameters and optimiser state
        p2 = jax.tree_util.tree_map(lambda a, b_: jnp.where(act, a, b_), p2, p)
        s2 = jax.tree_util.tree_map(lambda a, b_: jnp.where(act, a, b_), s2, s)
        return p2, s2, val

    vstep = jax.vmap(step, in_axes=(0, 0, 0, 0, 0, 0))

    @jax.jit
    def run_chunk(p, s, X, Y, W, idx, act):
        # idx (L, k, B): sample indices of each model's mini-batches
        def body(carry, ib):
            p, s = carry
            x = jnp.take_along_axis(X, ib[:, :, None], axis=1)
            y = jnp.take_along_axis(Y, ib, axis=1)
            w = jnp.take_along_axis(W, ib, axis=1)
            p, s, val = vstep(p, s, x, y, w, act)
            return (p, s), val

        (p, s), vals = jax.lax.scan(body, (p, s), idx)
        return p, s, vals.mean(axis=0)

    @jax.jit
    def keep_best(best, p, improved):
        return jax.tree_util.tree_map(
            lambda a, b_: jnp.where(improved.reshape((-1,) + (1,) * (a.ndim - 1)), b_, a), best, p
        )

    out = (opt, run_chunk, keep_best)
    if len(_COMPILED) > 16:
        _COMPILED.clear()
    _COMPILED[key] = out
    return out


def train(
    X: np.ndarray,
    Y: np.ndarray,
    Wt: np.ndarray,
    valid: np.ndarray,
    cfg: TrainConfig,
    seed: int,
    progress: Callable[[float, str], None] | None = None,
    check_cancelled: Callable[[], None] | None = None,
    on_epoch: Callable[[int, list], None] | None = None,
    every: int = 0,
) -> TrainResult:
    """Train ``k`` networks together on the weighted squared loss (Eq. 6).

    ``X (k, P, in_dim)`` inputs, ``Y (k, P)`` labels (already divided by each model's
    output scale), ``Wt (k, P)`` sample weights, ``valid (k,)`` number of real samples
    per model (they come first; the rest is padding never drawn). One epoch is one pass
    over each model's samples in a fresh random order (topped up to whole jitted chunks
    from the next permutation); the loss of a mini-batch is ``sum(w (f - y)^2) / B``
    with the weights normalised to mean 1 over the model's samples, an unbiased
    estimate of Eq. 6 up to a constant factor. ``on_epoch(epoch, params)`` is called
    every ``every`` epochs with the current (not the best) numpy parameters.
    """
    jax, jnp, optax = jax_modules()
    t_start = time.perf_counter()
    k, P, _ = X.shape
    valid = np.asarray(valid, dtype=np.int64)
    nmax = int(valid.max())
    B = int(min(max(cfg.batch_size, 1), nmax)) if cfg.batch_size > 0 else nmax
    n_batches = max(1, math.ceil(nmax / B))
    L = min(n_batches, 16)  # batches per jitted call (bounded compile shapes, cancel checks)
    n_calls = math.ceil(n_batches / L)
    per_epoch = n_calls * L
    epochs = int(cfg.epochs)
    if cfg.max_steps > 0:
        epochs = max(1, min(epochs, cfg.max_steps // per_epoch))
    opt, run_chunk, keep_best = _compiled(cfg.net, cfg.lr, cfg.decay, epochs * per_epoch)
    rng = np.random.default_rng(seed)
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in init_params_np(seed, cfg.net, k)]
    state = jax.vmap(opt.init)(params)
    Xd, Yd, Wd = jnp.asarray(X, jnp.float32), jnp.asarray(Y, jnp.float32), jnp.asarray(Wt, jnp.float32)

    best_params = params
    best_loss = np.full(k, np.inf)
    wait = np.zeros(k, np.int64)
    active = np.ones(k, bool)
    epochs_run = np.zeros(k, np.int64)
    history: list[list[float]] = []
    steps = 0
    need = per_epoch * B
    for epoch in range(1, epochs + 1):
        if check_cancelled is not None:
            check_cancelled()
        order = np.empty((k, need), np.int32)
        for j in range(k):
            parts, have = [], 0
            while have < need:
                perm = rng.permutation(int(valid[j])).astype(np.int32)
                parts.append(perm)
                have += perm.size
            order[j] = np.concatenate(parts)[:need]
        order = order.reshape(k, per_epoch, B).transpose(1, 0, 2)
        act = jnp.asarray(active)
        losses = []
        for c in range(n_calls):
            params, state, lv = run_chunk(params, state, Xd, Yd, Wd, jnp.asarray(order[c * L : (c + 1) * L]), act)
            losses.append(np.asarray(lv))
            if check_cancelled is not None and n_calls > 1:
                check_cancelled()
        steps += per_epoch
        ep_loss = np.mean(losses, axis=0)
        history.append([float(v) for v in ep_loss])
        improved = active & (ep_loss < best_loss * (1 - cfg.tol))
        best_params = keep_best(best_params, params, jnp.asarray(improved))
        best_loss = np.where(improved, ep_loss, best_loss)
        wait = np.where(improved, 0, wait + 1)
        epochs_run = np.where(active, epoch, epochs_run)
        active = active & (wait < cfg.patience)
        if progress is not None:  # plain words; the losses are in the result's history
            stopped = int(k - active.sum())
            progress(
                epoch / epochs,
                f"training {k} neural network{'s' if k > 1 else ''} together, {100 * epoch // epochs}% "
                f"(pass {epoch} of {epochs} over the training queries"
                + (f"; {stopped} of {k} stopped early)" if stopped else ")"),
            )
        if on_epoch is not None and every > 0 and epoch % every == 0:
            on_epoch(epoch, [(np.asarray(w), np.asarray(b)) for w, b in params])
        if not active.any():
            break
    out = [(np.asarray(w, np.float32), np.asarray(b, np.float32)) for w, b in best_params]
    return TrainResult(
        params=out,
        epochs_run=epochs_run,
        best_loss=best_loss,
        stopped_early=~active,
        seconds=time.perf_counter() - t_start,
        steps=steps,
        history=history,
    )


# ------------------------------------------------------------------ inference
_PREDICT = None


def _predict_fn():
    """One jitted forward pass for every model: the parameters are arguments, so a new model of
    an architecture seen before reuses the compiled code (XLA caches one executable per
    architecture and batch shape) instead of compiling its own."""
    global _PREDICT
    if _PREDICT is None:
        jax, jnp, _ = jax_modules()

        @jax.jit
        def fn(params, j, x):
            return _forward(jnp, jax, [(w[j], b[j]) for w, b in params], x)

        _PREDICT = fn
    return _PREDICT


class BatchPredictor:
    """Forward pass of model ``j`` of a stacked set, on padded batches.

    Batches are padded to powers of two (at least 8 rows) so a handful of shapes
    are compiled once per process; the parameters stay on the device, so a single
    query costs one call of a compiled function.
    """

    def __init__(self, params):
        self.params_np = params
        self._dev = None

    def __call__(self, j: int, x: np.ndarray) -> np.ndarray:
        fn = _predict_fn()
        if self._dev is None:
            _, jnp, _ = jax_modules()
            self._dev = [(jnp.asarray(w), jnp.asarray(b)) for w, b in self.params_np]
        n = x.shape[0]
        size = max(8, 1 << max(0, int(n - 1).bit_length()))
        xp = np.zeros((size, x.shape[1]), np.float32)
        xp[:n] = x
        return np.asarray(fn(self._dev, np.int32(j), xp))[:n].astype(np.float64)
