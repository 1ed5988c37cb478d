"""DAWA's second stage, GreedyH (Li, Hay, Miklau, Wang, PVLDB 2014, Section 4; restated in :class:`.mechanism.Dawa`):
weighted interval queries over a binary tree on the buckets, weights chosen greedily bottom-up for the
workload, measured with Laplace(1/eps2), and the bucket totals estimated by least squares.

Notation. ``Q`` is the workload on the buckets (``q x m``: query i's coverage of bucket j, the fraction of
the bucket's cells inside the query, since a bucket's estimate is spread evenly over its cells). A node v
over buckets ``I`` holds a strategy ``A_v`` on ``I`` whose weights along every root-to-leaf path sum to 1.
With ``M_v = (A_v^T A_v)^-1`` its least-squares covariance (in units of the noise variance), the node
keeps three things: ``e_v = trace(Q_I^T Q_I M_v)`` (its workload error), ``s_v = M_v 1`` and
``t_v = 1^T M_v 1``. Giving the children's subtrees the share p and the node's own interval 1 - p,
``A_v^T A_v = p^2 diag(M_c)^-1 + (1 - p)^2 1 1^T``; Sherman-Morrison gives, with ``E = e_l + e_r``,
``T = t_l + t_r``, ``s = (s_l, s_r)``, ``a = |Q_I s|^2`` and ``D = 1 + (1 - p)^2 T / p^2``:
``e_v = E / p^2 - (1 - p)^2 a / (p^4 D)``, ``s_v = s / (p^2 D)``, ``t_v = T / (p^2 D)``.
So each node's 100-step grid search over p costs one sparse product, ``a``, for all p at once (two with
the depth decay of :func:`greedy_weights`, which also needs the children's own sums).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

P_GRID = np.arange(1, 101) / 100.0  # the children's share, 100 steps (p = 1: the node is not measured)


@dataclass
class Tree:
    """A binary tree over ``m`` buckets, level by level: node k of level d covers buckets
    ``lo[d][k] .. hi[d][k] - 1``; ``left[d][k]`` is its left child's index in level d + 1 (the right
    child follows it), -1 for a leaf (one bucket)."""

    lo: list[np.ndarray]
    hi: list[np.ndarray]
    left: list[np.ndarray]

    @property
    def m(self) -> int:
        return int(self.hi[0][0])

    def nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Every node's (lo, hi), levels concatenated from the root."""
        return np.concatenate(self.lo), np.concatenate(self.hi)


def build_tree(m: int) -> Tree:
    """Halve every interval longer than one bucket (left half the smaller when odd)."""
    lo, hi = [np.array([0])], [np.array([int(m)])]
    left = []
    while True:
        a, b = lo[-1], hi[-1]
        inner = (b - a) > 1
        nxt = np.cumsum(inner) * 2 - 2
        left.append(np.where(inner, nxt, -1))
        if not inner.any():
            break
        mid = (a[inner] + b[inner]) // 2
        lo.append(np.column_stack([a[inner], mid]).ravel())
        hi.append(np.column_stack([mid, b[inner]]).ravel())
    return Tree(lo, hi, left)


# ------------------------------------------------------------------ workload
@njit(cache=True)
def _coverage(rects, labels, sizes, m):
    q = rects.shape[0]
    nnz = 0
    for r in range(q):
        nnz += max(rects[r, 2] - rects[r, 0], 0) * max(rects[r, 3] - rects[r, 1], 0)
    scratch = np.zeros(m)
    touched = np.empty(labels.size, dtype=np.int64)
    indptr = np.zeros(q + 1, dtype=np.int64)
    cols = np.empty(nnz, dtype=np.int64)
    vals = np.empty(nnz)
    k = 0
    for r in range(q):
        x0, y0, x1, y1 = rects[r, 0], rects[r, 1], rects[r, 2], rects[r, 3]
        nt = 0
        for iy in range(y0, y1):
            for ix in range(x0, x1):
                b = labels[iy, ix]
                if scratch[b] == 0.0:
                    touched[nt] = b
                    nt += 1
                scratch[b] += 1.0
        for b in np.sort(touched[:nt]):  # sorted columns: a valid CSR row
            cols[k] = b
            vals[k] = scratch[b] / sizes[b]
            scratch[b] = 0.0
            k += 1
        indptr[r + 1] = k
    return indptr, cols[:k], vals[:k]


def bucket_workload(cell_rects: np.ndarray, labels: np.ndarray, sizes: np.ndarray) -> sp.csr_matrix:
    """``Q`` on the buckets: for rectangles of whole cells ``(ix0, iy0, ix1, iy1)`` (half-open) and the
    bucket of every cell (``labels[iy, ix]``), each query's share of each bucket's cells."""
    m = int(sizes.size)
    r = np.ascontiguousarray(cell_rects, dtype=np.int64).reshape(-1, 4)
    indptr, cols, vals = _coverage(r, np.ascontiguousarray(labels, dtype=np.int64), sizes.astype(np.float64), m)
    return sp.csr_matrix((vals, cols, indptr), shape=(r.shape[0], m))


