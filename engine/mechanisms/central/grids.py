"""Uniform and adaptive grids, ``ug`` and ``ag`` (Qardaji, Yang, Li, ICDE 2013): the grid sizes of the
paper's guidelines, snapped to divisors of the output resolution (``align``), and AG's two levels."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import DataError, ParamError
from ...core.grid import downsample
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..capabilities import NoiseCase
from ..common import (
    LAPLACE_SD,
    TOTAL_PARAMS,
    UNIT_PARAM,
    ag_subcell_rects,
    bin_square,
    bound_contributions,
    cells_to_metres,
    curator_communication,
    curator_diagnostics,
    curator_view,
    laplace_counts,
    points_in_domain,
    split_epsilon,
    spread_rects,
    total_count,
    uniform_grid_rects,
)
from ..noise_model import Measurements, NoiseModel
from .alignment import ALIGN_CHOICES, ALIGN_HELP, ag_subcell_width, prefer_aligned

MAX_GRID_CELLS = 16_000_000  # refuse UG/AG grids that would not fit in memory


# ======================================================================== UG
def ug_size(n: float, eps: float, c: float = 10.0, cap: int | None = None) -> int:
    """Qardaji et al. Guideline 1: m = ceil(sqrt(N eps / c)) (at least 1), optionally capped at ``cap``.

    No lower bound of 10: that is AG's first-level rule (:func:`ag_level1_size`), not UG's
    (DPComp's UG has none either, its AG has max(10, ...))."""
    m = max(1, math.ceil(math.sqrt(max(n, 0.0) * eps / c)))
    return int(min(m, cap)) if cap else int(m)


def snap_to_divisor(m: float, n: int) -> int:
    """The divisor of the output resolution ``n`` (a power of two) nearest to the grid size ``m``
    in ratio: 2^k with the smallest |log2(m / 2^k)|, 1 <= 2^k <= n.

    Why in ratio: Qardaji et al.'s error model for a grid of m x m cells is a noise term
    growing as m plus a non-uniformity term falling as 1/m (Section III), E(m) = a m + b/m,
    least at m* = sqrt(b/a) with E(m*) = 2 sqrt(ab). At m = r m*, E = sqrt(ab) (r + 1/r), so
    E(r m*) / E(m*) = (r + 1/r)/2: symmetric in log r and growing with |log r|, so the power
    of two nearest in ratio is also the nearest in model error. It is within a factor sqrt 2
    of m (|log2 r| <= 1/2), so, taking the paper's m as the model's optimum, snapping costs at
    most (sqrt 2 + 1/sqrt 2)/2 = 3/(2 sqrt 2) = 1.061 in model error; 10 -> 8 (r = 0.8) costs
    (0.8 + 1.25)/2 = 1.025, where rounding 10 up to 16 (r = 1.6) would cost 1.113. Sizes above
    n are clipped to n (as the papers' sizes must be). For an integer m no tie is possible
    (log2 m = k + 1/2 would need m = 2^k sqrt 2)."""
    top = int(n).bit_length() - 1
    k = int(round(math.log2(m))) if m > 1 else 0
    return 1 << min(max(k, 0), top)


@register
class UniformGrid(Mechanism):
    """UG, the uniform grid of Qardaji, Yang, Li, "Differentially private grids for
    geospatial data", ICDE 2013, Section III (Guideline 1).

    An m x m grid over the domain with m = ceil(sqrt(N eps / c)), c = 10 (no lower bound);
    one Laplace(1/eps) count per grid cell (parallel composition); each cell's count
    is spread uniformly over the output cells it covers (the paper's uniformity
    assumption; by overlap area for cells that straddle output cells, ``align`` off).

    Threat model: trusted curator; the public sees the noisy grid. Guarantee:
    epsilon-DP when ``total = noisy`` (rho*eps on N, the rest on the cells);
    with ``total = public`` N is side information (declared in the ledger; the
    paper, like DPComp, assumes N known).

    Unit of privacy: ``user`` (default) weights each of a user's k locations 1/k, so
    N is the number of users and one user moves N and the grid's count vector by at
    most 1 in L1 each (user-level epsilon-DP); ``record``: location counts, a user
    with k locations protected at k*epsilon.

    Departures: m is rounded up (the paper leaves the rounding open). With ``align = auto``
    (default) the grid size is snapped as below when the paper's error model at the output
    resolution says snapping costs less than spreading straddling cells by area
    (:mod:`.alignment`: at 256 x 256 from about m = 12 up, not at 1,024 x 1,024 for m = 44);
    with ``align = on`` always. Snapping: the grid size is to the power of two nearest to m in ratio
    (:func:`snap_to_divisor`: 10 and 11 become 8, 12 becomes 16, 45 becomes 32, 98 becomes
    128; at most 2^L), so it divides the output resolution 2^L and
    every UG cell is a block of whole output cells: a count lands exactly on the output
    cells of its UG cell instead of being spread by area over cells that straddle UG cell
    edges, which smeared single-cell hot spots (a cab rank, a stadium) into their
    neighbours (unsnapped, UG measured 1.15 to 2.06x a peer implementation's error at 10^6
    points, epsilon 0.1). By the paper's own
    error model a m + b/m (see :func:`snap_to_divisor`) the snapped size costs at most a
    factor (sqrt 2 + 1/sqrt 2)/2 = 1.061 in model error against the paper's m (1.025 for
    10 -> 8). A floor of 10 like AG's would snap 10 up to 16 (1.113);
    unsnapped, that floor never binds in the central benchmark (N eps >= 1,000), so its
    ``align`` off rows are unchanged. With ``align`` off, m is the paper's and ``cap_to_grid``
    caps it at 2^L, cells finer than the released map only adding noise (DPBench's grids
    are likewise built over the domain histogram); cells are spread over the output cells
    by overlap area. Both are public quantities. Under ``user``
    N counts users, not locations, in Guideline 1 (it is the total the noise competes with).

    Noise model (``Release.noise``): the UG cells are the released units, each of standard
    deviation sqrt(2)/eps_cells given the released grid size m, spread over the output cells by
    overlap area (sqrt(2)/(eps_cells q) for an aligned UG cell of q output cells). Exact: the
    cell counts' noise is drawn after m is fixed and independently of the draw that chose it (the
    noisy total), so it is Laplace whatever m. Over repeated runs m may change (with the noisy
    total), which the SE given m does not include.
    """

    key = "ug"
    margin = "closed form"
    margin_note = "Laplace(1/eps) per UG cell, given the grid size"
    planner = "simulated"
    # c = 1000: one UG cell for any plausible noisy total, so the released cell count is c0 + noise
    noise_cases = (NoiseCase("ug", {"c": 1000.0}, float_attack=True),)
    label = "UG (uniform grid, Qardaji et al.)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central) under add/remove user (add/remove record with unit = record) with a noisy "
        "total; N as side information otherwise"
    )
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy grid counts."
    summary = "Choose a grid size from N and epsilon, add Laplace noise to each grid cell."
    paper = "Qardaji, Yang, Li. Differentially private grids for geospatial data. ICDE 2013"
    equations = "Section III, Guideline 1: m = sqrt(N eps / c), c = 10"
    params = (
        (UNIT_PARAM,)
        + TOTAL_PARAMS
        + (
            Param("c", "float", 10.0, "constant c of Guideline 1", min=0.1, max=1000.0, log=True),
            Param("align", "choice", "auto", ALIGN_HELP, choices=ALIGN_CHOICES, label="align with output cells"),
            Param("cap_to_grid", "bool", True, "unaligned: cap the grid size at the output resolution"),
        )
    )
    dp_outputs = ("total_used", "m", "m_uncapped", "aligned", "ug_cell_side_m", "noise", "measurements")
    side_information_keys = ("total_used", "m", "m_uncapped", "aligned", "ug_cell_side_m", "noise")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        noise = ctx.noise
        bounded = bound_contributions(data, domain, params["unit"])
        hist, xy, w = None, None, None
        if params["align"] != "off" and bounded.data.weight is None:
            # aligned cells are blocks of output cells: the histogram's block sums are the same counts
            # (integers, exactly), and a histogram is all an out-of-core dataset offers (parquet_source)
            hist = bounded.data.true_histogram(domain)
            n_true = float(hist.sum())
        else:
            xy, w = points_in_domain(bounded.data, domain)
            n_true = float(len(xy) if w is None else w.sum())
        ledger = Ledger()
        n_used, eps_cells = total_count(n_true, eps, params, ledger, noise, bounded)
        n = domain.n
        m_paper = ug_size(n_used, eps_cells, float(params["c"]))
        aligned = prefer_aligned(params["align"], m_paper, n)
        if not aligned and xy is None:
            try:
                xy, w = points_in_domain(bounded.data, domain)
            except DataError:  # out of core: only the histogram, so the aligned size
                aligned = True
        if aligned:
            m = snap_to_divisor(m_paper, n)
        else:
            m = min(m_paper, n) if params["cap_to_grid"] else m_paper
        if m * m > MAX_GRID_CELLS:
            raise ParamError(f"UG would need a {m}x{m} grid; turn on 'cap to grid' or lower epsilon")
        ctx.progress(0.3, f"counting on a {m}x{m} grid")
        counts = downsample(hist, n // m) if aligned and hist is not None else bin_square(xy, w, domain, m)
        noisy = laplace_counts(
            counts, eps_cells, noise, ledger, "grid cell counts", "ug cells", "Laplace(1/eps) per UG cell", bounded
        )
        ctx.check_cancelled()
        rects = uniform_grid_rects(m, n)
        density = spread_rects(rects, noisy.ravel(), n)
        edges = np.arange(m + 1, dtype=np.float64) * (n / m)
        basis = "Laplace(1/eps) per UG cell, spread over its output cells, given the grid size"
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "m": int(m),
                "m_uncapped": m_paper,
                "align": params["align"],
                "aligned": bool(aligned),
                "c": float(params["c"]),
                "total_used": n_used,
                "total": params["total"],
                "epsilon_cells": eps_cells,
                "ug_cell_side_m": domain.side / m,
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the noisy grid counts"),
            partition=cells_to_metres(rects, domain),
            diagnostics=diag,
            noise=NoiseModel.of_grid(noisy, LAPLACE_SD / eps_cells, edges, n, basis),
            measurements=Measurements(grid=noisy, cell_m=domain.side / m, scale=1.0 / eps_cells),
        )


