"""DP sparse EMD aggregation for heatmaps (Ghazi et al., 2023), its Laplace baselines
and its distributed (secure-aggregation) variant.

Paper: B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. No official code is public;
this module is derived from the paper. The one unofficial implementation is not a
reference: it spends the same epsilon on every level, keeps the top w over all cells
instead of the children of kept cells, runs BFGS on a non-smooth objective and scores
a 1-D "EMD".

What is implemented, by section:

* Section 2.3: the heatmap ``H_p^sigma`` (Gaussian filter, each source cell's kernel
  renormalised over the grid so no mass leaves the map): :func:`engine.metrics.gaussian_heatmap`.
* Section 3.1, Definition 3.1: the (scaled) pyramidal transform ``P = [P_0; P_1/2; ...;
  P_l/2^l]``, levels ``i = 0..l`` with ``2^i x 2^i`` cells.
* Algorithm 1 (DPSPARSEEMDAGG): ``s = sum_i p_i``; per level ``y'_i = (P_i s + nu_i)/2^i``,
  ``nu_i ~ Lap(1/eps_i)`` per cell; reconstruct; output ``s_hat / ||s_hat||_1``.
* Proof of Theorem 3.1 + Section 4: ``eps_i = gamma^|i-q| eps / Z`` with ``q =
  floor(log2 sqrt(w))`` and ``Z`` the sum of the weights over the measured levels, so the
  epsilons sum to ``eps`` (basic composition; one ledger entry per level). Section 4's
  ``gamma = 1/sqrt(2)`` and ``w = 20`` are the defaults.
* Section 4, "Implementation details": levels ``i < q`` are not measured (measurement
  starts at level ``q``, whose ``4^q <= w`` cells are all kept). ``pyramid="full"``
  runs Algorithm 1 as printed (levels ``0..l``, root kept by Algorithm 2 line 3).
* Algorithm 2 (RECONSTRUCT): ``T_i = children(S_{i-1})``; ``S_i`` = the ``min(w, |T_i|)``
  cells of ``T_i`` with the largest noisy values (only children of kept cells are ever
  looked at); ``y_hat = y'|_S``; ``s_hat = argmin_{s >= 0} ||y_hat - P s||_1``.
* Section 4: the LP has ``O(w l)`` variables: a cell of ``T_i \\ S_i`` ("left out") has
  ``y_hat = 0`` on its whole subtree, so the objective depends on the mass inside it
  only through its total ``x_c`` (cost ``sum_{j >= i} 2^-j x_c``); a kept cell ``c`` at
  level ``i`` contributes ``2^-i |y~(c) - m_c|`` with ``m_c`` the mass below it
  (``y~ = 2^i y'`` the noisy count). Variables: ``m_c`` per kept cell, ``u+_c, u-_c``
  for the absolute values, ``x_c`` per left-out cell; equalities ``m_c = sum of its
  children's m / x`` and ``m_c + u+_c - u-_c = y~(c)``. Solved with HiGHS
  (``scipy.optimize.linprog(method="highs")``) on sparse matrices.
* Appendix F / Sections 1.3, 5: the algorithm only needs a Laplace-like primitive;
  :class:`SparseEMDSecAgg` replaces each level's Laplace noise by secure-aggregation
  Polya noise (clients scale by ``B`` and round down, each adds
  ``Polya(1/n, r_i) - Polya(1/n, r_i)`` per coordinate; the sum is discrete Laplace).
* Section 4 "Baselines" ([LXD+19]): Laplace noise per cell of ``s``, negatives zeroed,
  optionally only the top ``t%`` cells kept, then the same Gaussian heatmap.

Noise model: the Laplace baselines with ``density = "estimate"`` state one in closed form
(``Release.noise``). Algorithm 1's release has none: which cells are kept
(top w per level) and the L1 reconstruction's solution are non-linear functions of the noise and
the data, so the dashboard estimates the spread from repeated seeded runs.

Noise: the Laplace measurements (Algorithm 1 and the baselines) are
``ctx.noise.add_laplace(counts, 1/eps_i)``: seeded numpy, or in secure mode the
requested counts themselves pass through OpenDP's Laplace measurement (engine.core.noise),
so OpenDP's floating-point-safe guarantee covers the measured values. The SecAgg
variant's discrete-Laplace part comes from OpenDP in secure mode and is added to
integer sums (exact).

Choices where the paper is silent (also listed in each mechanism's docstring):

* Where the mass of a left-out cell goes inside the cell is not determined by the LP
  (every placement has the same objective); ``fill="uniform"`` spreads it evenly over the
  cell (default: it claims nothing the measurements do not support), ``"centre"`` puts it
  on the cell's centre pixel (a sparse output).
* ``sigma`` (the heatmap filter width) is not stated in the paper; it is a parameter in
  units of the domain side (the paper's coordinates are ``[0, 1)^2``). Default 0.03: the
  saliency-map convention of the authors' other benchmark (fixations blurred by about one
  degree of visual angle, a few percent of the image width), about 600 m on a 20 km city.
  The metrics depend on it (KL most): see engine/bench/sparse_emd.py.
* Among the LP's minimisers (not unique) we return the one that splits the mass of a kept
  cell's left-out children evenly among them (``split="even"``): they lost the top-w
  contest, so their noisy counts are mostly noise; following them (``"noisy"``) or the
  solver's vertex (``"solver"``) concentrates mass where the truth has
  little (Figure 1 setting, ``python -m engine bench sparse_emd``: ``"noisy"`` loses 4 + 2
  comparisons of 16, ``"even"`` 2 + 1, offline + check-in; BENCHMARKS.md), and
  spreads a left-out cell's mass uniformly over it (``fill``); both keep the objective.
* The release's ``density`` is ``s_hat`` itself: an estimate of ``sum_i p_i`` in user units
  whose total is a DP estimate of the number of users (so no private count is needed to
  scale ``a_hat``). ``density="heatmap"`` publishes ``H_{a_hat}^sigma * ||s_hat||_1`` instead.
* Non-power-of-two grids (the paper assumes ``Delta = 2^l``): :func:`pad_to_dyadic` pads
  with empty cells at the north and east edges; :func:`aggregate` runs the algorithm on
  the padded grid, crops, and renormalises. Padding leaves the true distribution
  unchanged but noise in the padded cells can win top-w slots and the LP can place mass
  there, which cropping discards (so slightly fewer slots serve the real region). The
  engine's own domains are always dyadic, so the registered mechanisms never pad.
"""

