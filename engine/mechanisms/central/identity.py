"""Laplace per cell, ``identity`` (Dwork et al. 2006), with negatives clipped and the top-t% filter of
Ghazi et al. 2023, Section 4 (``identity_topt``; :func:`laplace_baseline` is also the sparse-EMD
family's baseline), and ``uniform``, the noisy total spread evenly."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import ParamError
from ...core.params import Param
from ..base import Mechanism, Release, register
from .common import (
    LAPLACE_SD,
    TOTAL_PARAMS,
    UNIT_PARAM,
    _base_diagnostics,
    _check_eps,
    _noise_source,
    _server_view,
    blank_postprocessed,
    bound_contributions,
    curator_communication,
)


# ================================================================== Identity
def top_t_count(n_cells: int, top_t: float) -> int:
    """Number of cells kept by top-t% thresholding: ceil(t/100 * cells), at least 1."""
    if not (0 < top_t <= 100):
        raise ParamError(f"top t must be a percentage in (0, 100] (got {top_t})")
    return int(min(n_cells, max(1, math.ceil(n_cells * top_t / 100.0 - 1e-9))))


def laplace_baseline(
    truth: np.ndarray,
    eps: float,
    rng,
    clip: bool = True,
    top_t: float | None = None,
    sensitivity: float = 1.0,
) -> np.ndarray:
    """The Laplace baseline of Ghazi et al. (2023, Section 4, "Baselines"): add
    Laplace(sensitivity/eps) to every cell of ``truth``; with ``top_t`` (a percentage,
    e.g. 0.01 for the paper's top-0.01%) keep only the ``top_t_count`` largest noisy
    cells and zero the rest; with ``clip`` zero the negative cells. eps-DP for an
    L1 sensitivity of ``sensitivity`` (1 for counts, or for per-user distributions
    summing to 1 under add/remove-one-user). ``rng``: numpy Generator or NoiseSource.
    """
    eps = _check_eps(eps)
    noise = _noise_source(rng)
    truth = np.asarray(truth, dtype=np.float64)
    noisy = noise.add_laplace(truth, float(sensitivity) / eps)
    if top_t is not None and top_t > 0:
        noisy = keep_top(noisy, top_t_count(noisy.size, float(top_t)))
    if clip:
        noisy = np.clip(noisy, 0.0, None)
    return noisy


def keep_top(noisy: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest cells of ``noisy``, the others zeroed (post-processing)."""
    flat = np.asarray(noisy, dtype=np.float64).ravel()
    if k >= flat.size:
        return noisy
    keep = np.argpartition(flat, flat.size - k)[flat.size - k :]
    out = np.zeros_like(flat)
    out[keep] = flat[keep]
    return out.reshape(np.shape(noisy))


TOPT_PAPER_PERCENT = 0.01  # Ghazi et al. 2023 Sec. 4.1: top 0.01% of 256 x 256 cells (7) for 200 users


def topt_rule_count(noisy: np.ndarray, eps: float, sensitivity: float = 1.0) -> int:
    """Cells the top-t baselines keep by default (Ghazi et al. 2023, Section 4).

    Every cell whose noisy count exceeds ``tau = (sensitivity / eps) ln(C / 2)``, the
    level a Laplace(sensitivity/eps) draw passes with probability ``1 / C``, so that
    about one empty cell of the ``C`` gets through on noise alone; and at least the
    paper's top 0.01% (7 of 65,536 cells). Why: the paper chose t = 0.01% for 256 x 256
    cells and 200 users per region, and reports that the thresholding variants worsen
    as the users grow ("a larger number of users cause an increase in the sparsity") or
    the grid changes (too few cells at 64, too many at 512; Appendix E). A fixed share
    of the grid kept 7 cells for 20,000 users on 65,536 cells, 27-1,370x a uniform map's
    MSE at eps = 10 on two synthetic cities (issue 22 saw 130-1,700x), and scaling the
    paper's 7 cells per 200 users to 656 for 20,000 still gave 4.7-11.5x: on a diffuse
    city most occupied cells hold a user or two, and how many of them stand out depends on
    the noise, not on the users. The noise level is what tells a cell with data from an
    empty one; with it the same runs give 0.11-0.32x. On check-in data like the paper's
    (200 users, 256 x 256; bench sparse_emd) the rule keeps about 7 cells at eps = 5, the
    paper's own number, about 50 at eps = 10, and the floor of 7 at eps <= 2 (where no
    cell stands out). Post-processing of the noisy map: no budget, no user count."""
    C = int(np.size(noisy))
    tau = float(sensitivity) / float(eps) * math.log(max(C / 2.0, 1.0))
    return int(min(C, max(top_t_count(C, TOPT_PAPER_PERCENT), np.count_nonzero(np.asarray(noisy) > tau))))


@register
class Identity(Mechanism):
    """Identity: Laplace(1/epsilon) noise on every cell of the true histogram.

    Paper: the Laplace mechanism (Dwork, McSherry, Nissim, Smith 2006), the "Identity"
    baseline of DPBench (Hay et al., SIGMOD 2016). Variants from Ghazi et al. (2023,
    Section 4, "Baselines"): negatives set to zero (``clip_negatives``), and the
    thresholding variant that keeps only the top t% noisy cells (``top_t`` as a
    percentage; the paper used 0.01% and 0.001%).

    Threat model: a trusted curator sees every location and publishes the noisy
    histogram. Guarantee: epsilon-DP (central) for the chosen ``unit``; the
    histogram has L1 sensitivity 1, so one Laplace(1/epsilon) draw per cell
    composes in parallel. Clipping and thresholding are post-processing.

    Unit of privacy (see the module docstring): ``user`` (default) counts each of a
    user's k locations 1/k, so the histogram is the sum of the users' normalised
    distributions and one user changes it by at most 1 in L1: user-level epsilon-DP,
    which is Ghazi et al.'s unit (each user's distribution normalised). ``record``:
    plain location counts, a user with k locations protected at k*epsilon.

    Departures: top-t keeps ceil(t% of the cells), at least one cell (the paper does
    not say how t% of a cell count is rounded).

    Standard error (issue 16): ``extras["stderr"]`` is sqrt(2)/epsilon in every cell, the
    standard deviation of the Laplace(1/epsilon) draw, exact and the same whatever the data
    (in secure mode OpenDP's Laplace, rounded to a fine float lattice: the same to within that
    rounding). Cells that clipping or top-t set to 0 get NaN: their 0 is a choice made on the
    noisy value, biased towards 0, not noisy around the truth, so no noise-based margin applies.
    A kept cell's SE is its noise's; keeping selects draws above a threshold, so over repeated
    runs a cell whose truth is near the threshold also spreads by being kept or not.
    ``stderr_cells`` = 1: the cells' noises are independent.
    """

    key = "identity"
    label = "Identity (Laplace per cell)"
    family = "central"
    guarantee = "user-level epsilon-DP (central) under add/remove user; add/remove record with unit = record"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy histogram."
    summary = "Add Laplace noise of scale 1/epsilon to every cell's count."
    paper = "Dwork et al. 2006; DPBench (Hay et al. 2016); top-t variant: Ghazi et al. 2023"
    equations = "Laplace mechanism (Dwork et al. 2006, Prop. 1); Ghazi et al. 2023 Section 4 (baselines)"
    params = (
        UNIT_PARAM,
        Param("clip_negatives", "bool", False, "set negative noisy counts to zero (post-processing)"),
        Param(
            "top_t",
            "float",
            0.0,
            "keep only the top t% of cells by noisy count and zero the rest (Ghazi et al. Section 4); 0 = off",
            min=0.0,
            max=100.0,
            label="top t (%)",
        ),
    )
    dp_outputs = ("cells_kept", "stderr")

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        truth = bounded.data.true_histogram(domain)
        raw = laplace_baseline(truth, eps, ctx.noise, clip=False)
        kept, top_t = self._cells_kept(raw, eps, float(params["top_t"]))
        noisy = keep_top(raw, kept)
        if params["clip_negatives"]:
            noisy = np.clip(noisy, 0.0, None)
        stderr = blank_postprocessed(np.full(raw.shape, LAPLACE_SD / eps), noisy, raw)
        ledger = Ledger()
        ledger.spend(
            "cell counts", eps, composition="parallel", group="cells", note=f"Laplace(1/eps) per cell; {bounded.short}"
        )
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "noise_scale": 1.0 / eps,
                "cells": int(truth.size),
                "clip_negatives": bool(params["clip_negatives"]),
                "top_t_percent": top_t,
                "cells_kept": kept,
                "stderr_basis": "Laplace(1/eps) per cell: sqrt(2)/eps; cells set to 0 after the noise have none",
            }
        )
        return Release(
            density=noisy,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=_server_view("the noisy histogram"),
            diagnostics=diag,
            extras={"stderr": stderr, "stderr_cells": 1},
        )

    def _cells_kept(self, noisy: np.ndarray, eps: float, top_t: float) -> tuple[int, float | None]:
        """(cells kept, t in %): top t% when ``top_t > 0``, else every cell."""
        if top_t > 0:
            return top_t_count(noisy.size, top_t), top_t
        return int(noisy.size), None


