"""The baselines of Cormode, Markov & Srinivas 2024, Sections 2 and 4: subtractive dithering and randomized
rounding (both optionally with randomized response), Duchi et al.'s one-bit mechanism, the piecewise mechanism
and Laplace noise on the clipped value (:func:`baseline_mean`, with their formulas). Secure mode: see
:mod:`.bitpush`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.errors import ParamError
from .bits import check_optional_epsilon, is_secure, randomized_response, rr_unbias
from .rounds import ServerLog, group_layout

BASELINES = ("dithering", "rounding", "duchi", "piecewise", "laplace")


# ------------------------------------------------------------------ baselines
@dataclass
class BaselineResult:
    estimate: np.ndarray  # (G,)
    stderr: np.ndarray  # (G,)
    per_client: np.ndarray  # unbiased per-client estimates (server side)
    log: ServerLog
    n_clients: np.ndarray
    method: str
    epsilon: float | None


def baseline_mean(
    values,
    method: str,
    low: float,
    high: float,
    rng: np.random.Generator,
    epsilon: float | None = None,
    *,
    groups=None,
    n_groups: int | None = None,
    noise=None,
) -> BaselineResult:
    """Classical one-report mean estimators on the public range ``[low, high]``
    (inputs are clipped to it). Each client sends one report:

    * ``dithering`` (subtractive dithering, Ben-Basat et al. [3]): the client draws
      ``h ~ U[0,1]`` and sends ``1[x' >= h]`` (x' the value scaled to [0,1]); the
      server, which also sees ``h``, estimates ``bit + h - 1/2``. With ``epsilon``
      the bit goes through randomized response and is unbiased first (the
      paper's LDP baseline).
    * ``rounding`` (randomized rounding): send ``1`` with probability ``x'``;
      with ``epsilon`` randomized response on that bit.
    * ``duchi`` (Duchi et al. [13], one bit): ``t = 2x' - 1`` in [-1, 1]; output
      ``+-B``, ``B = (e^eps + 1)/(e^eps - 1)``, ``P(+B) = 1/2 + t/(2B)`` (needs epsilon).
    * ``piecewise`` (Wang et al. [28], "Collecting and analyzing multidimensional data with local
      differential privacy", ICDE 2019; needs epsilon): ``t = 2x' - 1``,
      ``C = (e^(eps/2) + 1)/(e^(eps/2) - 1)``, ``l = (C + 1)/2 t - (C - 1)/2``, ``r = l + C - 1``;
      with probability ``e^(eps/2)/(e^(eps/2) + 1)`` uniform on ``[l, r]``, else uniform on
      ``[-C, l) U (r, C]``; unbiased.
    * ``laplace``: Laplace noise of scale ``(high - low)/eps`` on the clipped value.

    ``noise``: an :class:`engine.core.noise.NoiseSource`. In secure mode randomized
    response (dithering, rounding) is OpenDP's and the Laplace report is
    ``noise.add_laplace`` (the value passes through OpenDP's Laplace measurement),
    Duchi's coin ``noise.bernoulli`` (exact, OS entropy; the float rounding of
    ``1/2 + t/(2B)`` moves epsilon by a relative 1e-16 at most), and the piecewise
    mechanism, a continuous output without a floating-point-safe sampler, is
    refused. The dither ``h``
    and the rounding coin stay on ``rng`` (not privacy noise: see the module
    docstring). Without a secure ``noise`` every draw comes from ``rng``.
    """
    if method not in BASELINES:
        raise ParamError(f"unknown baseline {method!r}; expected one of {', '.join(BASELINES)}")
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ParamError(f"the public range must have low < high (got {low}, {high})")
    eps = check_optional_epsilon(epsilon)
    if eps is None and method in ("duchi", "piecewise", "laplace"):
        raise ParamError(f"the {method} mechanism is a local-DP mechanism: it needs epsilon")
    if method == "piecewise" and is_secure(noise):
        raise ParamError(
            "the piecewise mechanism has no floating-point-safe sampler (its output is continuous); in secure "
            "mode use duchi, laplace, dithering or rounding"
        )
    v = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(v).all():
        raise ParamError("values must be finite numbers (drop missing values first)")
    g, G = group_layout(groups, v.size, n_groups)
    clients = np.flatnonzero(g >= 0)
    width = high - low
    xs = (np.clip(v[clients], low, high) - low) / width  # in [0, 1]
    aux = None
    if method in ("dithering", "rounding"):
        if method == "dithering":
            h = rng.random(xs.size)
            bit = (xs >= h).astype(np.int8)
            aux = h
        else:
            bit = (rng.random(xs.size) < xs).astype(np.int8)
        report = bit.astype(np.float64) if eps is None else randomized_response(bit, eps, rng, noise).astype(np.float64)
        unb = report if eps is None else rr_unbias(report, eps)
        est01 = unb + h - 0.5 if method == "dithering" else unb
    elif method == "duchi":
        e = math.exp(eps)
        B = (e + 1.0) / (e - 1.0)
        t = 2.0 * xs - 1.0
        p_plus = 0.5 + t / (2.0 * B)
        plus = noise.bernoulli(p_plus) if is_secure(noise) else rng.random(xs.size) < p_plus
        report = np.where(plus, B, -B)
        est01 = (report + 1.0) / 2.0
    elif method == "piecewise":  # seeded numpy only (refused in secure mode above)
        report = _piecewise(2.0 * xs - 1.0, eps, rng)
        est01 = (report + 1.0) / 2.0
    else:
        from ...core.noise import NoiseSource

        src = noise if is_secure(noise) else NoiseSource(rng)  # seeded: exactly x + rng.laplace(0, scale, n)
        report = src.add_laplace(xs * width + low, width / eps)
        est01 = (report - low) / width
    per_client = low + width * est01
    gc = g[clients]
    cnt = np.bincount(gc, minlength=G).astype(np.float64)
    s = np.bincount(gc, weights=per_client, minlength=G)
    s2 = np.bincount(gc, weights=per_client**2, minlength=G)
    mean = np.divide(s, cnt, out=np.zeros(G), where=cnt > 0)
    var = np.divide(s2 - cnt * mean**2, cnt - 1, out=np.full(G, np.inf), where=cnt > 1)
    stderr = np.sqrt(np.maximum(var, 0.0) / np.maximum(cnt, 1.0))
    log = ServerLog(
        client=clients.astype(np.int64),
        bit=np.full(clients.size, 0 if method in ("dithering", "rounding") else -1, dtype=np.int16),
        round=np.ones(clients.size, dtype=np.int8),
        report=np.asarray(report, dtype=np.float64),
        group=gc,
        aux=aux,
    )
    return BaselineResult(mean, stderr, per_client, log, cnt.astype(np.int64), method, eps)


def _piecewise(t: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Piecewise mechanism on ``t`` in [-1, 1]; unbiased, output in [-C, C]. Its noise
    comes from the numpy ``rng`` (no floating-point-safe sampler: refused in secure mode)."""
    e2 = math.exp(eps / 2.0)
    C = (e2 + 1.0) / (e2 - 1.0)
    lft = (C + 1.0) / 2.0 * t - (C - 1.0) / 2.0
    rgt = lft + C - 1.0
    centre = rng.random(t.size) < e2 / (e2 + 1.0)
    u = rng.random(t.size)
    inside = lft + u * (C - 1.0)
    # outside: uniform on [-C, l) U (r, C], total length C + 1
    pos = u * (C + 1.0)
    left_len = lft + C
    outside = np.where(pos < left_len, -C + pos, rgt + (pos - left_len))
    return np.where(centre, inside, outside)