from __future__ import annotations

import time

import numpy as np

from ...core.accounting import Ledger
from ...core.grid import Domain, pyramid
from ...core.params import Param
from ...metrics import gaussian_heatmap
from ..base import Mechanism, Release, aggregate_view, register
from ..capabilities import AuditPlan
from ..common import curator_communication
from ..outputs import Heat, Level
from .algorithm import GAMMA_SECTION4, W_DEFAULT, laplace_measure, level_epsilons, normalised, start_level, w_rule
from .reconstruct import SPLITS, reconstruct

W_COUNT_SHARE = 0.05  # share of epsilon spent on the user count that sets w (w = 0, central mechanism)
SIGMA_DEFAULT = 0.03  # our choice (the paper does not state sigma), in units of the domain side


# ------------------------------------------------------------------ data access
def user_distribution_sum(data, domain: Domain) -> tuple[np.ndarray, list[str]]:
    """``s = sum_i p_i`` on the domain grid, every user's ``p_i`` having L1 norm <= 1.

    With user ids each user's locations share weight 1 (``per_user_normalised``); without
    them every location is its own user (a point mass; weights above 1 are clipped to 1 so
    the sensitivity stays 1)."""
    notes = []
    if data.user_id is not None:
        s = data.true_histogram(domain, per_user_normalised=True)
    elif data.weight is None:  # the plain histogram, all an out-of-core dataset offers (parquet_source)
        s = data.true_histogram(domain)
    else:
        inside = domain.inside(data.xy)
        wts = None
        if data.weight is not None:
            wts = np.clip(data.weight[inside].astype(np.float64), 0.0, 1.0)
            if (data.weight[inside] > 1).any():
                notes.append("location weights above 1 were clipped to 1 (each location is one user)")
        s = domain.histogram(data.xy[inside], wts)
    return s, notes