TOPT_RULE_HELP = (
    "0 = the default rule: keep every cell whose noisy count exceeds ln(cells/2)/epsilon (about one empty cell "
    "passes on noise alone), and at least the paper's top 0.01% (7 of 256x256 cells, chosen for 200 users); "
    "the number kept is in the diagnostics ('cells_kept'). > 0: keep exactly the top t% (the paper used 0.01 "
    "and 0.001)"
)


@register
class IdentityTopT(Identity):
    """Identity with top-t% thresholding: the "baseline with top t%" of Ghazi et al.
    (2023, Section 4 and Figures 1-3): Laplace(1/epsilon) per cell, negatives zeroed,
    then only the top t% noisy cells kept. ``top_t > 0`` keeps exactly that percentage
    (the paper reports 0.01% and 0.001%, chosen for 256 x 256 cells and 200 users).

    Default (``top_t = 0``, departure): t follows the noise, :func:`topt_rule_count`:
    every cell whose noisy count exceeds ``ln(C/2)/epsilon`` is kept (about one empty
    cell of the C passes on noise alone), and at least the paper's 0.01% of the cells.
    The paper's fixed 0.01% kept 7 of 65,536 cells whatever the users and was
    130-1,700x worse than a uniform map in MSE at eps = 10 with 20,000 users (issue 22);
    on check-in data like the paper's the rule keeps about the paper's 7 cells at
    eps = 5. The number of cells kept is in ``diagnostics["cells_kept"]``.

    Same threat model, guarantee, unit of privacy (``user`` by default: Ghazi et al.'s
    per-user normalised histogram) and departures as ``identity`` (thresholding, with
    the rule's choice of t, is post-processing of the noisy histogram); a separate key
    so comparisons can show both baselines side by side.
    """

    key = "identity_topt"
    label = "Identity + top-t% threshold (Ghazi et al. baseline)"
    summary = "Laplace noise per cell, then keep only the top cells (those above the noise) and zero the rest."
    params = (
        UNIT_PARAM,
        Param("clip_negatives", "bool", True, "set negative noisy counts to zero (post-processing)"),
        Param("top_t", "float", 0.0, TOPT_RULE_HELP, min=0.0, max=100.0, label="top t (%)"),
    )

    def _cells_kept(self, noisy: np.ndarray, eps: float, top_t: float) -> tuple[int, float | None]:
        """(cells kept, t in %): top t% when ``top_t > 0``, else :func:`topt_rule_count`."""
        if top_t > 0:
            return top_t_count(noisy.size, top_t), top_t
        kept = topt_rule_count(noisy, eps)
        return kept, 100.0 * kept / noisy.size


