"""Secure-mode exact samplers on fair bits of the operating system's CSPRNG:
Bernoulli, uniform integers, binomial, and the acceptance step of lattice planar Laplace.
No floating-point rounding decides an outcome and nothing is seeded; the constructions
are described in :mod:`engine.core.noise`."""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import Cancelled, ParamError
from .samplers import check_positive

# ------------------------------------------- secure-mode exact samplers (OS entropy)
# Exact constructions on fair bits of the operating system's CSPRNG (see the module
# docstring): no floating-point rounding decides an outcome and nothing is seeded.

SECURE_WORDS = 1 << 22  # 64-bit words of OS entropy per draw (32 MB), between cancel checks
PLANAR_LATTICE_FRACTION = 1000  # the planar lattice step is at most 1/(1000 eps)


def _os_words(n: int) -> np.ndarray:
    """``n`` uniform 64-bit words from the operating system's CSPRNG."""
    return np.frombuffer(bytearray(os.urandom(8 * int(n))), dtype=np.uint64)


def fresh_generator() -> np.random.Generator:
    """A numpy generator seeded with 128 bits of OS entropy (never recorded): for draws that
    do not enter a guarantee (noise independent of the data, added after an exact DP step)."""
    return np.random.default_rng(int.from_bytes(os.urandom(16), "little"))


