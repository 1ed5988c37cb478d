"""The Laplace baselines of Ghazi et al. 2023, Section 4 (Figure 1): Laplace noise on every cell, or
only the top t% cells kept, published with the paper's Gaussian heatmap
(:func:`engine.metrics.gaussian_heatmap`)."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.params import Param
from ..base import Mechanism, Release, aggregate_view, register
from ..capabilities import AuditPlan
from ..central.identity import FILL_AUDIT_NOTE, FILL_PARAM, TOPT_RULE_HELP
from ..common import curator_communication
from ..noise_model import NO_CLOSED_FORM, NoiseModel
from ..outputs import Heat
from .mechanism import DENSITY_PARAM, SIGMA_PARAM, heatmap_extras, user_distribution_sum


# --------------------------------------------------------------------- baselines
def _laplace_baseline(s, eps, rng, top_t=None, fill="bayes"):
    """The shared Laplace baseline of the central module, negatives zeroed. ``top_t``: None
    keeps every cell, > 0 the top t%; 0 the default rule
    (:func:`engine.mechanisms.central.identity.topt_release`), returned whole.
    Returns (noisy counts, cells kept, the default rule's release or None)."""
    from ..central.identity import keep_top, laplace_baseline, top_t_count, topt_release

    if top_t == 0:
        tt = topt_release(s, eps, rng, fill=fill)
        return tt.density, int(np.count_nonzero(tt.kept)), tt
    noisy = laplace_baseline(s, eps, rng, clip=False)
    kept = int(noisy.size) if top_t is None else top_t_count(noisy.size, float(top_t))
    return np.clip(keep_top(noisy, kept), 0.0, None), kept, None


class _LaplaceGaussBase(Mechanism):
    family = "central"
    guarantee = "epsilon-DP (central, per user, under add/remove user: each user's distribution has L1 norm <= 1)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees every user's locations; the public sees the noisy heatmap."
    paper = "Liu, Xia, Duchowski, Bailey, Holmqvist, Jain (ETRA 2019), as the baseline of Ghazi et al. 2023 (Sec. 4)"
    equations = "Ghazi et al. 2023 Sec. 4 (Baselines), Sec. 2.3 (heatmap)"
    dp_outputs = (
        "nonzero_cells",
        "empty",
        "cells_kept",
        "top_t_percent",
        "distribution",
        "heat",
        "noisy_counts",
        "noise",
        "fill",
    )

    def _release(self, data, domain, epsilon, params, ctx, top_t):
        """Noise model, with ``density = "estimate"``: every cell a unit of sqrt(2)/epsilon where it kept its
        noisy count, blank where it was zeroed (negative, or outside the top t), as for ``identity`` with
        clipping. None for the filtered heatmap: the filter averages the zeroed (clipped) counts, whose spread
        has no closed form; the dashboard estimates it from runs."""
        s, notes = user_distribution_sum(data, domain)
        noisy, kept, tt = _laplace_baseline(s, epsilon, ctx.noise, top_t, params.get("fill", "bayes"))
        dist, heat, ok = heatmap_extras(noisy, params["sigma"], domain)
        total = float(noisy.sum())
        density = noisy if params["density"] == "estimate" else heat * total
        extras = {"distribution": dist, "noisy_counts": noisy}
        noise = NO_CLOSED_FORM
        ledger = Ledger()
        if tt is None:
            if params["density"] == "estimate":  # a kept cell is its noisy count; a zeroed one is 0 by choice
                se = np.where(noisy > 0, math.sqrt(2.0) / float(epsilon), np.nan)
                noise = NoiseModel.of_cells(
                    noisy, se, "Laplace(1/eps) per cell: sqrt(2)/eps; cells set to 0 after the noise have none"
                )
            ledger.spend(
                "cell counts",
                float(epsilon),
                note="Laplace(1/eps) on every cell of s = sum of user distributions (L1 sensitivity 1)",
            )
        else:
            if params["density"] == "estimate":
                noise = tt.noise_model()
            ledger.spend("total count", tt.eps_total, note="Laplace count of s's total; its remainder fills the rest")
            ledger.spend(
                "cell counts",
                tt.eps_cells,
                note="Laplace(1/eps) on every cell of s = sum of user distributions (L1 sensitivity 1)",
            )
        for note in notes:
            ledger.note_side_information(note)
        diag = {
            "sigma_cells": params["sigma"] * domain.n,
            "nonzero_cells": int((noisy > 0).sum()),
            "empty": not ok,
            "noise_source": getattr(ctx.noise, "description", "custom"),
            "cells_kept": kept,  # by the top-t thresholding (all cells without it)
        }
        if top_t is not None:
            diag["top_t_percent"] = 100.0 * kept / noisy.size
        if tt is not None:
            diag.update({"threshold": tt.threshold, "fill": tt.fill})
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view(
                "The curator sees every location in the clear; the public sees only the noisy heatmap."
            ),
            diagnostics=diag,
            extras=extras,
            heat=Heat(heat, params["sigma"] * domain.n),
            noise=noise,
        )


