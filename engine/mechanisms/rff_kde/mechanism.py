"""Federated kernel density estimation: plain (Algorithm 1), with random Fourier
features (Algorithm 2, Algorithm 3's bandwidth rescaling, Lemmas 3-4), and with
geo-indistinguishability (Definition 4.1, Eq. 18), after Zong, Yang, Ley, Butts and
Markopoulou, "Privacy by Projection: Federated Population Density Estimation by
Projecting on Random Features", PoPETs 2023(1).

The numerics live beside this module (:mod:`.kde`, :mod:`.localisation`, :mod:`.curve`,
:mod:`.datasets`); this module wires them into the mechanism protocol. Shared conventions:

* Users are locations: every row of the dataset inside the public region is one
  (virtual) user, as the paper does with check-ins (Section 4.1.2). Rows outside the
  region are not queried. A row weight multiplies that user's contribution.
* The server's grid is the run's domain grid (cell centres). The released
  ``density`` is the averaged surface rescaled so that it sums to the number of
  users (the sum of weights): estimated counts per cell. If the surface sums to
  <= 0 (possible with few users and random features), it is converted with the kernel
  mass instead: ``count = f * N * cell^2 / (2 pi h^2)`` (the Gaussian kernel's
  integral is ``2 pi h^2``); the diagnostics say which.
* The attacker's grid: each user's response surface is evaluated on the domain's
  cell centres at ``min(depth, 8)`` (at most 256 x 256 points; the query grid itself
  up to depth 8), reported in ``release.extras["attack_grid"]``.
* ``server_view`` is ``"per_user"``: ``surface(user)`` is what that user sent (on the
  attack grid), ``candidates(users)`` the attacker's guesses of Section 4.2.2 (grid
  local maxima, plateaus whole, kept within a factor 1.1 of the global maximum,
  weights = normalised heights); ``engine.metrics.privacy_distance`` then computes
  the privacy score of Eq. 16 (weighted mean distance). ``user`` is the dense index of
  ``data.user_index()``; when a dataset has user ids, a person's locations are
  separate virtual users (the paper's setting) and the view pools their candidates,
  each location's weights scaled by 1/(number of the person's locations), and shows
  the mean of their surfaces: the server is assumed to link one device's reports.
  ``release.diagnostics`` carries the Eq. 16 score over a sample of virtual users
  (``attack_users``), the literal printed form of Eq. 16 (with its extra 1/K_i, see
  :mod:`.localisation`), the 0-feature baseline and the utility (Spearman against the
  full-data KDE, Section 4.2.1).
* No per-cell standard error in closed form: the random features' error at a cell and
  the geo-indistinguishable displacements' smoothing both depend on where the users are, and the
  surface is rescaled by the data's own total, so the spread is not a function of public scales;
  the dashboard estimates it from repeated seeded runs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.grid import Domain
from ...core.noise import planar_lattice_step
from ...core.params import Param
from ..base import Communication, Mechanism, Release, ServerView, register
from ..capabilities import MOVE, NoiseCase
from ..noise_model import Measurements
from . import curve, kde, localisation
from .view import FederatedKDEView, Users

PAPER = (
    "Zong, Yang, Ley, Butts, Markopoulou. Privacy by Projection: Federated Population Density Estimation "
    "by Projecting on Random Features. PoPETs 2023(1), 309-324."
)
RULES = ("fraction of side", "metres", "k-NN (non-private)")
H0_DIVISOR = 5  # Algorithm 3 with n = 1: the server's bandwidth h is 5 h0


# ==================================================================== params
def _bandwidth_params(default_k: int = 200) -> tuple[Param, ...]:
    return (
        Param(
            "bandwidth_rule",
            "choice",
            "fraction of side",
            "how the server picks the kernel bandwidth h: a fraction of the (public) region's side, a value in "
            "metres, or Section 4.2.4's rule (mean k-th nearest-neighbour distance of a 10% sample of users), "
            "which reads raw locations: a non-private step, recorded as side information",
            choices=RULES,
            label="bandwidth rule",
        ),
        Param("h_frac", "float", 0.05, "bandwidth as a fraction of the region's side", 0.001, 0.5, log=True),
        Param("h_m", "float", 500.0, "bandwidth in metres", 1.0, 1e6, log=True, label="bandwidth (m)"),
        Param("knn_k", "int", default_k, "k of the k-NN bandwidth rule (paper: 200 synthetic, 500 real)", 1, 100_000),
        Param(
            "attack_users",
            "int",
            500,
            "virtual users attacked for the Eq. 16 privacy score in the diagnostics (0 = skip)",
            0,
            100_000,
        ),
    )


def resolve_bandwidth(params: dict, domain: Domain, xy: np.ndarray, rng: np.random.Generator, ledger: Ledger):
    """The server's bandwidth in metres and a sentence on its privacy status."""
    rule = params["bandwidth_rule"]
    if rule == "fraction of side":
        h = float(params["h_frac"]) * domain.side
        return h, f"h = {params['h_frac']:g} x the public region's side (public)"
    if rule == "metres":
        return float(params["h_m"]), "h set in metres by the analyst (public)"
    h = kde.knn_bandwidth(xy, int(params["knn_k"]), rng)
    text = (
        f"bandwidth h = {h:.1f} m from the mean {int(params['knn_k'])}-th nearest-neighbour distance of a 10% "
        "sample of users' raw locations (Zong et al. Section 4.2.4): a non-private step, no budget spent"
    )
    ledger.note_side_information(text)
    return h, text