# ======================================================================== AG
def ag_level1_size(n: float, eps: float, c: float = 10.0, cap: int | None = None) -> int:
    """Qardaji et al. Section IV-B: m1 = max(10, ceil(sqrt(N eps / c) / 4))."""
    m1 = max(10, math.ceil(math.sqrt(max(n, 0.0) * eps / c) / 4.0))
    return int(min(m1, cap)) if cap else int(m1)


def ag_level2_sizes(
    noisy_counts: np.ndarray, eps2: float, c2: float = 5.0, cap: int | None = None, snap: bool = False
) -> np.ndarray:
    """m2 = ceil(sqrt(N' eps2 / c2)) per first-level cell with noisy count N' (at least 1;
    N' <= 0 gives 1), eps2 = (1 - alpha) eps; optionally capped. With ``snap`` (``cap`` a
    power of two: the output cells per first-level cell) each m2 is then snapped to the
    power of two nearest in ratio, at most ``cap`` (:func:`snap_to_divisor`)."""
    m2 = np.ceil(np.sqrt(np.clip(noisy_counts, 0.0, None) * eps2 / c2)).astype(np.int64)
    m2 = np.maximum(m2, 1)
    if snap:
        if not cap:
            raise ValueError("snapping m2 needs the cap (output cells per first-level cell)")
        top = int(cap).bit_length() - 1
        m2 = np.left_shift(1, np.clip(np.rint(np.log2(m2)), 0, top).astype(np.int64))
    elif cap:
        m2 = np.minimum(m2, cap)
    return m2


