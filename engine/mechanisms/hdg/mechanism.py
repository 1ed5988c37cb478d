"""The HDG mechanism: users in three groups report through a frequency oracle (:mod:`.oracle`); the server
post-processes the grids and builds the response matrix (:mod:`.server`)."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import EngineError, ParamError
from ...core.grid import deinterleave
from ...core.params import Param
from ..base import Communication, Mechanism, Release, ServerView, register
from ..capabilities import AuditPlan, NoiseCase
from ..federated_hh.tree import prepare_clients
from .grid_estimation import ALPHA1, ALPHA2, GROUPS, guideline, post_process, power_of_two, response_matrix
from .oracle import CW_PRIME, ORACLES, olh_range, oracle_pq, support_likelihood, unbias

PAPER = (
    "Yang, Wang, Li, Cheng, Su. Answering multi-dimensional range queries under local differential privacy. "
    "PVLDB 14(3), 2020 (full version: arXiv 2009.06538)"
)
GROUP_NAMES = ("1-D grid of x", "1-D grid of y", "2-D grid")


def assign_groups(rng: np.random.Generator, users: int) -> np.ndarray:
    """Each user's group (0: the 1-D grid of x, 1: of y, 2: the 2-D grid), a uniformly random partition
    into groups whose sizes differ by at most one."""
    return rng.permutation(np.arange(users) % GROUPS)


def granularities(users: int, eps: float, depth: int, params: dict) -> tuple[int, int, tuple[float, float]]:
    """``(g1, g2, guideline values)``: the parameters when set, else the guideline rounded to powers of
    two; both at most the map's side, ``g2 <= g1``."""
    side = 1 << depth
    real = guideline(users, eps, float(params["alpha1"]), float(params["alpha2"]))
    chosen = []
    for name, g in zip(("g1", "g2"), real):
        fixed = int(params[name])
        if fixed:
            if fixed & (fixed - 1) or not 2 <= fixed <= side:
                raise ParamError(f"{name} must be a power of two between 2 and the map's side {side} (got {fixed})")
            chosen.append(fixed)
        else:
            chosen.append(power_of_two(g, side))
    g1, g2 = chosen
    if g2 > g1:
        if int(params["g2"]) and int(params["g1"]):
            raise ParamError(f"g2 ({g2}) must not exceed g1 ({g1}): each 2-D cell covers whole 1-D cells")
        g2 = g1
    return g1, g2, real


class _HDGPosterior:
    """The attacker's posterior over the response matrix's cells for each user, from one report of that
    user (Bayes with a prior: the released map or uniform). The report is drawn afresh, from the same law
    as the one that entered the estimate, from a per-user seed (:func:`.oracle.support_likelihood`). A
    picklable callable for ``ServerView.candidates``."""

    MAX_CANDIDATES = 4096

    def __init__(self, oracle, eps, group, cell, g1, g2, prior, centres, seed):
        self.oracle, self.eps = oracle, eps
        self.group, self.cell = group, cell
        self.g1, self.g2 = g1, g2
        self.prior, self.centres, self.seed = prior, centres, seed

    def likelihood(self, u: int) -> np.ndarray:
        """The likelihood of each response-matrix cell ``[iy, ix]`` given user ``u``'s report."""
        g, b = int(self.group[u]), self.g1 // self.g2
        k = self.g1 if g < 2 else self.g2**2
        like = support_likelihood(self.oracle, self.eps, k, int(self.cell[u]), np.random.default_rng([self.seed, u]))
        if g == 0:
            return np.broadcast_to(like[None, :], (self.g1, self.g1))
        if g == 1:
            return np.broadcast_to(like[:, None], (self.g1, self.g1))
        return np.repeat(np.repeat(like.reshape(self.g2, self.g2), b, axis=0), b, axis=1)

    def __call__(self, user_idx):
        out = []
        for u in np.atleast_1d(np.asarray(user_idx, dtype=np.int64)):
            post = (self.prior * self.likelihood(int(u))).ravel()
            s = post.sum()
            post = post / s if s > 0 else np.full(post.size, 1.0 / post.size)
            if post.size > self.MAX_CANDIDATES:
                keep = np.argpartition(post, -self.MAX_CANDIDATES)[-self.MAX_CANDIDATES :]
                out.append((self.centres[keep], post[keep] / post[keep].sum()))
            else:
                out.append((self.centres, post))
        return out


