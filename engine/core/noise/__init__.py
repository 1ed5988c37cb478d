"""Noise samplers. Every sampler takes a seeded ``numpy.random.Generator``;
:class:`NoiseSource` bundles them for a run and adds a *secure mode* that draws
the privacy-critical integer and real-valued noise with OpenDP.

Parameterisations (used throughout the engine):

* ``laplace(rng, scale)``: density ``exp(-|x|/scale) / (2 scale)``; ``scale = Δ/ε``.
* ``discrete_laplace(rng, t)``: the two-sided geometric law on the integers,
  ``P(k) = (1-r)/(1+r) r^|k|`` with ``r = exp(-1/t)``. The engine passes the
  *scale* ``t`` (as OpenDP does); for an integer query of L1 sensitivity Δ,
  ``t = Δ/ε`` gives ε-DP. ``dl_r(t)`` and ``dl_scale(r)`` convert. Variance
  ``2r/(1-r)^2``.
* ``polya(rng, alpha, r)``: Pólya (negative binomial) law
  ``P(k) = Γ(k+α)/(k! Γ(α)) (1-r)^α r^k``, i.e. Poisson(Gamma(shape α, scale
  r/(1-r))); numpy's ``negative_binomial(α, 1-r)`` is the same law (and draws
  it exactly that way, in float64). Mean ``αr/(1-r)``, variance ``αr/(1-r)^2``.
  ``Polya(1, r) - Polya(1, r)`` is discrete Laplace(r) and the law is
  infinitely divisible: a sum of m i.i.d. ``Polya(1/N, r)`` is ``Polya(m/N, r)``.
* ``planar_laplace(rng, eps)``: geo-indistinguishability noise (Andrés et al.,
  CCS 2013), density ``eps^2/(2π) exp(-eps |z|)`` in the plane; ``eps`` is per
  metre; expected displacement ``2/eps``.

Secure mode (``NoiseSource(rng, secure=True)``): discrete Laplace, Laplace and
Gaussian noise come from OpenDP's measurements (``make_laplace`` on an ``i64``
vector domain with ``l1_distance``, which samples the discrete Laplace exactly;
``make_laplace`` on an ``f64`` vector domain with ``l1_distance`` and
``make_gaussian`` with ``l2_distance``, which OpenDP samples exactly on the
lattice of multiples of 2^k, free of the floating-point attacks on textbook
samplers), and binary randomized response from
``make_randomized_response_bitvec``. Secure mode is NOT seeded: OpenDP draws
from the operating system's CSPRNG, so runs are not reproducible. OpenDP is
slower (about 10 µs per integer, 25-60 µs per real value: 1.6 s for a 256x256
grid with Laplace).

The samplers OpenDP lacks are built, in secure mode, from exact constructions on
fair bits of the operating system's CSPRNG (``os.urandom``) and OpenDP's discrete
Laplace; no float rounding decides an outcome, and nothing comes from the seeded
stream:

* Bernoulli(p) for a float ``p`` (:func:`secure_bernoulli`): with ``i`` the position
  of the first 1 in a stream of fair bits (``P(i) = 2^-i``), output the i-th binary
  digit of ``p``; ``P(1) = sum_i 2^-i d_i(p) = p`` exactly.
* Uniform integers below ``k`` (:func:`secure_uniform_below`): 64-bit words, rejecting
  the top ``2^64 mod k`` values, so every residue is equally likely.
* Binomial(m, p) (:func:`secure_binomial`): the m trials' first-1 positions are split
  level by level, ``N_i ~ Binomial(remaining, 1/2)`` (a popcount of fresh bits), and the
  successes are the ``N_i`` of the levels where ``p`` has a 1 digit: the same law as m
  Bernoulli(p) trials, about 2 fair bits per trial.
* k-ary randomized response: keep with Bernoulli(p), else a uniform other value.
  Unary encoding: the two binomials of :func:`unary_encoding_counts`, exact.
* Planar Laplace (:meth:`NoiseSource.add_planar_laplace`): a departure from the
  continuous law of Andrés et al., which has no exact sampler in floating point. The
  location is snapped to the lattice ``u Z^2`` (``u`` a power of two, at most
  ``1/(1000 eps)`` metres, :func:`planar_lattice_step`) and moved by ``u k`` with ``k`` in
  ``Z^2`` drawn with ``P(k) ∝ exp(-eps u |k|_2)`` (the planar Laplace law restricted to
  the lattice), by rejection from two independent discrete Laplaces (OpenDP, rate
  ``eps u / sqrt 2`` each, since ``|k|_1 <= sqrt 2 |k|_2``) accepted with probability
  ``exp(-(eps u |k|_2 - |k|_1 / s))``, decided exactly (float bounds, exact decimal
  arithmetic when they do not decide). Outputs ``u (snap(x)/u + k)`` are exact floats.
  Guarantee: for snapped inputs the output laws at ``x``, ``x'`` differ by at most
  ``e^(eps |x - x'|)`` (triangle inequality on the lattice); snapping moves each input by
  at most ``u / sqrt 2``, so for the true locations ``e^(eps (d + sqrt 2 u))``, ``sqrt 2
  eps u <= 0.0015``.
* Pólya shares (:meth:`NoiseSource.polya_difference_sum`): a shard with at least its
  planned N survivors releases discrete Laplace (OpenDP) plus
  ``Polya((m - N)/N) - Polya((m - N)/N)`` extra noise; the extra part is independent of
  the data, so its law does not enter the guarantee (post-processing) and it is drawn
  from a numpy generator seeded by fresh OS entropy (not recorded, never the run's
  seed). A shard with fewer survivors than planned has no float-safe sampler (a Pólya
  shape below 1): secure mode refuses to noise it, and the secure sum withholds it.
* The bare Pólya sampler has no secure form (:meth:`NoiseSource.polya` refuses).
* A quantile (:meth:`NoiseSource.quantile`): the exponential mechanism over public candidates, OpenDP's
  ``make_private_quantile`` (report noisy max with exponential noise on Smith's score); without secure mode
  the same law from the seeded stream (:func:`noisy_quantile`).

Use :meth:`NoiseSource.add_laplace`, :meth:`NoiseSource.add_gaussian` and
:meth:`NoiseSource.add_discrete_laplace` to noise data: in secure mode they pass
the data vector itself through the OpenDP measurement. For floats OpenDP rounds
each input to the nearest multiple of 2^k, adds integer noise exactly and rounds
the sum to a float once (post-processing); with the default k (the smallest,
2^-1074, on which every finite float64 lies) the rounding is exact and the
measurement's privacy map is exactly ``sensitivity / scale``, so OpenDP's
floating-point-safe guarantee covers the released values themselves. Without
secure mode they return ``x + noise`` from the seeded stream, the same numbers
as ``x + rng.laplace(0, scale, x.shape)`` (resp. normal, discrete Laplace). The
bare samplers :meth:`NoiseSource.laplace` / :meth:`NoiseSource.gaussian` return
noise alone (in secure mode OpenDP's measurement applied to a zero vector);
adding that noise to real-valued data in numpy is outside OpenDP's proof (the
rounding of the final float addition depends on the data), so privacy-critical
callers use the ``add_*`` forms. For integer data and discrete Laplace the sum
is exact either way.

Layout: :mod:`.samplers` (seeded samplers and randomized response), :mod:`.polya`
(distributed discrete Laplace), :mod:`.secure` (exact samplers on OS entropy) and
:mod:`.source` (:class:`NoiseSource`); this package re-exports their public names.
"""

from .polya import (  # noqa: F401
    ShardNoise,
    polya_difference_epsilon,
    polya_difference_sum,
    split_shards,
)
from .samplers import (  # noqa: F401
    discrete_laplace,
    dl_cdf,
    dl_pmf,
    dl_r,
    dl_scale,
    dl_variance,
    gaussian,
    laplace,
    noisy_quantile,
    planar_laplace,
    planar_laplace_radius_cdf,
    polya,
    polya_difference,
    quantile_epsilon,
    quantile_scale,
    quantile_scores,
    randomized_response,
    randomized_response_kary,
    rr_kary_unbias_counts,
    rr_keep_probability,
    rr_unbias_count,
    rr_unbias_mean,
    unary_encoding_counts,
    unary_encoding_pq,
    unary_encoding_unbias,
)
from .secure import (  # noqa: F401
    fresh_generator,
    planar_lattice_step,
    secure_bernoulli,
    secure_binomial,
    secure_uniform_below,
)
from .source import (  # noqa: F401
    NoiseSource,
)