def _parse_multiples(text: str) -> list[float]:
    out = []
    for part in str(text or "").replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise ParamError(
                f"extra bandwidths: {part!r} is not a number (give multiples of h0, e.g. '9, 13')"
            ) from None
        if not (math.isfinite(v) and 0 < v <= 1000):
            raise ParamError(f"extra bandwidths must be multiples of h0 in (0, 1000] (got {part})")
        out.append(v)
    if len(out) > 8:
        raise ParamError("at most 8 extra bandwidths")
    return out


# ============================================================ shared pieces
def _counts(surface_sum: np.ndarray, total: float, h: float, cell: float) -> tuple[np.ndarray, str]:
    """Server's averaged surface -> estimated counts per cell (see the module docstring)."""
    tot = float(surface_sum.sum())
    if tot > 0:
        return surface_sum * (total / tot), "averaged surface rescaled to sum to the number of users"
    return (
        surface_sum * (cell * cell / (2 * math.pi * h * h)),
        "surface sums to <= 0: converted with the kernel mass (f N cell^2 / (2 pi h^2))",
    )


def _attack_grid(domain: Domain) -> tuple[np.ndarray, np.ndarray, dict]:
    n = localisation.attack_cells(domain)
    xs, ys = kde.axes(domain, n)
    return xs, ys, {"x0": domain.x0, "y0": domain.y0, "side": domain.side, "n": n}


def _attack_diagnostics(view: FederatedKDEView, users: Users, m: int, rng: np.random.Generator) -> dict:
    """Eq. 16 over ``m`` virtual users drawn with ``rng`` (weighted mean and literal form),
    against the 0-feature baseline (mean distance to every attack-grid point)."""
    m = min(int(m), len(users.xy))
    if m <= 0:
        return {"attacked_users": 0}
    rows = np.sort(rng.choice(len(users.xy), size=m, replace=False))
    truth = users.xy[rows]
    cands = view.row_candidates(rows)
    z, lit = localisation.eq16_scores(cands, truth)
    zero = localisation.zero_feature_distance(truth, view.xs, view.ys)
    ok = np.isfinite(z)
    zm = float(np.where(ok, z, zero).mean())  # refusing users: the attacker knows only the region
    return {
        "attacked_users": m,
        "privacy_eq16_m": zm,
        "privacy_eq16_literal_m": float(np.nanmean(lit)) if ok.any() else None,
        "zero_feature_m": float(zero.mean()),
        "privacy_vs_zero_features": zm / float(zero.mean()) if zero.mean() > 0 else None,
        "mean_candidates": float(np.mean([len(c[1]) for c in cands])),
    }


def _utility(estimate_fn, users: Users, h: float, domain: Domain, density: np.ndarray, xs, ys) -> tuple[float, str]:
    """Spearman of the estimate against the full-data KDE (Section 4.2.1) on the attack grid."""
    if len(xs) == domain.n:
        est = density
    else:
        est = estimate_fn(xs, ys)
    ref = kde.kde_grid_sum(users.xy, h, xs, ys, users.weights)
    return curve.spearman_raw(ref, est), f"{len(xs)} x {len(xs)} grid"