def _binary_digits(p: float) -> np.ndarray:
    """The binary digits ``d_1, d_2, ...`` of ``p`` in [0, 1] as a bool array (``d_i`` at
    index ``i - 1``; ``p = sum_i d_i 2^-i`` exactly, at most 1074 digits; 1.0 = 0.111...
    truncated at 1100 digits, whose tail has probability 2^-1100 of being reached)."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ParamError(f"a probability must lie in [0, 1] (got {p})")
    if p == 1.0:
        return np.ones(1100, dtype=bool)
    num, den = p.as_integer_ratio()  # den = 2^k
    k = den.bit_length() - 1
    return np.array([(num >> (k - i)) & 1 for i in range(1, k + 1)], dtype=bool)


def _first_one(n: int) -> np.ndarray:
    """Position ``i >= 1`` of the first 1 in a fresh stream of fair bits, ``P(i) = 2^-i``."""
    out = np.zeros(int(n), dtype=np.int64)
    todo = np.arange(int(n))
    offset = 0
    while todo.size:
        w = _os_words(todo.size) >> np.uint64(11)  # 53 fair bits, exact as a float64
        _, e = np.frexp(w.astype(np.float64))  # e = bit length (0 for w = 0)
        hit = w > 0
        out[todo[hit]] = offset + 54 - e[hit]
        todo = todo[~hit]
        offset += 53
    return out


def secure_bernoulli(p, size=None) -> np.ndarray:
    """Exact Bernoulli(``p``) draws (bool) from OS entropy: the first-1 position ``i`` of
    fair bits picks the i-th binary digit of ``p``. ``p`` a float in [0, 1], or an array of
    them (one per draw; then ``size`` is its shape)."""
    pa = np.asarray(p, dtype=np.float64)
    if pa.ndim == 0:
        d = _binary_digits(float(pa))
        n = int(np.prod(size)) if size is not None else 1
        lv = _first_one(n)
        out = np.zeros(n, dtype=bool)
        ok = lv <= d.size
        out[ok] = d[lv[ok] - 1]
        return out.reshape(size) if size is not None else out[0]
    if not (np.all(pa >= 0) and np.all(pa <= 1)):
        raise ParamError("probabilities must lie in [0, 1]")
    flat = pa.ravel()
    lv = _first_one(flat.size)
    # digit i of p is floor(p 2^i) mod 2, exact in float64 while 2^i p stays finite (i <= 1000)
    near = lv <= 1000
    out = np.zeros(flat.size, dtype=bool)
    out[near] = np.mod(np.floor(np.ldexp(flat[near], lv[near])), 2.0) == 1.0
    out[flat == 1.0] = True  # 1 = 0.111... in binary
    for j in np.flatnonzero(~near):  # probability below 2^-1000 per draw
        d = _binary_digits(float(flat[j]))
        out[j] = bool(lv[j] <= d.size and d[lv[j] - 1])
    return out.reshape(pa.shape)


def secure_uniform_below(k: int, size) -> np.ndarray:
    """Uniform integers in ``0..k-1`` (int64) from OS entropy, exact: 64-bit words above the
    largest multiple of ``k`` are drawn again."""
    k = int(k)
    if k < 1:
        raise ParamError("the range of a uniform integer must hold at least one value")
    n = int(np.prod(size))
    top = np.uint64(2**64 - 1 - (2**64 % k))  # accept w <= top: exactly (2^64 // k) k words
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        w = _os_words(todo.size)
        ok = w <= top
        out[todo[ok]] = (w[ok] % np.uint64(k)).astype(np.int64)
        todo = todo[~ok]
    return out.reshape(size)


def _binomial_half(m: np.ndarray, cancel_cb=None) -> np.ndarray:
    """Binomial(m_j, 1/2) for each entry: the popcount of m_j fresh fair bits."""
    m = np.asarray(m, dtype=np.int64)
    out = np.zeros(m.size, dtype=np.int64)
    words = (m + 63) // 64
    start = 0
    while start < m.size:  # chunks of at most SECURE_WORDS words (one cell may exceed it alone)
        if cancel_cb is not None and cancel_cb():
            raise Cancelled("the run was cancelled")
        stop = start + max(1, int(np.searchsorted(np.cumsum(words[start:]), SECURE_WORDS, side="right")))
        wc = words[start:stop]
        w = _os_words(int(wc.sum()))
        ends = np.cumsum(wc)
        rem = m[start:stop] % 64
        last = (ends - 1)[(wc > 0) & (rem > 0)]  # a partial last word keeps its low m mod 64 bits
        w[last] &= (np.uint64(1) << rem[(wc > 0) & (rem > 0)].astype(np.uint64)) - np.uint64(1)
        cs = np.concatenate([[0], np.cumsum(np.bitwise_count(w), dtype=np.int64)])
        out[start:stop] = cs[ends] - cs[ends - wc]
        start = stop
    return out


def secure_binomial(m, p: float, cancel_cb=None) -> np.ndarray:
    """Exact Binomial(``m``, ``p``) per entry of ``m`` (int64) from OS entropy: the trials'
    first-1 positions are split level by level (``N_i ~ Binomial(remaining, 1/2)``) and the
    successes are the trials at the levels where ``p`` has a 1 digit (package docstring)."""
    m = np.asarray(m, dtype=np.int64)
    if m.size and m.min() < 0:
        raise ParamError("binomial trial counts must be non-negative")
    digits = _binary_digits(p)
    rem = m.ravel().copy()
    succ = np.zeros(rem.size, dtype=np.int64)
    for d in digits:
        if not rem.any():
            break
        n_i = _binomial_half(rem, cancel_cb)
        if d:
            succ += n_i
        rem -= n_i
    return succ.reshape(m.shape)


def planar_lattice_step(eps: float) -> float:
    """The lattice step ``u`` of secure planar Laplace: the largest power of two at most
    ``1 / (1000 eps)`` (metres when eps is per metre)."""
    eps = check_positive("planar Laplace epsilon", eps)
    return 2.0 ** math.floor(math.log2(1.0 / (PLANAR_LATTICE_FRACTION * eps)))


def accept_planar(k1: np.ndarray, k2: np.ndarray, b: float, s: float) -> np.ndarray:
    """Exact Bernoulli(exp(-g)) per lattice vector, ``g = b |k|_2 - |k|_1 / s >= 0``.

    A 53-bit uniform U (the real uniform lies in [U, U + 2^-53)) is compared with the float
    value of exp(-g) and a bound on its error; the rare undecided draws (about 1e-13) are
    decided with exact decimal arithmetic and more fair bits."""
    a1 = np.abs(k1).astype(np.float64)
    a2 = np.abs(k2).astype(np.float64)
    l2, l1 = np.hypot(a1, a2), a1 + a2
    acc = np.exp(-(b * l2 - l1 / s))
    err = 8 * 2.0**-52 * (b * l2 + l1 / s) + 2.0**-48  # float errors of g, exp and the comparisons
    u = (_os_words(acc.size) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    yes = u + 2.0**-53 <= acc - err
    no = u >= acc + err
    for j in np.flatnonzero(~(yes | no)):
        yes[j] = _accept_planar_exact(int(abs(k1[j])), int(abs(k2[j])), b, s, int(u[j] * 2.0**53))
    return yes


def _accept_planar_exact(a1: int, a2: int, b: float, s: float, head: int) -> bool:
    """Decide U < exp(-(b sqrt(a1^2 + a2^2) - (a1 + a2)/s)) exactly: U's first 53 bits are
    ``head``; more fair bits and more decimal digits until the comparison is certain."""
    from decimal import Decimal, localcontext

    bits, num = 53, head
    digits = 40
    while True:
        extra = 128
        num = (num << extra) | int.from_bytes(os.urandom(extra // 8), "big")
        bits += extra
        digits += 40
        with localcontext() as c:
            c.prec = digits
            g = Decimal(b) * Decimal(a1 * a1 + a2 * a2).sqrt() - Decimal(a1 + a2) / Decimal(s)
            a = (-g).exp()
            tol = Decimal(10) ** (8 - digits)  # a few units in the last digit of each operation
            lo = Decimal(num) / Decimal(2**bits)
            hi = Decimal(num + 1) / Decimal(2**bits)
            if hi <= a - tol:
                return True
            if lo >= a + tol:
                return False
