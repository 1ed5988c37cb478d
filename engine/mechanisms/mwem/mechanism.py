"""The MWEM mechanism: T rounds of the exponential mechanism over the range workload, a Laplace measurement and
the multiplicative-weights update (:mod:`.mw`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..capabilities import AuditPlan
from ..common import (
    TOTAL_PARAMS,
    UNIT_PARAM,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
    split_epsilon,
    total_count,
)
from ..dawa.mechanism import Dawa, workload_rects
from .mw import exponential_mechanism, mw_update, rect_answers

_WORKLOAD = {p.name: p for p in Dawa.params}
WORKLOAD_PARAMS = (
    replace(
        _WORKLOAD["workload"],
        help="the range queries MWEM selects from: a sample of all rectangles, or squares as on the Range queries page",
    ),
    replace(_WORKLOAD["workload_queries"], default=2000, help="rectangles in the workload (DPBench: 2,000)"),
    _WORKLOAD["side_min_pct"],
    _WORKLOAD["side_max_pct"],
    _WORKLOAD["workload_seed"],
)
TOTAL = (
    replace(
        TOTAL_PARAMS[0],
        help="how the total n that scales the initial uniform map is obtained: 'noisy' spends a fraction rho of "
        "epsilon on it; 'public' reads the true n as side information (the paper's assumption; the release is then "
        "not epsilon-DP with respect to n)",
        label="total n",
    ),
    TOTAL_PARAMS[1],
)
N_FLOOR = 1.0  # a noisy total below one person is read as one: the updates divide by it


@register
class Mwem(Mechanism):
    """MWEM (Hardt, Ligett, McSherry, "A simple and practical algorithm for differentially private data release",
    NIPS 2012), on the map's cells with a workload of range queries (rectangles of cells).

    A_0 is the uniform map of total n. For rounds t = 1 .. T (``rounds``):

    1. Selection: the exponential mechanism picks a query q_t of the workload with probability proportional to
       exp(eps_s |q(x) - q(A_(t-1))| / 2), eps_s = ``ratio`` x epsilon' / T (the worst-answered queries most
       likely; a query's answer moves by at most 1 per person, so the score's sensitivity is 1).
    2. Measurement: m_t = q_t(x) + Laplace(1 / eps_m), eps_m = (1 - ``ratio``) x epsilon' / T.
    3. Update (multiplicative weights): A_t(c) proportional to A_(t-1)(c) exp(q_t(c) (m_t - q_t(A_(t-1))) / (2n)),
       scaled to total n, q_t(c) = 1 for the cells of the rectangle. As the paper's improvements suggest, every
       round then sweeps the update over all measurements so far, ``passes`` times, in the order they were taken
       (DPBench's 2-D MWEM: 100 sweeps).

    The release is A_T (``output = last``, DPBench's choice) or the paper's average of A_1 .. A_T (``average``).
    Workload (public, from ``workload_seed``): ``workload_queries`` rectangles sampled uniformly from all ranges of
    the grid (default; DPBench's MWEM is handed its 2,000 random range queries, the very ones it is scored on), or
    squares drawn as the Range queries page draws them, as for DAWA (:func:`engine.mechanisms.dawa.mechanism.workload_rects`).

    The total n: the paper takes the number of records as known. By default it is bought here with ``rho`` x
    epsilon (Laplace count; epsilon' = the rest), or read as declared side information with ``total = public``
    (epsilon' = epsilon). A noisy total under 1 is read as 1 (the update divides by n).

    Threat model: a trusted curator sees every location, runs the rounds and publishes the final map (and may
    publish the selected queries and their noisy answers, DP outputs too). Guarantee: epsilon-DP (central) under
    add/remove user (add/remove record with ``unit = record``) with a noisy total: T exponential mechanisms of
    eps_s and T Laplace measurements of eps_m (sensitivity 1) compose sequentially with the total's count to
    epsilon; the updates are post-processing. Unit ``user`` weights each of a user's k locations 1/k, so every
    rectangle's count (and the total) moves by at most 1 per user. In secure mode the selection is OpenDP's
    report-noisy-max (exponential noise, the same epsilon; :func:`.mw.exponential_mechanism`).

    Departures: the paper spends epsilon / (2T) on each selection and each measurement; ``ratio`` = 0.5 is that
    split. DPBench's MWEM also removes a selected query from the candidates; here, as in the paper, a query may
    be selected again (its two measurements both enter the update). The section numbers of the paper are not
    quoted: its text was not reachable from this machine (the search tool holds its abstract), so the
    algorithm is restated from the paper as we know it (Algorithm 1 and its practical improvements).

    Standard error: none in closed form (the update is non-linear in the noisy measurements): repeated runs only.
    """

    key = "mwem"
    margin_note = "no closed form: the update is non-linear in the noisy measurements; estimated from repeats"
    planner = "simulated"
    audit_plan = AuditPlan(
        depth=1,
        params={"rounds": 1, "passes": 1, "rho": 0.5, "workload_queries": 10},
        note="a 2 x 2 map, one round and one update, half of epsilon on the noisy total, 10 rectangles: the person "
        "then moves the total and the one measurement that the target's value is made of (at the defaults, ten "
        "rounds of a twentieth each and a 5 % total drown one person)",
    )
    label = "MWEM (Hardt et al., multiplicative weights)"
    family = "central"
    guarantee = (
        "epsilon-DP (central) under add/remove user (add/remove record with unit = record) with a noisy total; n as "
        "side information otherwise"
    )
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the map (and the measured queries)."
    summary = (
        "Starting from a uniform map, T times: pick privately a range query the map answers badly, measure it with "
        "Laplace noise, and reweight the map multiplicatively towards all the measurements."
    )
    paper = (
        "Hardt, Ligett, McSherry. A simple and practical algorithm for differentially private data release. NIPS 2012"
    )
    equations = (
        "Algorithm 1: exponential mechanism on |q(x) - q(A)|, Laplace measurement, update A(c) * exp(q(c) (m - q(A)) "
        "/ (2n)); repeated updates over all measurements"
    )
    params = (
        (UNIT_PARAM,)
        + TOTAL
        + (
            Param(
                "rounds", "int", 10, "rounds T (queries selected and measured; DPBench's default 10)", min=1, max=200
            ),
            Param(
                "ratio", "float", 0.5, "share of each round's epsilon spent on selecting its query", min=0.05, max=0.95
            ),
            Param(
                "passes",
                "int",
                100,
                "sweeps of the update over all measurements after each round (1 = each measurement once)",
                min=1,
                max=1000,
            ),
            Param(
                "output",
                "choice",
                "last",
                "the released map: 'last' the final A_T (DPBench), 'average' the mean of A_1 .. A_T (the paper's "
                "Algorithm 1)",
                choices=("last", "average"),
            ),
        )
        + WORKLOAD_PARAMS
    )
    dp_outputs = ("total_used", "selected", "measurements")
    side_information_keys = ("total_used",)

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        x = bounded.data.true_histogram(domain)
        ledger = Ledger()
        n_used, eps_rounds = total_count(
            float(x.sum()), eps, params, ledger, ctx.noise, bounded, purpose="to scale the initial uniform map"
        )
        n_hat = max(n_used, N_FLOOR)
        T = int(params["rounds"])
        eps_sel, eps_meas = split_epsilon(eps_rounds, float(params["ratio"]))
        rects = workload_rects(domain, params)
        truth = rect_answers(x, rects)
        A = np.full(x.shape, n_hat / x.size)
        acc = np.zeros(x.shape)
        chosen, measured = [], []
        for t in range(T):
            i = exponential_mechanism(np.abs(truth - rect_answers(A, rects)), eps_sel / T, ctx.noise)
            chosen.append(i)
            measured.append(float(ctx.noise.add_laplace(np.array([truth[i]]), T / eps_meas)[0]))
            A = mw_update(A, rects[chosen], np.array(measured), n_hat, int(params["passes"]))
            acc += A
            ctx.progress((t + 1) / T, f"round {t + 1} of {T}")
            ctx.check_cancelled()
        ledger.spend(
            "query selection", eps_sel, note=f"{T} exponential mechanisms of eps_s = {eps_sel / T:.4g}; {bounded.short}"
        )
        ledger.spend(
            "measurements", eps_meas, note=f"{T} Laplace counts of eps_m = {eps_meas / T:.4g}; {bounded.short}"
        )
        density = A if params["output"] == "last" else acc / T
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "total_used": float(n_hat),
                "rounds": T,
                "epsilon_selection": eps_sel,
                "epsilon_measurement": eps_meas,
                "workload": params["workload"],
                "workload_queries": int(rects.shape[0]),
                "selected": [[int(v) for v in rects[i]] for i in chosen],
                "measurements": measured,
            }
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the map and the measured range queries"),
            diagnostics=diag,
        )
