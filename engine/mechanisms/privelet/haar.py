"""The Haar wavelet transform of Privelet (Xiao, Wang, Gehrke, ICDE 2010, Section IV), one axis at a time.

For an ordinal axis of m = 2^l entries the decomposition tree is the complete binary tree over them. The
coefficients are the *base* coefficient c0, the mean of all entries, and one coefficient per internal node N,
c_N = (a_L - a_R) / 2, a_L and a_R the means of the entries under N's left and right child. Layout along the
axis: index 0 holds c0, index 1 the root's coefficient, indices 2^(k-1) .. 2^k - 1 the nodes of depth k - 1
left to right (the finest, pairs of entries, last). An entry is rebuilt as c0 + sum over its ancestors N of
+c_N (entry under N's left child) or -c_N (right child).

Privelet's weight function W_Haar gives c0 the weight m and c_N the number of entries under N; with it the
transform's *generalized sensitivity* (the largest sum over coefficients of W(c) |change of c| when one entry
changes by 1) is 1 + l: c0 moves by 1/m and each of the l ancestors' coefficients by 1/(2 * half its
entries) = 1/(its entries). A multi-dimensional histogram is transformed axis after axis; the weight of a
coefficient is the product of its axes' weights and the generalized sensitivity the product of theirs.
"""

from __future__ import annotations

import numpy as np


def _levels(m: int) -> int:
    l = int(m).bit_length() - 1
    if m < 1 or (1 << l) != m:
        raise ValueError(f"the Haar transform needs a power-of-two length (got {m})")
    return l


def forward(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The Haar coefficients of ``x`` along ``axis`` (layout in the module docstring)."""
    a = np.moveaxis(np.asarray(x, dtype=np.float64), axis, 0)
    _levels(a.shape[0])
    out = np.empty_like(a)
    while a.shape[0] > 1:
        half = a.shape[0] // 2
        left, right = a[0::2], a[1::2]
        out[half : 2 * half] = (left - right) / 2.0
        a = (left + right) / 2.0
    out[0] = a[0]
    return np.moveaxis(out, 0, axis)


def inverse(c: np.ndarray, axis: int = -1) -> np.ndarray:
    """The entries whose Haar coefficients along ``axis`` are ``c`` (the inverse of :func:`forward`)."""
    c = np.moveaxis(np.asarray(c, dtype=np.float64), axis, 0)
    m = c.shape[0]
    _levels(m)
    a = c[:1]
    size = 1
    while size < m:
        d = c[size : 2 * size]
        nxt = np.empty((2 * size,) + c.shape[1:])
        nxt[0::2], nxt[1::2] = a + d, a - d
        a, size = nxt, 2 * size
    return np.moveaxis(a, 0, axis)


def weights(m: int) -> np.ndarray:
    """W_Haar along one axis of m = 2^l entries: m for c0, the entries under N for c_N."""
    _levels(m)
    i = np.arange(m)
    depth = np.zeros(m, dtype=np.int64)
    depth[1:] = np.floor(np.log2(i[1:])).astype(np.int64)
    return (m >> depth).astype(np.float64)


def sensitivity(m: int) -> float:
    """The generalized sensitivity of the one-axis transform with respect to W_Haar: 1 + log2 m."""
    return 1.0 + _levels(m)


def forward2d(x: np.ndarray) -> np.ndarray:
    """The 2-D (standard decomposition) Haar coefficients of a square grid ``x[iy, ix]``: rows, then columns."""
    return forward(forward(x, axis=1), axis=0)


def inverse2d(c: np.ndarray) -> np.ndarray:
    return inverse(inverse(c, axis=0), axis=1)


def weights2d(m: int) -> np.ndarray:
    """Coefficient (i, j)'s weight: the product of the axes' weights."""
    w = weights(m)
    return np.outer(w, w)


def sensitivity2d(m: int) -> float:
    """The 2-D transform's generalized sensitivity: (1 + log2 m)^2."""
    return sensitivity(m) ** 2


def entry_variance_factor(m: int) -> float:
    """sum over coefficients of (the entry's coefficient in the inverse / W)^2 along one axis, the same for every
    entry: 1/m^2 for c0 plus 1/(2^-k m)^2 for the ancestor of depth k, k = 0 .. l - 1, i.e. (m^2 + 2) / (3 m^2).
    With Laplace(lambda / W) on every coefficient of a 2-D grid, each cell's variance is
    2 lambda^2 times the product of the two axes' factors."""
    _levels(m)
    return (m * m + 2.0) / (3.0 * m * m)