# ------------------------------------------------------------------ mechanisms
SPARSE_EMD_PARAMS = (
    Param(
        "w",
        "int",
        0,
        "cells kept per level (Algorithm 2): the w children of kept cells with the largest noisy "
        "values; governs the sparsity k the output can follow. Section 4 uses 20, for 200 users per map. "
        "0 (default): w grows with the users, max(20, 20 n / 200) (about 10 users per kept cell, as in the "
        "paper's setting), n from a Laplace count of the users spending 5% of epsilon (the number of "
        "clients, public, in the distributed variant); 100k users, eps 1: EMD 663 m at w = 20, 82 m at "
        "320, 41 m at 1280 (python -m engine bench sparse_emd)",
        min=0,
        max=4096,
    ),
    Param(
        "gamma",
        "float",
        GAMMA_SECTION4,
        "decay of the per-level budgets eps_i ~ gamma^|i - q| (Section 4: 1/sqrt(2); the proof of "
        "Theorem 3.1 uses 0.8; the error bound needs gamma > 0.5)",
        min=0.5,
        max=1.0,
    ),
    Param(
        "pyramid",
        "choice",
        "from_q",
        "from_q: measure levels q..l only, q = floor(log2 sqrt(w)) (Section 4, as in the paper's "
        "experiments); full: measure every level 0..l (Algorithm 1 as printed)",
        choices=("from_q", "full"),
    ),
    Param(
        "fill",
        "choice",
        "uniform",
        "where the LP's mass for a left-out cell goes (the LP is indifferent): spread uniformly "
        "over the cell, or on its centre pixel",
        choices=("uniform", "centre"),
    ),
    Param(
        "split",
        "choice",
        "even",
        "which of the LP's equally good solutions to return: the mass the LP gives to the left-out "
        "children of a kept cell is shared equally (even), in proportion to their noisy counts (noisy; "
        "mostly noise, they lost the top-w contest), or left as the solver returns it (solver; usually "
        "all on one child)",
        choices=SPLITS,
    ),
)
SIGMA_PARAM = Param(
    "sigma",
    "float",
    SIGMA_DEFAULT,
    "width of the heatmap's Gaussian filter (Section 2.3) as a fraction of the domain side "
    "(0 = no filter); not stated in the paper, 0.03 (about one degree of visual angle in saliency maps) "
    "is our default",
    min=0.0,
    max=0.25,
)
_USERS_MAX = Param(
    "users_max",
    "int",
    0,
    "a public upper bound on the number of users (declared as side information), e.g. the size of the sample "
    "you drew: when the rule for w = 0 cannot go above 20 for it (at most 209 users), w = 20 and no budget is "
    "spent on a count of the users; above, the count is capped at it. 0 = no bound",
    min=0,
    max=10**9,
    label="users, public upper bound",
    shown_if=(("w", 0),),
)

DENSITY_PARAM = Param(
    "density",
    "choice",
    "estimate",
    "what the release's density holds: the unfiltered estimate (counts in users) or the "
    "Gaussian-filtered heatmap scaled to the same total; the heat layer is always in the release",
    choices=("estimate", "heatmap"),
)


def heatmap_extras(estimate: np.ndarray, sigma: float, domain: Domain) -> tuple[np.ndarray, np.ndarray, bool]:
    dist, ok = normalised(estimate)
    heat = gaussian_heatmap(dist, sigma * domain.n)
    return dist, heat / heat.sum() if heat.sum() > 0 else dist, ok


