"""The noise of one run, :class:`NoiseSource`: the seeded numpy stream, or secure mode
(OpenDP's measurements and the exact samplers of :mod:`.secure`). See :mod:`engine.core.noise`."""

from __future__ import annotations

import math

import numpy as np

from ..errors import Cancelled, ParamError
from .polya import ShardNoise, polya_difference_sum
from .samplers import (
    check_positive,
    discrete_laplace,
    gaussian,
    laplace,
    noisy_quantile,
    planar_laplace,
    polya,
    randomized_response,
    randomized_response_kary,
    rr_keep_probability,
    unary_encoding_counts,
    unary_encoding_pq,
)
from .secure import (
    accept_planar,
    fresh_generator,
    planar_lattice_step,
    secure_bernoulli,
    secure_binomial,
    secure_uniform_below,
)

# ------------------------------------------------------------------ NoiseSource


SECURE_BATCH = 8192  # values per OpenDP call in secure mode (see NoiseSource._secure_add)


class NoiseSource:
    """The noise of one run: the seeded numpy stream, or OpenDP in secure mode.

    ``secure=False``: every draw comes from ``rng`` (deterministic given the
    seed). ``secure=True``: every sampler is floating-point safe and unseeded:
    discrete Laplace, Laplace, Gaussian and binary randomized response come from
    OpenDP (exact integer / lattice samplers fed by the OS entropy source; NOT
    seeded, NOT reproducible), k-ary randomized response, unary encoding,
    Bernoulli, planar Laplace and Pólya shares from the exact constructions of
    the package docstring; ``rng`` is never used for noise. Privacy-critical code
    noises data with :meth:`add_laplace`, :meth:`add_gaussian`,
    :meth:`add_discrete_laplace` and :meth:`add_planar_laplace`, which in secure
    mode pass the data itself through the exact sampler. See the package docstring.
    """

    _KINDS = {"laplace": "lap", "gaussian": "gauss", "discrete_laplace": "dlap"}

    def __init__(self, rng: np.random.Generator, secure: bool = False, cancel_cb=None):
        self.rng = rng
        self.secure = bool(secure)
        self.cancel_cb = cancel_cb  # () -> bool; checked between OpenDP batches (secure mode)
        self._meas: dict = {}

    @property
    def description(self) -> str:
        """Where the privacy noise comes from (for diagnostics)."""
        if self.secure:
            return "OpenDP and exact samplers on the OS entropy source (secure mode; not seeded)"
        return "seeded numpy Generator"

    # ---- OpenDP plumbing
    def _opendp(self, kind: str, scale: float):
        key = (kind, float(scale))
        m = self._meas.get(key)
        if m is None:
            import opendp.prelude as dp

            dp.enable_features("contrib")
            # default k: the finest lattice (2^-1074 for float64), on which every finite float lies, so
            # OpenDP's rounding of the input is exact and its privacy map is exactly d_in / scale
            if kind == "dlap":
                space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
                m = dp.m.make_laplace(*space, scale=float(scale))
            elif kind == "lap":
                space = dp.vector_domain(dp.atom_domain(T="f64", nan=False)), dp.l1_distance(T="f64")
                m = dp.m.make_laplace(*space, scale=float(scale))
            elif kind == "gauss":
                space = dp.vector_domain(dp.atom_domain(T="f64", nan=False)), dp.l2_distance(T="f64")
                m = dp.m.make_gaussian(*space, scale=float(scale))
            else:  # pragma: no cover
                raise ValueError(kind)
            self._meas[key] = m
        return m

    def opendp_measurement(self, kind: str, scale: float):
        """The OpenDP measurement secure mode uses for ``kind`` (``laplace``,
        ``gaussian``, ``discrete_laplace``) at ``scale``: a vector measurement whose
        ``map(d_in)`` gives the privacy loss (epsilon; rho for the Gaussian)."""
        if kind not in self._KINDS:
            raise ParamError(f"no OpenDP measurement for {kind!r}; expected one of {', '.join(self._KINDS)}")
        return self._opendp(self._KINDS[kind], check_positive(f"{kind} scale", scale))

    def _secure_add(self, kind: str, scale: float, xa: np.ndarray, dtype):
        """``xa`` passed through OpenDP's vector measurement (same shape; a scalar for 0-d).

        The vector goes through in batches of ``SECURE_BATCH`` values (about 0.1-0.5 s of
        OpenDP each), with ``cancel_cb`` checked before each: a cancelled run stops within a
        batch. Same law and guarantee as one call: the measurement adds independent noise
        per coordinate, and the batches' privacy losses add up to the whole vector's
        (``sum_b d_b / scale = d / scale`` for L1 and Laplace; ``sum_b d_b^2 / (2 sigma^2) =
        d^2 / (2 sigma^2)`` zCDP for L2 and the Gaussian)."""
        if xa.size == 0:
            return xa.astype(dtype, copy=True)
        flat = xa.ravel()
        meas = self._opendp(kind, scale)
        out = np.empty(flat.size, dtype=dtype)
        for i in range(0, flat.size, SECURE_BATCH):
            if self.cancel_cb is not None and self.cancel_cb():
                raise Cancelled("the run was cancelled")
            part = flat[i : i + SECURE_BATCH]
            out[i : i + part.size] = meas(part if dtype == np.int64 else part.tolist())
        return out.reshape(xa.shape) if xa.ndim else out[0]

    @staticmethod
    def _float_data(x) -> np.ndarray:
        xa = np.asarray(x, dtype=np.float64)
        if not np.isfinite(xa).all():
            raise ParamError("the values to noise must be finite numbers (got NaN or infinity)")
        return xa

    @staticmethod
    def _int_data(x) -> np.ndarray:
        xa = np.asarray(x)
        if xa.dtype.kind in "iub":
            return xa.astype(np.int64)
        xf = np.asarray(xa, dtype=np.float64)
        if not (np.isfinite(xf).all() and np.array_equal(xf, np.round(xf))) or (np.abs(xf) >= 2.0**63).any():
            raise ParamError("discrete Laplace noise needs integer data (int64)")
        return xf.astype(np.int64)

    @staticmethod
    def _size(xa: np.ndarray):
        return xa.shape if xa.ndim else None

    # ---- data + noise (the privacy-critical forms)
    def add_laplace(self, x, scale: float):
        """``x + Laplace(0, scale)`` per element, float64 (a scalar for a scalar ``x``):
        the Laplace mechanism, ``scale = Δ1/ε`` for a query of L1 sensitivity Δ1.

        Secure mode: ``x`` itself goes through OpenDP's ``make_laplace`` on a float64
        vector domain with ``l1_distance`` (the released values are OpenDP's output).
        Otherwise exactly ``x + rng.laplace(0, scale, x.shape)`` (the numbers of the
        seeded stream, bit for bit). ``x`` must be finite."""
        scale = check_positive("Laplace scale", scale)
        xa = self._float_data(x)
        if self.secure:
            return self._secure_add("lap", scale, xa, np.float64)
        return xa + self.rng.laplace(0.0, scale, self._size(xa))

    def add_gaussian(self, x, sigma: float):
        """``x + N(0, sigma^2)`` per element, float64. Secure mode: ``x`` goes through
        OpenDP's ``make_gaussian`` (float64 vector domain, ``l2_distance``; its map is
        zCDP rho = Δ2^2/(2 sigma^2)). Otherwise exactly ``x + rng.normal(0, sigma, x.shape)``."""
        sigma = check_positive("Gaussian sigma", sigma)
        xa = self._float_data(x)
        if self.secure:
            return self._secure_add("gauss", sigma, xa, np.float64)
        return xa + self.rng.normal(0.0, sigma, self._size(xa))

    def add_discrete_laplace(self, x_int, scale: float):
        """``x + DiscreteLaplace(scale)`` per element on integer data, int64. Secure mode:
        ``x`` goes through OpenDP's ``make_laplace`` on an int64 vector domain with
        ``l1_distance`` (saturating at the int64 range). Otherwise exactly
        ``x + discrete_laplace(rng, scale, x.shape)``."""
        t = check_positive("discrete Laplace scale", scale)
        xa = self._int_data(x_int)
        if self.secure:
            return self._secure_add("dlap", t, xa, np.int64)
        return xa + discrete_laplace(self.rng, t, self._size(xa))

    def quantile(self, values, candidates, alpha: float, scale: float) -> float:
        """One of the public sorted ``candidates`` as the ``alpha``-quantile of ``values`` (the exponential
        mechanism, :func:`noisy_quantile`; ε from :func:`quantile_epsilon`). Secure mode: the values go through
        OpenDP's ``make_private_quantile`` (float64 values, symmetric distance, ``max_divergence``), which draws
        the same law exactly. ``values`` must be finite."""
        scale = check_positive("quantile scale", scale)
        xa = self._float_data(values).ravel()
        if not self.secure:
            return noisy_quantile(self.rng, xa, candidates, alpha, scale)
        import opendp.prelude as dp

        dp.enable_features("contrib")
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
        cands = [float(c) for c in candidates]
        return float(dp.m.make_private_quantile(*space, dp.max_divergence(), cands, float(alpha), scale)(xa.tolist()))

    # ---- bare noise (to add to data, prefer the add_* forms above)
    def _secure_draw(self, kind: str, scale: float, size, dtype):
        zeros = np.zeros(() if size is None else size, dtype=dtype)
        return self._secure_add(kind, scale, zeros, dtype)

    def laplace(self, scale: float, size=None) -> np.ndarray:
        """Laplace(0, scale) noise alone (see the package docstring: adding it to real data
        outside OpenDP is not covered by OpenDP's proof; use :meth:`add_laplace`)."""
        if self.secure:
            return self._secure_draw("lap", check_positive("Laplace scale", scale), size, np.float64)
        return laplace(self.rng, scale, size)

    def discrete_laplace(self, t: float, size=None) -> np.ndarray:
        """Discrete Laplace with scale ``t`` (``r = exp(-1/t)``), int64."""
        if self.secure:
            return self._secure_draw("dlap", check_positive("discrete Laplace scale", t), size, np.int64)
        return discrete_laplace(self.rng, t, size)

    def gaussian(self, sigma: float, size=None) -> np.ndarray:
        """N(0, sigma^2) noise alone (prefer :meth:`add_gaussian` for data)."""
        if self.secure:
            return self._secure_draw("gauss", check_positive("Gaussian sigma", sigma), size, np.float64)
        return gaussian(self.rng, sigma, size)

    def polya(self, alpha, r: float, size=None, *, one_minus_r: float | None = None) -> np.ndarray | np.int64:
        """Pólya draws from the seeded stream; secure mode has no float-safe Pólya sampler for
        a general shape (see :meth:`polya_difference_sum` for the secure shares)."""
        if self.secure:
            raise ParamError("secure mode has no floating-point-safe Pólya sampler for a general shape")
        return polya(self.rng, alpha, r, size, one_minus_r=one_minus_r)

    def polya_difference_sum(self, n_clients: int, size: int, t: float, shard_size: int, **kw) -> ShardNoise:
        """:func:`polya_difference_sum`. Secure mode: the discrete-Laplace part of every shard is
        OpenDP's and the extra Pólya part (independent of the data) comes from fresh OS entropy,
        never from ``rng``; a shard with fewer survivors than planned (Pólya shape below 1) is
        refused, as there is no float-safe sampler for it (callers withhold such shards); the
        per-client form (numpy shares) is refused."""
        if not self.secure:
            return polya_difference_sum(self.rng, n_clients, size, t, shard_size, **kw)
        if kw.get("per_client"):
            raise ParamError("secure mode cannot draw every client's Pólya share (no float-safe sampler)")
        kw["dl_sampler"] = lambda tt, n: self.discrete_laplace(tt, n)
        sn = polya_difference_sum(fresh_generator(), n_clients, size, t, shard_size, **kw)
        if ((sn.alpha < 1) & (sn.survivors > 0)).any():
            raise ParamError(
                "a secure-aggregation shard kept fewer clients than its DP shard size: its Pólya noise (shape below "
                "1) has no floating-point-safe sampler; withhold such shards in secure mode"
            )
        return sn

    def planar_laplace(self, eps: float, size: int | None = None) -> np.ndarray:
        """Planar Laplace displacements. Secure mode: the lattice law of the package docstring
        (multiples of :func:`planar_lattice_step`), to be added to a lattice point: use
        :meth:`add_planar_laplace` for locations."""
        if not self.secure:
            return planar_laplace(self.rng, eps, size)
        eps = check_positive("planar Laplace epsilon", eps)
        n = 1 if size is None else int(size)
        u = planar_lattice_step(eps)
        out = self._planar_lattice(eps * u, n).astype(np.float64) * u
        return out[0] if size is None else out

    def add_planar_laplace(self, xy, eps: float) -> np.ndarray:
        """Locations ``xy`` (n, 2) moved by planar Laplace noise of ``eps`` per unit of
        distance. Without secure mode exactly ``xy + planar_laplace(rng, eps, n)`` (the seeded
        stream, so a seeded run repeats draw for draw). Secure mode: each location snapped to the lattice ``u Z^2``
        (:func:`planar_lattice_step`) and moved by ``u k``, ``P(k) ∝ exp(-eps u |k|_2)``: exact
        lattice points (package docstring, with the guarantee)."""
        eps = check_positive("planar Laplace epsilon", eps)
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        if not np.isfinite(xy).all():
            raise ParamError("the locations to noise must be finite numbers")
        if not self.secure:
            return xy + planar_laplace(self.rng, eps, len(xy))
        u = planar_lattice_step(eps)
        return (np.rint(xy / u) + self._planar_lattice(eps * u, len(xy))) * u

    def _planar_lattice(self, b: float, n: int) -> np.ndarray:
        """``n`` integer vectors with ``P(k) ∝ exp(-b |k|_2)``: pairs of discrete Laplaces of
        scale ``s >= sqrt 2 / b`` (OpenDP) accepted with probability ``exp(-(b |k|_2 - |k|_1/s))``."""
        s = math.sqrt(2.0) / b * (1 + 2.0**-40)  # 1/s < b/sqrt 2, so the acceptance is at most 1
        out = np.zeros((n, 2), dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            m = todo.size + todo.size // 3 + 8  # the acceptance rate is about pi/4
            k = np.asarray(self.discrete_laplace(s, (m, 2)), dtype=np.int64)
            k = k[accept_planar(k[:, 0], k[:, 1], b, s)][: todo.size]
            out[todo[: len(k)]] = k
            todo = todo[len(k) :]
        return out

    def bernoulli(self, p, size=None) -> np.ndarray:
        """Bernoulli(``p``) draws (bool); ``p`` a float or an array (one per draw). Secure mode:
        exact on OS entropy (:func:`secure_bernoulli`); otherwise ``rng.random(shape) < p``."""
        if self.secure:
            return secure_bernoulli(p, size)
        pa = np.asarray(p, dtype=np.float64)
        return self.rng.random(size if pa.ndim == 0 else pa.shape) < pa

    def randomized_response(self, bits, eps: float) -> np.ndarray:
        """Binary randomized response (secure mode: OpenDP's bit-vector RR, whose
        flip probability f = 2/(1+e^eps) gives keep probability e^eps/(1+e^eps))."""
        if not self.secure:
            return randomized_response(self.rng, bits, eps)
        b = np.asarray(bits).astype(bool)
        if b.size == 0:
            return b.copy()
        import opendp.prelude as dp

        dp.enable_features("contrib")
        f = 2.0 / (1.0 + math.exp(check_positive("randomized response epsilon", eps)))  # 2 (1 - p), no cancellation
        key = ("rr", f)
        m = self._meas.get(key)
        if m is None:
            # max_weight only enters OpenDP's privacy map, which we do not use here
            m = dp.m.make_randomized_response_bitvec(dp.bitvector_domain(max_weight=1), dp.discrete_distance(), f=f)
            self._meas[key] = m
        packed = np.packbits(b.ravel())
        out = np.empty_like(packed)
        step = SECURE_BATCH * 16  # bytes: about 0.05 s of OpenDP, then the cancel check
        for i in range(0, packed.size, step):  # each bit is flipped independently: batches are one call's law
            if self.cancel_cb is not None and self.cancel_cb():
                raise Cancelled("the run was cancelled")
            out[i : i + step] = np.frombuffer(m(packed[i : i + step].tobytes()), dtype=np.uint8)
        return np.unpackbits(out)[: b.size].astype(bool).reshape(b.shape)

    def randomized_response_kary(self, values, k: int, eps: float) -> np.ndarray:
        """k-ary randomized response (:func:`randomized_response_kary`). Secure mode: keep with
        an exact Bernoulli of the float ``e^eps/(e^eps+k-1)``, else an exactly uniform other
        value, on OS entropy (the float rounding of the keep probability moves epsilon by a
        relative 1e-16 at most)."""
        if not self.secure:
            return randomized_response_kary(self.rng, values, k, eps)
        v = np.asarray(values, dtype=np.int64)
        if v.size and (v.min() < 0 or v.max() >= k):
            raise ParamError(f"k-ary randomized response needs values in 0..{k - 1}")
        keep = secure_bernoulli(rr_keep_probability(eps, k), v.shape)
        other = secure_uniform_below(k - 1, v.shape)
        return np.where(keep, v, other + (other >= v))

    def unary_encoding_counts(self, counts, n: int, eps: float, optimized: bool = True) -> np.ndarray:
        """Report sums of unary encoding (:func:`unary_encoding_counts`). Secure mode: the two
        binomials drawn exactly on OS entropy (:func:`secure_binomial`, about 2 fair bits per
        user and category)."""
        if not self.secure:
            return unary_encoding_counts(self.rng, counts, n, eps, optimized)
        c = np.asarray(counts, dtype=np.int64)
        if c.size and (c.min() < 0 or c.max() > n):
            raise ParamError("unary encoding counts must lie in 0..n")
        p, q = unary_encoding_pq(eps, optimized)
        return secure_binomial(c, p, self.cancel_cb) + secure_binomial(int(n) - c, q, self.cancel_cb)

    def report_counts(self, counts, n: int, p: float, q: float) -> np.ndarray:
        """How many of ``n`` users' independent local reports support each category, ``counts[v]`` of
        them holding it: ``Binomial(counts[v], p) + Binomial(n - counts[v], q)`` (a holder supports its
        category with probability ``p``, anyone else with ``q``). The aggregate of unary encoding and of
        local hashing with an ideal hash family (engine.mechanisms.hdg.oracle). Secure mode: both
        binomials exact on OS entropy (:func:`secure_binomial`)."""
        c = np.asarray(counts, dtype=np.int64)
        if c.size and (c.min() < 0 or c.max() > n):
            raise ParamError("report counts must lie in 0..n")
        if not (0.0 <= q < p <= 1.0):
            raise ParamError(f"report probabilities must satisfy 0 <= q < p <= 1 (got p = {p}, q = {q})")
        if not self.secure:
            return self.rng.binomial(c, p) + self.rng.binomial(int(n) - c, q)
        return secure_binomial(c, p, self.cancel_cb) + secure_binomial(int(n) - c, q, self.cancel_cb)
