"""The Privelet mechanism: Haar coefficients of the histogram (:mod:`.haar`), weighted Laplace noise, inverse."""

from __future__ import annotations

import math

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ..base import Mechanism, Release, register
from ..capabilities import AuditPlan
from ..common import (
    LAPLACE_SD,
    UNIT_PARAM,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
)
from ..noise_model import Correlated, NoiseModel
from . import haar


@register
class Privelet(Mechanism):
    """Privelet (Xiao, Wang, Gehrke, "Differential privacy via wavelet transforms", ICDE 2010), with the Haar
    wavelet transform (HWT) of its Section IV, applied to the 2-D grid by the standard decomposition (one axis
    after the other) as its multi-dimensional extension prescribes.

    1. The histogram M of the 2^L x 2^L cells is transformed into its Haar coefficients C (:mod:`.haar`: the base
       coefficient, the mean; per decomposition-tree node, half the difference of its children's means; per
       axis, then as products across the two axes).
    2. Each coefficient c gets Laplace noise of scale lambda / W(c), W the Haar weight function (the entries
       under the node, m for the base coefficient; the product over the axes) and lambda = rho / epsilon with
       rho = (1 + L)^2 the transform's generalized sensitivity with respect to W (the paper's lemma on weighted
       Laplace noise: the sum of W(c) |change of c| when one entry moves by 1 is at most rho).
    3. The noisy histogram is the inverse transform of the noisy coefficients: each cell is the base
       coefficient plus, over its ancestors in each axis's tree, the coefficients with the sign of its side.
       The Haar coefficients are a basis, so every set of noisy coefficients is the transform of exactly one
       histogram and the reconstruction is consistent by construction (the paper's nominal transform needs
       its mean-subtraction step for that; the HWT does not).

    Neighbours. The paper's lemma reads epsilon = 2 rho / lambda for its neighbouring datasets, which differ
    in the value of one tuple (two entries of M change). Here neighbours add or remove one record (one entry
    moves by 1, DPBench's unit), so lambda = rho / epsilon: the noise DPBench's ``privelet2D`` adds, (L + 1)^2
    / epsilon on the unnormalised coefficients.

    Threat model: a trusted curator sees every location and publishes the noisy map; the adversary sees the
    release. Guarantee: epsilon-DP (central) under add/remove user (add/remove record with ``unit = record``):
    the Laplace mechanism on the weighted coefficients W(c) c, whose L1 sensitivity is rho; the inverse is
    post-processing. Unit ``user`` weights each of a user's k locations 1/k, so one user moves M by at most 1
    in L1 and the weighted coefficients by at most rho (the triangle inequality over the user's cells).

    Departures: none in the algorithm. The paper's hybrid Privelet+ (no transform along small nominal axes)
    does not arise on a map's two ordinal axes. Negative cells are kept (the estimate is unbiased).

    Standard error: exact and data-independent. Every cell is the base coefficient plus one signed coefficient
    per ancestor along each axis, so its variance is 2 lambda^2 u^2 with u = (m^2 + 2)/(3 m^2) per axis
    (:func:`.haar.entry_variance_factor`), the same for every cell (``Release.noise``, one unit per cell). Cells
    share coefficients, so their errors are correlated: the noise model says so (a cell has its margin, a region
    of several cells none).
    """

    key = "privelet"
    data_independent = True
    margin = "closed form"
    margin_note = "Laplace(lambda / W) per Haar coefficient, through the inverse transform: per cell only"
    planner = "simulated"
    audit_plan = AuditPlan(
        depth=1,
        note="a 2 x 2 map: the noise scale is (1 + depth)^2 / epsilon, 4 / epsilon here (25 / epsilon on 16 x 16, "
        "spread over the cells' shared coefficients, hides one person at a single cell from the test)",
    )
    label = "Privelet (Xiao et al., Haar wavelets)"
    family = "central"
    guarantee = "epsilon-DP (central) under add/remove user (add/remove record with unit = record)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy map."
    summary = (
        "The map's Haar wavelet coefficients get Laplace noise scaled to each coefficient's weight (coarse "
        "coefficients, which many cells share, get less noise), then the inverse transform rebuilds the map."
    )
    paper = "Xiao, Wang, Gehrke. Differential privacy via wavelet transforms. ICDE 2010"
    equations = (
        "Section IV: Haar wavelet transform, weight function W_Haar, generalized sensitivity 1 + log2 m per axis; "
        "Laplace(lambda / W(c)) per coefficient, lambda = rho / epsilon under add/remove; inverse transform"
    )
    params = (UNIT_PARAM,)
    dp_outputs = ("noise",)

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        x = bounded.data.true_histogram(domain)
        m = domain.n
        rho = haar.sensitivity2d(m)
        lam = rho / eps
        w = haar.weights2d(m)
        ctx.progress(0.2, "transforming")
        noisy = ctx.noise.add_laplace(w * haar.forward2d(x), lam) / w
        ledger = Ledger()
        ledger.spend(
            "Haar coefficients",
            eps,
            note=f"Laplace(lambda / W(c)) per coefficient, lambda = {rho:g} / eps (generalized sensitivity); "
            + bounded.short,
        )
        ctx.check_cancelled()
        density = haar.inverse2d(noisy)
        sd = LAPLACE_SD * lam * haar.entry_variance_factor(m)
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "generalized_sensitivity": rho,
                "lambda": lam,
                "levels_per_axis": int(math.log2(m)),
            }
        )
        basis = "Laplace(lambda / W) per Haar coefficient, through the (linear) inverse transform"
        shared = Correlated("the cells share Haar coefficients")
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the noisy map (equivalently its noisy Haar coefficients)"),
            diagnostics=diag,
            noise=NoiseModel.of_cells(density, sd, basis, covariance=shared),
        )
