"""Aligned or unaligned grid sizes for UG and AG, chosen by Qardaji et al.'s error model at the
resolution the result is released (and evaluated) at.

The model (ICDE 2013, Section III): a grid of m x m cells has error E(m) = a m + b/m, a noise
term and a non-uniformity term; the paper's m* (Guideline 1) is its optimum, so with a = 1/m*,
b = m*, E(m*) = 2 and E(r m*) = r + 1/r.

* Aligned: the power of two nearest to m* in ratio (:func:`~.grids.snap_to_divisor`), every cell
  a block of whole output cells: E = r + 1/r with r = 2^k / m*, up to 2.12 (r = sqrt 2).
* Unaligned: the paper's m*, cells spread by overlap area over the output cells they straddle.
  A cell w output cells wide then reaches a band one output cell wider, so its mass is assumed
  uniform over w + 1 cells instead of w: the non-uniformity term grows by (1 + 1/w),
  E = 1 + (1 + 1/w) = 2 + m*/n for w = n / m* (n output cells per side).

Fine output grids (SNH's 1024 x 1024 protocol: m* = 44, w = 23) make straddling cheap and
snapping 44 to 32 dear (model 2.04 against 2.10; measured 1.09-1.64x the range error); output
cells as fine as the grid (256 x 256 at 10^6 points, m* = 98, w = 2.6) make it dear (model 2.38
against 2.07 for 128; measured up to 11x for AG, whose sub-cells were 1.02-1.07 output cells).
For AG the width that matters is the sub-cells': w = n / (m1 m2) with m2 the second level's size
for a first-level cell holding the average count.
"""

from __future__ import annotations

import math

ALIGN_CHOICES = ("auto", "on", "off")
ALIGN_HELP = (
    "auto: snap the grid sizes to powers of two dividing the output resolution (cells are blocks of whole output "
    "cells) when Qardaji et al.'s error model a m + b/m at the output resolution says snapping costs less than "
    "spreading straddling cells by area, else the paper's sizes; on: always snap; off: the paper's sizes"
)


def aligned_cost(m_paper: float, n: int) -> float:
    """Model error of the power of two nearest to ``m_paper`` in ratio (at most ``n``), relative
    to the optimum's half (E(m*) = 2)."""
    top = int(n).bit_length() - 1
    k = min(max(int(round(math.log2(m_paper))) if m_paper > 1 else 0, 0), top)
    r = (1 << k) / max(float(m_paper), 1.0)
    return r + 1.0 / r


def unaligned_cost(m_paper: float, n: int, width: float | None = None) -> float:
    """Model error of the paper's size spread by area: 1 + (1 + 1/w), w = the cells' width in
    output cells (``n / m_paper`` unless given)."""
    m = min(float(m_paper), float(n))
    w = float(n) / m if width is None else float(width)
    return 1.0 + (1.0 + 1.0 / max(w, 1e-9))


def prefer_aligned(mode: str, m_paper: float, n: int, width: float | None = None) -> bool:
    """``align`` = on/off, or auto: the cheaper of the two in the model (ties: aligned)."""
    if mode in ("on", "off"):
        return mode == "on"
    if m_paper >= n:  # the output grid itself: both are the same
        return True
    return aligned_cost(m_paper, n) <= unaligned_cost(m_paper, n, width)


def ag_subcell_width(m1: float, n_used: float, eps2: float, c2: float, n: int) -> float:
    """Output cells per AG sub-cell for a first-level cell holding the average count N / m1^2."""
    m2 = max(1, math.ceil(math.sqrt(max(n_used, 0.0) / max(m1, 1.0) ** 2 * eps2 / c2)))
    return float(n) / (max(m1, 1.0) * m2)