# =================================================================== Uniform
@register
class Uniform(Mechanism):
    """Uniform: the total count spread evenly over all cells.

    DPBench / DPComp (Hay et al., SIGMOD 2016): the data-independent floor; an
    algorithm whose error is close to Uniform's learns nothing about the shape.
    Threat model: trusted curator. Guarantee: with ``total = noisy``, epsilon-DP
    (the whole budget buys one Laplace(1/epsilon) count of the total); with
    ``total = public`` the true total is side information (declared in the ledger),
    no budget is spent, and the release is not private with respect to N.

    Unit of privacy: ``user`` (default) counts each of a user's k locations 1/k, so
    the total is the number of users and one user moves it by at most 1 (user-level);
    ``record``: the number of locations (a user with k locations at k*epsilon).

    Departures: a negative noisy total is set to zero (post-processing).

    Standard error (issue 16): with ``total = noisy``, ``extras["stderr"]`` is sqrt(2)/epsilon
    spread over the C cells, sqrt(2)/(epsilon C) per cell (the one Laplace draw moves every cell
    together: ``stderr_cells`` = C), NaN when the noisy total was set to 0; with ``total = public``
    0 (no noise). The release's error is mostly its bias (the map is flat), which no SE shows.
    """

    key = "uniform"
    label = "Uniform (total spread evenly)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central) on the total under add/remove user (add/remove record with unit = "
        "record); none if public"
    )
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees one number (the total)."
    summary = "Estimate only the total and assume locations are spread evenly."
    paper = "DPBench (Hay et al. 2016)"
    equations = "DPBench data-independent baseline (Uniform)"
    params = (UNIT_PARAM, TOTAL_PARAMS[0])
    dp_outputs = ("total_used", "stderr")
    side_information_keys = ("total_used",)

    def run(self, data, domain, epsilon, params, ctx):
        eps = _check_eps(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        n_true = float(bounded.data.true_histogram(domain).sum())
        ledger = Ledger()
        if params["total"] == "public":
            ledger.note_side_information(f"the true {bounded.total_name} N (spread evenly; no budget spent)")
            n_used = n_true
        else:
            n_used = max(float(ctx.noise.add_laplace(n_true, 1.0 / eps)), 0.0)
            ledger.spend("total count N", eps, note=f"Laplace(1/eps) on the {bounded.total_name}; {bounded.short}")
        cells = domain.n * domain.n
        diag = _base_diagnostics(eps, bounded, ctx)
        diag.update({"total_used": n_used, "total": params["total"]})
        if params["total"] == "public":
            sd = 0.0
            diag["stderr_basis"] = "no noise: the true total spread evenly"
        else:
            sd = LAPLACE_SD / eps / cells if n_used > 0 else math.nan
            diag["stderr_basis"] = "one Laplace(1/eps) total spread over every cell: sqrt(2)/(eps x cells)"
        return Release(
            density=np.full((domain.n, domain.n), n_used / cells),
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=_server_view("the total count"),
            diagnostics=diag,
            extras={"stderr": np.full((domain.n, domain.n), sd), "stderr_cells": cells},
        )