_COMMON_THREAT = (
    "Malicious server (Section 3.3): it picks the grid and the bandwidth(s), sees every user's response "
    "surface on the grid and has unlimited computation; users never send their location and may refuse queries "
    "outside a public policy. No trusted curator, no secure aggregation."
)


ATTACK_SURFACE_COST = 4  # local-maxima scan of a surface, in units of one feature's cos term


def _attack_work(params: dict, depth: int, features: int = 0) -> float:
    """The time estimate's W of the per-user attack: attacked users x attack-grid points x (B + 4), in 1e6."""
    from ...metrics import PRIVACY_MAX_USERS

    cells = localisation.attack_cells(Domain(0.0, 0.0, 1.0, depth)) ** 2
    return (int(params["attack_users"]) + PRIVACY_MAX_USERS) * cells * (features + ATTACK_SURFACE_COST) / 1e6


def _release(density, domain, ledger, n_queries, view, diagnostics, extras, measurements=None) -> Release:
    cells = domain.n * domain.n
    comm = Communication(
        float(cells * n_queries),
        float(64 * cells * n_queries),
        rounds=int(n_queries),
        note=f"one 64-bit value per grid point ({domain.n} x {domain.n}) per answered query",
    )
    return Release(
        density=density,
        domain=domain,
        ledger=ledger,
        communication=comm,
        server_view=view_to_server(view),
        diagnostics=diagnostics,
        extras=extras,
        measurements=measurements,
    )


def view_to_server(view: FederatedKDEView) -> ServerView:
    if view.refused:
        desc = "Every user refused the query (Lemma 3 policy): the server received nothing per user."
    elif view.mode == "rff":
        desc = (
            f"The server sees each user's projection on B = {view.n_features} random Fourier features evaluated on "
            "its grid (bands repeating across the region); the attacker guesses the surface's top local maxima."
        )
    else:
        desc = "The server sees each user's exact Gaussian kernel on its grid: its peak is at the location it used."
    return ServerView("per_user", desc, candidates=view.candidates, surface=view.surface)


# =============================================================== mechanisms
@register
class FederatedKDE(Mechanism):
    """Federated KDE (Zong et al. 2023, Section 3.1, Algorithm 1, Eqs. 1 and 5).

    Each user evaluates its Gaussian kernel ``k_h(g, d_i) = exp(-|g - d_i|^2 / (2h^2))``
    at every grid point and sends the surface; the server averages the surfaces
    (``(1/N) sum_i G_h(d_i)``, Eq. 1). Threat model: a malicious server that sees each
    user's surface; the peak of the surface is at the user's location (Fig. 2), so
    this is the paper's worst case for privacy and best case for utility. Guarantee:
    none. Bandwidth: as chosen by ``bandwidth_rule`` (Section 4.2.4's k-NN rule is
    non-private and recorded as side information).

    Departures: the released density is the averaged surface rescaled to counts (see
    the module docstring); the attack grid is capped at 256 x 256.
    """

    key = "federated_kde"
    cost_variants = ({"attack_users": 0}, {"attack_users": 2000})
    margin = "none"
    margin_note = "no noise: a non-private reference, the same map at every seed"
    audit_plan = replace(MOVE, runs=1000)
    label = "Federated KDE (Zong et al.)"
    family = "federated"
    guarantee = "none: each user's kernel surface reveals its location (the worst case for privacy)"
    neighbouring = "none"
    threat_model = _COMMON_THREAT
    summary = "Each phone evaluates a Gaussian bump centred on itself on the server's grid; the server averages them."
    paper = PAPER
    equations = "Section 3.1, Algorithm 1, Eqs. 1, 5; attack Section 4.2.2, Eq. 16"
    uses_epsilon = False
    params = _bandwidth_params()
    dp_outputs = ("density_scaling",)  # no privacy claim: its released outputs
    side_information_keys = ("h_m", "bandwidth")  # the k-NN bandwidth rule reads raw locations (declared)

    @classmethod
    def cost_features(cls, params: dict, depth: int, n_points: int) -> tuple[float, float]:
        return 1.0, _attack_work(params, depth)

    def run(self, data, domain, epsilon, params, ctx):
        users = Users(data, domain)
        ledger = Ledger()
        h, h_note = resolve_bandwidth(params, domain, users.xy, ctx.rng, ledger)
        ctx.progress(0.1, "users evaluate their kernels")
        xs, ys = kde.axes(domain)
        s = kde.kde_grid_sum(users.xy, h, xs, ys, users.weights)
        density, scale_note = _counts(s, users.total, h, domain.cell)
        ctx.check_cancelled()
        axs, ays, grid = _attack_grid(domain)
        view = FederatedKDEView(users, "kde", users.xy, h, axs, ays)
        ctx.progress(0.6, "attacking users")
        arng = np.random.default_rng(ctx.rng.integers(0, 2**63))
        diag = {"h_m": h, "bandwidth": h_note, "density_scaling": scale_note}
        ctx.record_evaluation(
            users=len(users.xy),
            users_outside_region=users.outside,
            utility_spearman_vs_full_kde=1.0,
            **_attack_diagnostics(view, users, params["attack_users"], arng),
        )
        return _release(density, domain, ledger, 1, view, diag, {"attack_grid": grid})