class SparseEMDBase(Mechanism):
    cost_variants = ({"w": 20}, {"w": 200}, {"w": 2000})

    @classmethod
    def cost_features(cls, params: dict, depth: int, n_points: int) -> tuple[float, float]:
        """W: the reconstruction LP's size, w kept cells on each measured level (w from the default rule on the
        locations, a stand-in for the users the run counts), in 1e4."""
        w = int(params["w"]) or w_rule(n_points, depth)
        return 1.0, w * (depth - start_level(w) + 1) / 1e4

    def _run_core(self, domain, epsilon, params, ctx, measure_factory):
        w = params["w"]
        levels, eps = level_epsilons(epsilon, domain.depth, w, params["gamma"], params["pyramid"] == "full")
        ctx.progress(0.1, "adding noise to the pyramid and keeping its largest cells")
        measure = measure_factory(levels, eps)
        ctx.check_cancelled()
        t0 = time.perf_counter()
        recon = reconstruct(measure, domain.depth, int(levels[0]), w, params["fill"], params["split"])
        t_rec = time.perf_counter() - t0
        ctx.check_cancelled()
        ctx.progress(0.8, "drawing the heatmap")
        dist, heat, ok = heatmap_extras(recon.s_hat, params["sigma"], domain)
        total = float(recon.s_hat.sum())
        density = recon.s_hat if params["density"] == "estimate" else heat * total
        ledger = Ledger()
        for lvl, e in zip(levels, eps):
            ledger.spend(
                f"level {int(lvl)} ({1 << int(lvl)}x{1 << int(lvl)} cells)",
                float(e),
                composition="sequential",
                note=f"eps_{int(lvl)} = gamma^|{int(lvl)} - q| eps / Z; each user's level vector has L1 norm <= 1",
            )
        diagnostics = {
            "q": start_level(w),
            "levels": [int(v) for v in levels],
            "level_epsilons": [float(e) for e in eps],
            "kept_per_level": [int(a.shape[0]) for a in recon.kept],
            "left_out_per_level": [int(a.shape[0]) for a in recon.left_out],
            "lp": recon.lp,
            "reconstruct_s": t_rec,
            "estimated_total": total,
            "empty_reconstruction": not ok,
            "sigma_cells": params["sigma"] * domain.n,
            "noise_source": getattr(ctx.noise, "description", "custom"),
        }
        extras = {
            "distribution": dist,
            "sparse_reconstruction": recon.s_hat,
            "kept_cells": dict(zip((int(v) for v in levels), recon.kept)),
            "left_out_cells": dict(zip((int(v) for v in levels), recon.left_out)),
            "kept_values": dict(zip((int(v) for v in levels), recon.kept_values)),
        }
        # Explore's level slider: S_i and its noisy counts per measured level. They are the
        # eps_i-DP measurements themselves, so showing them spends no further budget.
        snapshots = tuple(
            Level(
                _cell_rects(kept, int(lv), domain),
                counts=vals,
                level=int(lv),
                epsilon=float(e),
                considered=int(kept.shape[0] + left.shape[0]),  # |T_i|
            )
            for lv, e, kept, vals, left in zip(levels, eps, recon.kept, recon.kept_values, recon.left_out)
        )
        return (
            density,
            ledger,
            diagnostics,
            extras,
            {"heat": Heat(heat, params["sigma"] * domain.n), "levels": snapshots},
        )


# what Algorithm 1's reconstruction releases (central and secure-aggregation variants alike): all computed
# from the noisy level measurements
RECONSTRUCTION_OUTPUTS = (
    "kept_per_level",
    "left_out_per_level",
    "kept_cells",
    "lp",
    "reconstruct_s",
    "estimated_total",
    "empty_reconstruction",
    "distribution",
    "sparse_reconstruction",
    "heat",
    "left_out_cells",
    "kept_values",
    "levels",
)


