"""The local-DP comparison of Bagdasaryan et al. 2022, Figure 1: k-ary randomized response or
optimized unary encoding over the grid's cells at the same epsilon."""

from __future__ import annotations

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.noise import rr_kary_unbias_counts, rr_keep_probability, unary_encoding_pq, unary_encoding_unbias
from ...core.params import Param
from ..base import Communication, Mechanism, Release, ServerView, register
from ..capabilities import AuditPlan, NoiseCase
from ..noise_model import NoiseModel
from .baselines import pixel_codes_at, single_location_codes
from .protocol import PAPER


# ==================================================================== local DP
class _LDPPosterior:
    """The attacker's posterior over grid cells for each user, from that user's
    local report alone (Bayes with a prior: the released estimate or uniform).
    A picklable callable for ``ServerView.candidates``."""

    MAX_CANDIDATES = 4096

    def __init__(self, encoding, centres, prior, p, q, reports=None, cells=None, seed=0):
        self.encoding = encoding
        self.centres = centres
        self.prior = prior
        self.p, self.q = p, q
        self.reports = reports
        self.cells = cells
        self.seed = seed

    def __call__(self, user_idx):
        out = []
        K = self.prior.size
        for u in np.atleast_1d(np.asarray(user_idx, dtype=np.int64)):
            if self.encoding == "krr":
                like = np.full(K, self.q)
                like[self.reports[u]] = self.p
            else:  # OUE: regenerate this user's bit vector from its own seed
                g = np.random.default_rng([self.seed, int(u)])
                bits = g.random(K) < self.q
                bits[self.cells[u]] = g.random() < self.p
                ratio = self.p * (1 - self.q) / (self.q * (1 - self.p))
                like = np.where(bits, ratio, 1.0)
            post = self.prior * like
            s = post.sum()
            post = post / s if s > 0 else np.full(K, 1.0 / K)
            if K > self.MAX_CANDIDATES:
                keep = np.argpartition(post, -self.MAX_CANDIDATES)[-self.MAX_CANDIDATES :]
                out.append((self.centres[keep], post[keep] / post[keep].sum()))
            else:
                out.append((self.centres, post))
        return out


