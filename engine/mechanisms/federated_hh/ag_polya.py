"""The adaptive grid (AG, Qardaji et al. 2013) run under distributed DP with the Pólya-share secure
sum, a baseline of Bagdasaryan et al. 2022, Table 1 (its grid sizes from the central AG of
:mod:`engine.mechanisms.central.grids`)."""

from __future__ import annotations

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.grid import Domain
from ...core.params import Param
from ..base import Mechanism, register
from ..capabilities import ZERO_OUT
from ..common import ag_subcell_rects, split_epsilon, spread_rects
from ..noise_model import NoiseModel
from .baselines import distributed_release
from .param_groups import secagg_params
from .protocol import (
    PAPER,
    POLYA_BASIS,
    THREAT_DISTRIBUTED,
    check_secagg,
    degradation_warning,
    exact_sum,
    note_clients,
    secagg_kwargs,
    spend_sharded,
)
from .secure_sum import secure_sum
from .tree import Clients, prepare_clients

CONSISTENT = (
    "no margin: the second level's sizes come from the first-level counts the consistency step reuses, so its noise "
    "is not the Pólya law given the released grid (repeated runs only)"
)


# ============================================================ adaptive grid (AG)
@register
class AdaptiveGridPolya(Mechanism):
    """Adaptive grid of Qardaji, Yang, Li (ICDE 2013) run under the distributed
    Pólya mechanism (Bagdasaryan et al. 2022, Section 6.2, Table 1 "Adaptive-grid"):
    a first query on an ``m1 x m1`` grid (the paper: 10 x 10) with ``alpha eps``;
    each first-level cell with noisy count N' is split into ``m2 x m2`` with
    ``m2 = ceil(sqrt(N' (1 - alpha) eps / c2))`` (the paper: alpha = 0.5, c2 = 10)
    and the second query, a one-hot vector over all sub-cells, uses the rest.
    Both queries use Pólya shares and SecAgg shards (sensitivity 1). Optional
    constrained inference between the levels (Qardaji et al. Section IV-B) with
    the two levels' actual noise variances. Communication: m1^2 + sum m2^2 elements.
    Threat model and guarantee as ``adaptive_hh``; departures: the first-level size is
    fixed (or Qardaji's rule with the public number of users); m1 and every m2 are
    snapped to the power of two nearest in ratio that divides the output resolution
    (``central.snap_to_divisor``: the paper's m1 = 10 and the minimum 10 of Qardaji's rule
    become 8, within a factor sqrt 2 as every snapped size), so every cell is a block of
    whole output pixels and its count lands exactly on them (spreading cells that
    straddle pixels by area smeared single-pixel
    hot spots into their neighbours, as for the central ``ag``); m2 is capped so
    sub-cells are no finer than output pixels; N' <= 0 gives m2 = 1.

    Noise model: with ``consistency`` off, the sub-cells are the released units, each with the
    second query's Pólya standard deviation, exact given the released sub-grid (its noise is drawn
    after m2 is fixed; :func:`.protocol.polya_noise_model`). None with consistency (the default): m2
    is chosen from the first-level count the inference reuses (see the central ``ag``)."""

    key = "ag_polya"
    margin = "closed form"
    margin_note = "the Pólya noise per sub-cell with consistency off; with consistency none (repeats)"
    audit_plan = ZERO_OUT
    label = "Adaptive grid (Qardaji et al.) with Pólya noise (Table 1)"
    family = "distributed"
    guarantee = "epsilon-DP under zero-out user, the number of clients U public (distributed, Pólya shares + SecAgg)"
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    summary = "Two rounds: a coarse noisy grid, then each cell split according to its noisy count."
    paper = PAPER + "; Qardaji, Yang, Li. Differentially private grids for geospatial data. ICDE 2013"
    equations = "Section 6.2 (adaptive grid baseline); Qardaji et al. Section IV"
    params = (
        Param(
            "m1",
            "int",
            10,
            "first-level grid side (the paper: 10), snapped to the nearest power of two dividing the resolution; "
            "0 = Qardaji's max(10, sqrt(U eps / c)/4)",
            min=0,
            max=1024,
        ),
        Param("alpha", "float", 0.5, "share of epsilon spent on the first level", min=0.05, max=0.95),
        Param("c", "float", 10.0, "constant c of Qardaji's first-level rule (m1 = 0)", min=0.1, max=1000.0, log=True),
        Param("c2", "float", 10.0, "constant c2 of the second level (the paper: 10)", min=0.1, max=1000.0, log=True),
        Param("consistency", "bool", True, "constrained inference between the two levels"),
    ) + secagg_params()
    dp_outputs = ("m2_min", "m2_max", "second_level_cells", "noise")
    side_information_keys = ("m1", "users", "effective_epsilon", "warnings", "noise")

    def run(self, data, domain, epsilon, params, ctx):
        from ..central.grids import ag_level1_size, ag_level2_sizes, snap_to_divisor

        eps = check_epsilon(epsilon)
        alpha = float(params["alpha"])
        eps1, eps2 = split_epsilon(eps, alpha)
        c = prepare_clients(data, domain, ctx.rng, multi_location="most_visited")
        U = c.n
        check_secagg(params, U)
        xy = self._client_points(c, domain)
        n = domain.n
        if int(params["m1"]):
            m1 = snap_to_divisor(int(params["m1"]), n)
        else:
            m1 = snap_to_divisor(ag_level1_size(U, eps, float(params["c"]), n), n)
        kw = secagg_kwargs(params)
        s1 = m1 / domain.side
        fx = (xy[:, 0] - domain.x0) * s1
        fy = (xy[:, 1] - domain.y0) * s1
        ix1 = np.clip(fx.astype(np.int64), 0, m1 - 1)
        iy1 = np.clip(fy.astype(np.int64), 0, m1 - 1)
        cell = iy1 * m1 + ix1
        ss1 = secure_sum(ctx, np.arange(U), cell, None, U, m1 * m1, eps1, 1, **kw)
        noisy1 = ss1.total.astype(np.float64)
        m2 = ag_level2_sizes(noisy1, eps2, float(params["c2"]), n // m1, snap=True)
        sizes = m2 * m2
        total_cells = int(sizes.sum())
        offsets = np.zeros(m1 * m1, dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        m2p = m2[cell]
        sx = np.minimum(((fx - ix1) * m2p).astype(np.int64), m2p - 1)
        sy = np.minimum(((fy - iy1) * m2p).astype(np.int64), m2p - 1)
        sub = offsets[cell] + sy * m2p + sx
        ss2 = secure_sum(ctx, np.arange(U), sub, None, U, total_cells, eps2, 1, **kw)
        noisy2 = ss2.total.astype(np.float64)
        owner = np.repeat(np.arange(m1 * m1), sizes)
        est2 = noisy2
        if params["consistency"]:
            v1, v2 = ss1.noise_std**2, ss2.noise_std**2
            u = np.bincount(owner, weights=noisy2, minlength=m1 * m1)
            kv2 = sizes * v2
            v_star = (noisy1 * kv2 + u * v1) / np.maximum(kv2 + v1, 1e-300)
            est2 = noisy2 + ((v_star - u) / sizes)[owner]
        rects = ag_subcell_rects(owner, offsets, m2, m1, n)
        density = spread_rects(rects, est2, n)
        noise = CONSISTENT
        if not params["consistency"] and exact_sum(ss2, params):  # sub-cells: blocks of whole pixels
            inv_cells = spread_rects(rects, np.ones(total_cells), n)  # 1 / the pixels of each pixel's sub-cell
            label = np.rint(spread_rects(rects, np.arange(total_cells, dtype=np.float64), n) / inv_cells)
            noise = NoiseModel.of_cells(density, ss2.noise_std * inv_cells, POLYA_BASIS, label=label.astype(np.int64))
        ledger = Ledger()
        note_clients(
            ledger, "" if int(params["m1"]) else "and Qardaji's first-level size m1 = max(10, sqrt(U eps/c)/4)"
        )
        spend_sharded(ledger, "first-level grid", eps1, ss1, "discrete Laplace via Pólya shares, sensitivity 1")
        spend_sharded(ledger, "second-level grid", eps2, ss2, "discrete Laplace via Pólya shares, sensitivity 1")
        metres = rects * domain.cell
        metres[:, [0, 2]] += domain.x0
        metres[:, [1, 3]] += domain.y0
        eff = ss1.effective_epsilon + ss2.effective_epsilon
        diag = {
            "m1": m1,
            "m2_min": int(m2.min()),
            "m2_max": int(m2.max()),
            "second_level_cells": total_cells,
            "users": U,
            "effective_epsilon": eff,
        }
        w = degradation_warning(eff, eps)
        return distributed_release(
            density,
            domain,
            ledger,
            m1 * m1 + total_cells,
            params,
            2,
            f"two sub-queries: {m1 * m1} + {total_cells:,} elements",
            diag,
            partition=metres,
            warnings=c.notes + ([w] if w else []),
            noise=noise,
        )

    @staticmethod
    def _client_points(c: Clients, domain: Domain) -> np.ndarray:
        """Cell centres of the clients' full-depth cells (what the clients encode)."""
        from ...core.grid import deinterleave

        ix, iy = deinterleave(c.code.astype(np.uint64), domain.depth)
        return np.column_stack([domain.x0 + (ix + 0.5) * domain.cell, domain.y0 + (iy + 0.5) * domain.cell])