@register
class SparseEMD(SparseEMDBase):
    """DP sparse EMD aggregation (Ghazi et al. 2023, Algorithms 1-2, Theorem 3.1, Section 4).

    Each user holds a distribution ``p_i`` over the grid (several check-ins share weight 1;
    a single location is a point mass), so every user's level vector ``P_i p_i`` has L1
    norm at most 1. Per measured level ``i`` the curator adds ``Lap(1/eps_i)`` to every
    cell count, with ``eps_i = gamma^|i-q| eps / Z`` (proof of Theorem 3.1; Section 4:
    ``gamma = 1/sqrt(2)``, ``w = 20``, measurement starting at ``q = floor(log2 sqrt(w))``).
    Algorithm 2 keeps the ``w`` children of kept cells with the largest noisy counts per
    level and solves ``min ||y_hat - P s||_1, s >= 0`` as a sparse LP with one variable per
    leaf of the kept tree (``O(w l)``, Section 4) using HiGHS. Output: ``a_hat = s_hat /
    ||s_hat||_1`` and its Gaussian heatmap (Section 2.3).

    Threat model: a trusted curator sees every user's locations; the public (and any
    analyst) sees only the released map. Guarantee: epsilon-DP (central, add/remove one
    user), basic composition of one Laplace mechanism per level (the reconstruction is
    post-processing).

    Departures / choices: noise is drawn only for the cells Algorithm 2 looks at (``T_i``);
    the others cannot affect the output, so the output law is unchanged. The LP's minimiser
    is not unique; we return the one that shares the mass given to a kept cell's left-out
    children equally (``split``) and spreads a
    left-out cell's mass uniformly over it (``fill``). ``sigma`` is ours (not stated in the
    paper; default 0.03 of the side), and the heatmap kernel is untruncated as in Sec. 2.3. ``density`` is ``s_hat`` (user units; its total is a DP estimate
    of the number of users), not ``a_hat`` times the private true count. If ``s_hat`` is
    identically zero the output distribution is uniform (flagged in the diagnostics).
    Locations without user ids are one user each (weights clipped to 1).
    """

    key = "sparse_emd"
    margin_note = "no closed form: which cells are kept and the L1 reconstruction depend on the noise"
    audit_plan = AuditPlan(runs=3000, test_runs=300)
    label = "Sparse EMD aggregation (Ghazi et al.)"
    family = "central"
    guarantee = "epsilon-DP (central, per user, under add/remove user; basic composition over pyramid levels)"
    neighbouring = "add/remove user"
    threat_model = (
        "A trusted curator sees every user's locations; the public sees only the released heatmap "
        "(reconstructed from Laplace-noised pyramid counts)."
    )
    summary = (
        "Noisy counts on a quadtree pyramid with more budget near level log2 sqrt(w); keep the w "
        "heaviest children of kept cells per level; an L1 linear program rebuilds a sparse map that is "
        "close in Earth Mover's Distance."
    )
    paper = (
        "Ghazi, He, Kohlhoff, Kumar, Manurangsi, Navalpakkam, Valliappan. Differentially Private Heatmaps. AAAI 2023"
    )
    equations = "Sec. 2.3 (heatmap), Def. 3.1 (pyramidal transform), Alg. 1-2, proof of Thm 3.1 (eps_i), Sec. 4"
    params = SPARSE_EMD_PARAMS + (_USERS_MAX, SIGMA_PARAM, DENSITY_PARAM)
    dp_outputs = (
        "w",  # from the Laplace count of users (its own ledger entry)
        "w_rule_users",
        *RECONSTRUCTION_OUTPUTS,
    )

    def run(self, data, domain, epsilon, params, ctx):
        ctx.progress(0.0, "building each user's distribution")
        s, notes = user_distribution_sum(data, domain)
        pyr = pyramid(s)
        eps_levels, n_hat, bound = float(epsilon), None, int(params["users_max"])
        if int(params["w"]) == 0 and bound and w_rule(bound, domain.depth) == W_DEFAULT:
            params = {**params, "w": W_DEFAULT}  # the rule cannot change w: no count to pay for
        elif int(params["w"]) == 0:  # w from a DP count of the users (w_rule); the levels get the rest
            eps_n = W_COUNT_SHARE * float(epsilon)
            eps_levels -= eps_n
            n_hat = float(ctx.noise.add_laplace(np.array([s.sum()]), 1.0 / eps_n)[0])
            n_hat = min(n_hat, bound) if bound else n_hat
            params = {**params, "w": w_rule(n_hat, domain.depth)}
        density, ledger, diag, extras, parts = self._run_core(
            domain, eps_levels, params, ctx, lambda lv, ep: laplace_measure(pyr, lv, ep, ctx.noise)
        )
        diag["w"] = int(params["w"])
        if n_hat is not None:
            diag["w_rule_users"] = n_hat
            ledger.spend(
                "user count (sets w)",
                float(epsilon) - eps_levels,
                composition="sequential",
                note=f"Laplace count of the users (sensitivity 1), {W_COUNT_SHARE:.0%} of epsilon; "
                "w = max(20, 20 n / 200) (w_rule)",
            )
        for note in notes:
            ledger.note_side_information(note)
        if bound:
            ledger.note_side_information(f"a public upper bound of {bound:,} users (users_max), given by the analyst")
        ctx.progress(1.0, "done")
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view(
                "The curator sees every location in the clear; the public sees only the released "
                "sparse reconstruction / heatmap."
            ),
            partition=leaf_rects_from(extras, domain),
            diagnostics=diag,
            extras=extras,
            **parts,
        )


def _cell_rects(cells, level: int, domain) -> np.ndarray:
    """(k, 4) rectangles ``(x0, y0, x1, y1)`` in metres of level-``level`` cells ``[ix, iy]``."""
    c = np.asarray(cells, dtype=np.float64).reshape(-1, 2)
    size = domain.side / (1 << level)
    x0, y0 = domain.x0 + c[:, 0] * size, domain.y0 + c[:, 1] * size
    return np.stack([x0, y0, x0 + size, y0 + size], axis=1)


def leaf_rects_from(extras, domain):
    """The reconstruction's leaves: every left-out cell and the kept cells of the last level."""
    parts = [_cell_rects(cells, lvl, domain) for lvl, cells in extras["left_out_cells"].items()]
    last = max(extras["kept_cells"])
    parts.append(_cell_rects(extras["kept_cells"][last], last, domain))
    return np.concatenate(parts)
