"""What a trusted curator's release says of itself: its communication (every location uploaded in the
clear), the server's view and the diagnostics every central release starts with."""

from __future__ import annotations

from ..base import Communication, aggregate_view
from ._bounding import Bounded


def curator_communication() -> Communication:
    """Central DP: every user uploads all of its locations in the clear (2 coordinates of 64
    bits each); the trusted curator bounds contributions after receiving them. Counted per
    location: the locations per user are a fact of the true data, which a release does not
    carry (the evaluation's ``comm_*`` metrics multiply by their mean)."""
    return Communication(
        2.0,
        128.0,
        note="each user sends each of its locations to the trusted curator: 2 coordinates (64-bit) per location",
        per_location=True,
    )


def curator_view(what: str):
    """The server's view of a central release: everything, while the public sees ``what``."""
    return aggregate_view(f"The curator sees every location in the clear; the public sees only {what}.")


def curator_diagnostics(eps: float, bounded: Bounded, ctx=None) -> dict:
    """The unit of privacy, the bounding, epsilon and (in a run) the noise source."""
    d = {**bounded.diagnostics(), "epsilon": float(eps)}
    if ctx is not None:
        d["noise_source"] = getattr(ctx.noise, "description", "custom")
    return d