@register
class LaplaceGauss(_LaplaceGaussBase):
    """Laplace baseline of Ghazi et al. (2023, Section 4; from [LXD+19]) on the heatmap pipeline.

    ``s = sum_i p_i`` (each user's distribution has L1 norm <= 1), ``Lap(1/eps)`` added to
    every cell, negative cells set to zero, then the Gaussian heatmap of Section 2.3.
    Threat model: trusted curator; the public sees the heatmap. Guarantee: epsilon-DP per
    user (one Laplace mechanism of L1 sensitivity 1; zeroing and filtering are
    post-processing). Departure: ``sigma`` is ours (the paper does not state it).
    """

    key = "laplace_gauss"
    margin = "closed form"
    margin_note = "Laplace(1/eps) per cell with density = estimate; the filtered heatmap has none (repeats)"
    label = "Laplace per cell + Gaussian heatmap (baseline)"
    summary = "Laplace noise on every cell of the per-user-normalised histogram, negatives zeroed, Gaussian filter."
    params = (SIGMA_PARAM, DENSITY_PARAM)

    def run(self, data, domain, epsilon, params, ctx):
        return self._release(data, domain, epsilon, params, ctx, None)


@register
class LaplaceTopTGauss(_LaplaceGaussBase):
    """Top-t% thresholding variant of the Laplace baseline (Ghazi et al. 2023, Section 4).

    As :class:`LaplaceGauss`, but only the largest noisy cells are kept, the rest are
    zeroed; then the Gaussian heatmap. ``t > 0`` keeps ``ceil(t% of the cells)`` (at least
    one); the paper used t = 0.01% and 0.001%, chosen for 256 x 256 cells and 200 users.
    Default (``t = 0``, departure): t follows the noise
    (:func:`engine.mechanisms.central.identity.topt_release`): 5% of epsilon counts the total,
    every cell above one-false-cell-in-a-hundred-maps (:func:`~engine.mechanisms.central.identity.topt_threshold`)
    is kept, and the rest of the total is shared out over the other cells by empirical-Bayes weights
    from their noisy counts (:mod:`engine.mechanisms.central.ebfill`; evenly, the uniform map, where
    those show no structure) instead of zeroing them (the fixed 0.01% kept 7 of 65,536 cells whatever
    the users: up to 3,000x a uniform map's MSE; BENCHMARKS.md, "defaults on data nobody tuned them
    on"). ``diagnostics["cells_kept"]`` holds the number kept.
    Guarantee and threat model as the baseline (the choice of t is post-processing of the
    noisy counts; the default's total and cells compose sequentially, 5% + 95% of epsilon).
    Departure: the rounding of t% of the cells to a count is ours (the paper does not say).
    """

    key = "laplace_topt_gauss"
    margin = "closed form"
    margin_note = "kept cells: Laplace(1/eps_cells); the others share the remainder (density = estimate)"
    # the top-t rule keeps an empty cell with probability 1/C and the person's cell about e^eps / C: rare events
    audit_plan = AuditPlan(runs=100_000, params={"fill": "even"}, note=FILL_AUDIT_NOTE)
    label = "Laplace top-t% + Gaussian heatmap (baseline)"
    summary = "The Laplace baseline keeping only the top t% noisy cells, then a Gaussian filter."
    params = (
        Param("t", "float", 0.0, TOPT_RULE_HELP, min=0.0, max=100.0, label="top t (%)"),
        FILL_PARAM,
        SIGMA_PARAM,
        DENSITY_PARAM,
    )

    def run(self, data, domain, epsilon, params, ctx):
        return self._release(data, domain, epsilon, params, ctx, float(params["t"]))