@register
class FederatedRFFKDE(Mechanism):
    """Federated RFF KDE (Zong et al. 2023, Sections 2.3 and 3.2-3.5, Algorithms 2-3,
    Eqs. 3-4, 6-7, Lemmas 1-4).

    Each user draws ``B`` frequencies once, ``omega0_b ~ N(0, I / h0^2)`` with the
    server's base bandwidth ``h0 = h / 5`` (Algorithm 3, n = 1), keeps them on the
    device, and for a query at bandwidth ``h'`` rescales them to ``(h0 / h') omega0``
    (so ``omega ~ N(0, I/h'^2)``). It returns ``(1/B) sum_b cos(omega_b . (g - d))`` at
    every grid point (Eq. 7 over B); the server averages (Eq. 6), which converges to
    the KDE as N grows for any B (Section 3.4). ``B = 0`` is the paper's 0-feature
    baseline (a constant answer: best privacy, no utility).

    User-side policy (public, hence applied identically by every user, so a refusal is
    unanimous; refusals are listed in the diagnostics):

    * Lemma 3: refuse a bandwidth above ``sqrt(gamma) l / (2 pi j)``, ``l`` the region's
      side, which guarantees at least ``j`` bands across the region with probability
      ``1 - C(gamma) = exp(-gamma/2)`` per feature;
    * Lemma 4: when the server asks for several bandwidths (``extra_bandwidths``, in
      multiples of ``h0``), answer only ``h' = (4n+1) h0`` so that bands at different
      bandwidths overlap (Fig. 7); the main query is ``5 h0 = h``.

    Threat model: malicious server seeing every user's surface at every answered
    bandwidth, unlimited computation. Guarantee: no differential privacy; privacy by
    projection (Lemmas 1-2: the location is only known up to its equivalence class of
    bands), measured empirically by the Eq. 16 attack.

    Departures: the paper's experiments apply neither policy (they use h = 0.55 units on
    our regions of side 5 and 12 units for them, which the default Lemma 3 policy refuses on the
    smaller one): turn ``lemma3_policy`` off to reproduce them. Every user uses the
    same ``B``. Extra-bandwidth surfaces are released in ``extras`` (density of the main
    query only). Released density and attack grid: see the module docstring.
    """

    key = "federated_rff_kde"
    cost_variants = ({"B": 1}, {"B": 8}, {"attack_users": 0}, {"attack_users": 2000})
    audit_plan = replace(MOVE, runs=1000, test_runs=100)
    label = "Federated RFF KDE (Zong et al.)"
    family = "federated"
    guarantee = "no DP; privacy by projection on B random Fourier features (location hidden among repeating bands)"
    neighbouring = "none"
    threat_model = _COMMON_THREAT + " Each user's random frequencies never leave the device."
    summary = (
        "Each phone projects its location on a few random waves (random Fourier features) and sends that pattern: "
        "it peaks on bands across the whole region, so the server cannot tell on which band the user is, yet the "
        "average over many users converges to the density."
    )
    paper = PAPER
    equations = (
        "Section 2.3 Eqs. 2-4; Section 3.2 Algorithm 2, Eqs. 6-7; Section 3.5 Lemmas 1-4, Algorithm 3; "
        "attack Section 4.2.2 Eq. 16"
    )
    uses_epsilon = False
    params = (
        Param("B", "int", 2, "random features per user (0 = the 0-feature baseline)", 0, 50, label="features B"),
        *_bandwidth_params(),
        Param("lemma3_policy", "bool", True, "users refuse bandwidths above the Lemma 3 bound", label="Lemma 3 policy"),
        Param(
            "gamma",
            "float",
            0.5,
            "Lemma 3's gamma: at least j bands with probability 1 - C(gamma) = exp(-gamma/2) per feature",
            1e-4,
            100.0,
            log=True,
        ),
        Param("bands_j", "int", 2, "Lemma 3's j: bands that must cross the region (paper: at least 2)", 1, 1000),
        Param(
            "extra_bandwidths",
            "str",
            "",
            "other bandwidths the server also asks for, as multiples of h0 = h/5, e.g. '9, 13' (Lemma 4 allows 4n+1)",
        ),
        Param(
            "lemma4_policy", "bool", True, "users answer only bandwidths (4n+1) h0 (Lemma 4)", label="Lemma 4 policy"
        ),
    )

    dp_outputs = ("density_scaling", "bandwidth_surfaces")  # no privacy claim: its released outputs
    # what the bandwidth decides, when the k-NN rule reads it off raw locations (declared)
    side_information_keys = (
        "h_m",
        "h0_m",
        "bandwidth",
        "lemma3_prob_j_bands_at_h",
        "bandwidth_queries",
        "queries_answered",
        "queries_refused",
        "refusals",
        "warning",
        "communication",
    )

    @classmethod
    def cost_features(cls, params: dict, depth: int, n_points: int) -> tuple[float, float]:
        """Each location costs B features at every answered bandwidth."""
        b = int(params.get("B", 0))
        return max(b, 1) * (1 + len(_parse_multiples(params["extra_bandwidths"]))), _attack_work(params, depth, b)

    def run(self, data, domain, epsilon, params, ctx):
        users = Users(data, domain)
        ledger = Ledger()
        h, h_note = resolve_bandwidth(params, domain, users.xy, ctx.rng, ledger)
        b = int(params["B"])
        h0 = h / H0_DIVISOR
        extra = _parse_multiples(params["extra_bandwidths"])
        bound = kde.lemma3_max_bandwidth(domain.side, float(params["gamma"]), int(params["bands_j"]))
        queries = []
        for k in dict.fromkeys([float(H0_DIVISOR), *extra]):
            hq = k * h0
            n4 = kde.lemma4_index(hq, h0)
            reasons = []
            if params["lemma4_policy"] and n4 is None:
                reasons.append(f"{k:g} h0 is not (4n+1) h0 (Lemma 4)")
            if params["lemma3_policy"] and b > 0 and hq >= bound:  # Lemma 3: h must be smaller than the bound
                reasons.append(f"h = {hq:.1f} m exceeds the Lemma 3 bound {bound:.1f} m")
            queries.append(
                {"multiple_of_h0": k, "h_m": hq, "lemma4_n": n4, "accepted": not reasons, "reason": "; ".join(reasons)}
            )
        main = queries[0]
        # omega0 = z / h0 drawn once per user; a query at h' uses (h0/h') omega0 = z / h'
        z = ctx.rng.standard_normal((len(users.xy), b, 2))
        xs, ys = kde.axes(domain)
        axs, ays, grid = _attack_grid(domain)
        extras: dict = {"attack_grid": grid, "bandwidth_queries": queries, "bandwidth_surfaces": {}}

        def estimate(hq, gx, gy):
            if b == 0:
                return np.full((len(gy), len(gx)), users.total / (len(gx) * len(gy)))
            return kde.rff_grid_sum(users.xy, z / hq, gx, gy, users.weights) / b

        ctx.progress(0.1, "users project their locations on random features")
        scale_note = "users refused: nothing to average"
        if main["accepted"]:
            density, scale_note = _counts(estimate(h, xs, ys), users.total, h, domain.cell)
        else:
            density = np.zeros((domain.n, domain.n))
        for q in queries[1:]:
            ctx.check_cancelled()
            if q["accepted"]:
                extras["bandwidth_surfaces"][f"{q['h_m']:.6g}"] = _counts(
                    estimate(q["h_m"], xs, ys), users.total, q["h_m"], domain.cell
                )[0]
        ctx.check_cancelled()
        view = FederatedKDEView(users, "rff", users.xy, h, axs, ays, z=z, refused=not main["accepted"])
        ctx.progress(0.6, "attacking users")
        arng = np.random.default_rng(ctx.rng.integers(0, 2**63))
        refusals = [q for q in queries if not q["accepted"]]
        diag = {
            "B": b,
            "h_m": h,
            "h0_m": h0,
            "bandwidth": h_note,
            "lemma3_bound_m": bound,
            "lemma3_confidence": kde.lemma3_confidence(float(params["gamma"])),
            "lemma3_prob_j_bands_at_h": kde.lemma3_band_probability(h, domain.side, int(params["bands_j"])),
            "queries_answered": sum(q["accepted"] for q in queries),
            "queries_refused": len(refusals),
            "refusals": [f"h = {q['h_m']:.1f} m: {q['reason']}" for q in refusals],
            "density_scaling": scale_note,
        }
        ctx.record_evaluation(
            users=len(users.xy),
            users_outside_region=users.outside,
            users_refusing_main_query=0 if main["accepted"] else len(users.xy),
        )
        if main["accepted"] and b > 0:
            u, g = _utility(lambda gx, gy: estimate(h, gx, gy), users, h, domain, density, axs, ays)
            ctx.record_evaluation(utility_spearman_vs_full_kde=u, utility_grid=g)
        ctx.record_evaluation(**_attack_diagnostics(view, users, params["attack_users"], arng))
        if not main["accepted"]:
            diag["warning"] = (
                f"Every user refused the main query: h = {h:.1f} m exceeds the Lemma 3 bound {bound:.1f} m for a "
                f"{domain.side:.0f} m region (gamma = {params['gamma']:g}, j = {params['bands_j']}). Lower the "
                "bandwidth, raise gamma or lower j, or turn the policy off."
            )
        n_ans = sum(q["accepted"] for q in queries)
        return _release(density, domain, ledger, n_ans, view, diag, extras)