@register
class LocalGridRR(Mechanism):
    """Local-DP comparison (Bagdasaryan et al. 2022, Section 2.2 and Figure 1):
    every user randomises its own grid cell at level ``level`` before sending it,
    with the same epsilon. Encodings: k-ary randomized response (direct
    encoding; keep probability e^eps/(e^eps + K - 1)) or optimized unary
    encoding (Wang et al., USENIX Security 2017; p = 1/2, q = 1/(e^eps + 1)); the
    server unbiases the report counts, ``(c - U q)/(p - q)``. Threat model: the
    server (the attacker) sees every user's report; its view is per user, with
    ``candidates`` giving the Bayesian posterior over cells from one report
    (prior: the released estimate, clipped and normalised, or uniform; at most
    4,096 most likely cells). Guarantee: epsilon-LDP per report. OUE's aggregate
    is drawn exactly as binomial counts; the per-user report shown to the
    attacker is drawn from the same law from a per-user seed. Users with
    several locations report their most visited cell. Secure mode: both
    encodings are drawn exactly on OS entropy (``ctx.noise``; engine.core.noise).

    Noise model: the report cells are the released units (each spread over its pixels). A cell
    with c of the U users gets ``Bin(c, p) + Bin(U - c, q)`` reports (one per user for k-RR; for
    OUE each user's bit of the cell), so the unbiased estimate has variance
    ``U q (1 - q)/(p - q)^2 + c (1 - p - q)/(p - q)``. It depends on the true c; the model plugs
    in the released estimate clipped at 0 (post-processing of the DP output, nothing private
    read): exact in expectation where the estimate is positive, conservative for near-empty cells
    (by (1 - p - q)/(p - q) x the mean of the estimate's negative part, relatively about
    0.4 (1 - p - q)/sqrt(U q (1 - q)) for an empty cell). k-RR's cells are also slightly
    negatively correlated (one report per user: covariance of order U q^2/(p - q)^2), which a
    sum of cells' variances ignores; OUE's cells are independent."""

    key = "ldp_grid"
    margin = "closed form"
    margin_note = "the binomial variance of each report cell's unbiased count (plug-in)"
    audit_plan = AuditPlan(
        depth=1,
        base_users=0,
        note="a 2 x 2 map: the report is one of K = 4 cells (the default level is capped at the map's depth), so "
        "the randomized response's probabilities are large and the test has power",
    )
    noise_cases = (
        NoiseCase("ldp_grid_krr", {"level": 1, "encoding": "krr"}, base_users=20),
        NoiseCase("ldp_grid_oue", {"level": 1, "encoding": "oue"}, base_users=20),
    )
    label = "Local DP grid (randomized response / unary encoding)"
    family = "local"
    guarantee = "epsilon-LDP (each report is private on its own): replace user, the number of reports public"
    neighbouring = "replace user"
    dp_outputs = ("noise",)
    side_information_keys = ("users",)
    threat_model = "Untrusted server: it sees every user's randomised report; no secure aggregation."
    summary = "Each user randomises its own cell before sending it; the server unbiases the counts."
    paper = PAPER + "; Wang, Blocki, Li, Jha. Locally differentially private protocols for frequency estimation. 2017"
    equations = "Section 2.2, Figure 1 (local-DP comparison)"
    params = (
        Param("level", "int", 6, "grid level of the reports (2^l cells per side)", min=1, max=10),
        Param(
            "encoding",
            "choice",
            "krr",
            "'krr': k-ary randomized response (one cell index per user); 'oue': optimized unary encoding "
            "(one bit per cell per user)",
            choices=("krr", "oue"),
        ),
        Param(
            "attacker_prior",
            "choice",
            "release",
            "prior of the attacker's per-user posterior: the released map or uniform over cells",
            choices=("release", "uniform"),
        ),
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        D = domain.depth
        lv = min(int(params["level"]), D)
        K = 4**lv
        codes, U, notes = single_location_codes(data, domain, ctx.rng)
        cells = codes >> (2 * (D - lv))
        reports = None
        if params["encoding"] == "krr":
            reports = ctx.noise.randomized_response_kary(cells, K, eps)
            est = rr_kary_unbias_counts(np.bincount(reports, minlength=K), U, K, eps)
            p = rr_keep_probability(eps, K)
            q = (1 - p) / (K - 1)
            comm = Communication(1.0, float(2 * lv), note=f"one cell index of {2 * lv} bits")
        else:
            true = np.bincount(cells, minlength=K)
            est = unary_encoding_unbias(ctx.noise.unary_encoding_counts(true, U, eps), U, eps)
            p, q = unary_encoding_pq(eps)
            comm = Communication(float(K), float(K), note=f"one bit per cell: {K:,} bits")
        block = 4 ** (D - lv)
        density = est[pixel_codes_at(D, lv)] / block
        var = U * q * (1 - q) / (p - q) ** 2 + np.clip(est, 0.0, None) * (1 - p - q) / (p - q)
        stderr = np.sqrt(var)[pixel_codes_at(D, lv)] / block  # plug-in, see the docstring
        ledger = Ledger()
        ledger.spend(
            "local reports", eps, composition="parallel", group="users", note="each user randomises its own report"
        )
        ledger.note_side_information("the number of reports U (the server receives each one; it unbiases the counts)")
        from ...core.grid import deinterleave

        ix, iy = deinterleave(np.arange(K, dtype=np.uint64), lv)
        s = domain.side / (1 << lv)
        centres = np.column_stack([domain.x0 + (ix + 0.5) * s, domain.y0 + (iy + 0.5) * s])
        if params["attacker_prior"] == "release":
            prior = np.clip(est, 0, None)
            prior = prior / prior.sum() if prior.sum() > 0 else np.full(K, 1.0 / K)
        else:
            prior = np.full(K, 1.0 / K)
        seed = int(ctx.rng.integers(0, 2**62))
        post = _LDPPosterior(params["encoding"], centres, prior, p, q, reports=reports, cells=cells, seed=seed)
        view = ServerView(
            "per_user",
            "The server sees each user's randomised report, from which it can tell which cells the user most likely "
            "was in.",
            candidates=post,
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=comm,
            server_view=view,
            partition=None,
            diagnostics={
                "level": lv,
                "cells": K,
                "users": U,
                "p": p,
                "q": q,
            },
            warnings=tuple(notes),
            noise=NoiseModel.of_blocks(
                density,
                stderr,
                block,
                "binomial variance of the unbiased report count, the released estimate (>= 0) as the cell's count",
            ),
        )