@njit(cache=True)
def _node_square_sums(indptr, indices, data, s, node_of, n_nodes):
    """Per node, sum over queries of (the query's s-weighted coverage of the node's buckets)^2: one pass over
    each row's sorted entries, which meet a node's (contiguous) buckets consecutively."""
    out = np.zeros(n_nodes)
    for r in range(indptr.size - 1):
        cur = -1
        acc = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            v = node_of[indices[k]]
            if v != cur:
                if cur >= 0:
                    out[cur] += acc * acc
                cur = v
                acc = 0.0
            acc += data[k] * s[indices[k]]
        if cur >= 0:
            out[cur] += acc * acc
    return out


def all_ranges_sample(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` rectangles of whole cells drawn uniformly from all ``(n(n+1)/2)^2`` ranges of an
    ``n x n`` grid: per axis two distinct fences of ``0 .. n``."""

    def axis():
        i = rng.integers(0, n + 1, count)
        j = rng.integers(0, n, count)
        j = j + (j >= i)
        return np.minimum(i, j), np.maximum(i, j)

    x0, x1 = axis()
    y0, y1 = axis()
    return np.column_stack([x0, y0, x1, y1])


# ------------------------------------------------------------------ GreedyH
def _positions(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    sizes = hi - lo
    return np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes) + np.repeat(lo, sizes)


def _square_sums(Q: sp.csr_matrix, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, ridge: float) -> np.ndarray:
    """Per node ``[lo, hi)``: ``|Q_I s_I|^2``, plus ``ridge |s_I|^2`` (every bucket as a point query)."""
    sizes = hi - lo
    cols = _positions(lo, hi)
    node_of = np.full(Q.shape[1], -1, dtype=np.int64)
    node_of[cols] = np.repeat(np.arange(lo.size), sizes)
    out = _node_square_sums(Q.indptr, Q.indices, Q.data, s, node_of, lo.size)
    if ridge:
        out += ridge * np.bincount(node_of[cols], weights=s[cols] ** 2, minlength=lo.size)
    return out


def greedy_weights(
    tree: Tree, Q: sp.csr_matrix, ridge: float = 0.0, decay: bool = True
) -> tuple[list[np.ndarray], float]:
    """GreedyH's children's share p per node (1 for leaves), level by level, and the expected workload
    error of the result, ``trace(Q^T Q M_root)`` (in units of the noise variance). ``ridge`` adds every
    bucket as a point query of that weight (``Q^T Q + ridge I``).

    ``decay``: the grid search at depth d (root 0) discounts the node's own query by ``delta = 2^(-d/2)``,
    as the authors' code does: it minimises ``E / p^2 - delta (1 - p)^2 ((a - a1) delta + a1) /
    (p^2 (p^2 + delta (1 - p)^2 T))``, with ``a1`` the children's own ``|Q_c s_c|^2`` (``a - a1`` is the
    part of the workload that crosses between the children). The search node by node is myopic: it
    pays for the node's interval as if no ancestor measured it. Without the discount, on 4,500 buckets
    of DPBench's BeijingTaxiE at 10^6 points, the chosen strategy's exact error is 2.1x the discounted
    one's (BENCHMARKS.md). The weights are exact either way, and so is the error passed up the tree."""
    m = tree.m
    Q = sp.csr_matrix(Q)
    Q.sort_indices()  # the per-node sums read each row's buckets in order
    col_sq = np.bincount(Q.indices, weights=Q.data**2, minlength=m) + ridge
    s = np.ones(m)
    e = [None] * len(tree.lo)
    t = [None] * len(tree.lo)
    shares = [None] * len(tree.lo)
    for d in range(len(tree.lo) - 1, -1, -1):
        lo, hi, left = tree.lo[d], tree.hi[d], tree.left[d]
        leaf = left < 0
        ed = np.where(leaf, col_sq[np.minimum(lo, m - 1)], 0.0)
        td = np.ones(lo.size)
        pd = np.ones(lo.size)
        inner = np.flatnonzero(~leaf)
        if inner.size:
            li = left[inner]
            E = e[d + 1][li] + e[d + 1][li + 1]
            T = t[d + 1][li] + t[d + 1][li + 1]
            a = _square_sums(Q, s, lo[inner], hi[inner], ridge)  # |Q_I s|^2 per inner node
            delta, cross = 1.0, a
            if decay:
                own = _square_sums(Q, s, tree.lo[d + 1], tree.hi[d + 1], ridge)
                a1 = own[li] + own[li + 1]
                delta = 2.0 ** (-d / 2.0)
                cross = (a - a1) * delta + a1
            p = P_GRID[None, :]
            one_p2 = (1.0 - p) ** 2
            D = 1.0 + one_p2 * T[:, None] / p**2
            D_search = 1.0 + delta * one_p2 * T[:, None] / p**2
            search = E[:, None] / p**2 - delta * one_p2 * cross[:, None] / (p**4 * D_search)
            k = np.argmin(search, axis=1)
            rows = np.arange(inner.size)
            best = P_GRID[k]
            Dk = D[rows, k]
            ed[inner] = E / best**2 - (1.0 - best) ** 2 * a / (best**4 * Dk)
            factor = 1.0 / (best**2 * Dk)
            td[inner] = T * factor
            s[_positions(lo[inner], hi[inner])] *= np.repeat(factor, hi[inner] - lo[inner])
            pd[inner] = best
        e[d], t[d], shares[d] = ed, td, pd
    return shares, float(e[0][0])


def node_weights(tree: Tree, shares: list[np.ndarray]) -> np.ndarray:
    """Every node's own query weight (levels concatenated): ``(1 - p_v) x`` the product of its ancestors'
    p, and for a leaf that product; the weights along every root-to-leaf path sum to 1 (L1 sensitivity 1)."""
    out = []
    scale = np.ones(1)
    for d in range(len(tree.lo)):
        p, left = shares[d], tree.left[d]
        out.append(np.where(left < 0, scale, scale * (1.0 - p)))
        inner = np.flatnonzero(left >= 0)
        if inner.size:
            nxt = np.empty(2 * inner.size)
            nxt[0::2] = nxt[1::2] = scale[inner] * p[inner]
            scale = nxt
    return np.concatenate(out)


def least_squares(tree: Tree, weights: np.ndarray, y: np.ndarray, var: float) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares bucket totals from the weighted node answers ``y`` (levels concatenated; nodes of
    weight 0 unmeasured) whose noise has variance ``var`` each, and the estimates' variances.

    Exact generalised least squares on a tree in two passes (Hay et al. 2010's constrained inference
    with unequal variances): upward, each node's estimate from its own subtree (its own answer
    ``y / w``, of variance ``var / w^2``, averaged by inverse variance with its children's sum); downward,
    the parent's final estimate's excess over the children's sum shared in proportion to their
    variances, and their variances updated the same way (the smoother of a linear Gaussian model)."""
    sizes = [lo.size for lo in tree.lo]
    offs = np.concatenate([[0], np.cumsum(sizes)])
    zb, vb = [None] * len(sizes), [None] * len(sizes)
    for d in range(len(sizes) - 1, -1, -1):
        w = weights[offs[d] : offs[d + 1]]
        yd = y[offs[d] : offs[d + 1]]
        left = tree.left[d]
        inner = left >= 0
        li = np.where(inner, left, 0)
        S = np.where(inner, zb[d + 1][li] + zb[d + 1][li + 1], 0.0) if d + 1 < len(sizes) else np.zeros(w.size)
        V = (
            np.where(inner, vb[d + 1][li] + vb[d + 1][li + 1], np.inf)
            if d + 1 < len(sizes)
            else np.full(w.size, np.inf)
        )
        measured = w > 0
        vo = np.where(measured, var / np.where(measured, w, 1.0) ** 2, np.inf)
        zo = np.where(measured, yd / np.where(measured, w, 1.0), 0.0)
        prec = np.where(measured, 1.0 / vo, 0.0) + np.where(np.isfinite(V), 1.0 / V, 0.0)
        vb[d] = 1.0 / prec
        zb[d] = vb[d] * (np.where(measured, zo / vo, 0.0) + np.where(np.isfinite(V), S / V, 0.0))
    F, P = zb[0], vb[0]
    leaves_f = np.empty(tree.m)
    leaves_p = np.empty(tree.m)
    for d in range(len(sizes)):
        left, lo = tree.left[d], tree.lo[d]
        leaf = left < 0
        leaves_f[lo[leaf]] = F[leaf]
        leaves_p[lo[leaf]] = P[leaf]
        inner = np.flatnonzero(~leaf)
        if not inner.size:
            break
        li = left[inner]
        vl, vr = vb[d + 1][li], vb[d + 1][li + 1]
        V = vl + vr
        excess = F[inner] - (zb[d + 1][li] + zb[d + 1][li + 1])
        gap = P[inner] - V
        nf = np.empty(2 * inner.size)
        nP = np.empty(2 * inner.size)
        nf[0::2] = zb[d + 1][li] + vl / V * excess
        nf[1::2] = zb[d + 1][li + 1] + vr / V * excess
        nP[0::2] = vl + (vl / V) ** 2 * gap
        nP[1::2] = vr + (vr / V) ** 2 * gap
        F, P = nf, nP
    return leaves_f, leaves_p


def node_totals(tree: Tree, bucket_totals: np.ndarray) -> np.ndarray:
    """Every node's true total (levels concatenated)."""
    cs = np.concatenate([[0.0], np.cumsum(bucket_totals)])
    lo, hi = tree.nodes()
    return cs[hi] - cs[lo]