@register
class GeoIndKDE(Mechanism):
    """Geo-indistinguishability + federated KDE (Zong et al. 2023, Section 4.2.3,
    Definition 4.1, Eq. 18; Andres et al., CCS 2013).

    Each person reports at most ``m = locations_per_person`` of its locations inside the
    region (a public cap; a person with more has ``m`` of them drawn uniformly at random);
    each reported location is moved by planar Laplace noise with density
    ``eps'^2/(2 pi) exp(-eps' |z|)``, ``eps' = eps / m`` (``eps`` PER METRE; expected
    displacement ``2/eps'`` metres), then runs Algorithm 1 from the noisy location. The
    run's epsilon is read per km by default (``epsilon_unit``), so the dashboard slider's stops,
    0.01-10, span city-scale displacements (200 km to 200 m); ``per metre`` reads it
    as the paper states it.
    Threat model: malicious server seeing each user's kernel surface, hence its noisy
    location. Guarantee, per person (the user-level unit of the other mechanisms):
    ``eps``-geo-indistinguishability (``eps d``-privacy) for all of a person's reported
    locations together: two persons whose locations pair up at most ``d`` metres apart give
    output distributions within a factor ``e^(sum_j (eps/m) d_j) <= e^(eps d)`` (sequential
    composition of the ``m`` reports; the ledger books ``m`` entries of ``eps/m``) — a
    metric privacy notion, not epsilon-DP. Locations that the noise pushes outside the
    region still contribute (their kernels' tails). The density is rescaled to the number
    of reports the server received (declared side information).

    Departures: as :class:`FederatedKDE` (density scaling, attack grid). The paper
    noises every check-in at ``eps``, which protects one
    check-in, not a person (a person with k check-ins at ``k eps d``). Noise: seeded numpy
    (Andres et al.'s polar method); in secure mode the lattice construction of
    :mod:`engine.core.noise` (exact, on OS entropy: locations snapped to a lattice of step at
    most ``1/(1000 eps')``, which adds at most ``sqrt 2 eps' u <= 0.0015`` to ``eps' d``).
    """

    key = "geoind_kde"
    cost_variants = ({"attack_users": 0}, {"attack_users": 2000})
    audit_plan = MOVE
    noise_cases = (NoiseCase("geoind_kde", {"attack_users": 0}, base_users=0, metric_move_m=1000.0, float_attack=True),)
    label = "Geo-indistinguishability + federated KDE"
    family = "federated"
    guarantee = (
        "epsilon-geo-indistinguishability per person (epsilon per km by default, per metre as in the paper: the "
        "epsilon_unit parameter): a person's at most m reported locations each get epsilon/m, so two persons whose "
        "locations pair up at most d apart are e^(eps d)-close; replace user"
    )
    neighbouring = "replace user"
    threat_model = _COMMON_THREAT + " Each user perturbs its own location with planar Laplace noise first."
    summary = (
        "Each phone jitters its location with planar Laplace noise (mean displacement 2/epsilon km, as epsilon is "
        "per km by default), then sends its bump."
    )
    paper = PAPER + " Andres, Bordenabe, Chatzikokolakis, Palamidessi. Geo-indistinguishability. CCS 2013."
    equations = "Section 4.2.3 Definition 4.1, Eqs. 17-18; Algorithm 1; attack Eq. 16"
    uses_epsilon = True
    params = (
        Param(
            "epsilon_unit",
            "choice",
            "per km",
            "unit of the run's epsilon: 'per km' (epsilon 1 = 2 km mean displacement) or 'per metre' (as in the paper)",
            choices=("per km", "per metre"),
        ),
        Param(
            "locations_per_person",
            "int",
            1,
            "m: locations each person reports (a person with more has m drawn at random); each is noised at "
            "epsilon/m, so a person's reports together spend epsilon",
            1,
            1000,
            label="locations per person m",
        ),
    ) + _bandwidth_params()
    dp_outputs = ("noisy_outside_region", "density_scaling", "measurements")
    side_information_keys = ("h_m", "bandwidth")

    @classmethod
    def cost_features(cls, params: dict, depth: int, n_points: int) -> tuple[float, float]:
        return 1.0, _attack_work(params, depth)

    def run(self, data, domain, epsilon, params, ctx):
        eps_run = check_epsilon(epsilon)
        m = int(params["locations_per_person"])
        eps_loc = eps_run / m
        while math.fsum([eps_loc] * m) > eps_run:  # m shares never sum past the budget
            eps_loc = math.nextafter(eps_loc, 0.0)
        eps = eps_loc / 1000.0 if params["epsilon_unit"] == "per km" else eps_loc
        users = Users(data, domain, m, ctx.rng)
        ledger = Ledger()
        h, h_note = resolve_bandwidth(params, domain, users.xy, ctx.rng, ledger)
        for j in range(m):
            ledger.spend(
                f"planar Laplace, location {j + 1} of {m} of each person" if m > 1 else "planar Laplace",
                eps_loc,
                note=(
                    f"epsilon = {eps:g} per metre ({eps * 1000:g} per km), expected displacement {2 / eps:.0f} m; "
                    "metric privacy (eps*d), not epsilon-DP; parallel over people"
                    + (f", sequential over a person's {m} reports" if m > 1 else "")
                ),
            )
        ledger.note_side_information(
            "the number of reported locations N (each person's at most m reports reach the server), to which the "
            "density is rescaled"
        )
        noisy = ctx.noise.add_planar_laplace(users.xy, eps)
        ctx.progress(0.1, "users perturb their locations and evaluate their kernels")
        xs, ys = kde.axes(domain)
        s = kde.kde_grid_sum(noisy, h, xs, ys, users.weights)
        density, scale_note = _counts(s, users.total, h, domain.cell)
        ctx.check_cancelled()
        axs, ays, grid = _attack_grid(domain)
        view = FederatedKDEView(users, "kde", noisy, h, axs, ays)
        ctx.progress(0.6, "attacking users")
        arng = np.random.default_rng(ctx.rng.integers(0, 2**63))
        diag = {
            "epsilon_per_m": eps,
            "epsilon_per_km": eps * 1000,
            "locations_per_person": m,
            "expected_displacement_m": 2 / eps,
            "displacement_over_side": 2 / eps / domain.side,
            "lattice_step_m": planar_lattice_step(eps) if ctx.secure else None,
            "noisy_outside_region": int((~domain.inside(noisy)).sum()),
            "h_m": h,
            "bandwidth": h_note,
            "density_scaling": scale_note,
        }
        u, g = _utility(
            lambda gx, gy: kde.kde_grid_sum(noisy, h, gx, gy, users.weights), users, h, domain, density, axs, ays
        )
        ctx.record_evaluation(
            users=len(users.xy),
            users_outside_region=users.outside,
            locations_not_reported=users.capped,
            mean_displacement_m=float(np.hypot(*(noisy - users.xy).T).mean()),
            utility_spearman_vs_full_kde=u,
            utility_grid=g,
            **_attack_diagnostics(view, users, params["attack_users"], arng),
        )
        located = Measurements(locations=noisy, planar_epsilon=eps)
        return _release(density, domain, ledger, 1, view, diag, {"attack_grid": grid}, located)
