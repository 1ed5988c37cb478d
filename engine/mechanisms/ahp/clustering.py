"""AHP's post-processing of the noisy counts (Zhang, Chen, Xu, Meng, Xie, SDM 2014): thresholding, then the
greedy clustering of the sorted counts. Everything here reads noisy counts only."""

from __future__ import annotations

import math

import numpy as np

try:  # numba: the greedy scan is a loop over the cells; the numpy loop below is the fallback
    import numba

    njit = numba.njit(cache=True, nogil=True)
except ImportError:  # pragma: no cover - numba is in requirements

    def njit(f):
        return f


def threshold(noisy: np.ndarray, eta: float, eps1: float) -> tuple[np.ndarray, float]:
    """Noisy counts at or below theta = eta ln(n) / eps1 set to 0 (n the number of counts): the largest of n
    Laplace(1/eps1) draws is about ln(n) / eps1, so most empty cells fall below it. Returns (counts, theta)."""
    noisy = np.asarray(noisy, dtype=np.float64)
    theta = float(eta) * math.log(max(noisy.size, 1)) / float(eps1)
    return np.where(noisy <= theta, 0.0, noisy), theta


@njit
def _cost(P, PP, i, j, two_var):
    """A cluster of the sorted values i..j (inclusive): its squared deviation from its mean plus the noise of
    its noisy mean over its members, 2 / (eps2^2 |C|) (each member gets Laplace(1/eps2) / |C|)."""
    k = j - i + 1
    s = P[j + 1] - P[i]
    sse = PP[j + 1] - PP[i] - s * s / k
    return sse + two_var / k


@njit
def _alone_cost(v, P, j, two_var):
    """err*(j): value j's least error if it opened a new cluster of the values j .. j + l - 1, its squared
    distance to that cluster's mean plus its share of the cluster's noise, 2 / (eps2^2 l^2), minimised over l.
    The scan stops once the distance has grown by more than the noise share can still fall (down to its value
    at the longest cluster, all values from j on)."""
    n = v.size
    floor = two_var / float(n - j) ** 2
    best = two_var  # l = 1: no distance
    last_dev, last_noise = 0.0, two_var
    for length in range(2, n - j + 1):
        mean = (P[j + length] - P[j]) / length
        dev = (v[j] - mean) ** 2
        noise = two_var / (length * length)
        if dev - last_dev >= last_noise - floor:
            break
        if dev + noise < best:
            best = dev + noise
        last_dev, last_noise = dev, noise
    return best


@njit
def _greedy(v, two_var):
    n = v.size
    P = np.zeros(n + 1)
    PP = np.zeros(n + 1)
    for k in range(n):
        P[k + 1] = P[k] + v[k]
        PP[k + 1] = PP[k] + v[k] * v[k]
    starts = np.zeros(n, dtype=np.int64)
    m = 1
    i = 0
    last = _cost(P, PP, 0, 0, two_var)
    for j in range(1, n):
        now = _cost(P, PP, i, j, two_var)
        # err*(j) is at least the noise share of the longest cluster: below that the test cannot pass, so the
        # scan is skipped (long runs of equal values, e.g. the thresholded zeros, stay linear)
        if now - last >= two_var / float(n - j) ** 2 and now >= last + _alone_cost(v, P, j, two_var):
            starts[m] = j
            m += 1
            i = j
            last = _cost(P, PP, j, j, two_var)
        else:
            last = now
    return starts[:m]


def greedy_clusters(sorted_values: np.ndarray, eps2: float) -> np.ndarray:
    """AHP's greedy clustering of the counts sorted ascending: the start of each cluster (positions in the sorted
    order). Value j joins the current cluster C unless err(C + j) >= err(C) + err*(j), err(C) = the squared
    deviation of C's values from their mean + 2 / (eps2^2 |C|) (:func:`_cost`), err*(j) j's error as the first
    value of a new cluster (:func:`_alone_cost`)."""
    v = np.ascontiguousarray(sorted_values, dtype=np.float64)
    if v.size == 0:
        return np.zeros(0, dtype=np.int64)
    return _greedy(v, 2.0 / float(eps2) ** 2)


def cluster_labels(noisy: np.ndarray, eps2: float) -> np.ndarray:
    """Per cell, its cluster (0 .. k-1, in increasing order of the clusters' noisy values): the cells sorted by
    their (thresholded) noisy counts, clustered greedily. Ties keep the cells' order (a stable sort)."""
    flat = np.asarray(noisy, dtype=np.float64).ravel()
    order = np.argsort(flat, kind="stable")
    starts = greedy_clusters(flat[order], eps2)
    sizes = np.diff(np.append(starts, flat.size))
    labels = np.empty(flat.size, dtype=np.int64)
    labels[order] = np.repeat(np.arange(starts.size), sizes)
    return labels.reshape(np.shape(noisy))