@register
class AdaptiveGrid(Mechanism):
    """AG, the adaptive grid of Qardaji, Yang, Li, ICDE 2013, Section IV.

    1. First level: m1 x m1 grid, m1 = max(10, ceil(sqrt(N eps / c) / 4)), c = 10,
       counts with Laplace(1/(alpha eps)), alpha = 0.5.
    2. Each first-level cell with noisy count N' is split into m2 x m2 cells,
       m2 = ceil(sqrt(N' (1 - alpha) eps / c2)), c2 = c / 2 = 5, counted with
       Laplace(1/((1 - alpha) eps)).
    3. Constrained inference (Section IV-B): the first-level count v and the sum u
       of its m2^2 sub-cells are averaged with inverse-variance weights,
       v' = (alpha^2 m2^2 v + (1-alpha)^2 u) / (alpha^2 m2^2 + (1-alpha)^2), and
       the difference v' - u is spread equally over the sub-cells.
    Each sub-cell's count is spread uniformly over the output cells it covers (uniformity
    assumption; by overlap area when ``align`` is off).

    Threat model: trusted curator; the public sees both noisy levels. Guarantee:
    epsilon-DP with ``total = noisy``: rho*eps on N, then alpha and (1 - alpha) of
    the rest on the two levels (each level parallel over disjoint cells; m2 is
    post-processing of the noisy first level). With ``total = public`` N is side
    information (declared).

    Unit of privacy: ``user`` (default) weights each of a user's k locations 1/k:
    one user moves N, the first-level vector and the second-level vector by at most 1
    in L1 each (the second-level partition is chosen from the noisy first level,
    i.e. fixed by post-processing before the second level is noised), so the same
    scales give user-level epsilon-DP; ``record``: location counts, a user with k
    locations protected at k*epsilon.

    Departures: when N' <= 0 the cell is not split (m2 = 1; the paper's formula is
    undefined there). With ``align = auto`` (default) as ``on`` when the error model at the
    output resolution, for sub-cells of the average first-level cell, prefers it
    (:mod:`.alignment`), else as ``off``. With ``align = on`` m1 and each m2 are snapped to the power of
    two nearest in ratio (:func:`snap_to_divisor`), m1 <= 2^L and m1*m2 <= 2^L, so every
    sub-cell is a block of whole output cells and lands exactly on them: with the paper's
    sizes (25 or 80 first-level cells over 256 output cells) second-level cells are
    1.02-1.07 output cells wide and spreading them by area smears single-cell hot spots
    into their neighbours, a bias that does not fall with epsilon. Each snapped size is within a factor sqrt 2 of
    the paper's, which can take m1 below the paper's minimum: its 10 becomes 8 (ratio 0.8;
    16 would be 1.6). m2 is Guideline 1 on a first-level cell, so ``ug``'s bound (at most
    1.061 in the model error a m + b/m) holds for it; m1 = sqrt(N eps/c)/4 is a heuristic
    (a quarter of UG's size), for which only the factor sqrt 2 is claimed. With ``align``
    off the sizes are the paper's, ``cap_to_grid`` caps m1 <= 2^L and m1*m2 <= 2^L, and
    sub-cells are spread by overlap area. Under ``user`` N and N' count users (user mass),
    not locations.

    Standard error: none in closed form; the dashboard estimates it from repeated
    seeded runs. Step 3 is an inverse-variance average of the two levels, and with the sub-grid
    fixed in advance a sub-cell's variance would follow (s2^2 - s2^4/(k s2^2 + s1^2) for k
    sub-cells and level variances s1^2, s2^2). But m2 is chosen from the same noisy first-level
    count v that the average then uses: given the released m2, v's noise is a Laplace draw
    restricted to the interval of values giving that m2 (not centred, smaller variance), in a way
    that depends on the true count; neither the SE given the structure nor the one over it is
    a function of the noise scales alone.
    """

    key = "ag"
    margin_note = "no closed form: the second level's sizes depend on noisy counts; estimated from repeats"
    label = "AG (adaptive grid, Qardaji et al.)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central) under add/remove user (add/remove record with unit = record) with a noisy "
        "total; N as side information otherwise"
    )
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the two levels of noisy grid counts."
    summary = "A coarse noisy grid, then each cell split according to its noisy count, made consistent."
    paper = "Qardaji, Yang, Li. Differentially private grids for geospatial data. ICDE 2013"
    equations = "Section IV: m1 = max(10, sqrt(N eps/c)/4), m2 = sqrt(N'(1-alpha) eps/c2), constrained inference"
    params = (
        (UNIT_PARAM,)
        + TOTAL_PARAMS
        + (
            Param("alpha", "float", 0.5, "fraction of the grid budget spent on the first level", min=0.05, max=0.95),
            Param("c", "float", 10.0, "constant c of the first level", min=0.1, max=1000.0, log=True),
            Param(
                "c2", "float", 5.0, "constant c2 of the second level (c/2 in the paper)", min=0.1, max=1000.0, log=True
            ),
            Param("align", "choice", "auto", ALIGN_HELP, choices=ALIGN_CHOICES, label="align with output cells"),
            Param("cap_to_grid", "bool", True, "unaligned: cap grid sizes so cells are no finer than output cells"),
        )
    )
    dp_outputs = (
        "total_used",
        "aligned",
        "m1",
        "m2_min",
        "m2_median",
        "m2_max",
        "second_level_cells",
        "level1_noisy",
        "m2",
        "level2_noisy",
        "level2_consistent",
    )
    side_information_keys = ("total_used", "m1", "aligned")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        noise = ctx.noise
        alpha = float(params["alpha"])
        bounded = bound_contributions(data, domain, params["unit"])
        xy, w = points_in_domain(bounded.data, domain)
        n_true = float(len(xy) if w is None else w.sum())
        ledger = Ledger()
        n_used, eps_grid = total_count(n_true, eps, params, ledger, noise, bounded)
        eps1, eps2 = split_epsilon(eps_grid, alpha)
        n = domain.n
        m1 = ag_level1_size(n_used, eps_grid, float(params["c"]), n)
        width = ag_subcell_width(m1, n_used, eps2, float(params["c2"]), n)
        align = prefer_aligned(params["align"], m1, n, width)
        cap = align or params["cap_to_grid"]
        m1 = (
            snap_to_divisor(m1, n)
            if align
            else ag_level1_size(n_used, eps_grid, float(params["c"]), n if cap else None)
        )

        # level 1
        s1 = m1 / domain.side
        fx = (xy[:, 0] - domain.x0) * s1
        fy = (xy[:, 1] - domain.y0) * s1
        ix1 = np.clip(fx.astype(np.int64), 0, m1 - 1)
        iy1 = np.clip(fy.astype(np.int64), 0, m1 - 1)
        cell = iy1 * m1 + ix1
        level1 = np.bincount(cell, weights=w, minlength=m1 * m1).astype(np.float64)
        noisy1 = laplace_counts(
            level1, eps1, noise, ledger, "first-level counts", "ag level 1", "Laplace(1/(a eps))", bounded
        )
        ctx.progress(0.3, "counting the second level")
        ctx.check_cancelled()

        # level 2: sizes from the noisy first level only
        m2 = ag_level2_sizes(noisy1, eps2, float(params["c2"]), max(1, n // m1) if cap else None, snap=align)
        sizes = m2 * m2
        total_cells = int(sizes.sum())
        if total_cells > MAX_GRID_CELLS:
            raise ParamError(
                f"AG would need {total_cells:,} second-level cells; turn on 'cap to grid' or lower epsilon"
            )
        offsets = np.zeros(m1 * m1, dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        m2p = m2[cell]
        sx = np.minimum(((fx - ix1) * m2p).astype(np.int64), m2p - 1)
        sy = np.minimum(((fy - iy1) * m2p).astype(np.int64), m2p - 1)
        sub = offsets[cell] + sy * m2p + sx
        level2 = np.bincount(sub, weights=w, minlength=total_cells).astype(np.float64)
        noisy2 = laplace_counts(
            level2, eps2, noise, ledger, "second-level counts", "ag level 2", "Laplace(1/((1-a) eps))", bounded
        )

        # constrained inference between the two levels (Section IV-B)
        owner = np.repeat(np.arange(m1 * m1), sizes)
        u = np.bincount(owner, weights=noisy2, minlength=m1 * m1)
        a2m2 = alpha**2 * sizes
        b2 = (1.0 - alpha) ** 2
        v_prime = (a2m2 * noisy1 + b2 * u) / (a2m2 + b2)
        est2 = noisy2 + ((v_prime - u) / sizes)[owner]
        ctx.progress(0.7, "spreading to the output grid")
        ctx.check_cancelled()

        # sub-cell rectangles in output-cell units
        rects = ag_subcell_rects(owner, offsets, m2, m1, n)
        density = spread_rects(rects, est2, n)

        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "m1": int(m1),
                "m2_min": int(m2.min()),
                "m2_median": float(np.median(m2)),
                "m2_max": int(m2.max()),
                "second_level_cells": total_cells,
                "align": params["align"],
                "aligned": bool(align),
                "alpha": alpha,
                "c": float(params["c"]),
                "c2": float(params["c2"]),
                "total_used": n_used,
                "total": params["total"],
                "epsilon_level1": eps1,
                "epsilon_level2": eps2,
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the two levels of noisy grid counts"),
            partition=cells_to_metres(rects, domain),
            diagnostics=diag,
            extras={
                "level1_noisy": noisy1.reshape(m1, m1),
                "m2": m2.reshape(m1, m1),
                "level2_noisy": noisy2,  # sub-cells grouped by first-level cell (row-major), each row-major
                "level2_consistent": est2,
            },
        )
