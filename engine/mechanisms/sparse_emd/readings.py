"""What a release of the sparse EMD family (and its Laplace baselines) reports, for the benchmarks (typed access
to its diagnostics and extras, which only this package reads)."""

from __future__ import annotations

import numpy as np


def distribution(release) -> np.ndarray:
    """The released distribution ``a_hat`` (``[iy, ix]``, summing to 1)."""
    return np.asarray(release.extras["distribution"], dtype=np.float64)


def w(release) -> int | None:
    """The cells kept per level, w, the release used (None for the Laplace baselines)."""
    v = release.diagnostics.get("w")
    return None if v is None else int(v)


def cells_kept(release) -> int:
    """Cells the top-t rule kept (every cell without it)."""
    return int(release.diagnostics["cells_kept"])


def modulus_bits(release) -> int:
    """The secure aggregation's word size in bits (``sparse_emd_secagg``)."""
    return int(release.diagnostics["modulus_bits"])


def shuffle_bits_per_user(release) -> float:
    """What the shuffle model would cost per user, in bits (Appendix F; ``sparse_emd_secagg``)."""
    return float(release.diagnostics["shuffle_model"]["bits_per_user"])