@register
class HDG(Mechanism):
    """HDG, hybrid-dimensional grids under local DP (Yang, Wang, Li, Cheng, Su, "Answering
    multi-dimensional range queries under local differential privacy", PVLDB 14(3), 2020; full
    version arXiv 2009.06538), on the two attributes of a location (x, y).

    The equations below are the paper's (its HDG section and its guideline for choosing the
    granularities); the paper's full text was not in the project's corpora when this was written, so
    they were restated from the paper as remembered and checked against the authors' public code
    (read, never copied); no section or equation numbers are quoted for that reason.

    1. **Groups.** The U users are split uniformly at random into m = d + d(d-1)/2 = 3 groups of sizes
       differing by at most one: one reports in a 1-D grid of x (``g1`` equal intervals of the map's
       side), one in a 1-D grid of y (``g1``), one in the 2-D grid (``g2 x g2`` cells).
    2. **Reports.** Each user reports its cell of its group's grid through a frequency oracle with the
       whole epsilon: optimized local hashing (OLH, the paper's; :mod:`.oracle`): hash range
       g' = round(e^eps + 1), keep probability p = e^eps / (e^eps + g' - 1), support probability of a
       non-held cell q = 1/g'. ``oracle = oue`` uses optimized unary encoding instead (p = 1/2,
       q = 1/(e^eps + 1); what the authors' code runs).
    3. **Estimates.** Per cell, f = ((S/n_k) - q) / (p - q) from the support count S of its group's
       n_k users: unbiased, variance about 4 e^eps / (n_k (e^eps - 1)^2).
    4. **Post-processing.** Norm-Sub on every grid (negatives to 0, one constant subtracted from the
       positive cells so the grid sums to 1), then up to ``consistency_rounds`` times (until a round moves
       the grids by less than a thousandth of a user in L1): the consistency step
       (per attribute and 2-D column/row interval I, the weighted average
       T(I) = (T1/b + T2/g2) / (1/b + 1/g2) of the 1-D grid's b = g1/g2 cells and the 2-D grid's g2
       cells, each grid's cells in I moved by an equal share of the difference; :func:`.server.consistency`)
       followed by Norm-Sub.
    5. **Response matrix.** The g1 x g1 matrix that answers 2-D queries: uniform at first, then in each
       sweep every column scaled to its x cell, every row to its y cell and every b x b block to its
       2-D cell (the paper's iterative update, iterative proportional fitting: its limit is the
       maximum-entropy matrix matching the grids), until a sweep moves it by less than one user in L1,
       or ``update_sweeps`` sweeps.
    6. **Guideline** (n = U users, m = 3, alpha1 = 0.7, alpha2 = 0.03 as in the paper):
       g1 = (n (e^eps - 1)^2 alpha1^2 / (2 m e^eps))^(1/3), g2 = sqrt(2 alpha2 (e^eps - 1) sqrt(n / (m e^eps))),
       each rounded to the nearest power of two (at least 2, at most the map's side; g2 <= g1).
       Set ``g1``/``g2`` to fix them instead.
    7. **Answers and map.** A range query sums the response matrix with the uniformity assumption inside
       its cells (as the paper); the released map is U x the matrix spread evenly over the map's cells,
       so the map's rectangle sums are those answers.

    Threat model: the server (the attacker) is untrusted and sees every user's randomised report and
    its group, nothing else; each user's device randomises its own report; no secure aggregation.
    Neighbouring relation: replace user (one person's data replaced by any other; the number of users
    U is public: the server receives every report, and U sets the group sizes and the guideline).
    Guarantee: epsilon-LDP per user: a user sends one report, and OLH's report (H, y) has likelihood
    ratio at most p / ((1 - p)/(g' - 1)) = e^eps between any two inputs (OUE: two bits differ,
    (p/q) ((1-q)/(1-p)) = e^eps); everything after is post-processing. A person with several locations
    reports the cell it visits most (at the map's resolution): the map counts people, each at one
    place, and the guarantee covers all of a person's locations at once (their choice is a function of
    that person's data alone).

    Simulation: the support counts are drawn from their exact law under an ideal hash family,
    Binomial(c, p) + Binomial(n_k - c, q) independently per cell (:mod:`.oracle`; tests/test_hdg.py
    checks it against per-user hashing), so a run costs O(cells), not O(users x cells); secure mode
    draws the binomials exactly on OS entropy. The attacker's view (``candidates``) draws one fresh
    report per user from the same law, from a per-user seed, with a Carter-Wegman hash
    ((a v + b) mod (2^31 - 1)) mod g', and returns the Bayesian posterior over the response matrix's
    cells (prior: the release or uniform; at most 4,096 most likely cells).

    Communication per client: OLH, one value in [g'] and the two 31-bit numbers (a, b) of its
    Carter-Wegman hash; OUE, one bit per cell of its group's grid (g1 or g2^2).

    Departures: d = 2 (the location's x and y), so the response matrix answers every query and the
    paper's estimation for more than two attributes does not arise; a location is first binned at the
    map's resolution (2^L cells per side, the paper's domain size c), and g1, g2 are capped there. The
    guideline's rounding to powers of two and the stopping rule of the update (less than one user
    moved) are the authors' code's; that code also divides users into groups by their order (here:
    at random), renormalises the matrix to n after every cell's update (here: plain proportional
    fitting), builds the matrix at the full domain (here g1 x g1, the same matrix: every update is
    constant inside a g1 x g1 cell) and runs OUE (here OLH by default). Norm-Sub is computed exactly
    (the projection onto the simplex) rather than by repeated subtraction (they differ only when the
    positive cells sum to less than the total: the repeated form never lifts a cell it has set to 0). HDG needs at least 3 users
    (one per group).
    """

    key = "hdg"
    margin_note = "no closed form: the consistency steps and the response matrix's update are not linear"
    audit_plan = AuditPlan(
        depth=1,
        base_users=2,
        note="a 2 x 2 map (both grids' granularities capped at 2) and 2 others in the sink cell: 3 users, one per "
        "group, so the person's report is its group's only one",
    )
    noise_cases = (NoiseCase("hdg", base_users=20),)
    label = "HDG (Yang et al., hybrid-dimensional grids, local DP)"
    family = "local"
    guarantee = "epsilon-LDP (each user's one report is private on its own): replace user, the number of users public"
    neighbouring = "replace user"
    threat_model = (
        "Untrusted server: it sees every user's randomised report (one of three grids per user); no secure aggregation."
    )
    summary = (
        "Users split into three groups; each reports its cell, randomised by local hashing, in a fine 1-D grid "
        "of x, a fine 1-D grid of y or a coarse 2-D grid; the server makes the grids consistent and fits the "
        "finest map that matches all three."
    )
    paper = PAPER + "; Wang, Blocki, Li, Jha. Locally differentially private protocols for frequency estimation. 2017"
    equations = (
        "HDG: user groups, OLH reports, Norm-Sub and the weighted-average consistency step, the response matrix's "
        "iterative update, the guideline for g1 and g2 (alpha1 = 0.7, alpha2 = 0.03)"
    )
    params = (
        Param("g1", "int", 0, "cells per side of the 1-D grids (0: the paper's guideline)", min=0, max=1024),
        Param("g2", "int", 0, "cells per side of the 2-D grid (0: the paper's guideline)", min=0, max=1024),
        Param("alpha1", "float", ALPHA1, "the guideline's alpha1 (non-uniformity inside a 1-D cell)", 1e-3, 10.0),
        Param("alpha2", "float", ALPHA2, "the guideline's alpha2 (non-uniformity inside a 2-D cell)", 1e-4, 10.0),
        Param(
            "oracle",
            "choice",
            "olh",
            "frequency oracle: 'olh' optimized local hashing (the paper's), 'oue' optimized unary encoding",
            choices=ORACLES,
        ),
        Param(
            "consistency_rounds", "int", 100, "largest number of consistency steps, each followed by Norm-Sub", 0, 1000
        ),
        Param("update_sweeps", "int", 100, "largest number of sweeps of the response matrix's update", 1, 10_000),
        Param(
            "attacker_prior",
            "choice",
            "release",
            "prior of the attacker's per-user posterior: the released map or uniform",
            choices=("release", "uniform"),
        ),
    )
    dp_outputs = ("grid_x", "grid_y", "grid_2d", "response_matrix", "consistency_rounds_run", "update_sweeps")
    side_information_keys = ("users", "group_sizes", "g1", "g2", "g1_guideline", "g2_guideline", "communication")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        clients = prepare_clients(data, domain, ctx.rng, multi_location="most_visited")
        users = clients.n
        if users < GROUPS:
            raise EngineError(f"HDG needs at least {GROUPS} users, one per group (got {users})")
        D = domain.depth
        g1, g2, real = granularities(users, eps, D, params)
        ix, iy = deinterleave(clients.code, D)
        group = assign_groups(ctx.rng, users)
        l1, l2 = int(math.log2(g1)), int(math.log2(g2))
        cell = np.where(group == 0, ix >> (D - l1), iy >> (D - l1))
        cell = np.where(group == 2, (iy >> (D - l2)) * g2 + (ix >> (D - l2)), cell)
        p, q = oracle_pq(params["oracle"], eps)
        sizes = np.bincount(group, minlength=GROUPS)
        ctx.progress(0.1, "users report through the frequency oracle")
        est = []
        for k, cells in enumerate((g1, g1, g2 * g2)):
            n_k = int(sizes[k])
            support = ctx.noise.report_counts(np.bincount(cell[group == k], minlength=cells), n_k, p, q)
            est.append(unbias(support, n_k, p, q) / n_k)
        ctx.check_cancelled()
        rounds = int(params["consistency_rounds"])
        fx, fy, f2, rounds = post_process(est[0], est[1], est[2].reshape(g2, g2), rounds, 1e-3 / users)
        ctx.progress(0.5, "the response matrix")
        m, sweeps = response_matrix(fx, fy, f2, int(params["update_sweeps"]), 1.0 / users)
        r = domain.n // g1
        density = np.repeat(np.repeat(m * users, r, axis=0), r, axis=1) / r**2
        ledger = Ledger()
        ledger.spend(
            "local reports",
            eps,
            composition="parallel",
            group="users",
            note="each user randomises one report, in the grid of its group",
        )
        ledger.note_side_information(
            "the number of users U (the server receives every report; U sets the three groups' sizes and the "
            "guideline's g1 and g2)"
        )
        s = domain.side / g1
        fine_x, fine_y = np.meshgrid(np.arange(g1), np.arange(g1))
        centres = np.column_stack([domain.x0 + (fine_x.ravel() + 0.5) * s, domain.y0 + (fine_y.ravel() + 0.5) * s])
        prior = m / m.sum() if params["attacker_prior"] == "release" and m.sum() > 0 else np.full_like(m, 1 / g1**2)
        seed = int(ctx.rng.integers(0, 2**62))
        view = ServerView(
            "per_user",
            "The server sees each user's randomised report in its group's grid, from which it can tell which cells "
            "the user most likely was in.",
            candidates=_HDGPosterior(params["oracle"], eps, group, cell, g1, g2, prior, centres, seed),
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=_communication(params["oracle"], eps, g1, g2),
            server_view=view,
            diagnostics={
                "g1": g1,
                "g2": g2,
                "g1_guideline": real[0],
                "g2_guideline": real[1],
                "users": users,
                "group_sizes": {name: int(n) for name, n in zip(GROUP_NAMES, sizes)},
                "oracle": params["oracle"],
                "p": p,
                "q": q,
                "consistency_rounds_run": rounds,
                "update_sweeps": sweeps,
            },
            warnings=tuple(clients.notes),
            extras={
                "grid_x": fx * users,
                "grid_y": fy * users,
                "grid_2d": f2 * users,
                "response_matrix": m * users,
            },
        )


def _communication(oracle: str, eps: float, g1: int, g2: int) -> Communication:
    """What one client uploads (module docstring); OUE's vector length averaged over the three groups."""
    if oracle == "olh":
        g = olh_range(eps)
        seed_bits = 2 * math.ceil(math.log2(CW_PRIME))
        bits = seed_bits + math.ceil(math.log2(g))
        return Communication(1.0, float(bits), note=f"one value in [{g}] and its hash's seed: {bits} bits")
    mean = (2 * g1 + g2 * g2) / GROUPS
    return Communication(mean, mean, note=f"one bit per cell of the group's grid: {g1} or {g2 * g2} bits")
