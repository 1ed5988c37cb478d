"""How a mechanism divides its epsilon: a split in two whose sum never exceeds it, and the total count N
that sizes a grid (a noisy count bought with a share of epsilon, or public side information)."""

from __future__ import annotations

import math

from ...core.accounting import Ledger
from ...core.noise import NoiseSource
from ...core.params import Param
from ._bounding import Bounded


def split_epsilon(eps: float, frac: float) -> tuple[float, float]:
    """Split eps into (frac * eps, rest) whose floating-point sum never exceeds eps."""
    a = frac * eps
    b = eps - a
    for _ in range(8):  # one or two steps of one ulp suffice
        if a + b <= eps:
            break
        b = math.nextafter(b, 0.0)
    return a, b


def total_count(
    xy_count: float,
    eps: float,
    params: dict,
    ledger: Ledger,
    noise: NoiseSource,
    bounded: Bounded,
    purpose: str = "to choose the grid size",
) -> tuple[float, float]:
    """The total N used to size a grid (or for ``purpose``): public side information, or a noisy count
    bought with rho*epsilon (sensitivity 1 for either unit, see :mod:`engine.mechanisms.central`).
    Returns (N used, epsilon left for the rest)."""
    if params["total"] == "public":
        ledger.note_side_information(
            f"the true {bounded.total_name} N (used {purpose}; DPComp's convention, not epsilon-DP)"
        )
        return float(xy_count), eps
    rho = float(params["rho"])
    eps_n, eps_rest = split_epsilon(eps, rho)
    n_hat = float(noise.add_laplace(xy_count, 1.0 / eps_n))
    ledger.spend("total count N", eps_n, note=f"Laplace(1/({rho:g} eps)) on the {bounded.total_name}; {bounded.short}")
    return max(n_hat, 0.0), eps_rest


TOTAL_PARAMS = (
    Param(
        "total",
        "choice",
        "noisy",
        "how the total N that sizes the grid is obtained: 'noisy' spends a fraction rho of epsilon on it; "
        "'public' reads the true N as side information (DPComp's convention; the release is then not epsilon-DP "
        "with respect to N)",
        choices=("noisy", "public"),
        label="total N",
    ),
    Param(
        "rho", "float", 0.05, "fraction of epsilon spent on the noisy total (when total = noisy)", min=0.001, max=0.5
    ),
)
