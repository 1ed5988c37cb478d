"""Classical central-DP baselines (DPBench / DPComp)."""

from __future__ import annotations

from ..accounting import Ledger
from ..params import Param
from .base import Communication, Mechanism, Release, aggregate_view, register


@register
class Identity(Mechanism):
    """Identity: Laplace(1/epsilon) noise on every cell of the true histogram.

    Threat model: a trusted curator sees every location and publishes the noisy
    histogram. Guarantee: epsilon-DP (central), one Laplace draw per cell,
    parallel composition over disjoint cells.
    """

    key = "identity"
    label = "Identity (Laplace per cell)"
    family = "central"
    guarantee = "epsilon-DP (central)"
    threat_model = "A trusted curator sees all locations; the public sees the noisy histogram."
    summary = "Add Laplace noise of scale 1/epsilon to every cell's count."
    paper = "Dwork et al. 2006; DPBench (Hay et al. 2016)"
    params = (Param("clip_negatives", "bool", False, "set negative noisy counts to zero"),)

    def run(self, data, domain, epsilon, params, ctx):
        truth = data.true_histogram(domain)
        noisy = truth + ctx.noise.laplace(1.0 / epsilon, truth.shape)
        if params["clip_negatives"]:
            noisy = noisy.clip(min=0)
        ledger = Ledger()
        ledger.spend("cell counts", epsilon, composition="parallel", group="cells", note="Laplace(1/eps) per cell")
        return Release(
            density=noisy,
            domain=domain,
            ledger=ledger,
            communication=Communication(2.0, 128.0, note="each user sends its location (2 coordinates) to the curator"),
            server_view=aggregate_view(
                "The curator sees every location in the clear; the public sees only the noisy histogram."
            ),
        )
