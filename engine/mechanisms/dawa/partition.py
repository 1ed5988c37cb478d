"""DAWA's first stage: a private partition of the (Hilbert-ordered) cell vector into contiguous buckets of
near-uniform counts (Li, Hay, Miklau, Wang, PVLDB 2014, Section 3; restated in :class:`.mechanism.Dawa`).

A bucket B costs ``dev(B) + 1/eps2``: its deviation from uniformity, ``dev(B) = sum_k |x_k - mean_B|``
(the error of spreading its total evenly), plus the expected absolute error of measuring its total with
Laplace(1/eps2). Each candidate bucket longer than one cell gets Laplace noise of scale
``(2 - 1/|B| - 1/n) / eps1`` on its cost, clamped below at ``1/eps2``; the partition of least total noisy
cost is found by dynamic programming over prefixes. ``approx`` considers only buckets whose length is a
power of two (any start), ``exact`` every length.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...core.errors import ParamError

EXACT_MAX_CELLS = 1024  # every length: n^2 / 2 noisy costs, so small maps only


@njit(cache=True)
def _window_devs(x: np.ndarray, rank: np.ndarray, sorted_x: np.ndarray, length: int) -> np.ndarray:
    """dev of every window ``x[s : s + length]``: a Fenwick tree over the values' ranks holds the count
    and the sum of the window's values at or below each rank, so the values below the window's mean are
    one prefix query away; the window slides by one insertion and one deletion (O(n log n) per length)."""
    n = x.size
    out = np.empty(n - length + 1)
    cnt = np.zeros(n + 1)
    tot = np.zeros(n + 1)
    wsum = 0.0
    for s in range(n):
        # insert x[s]
        i = rank[s] + 1
        while i <= n:
            cnt[i] += 1.0
            tot[i] += x[s]
            i += i & (-i)
        wsum += x[s]
        if s >= length:  # remove x[s - length]
            j = rank[s - length] + 1
            while j <= n:
                cnt[j] -= 1.0
                tot[j] -= x[s - length]
                j += j & (-j)
            wsum -= x[s - length]
        if s >= length - 1:
            mean = wsum / length
            k = np.searchsorted(sorted_x, mean, side="right")  # ranks < k hold values <= mean
            c_le = 0.0
            s_le = 0.0
            j = k
            while j > 0:
                c_le += cnt[j]
                s_le += tot[j]
                j -= j & (-j)
            dev = (mean * c_le - s_le) + ((wsum - s_le) - mean * (length - c_le))
            out[s - length + 1] = max(dev, 0.0)
    return out


def window_devs(x: np.ndarray, length: int) -> np.ndarray:
    """``dev(B)`` for every bucket of ``length`` consecutive entries of ``x``, by start."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    rank = np.empty(x.size, dtype=np.int64)
    rank[order] = np.arange(x.size)
    return _window_devs(x, rank, np.ascontiguousarray(x[order]), int(length))


def candidate_lengths(n: int, variant: str) -> np.ndarray:
    """Bucket lengths the partition considers (besides singletons): powers of two, or all."""
    if variant == "approx":
        return np.array([1 << k for k in range(1, int(math.log2(n)) + 1 if n > 1 else 1)], dtype=np.int64)
    if variant == "exact":
        if n > EXACT_MAX_CELLS:
            raise ParamError(
                f"the exact partition considers every bucket (n^2/2 = {n * n // 2:,} noisy costs for {n:,} cells); "
                f"use it on maps of at most {EXACT_MAX_CELLS} cells (depth 5), or the approximate partition"
            )
        return np.arange(2, n + 1, dtype=np.int64)
    raise ParamError(f"unknown partition variant {variant!r} (approx or exact)")


def cost_noise_scale(length: int, n: int, eps1: float) -> float:
    """Laplace scale on the cost of a bucket of ``length`` cells among ``n``: ``(2 - 1/length - 1/n) / eps1``."""
    return (2.0 - 1.0 / length - 1.0 / n) / eps1


def noisy_costs(x: np.ndarray, lengths: np.ndarray, eps1: float, eps2: float, noise, scale_factor: float = 1.0):
    """Noisy cost of every candidate bucket, a ``(len(lengths), n)`` array indexed by (length, start)
    (``inf`` where the bucket would run past the end): ``max(dev + 1/eps2 + Laplace, 1/eps2)``.
    ``scale_factor`` multiplies the noise scale (1 for DAWA; the audit's weakened variant uses less)."""
    n = x.size
    out = np.full((lengths.size, n), np.inf)
    floor = 1.0 / eps2
    for k, length in enumerate(lengths):
        dev = window_devs(x, int(length))
        noisy = noise.add_laplace(dev + floor, scale_factor * cost_noise_scale(int(length), n, eps1))
        out[k, : dev.size] = np.maximum(noisy, floor)
    return out


@njit(cache=True)
def _least_cost(costs: np.ndarray, lengths: np.ndarray, single: float) -> np.ndarray:
    n = costs.shape[1]
    best = np.empty(n + 1)
    arg = np.ones(n + 1, dtype=np.int64)
    best[0] = 0.0
    for end in range(1, n + 1):  # prefix x[0:end]; its last bucket is x[end - L: end]
        b = best[end - 1] + single
        a = 1
        for k in range(lengths.size):
            L = lengths[k]
            if L > end:
                break
            c = best[end - L] + costs[k, end - L]
            if c < b:
                b = c
                a = L
        best[end] = b
        arg[end] = a
    starts = []
    end = n
    while end > 0:
        end -= arg[end]
        starts.append(end)
    out = np.empty(len(starts), dtype=np.int64)
    for i in range(len(starts)):
        out[i] = starts[len(starts) - 1 - i]
    return out


def least_cost_partition(costs: np.ndarray, lengths: np.ndarray, single_cost: float) -> np.ndarray:
    """Start index of each bucket of the partition of least total cost (``lengths`` increasing;
    singletons cost ``single_cost``): ``C[0] = 0``, ``C[e] = min_L C[e - L] + cost(e - L, L)``."""
    return _least_cost(np.ascontiguousarray(costs), np.ascontiguousarray(lengths, dtype=np.int64), float(single_cost))


def private_partition(
    x: np.ndarray, eps1: float, eps2: float, noise, variant: str = "approx", scale_factor: float = 1.0
) -> np.ndarray:
    """Stage 1: the bucket starts of DAWA's private partition of ``x`` (eps1-DP by the paper's theorem
    on the noisy costs; see the mechanism's docstring)."""
    n = int(np.size(x))
    lengths = candidate_lengths(n, variant)
    if lengths.size == 0:
        return np.zeros(1, dtype=np.int64)
    costs = noisy_costs(np.asarray(x, dtype=np.float64), lengths, eps1, eps2, noise, scale_factor)
    return least_cost_partition(costs, lengths, 1.0 / eps2)
