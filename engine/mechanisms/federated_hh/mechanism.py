"""Location heatmaps under distributed DP with secure aggregation (Bagdasaryan,
Kairouz, Mellem, Gascón, Bonawitz, Estrin, Gruteser. PoPETs 2022(4)), and the
baselines of its Table 1 and Table 3, all behind one protocol.

Registered mechanisms (family in brackets):

* ``adaptive_hh`` [distributed]: Algorithm 2, the adaptive hierarchical histogram
  with the epsilon schedule of Eqs. 5-9 and the adaptive threshold; multiple
  locations per user (Section 5.7), proportion estimation (Appendix B), dropouts,
  modular clipping and a verification mode running real pairwise-masked SecAgg.
* ``hh_fixed_eps`` / ``hh_scheduled_fixed_t`` [distributed] and
  ``hh_interactive_nonprivate`` [none]: the interactive variants of Table 3.
* ``nonprivate_level`` [none]: users report in the clear, one quadtree level (Section 6.2).
* ``flat_onehot``, ``hierarchical_onehot``, ``cms_hierarchical``, ``ag_polya``
  [distributed]: the non-interactive baselines of Section 5.1 / Table 1, with the
  same Pólya-share secure sum.
* ``ldp_grid`` [local]: k-ary randomized response or optimized unary encoding over
  grid cells at the same epsilon (the local-DP comparison of Figure 1).

This module holds Algorithm 2 and its variants; the baselines live beside it
(:mod:`.baselines`, :mod:`.ag_polya`, :mod:`.local`). Everything is vectorised (see :mod:`.tree`): per sub-query one gather of each
client's longest-prefix node through a look-up table over Morton codes, one
``bincount``, and one noise draw per coordinate (per shard and coordinate when
the shard sums matter: modular clipping, secure mode). The per-client path is
kept for the verification mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import EngineError
from ...core.grid import morton_of_pixels
from ..base import Communication, Mechanism, Release, ServerView, aggregate_view, register
from ..capabilities import ONE_OTHER, AuditPlan
from ..noise_model import NO_CLOSED_FORM
from ..outputs import Level, Proportions
from .param_groups import (
    extension_params,
    relation_params,
    schedule_params,
    secagg_params,
)
from .protocol import (
    PAPER,
    THREAT_DISTRIBUTED,
    VIEW_DISTRIBUTED,
    add_remove_plan,
    check_secagg,
    degradation_warning,
    last_share,
    note_clients,
    polya_noise_model,
    secagg_kwargs,
    shard_diagnostics,
    shard_diagnostics_public,
    spend_sharded,
    word_bits,
)
from .secure_sum import secure_sum
from .tree import (
    PrefixTree,
    dl_std,
    encode_multi,
    eps_for_std,
    node_level,
    node_rects,
    paint_lut,
    prepare_clients,
    proportion_ci,
    rebuild_density,
    schedule_epsilon,
    sigma_target,
)


def _subquery_epsilon(p, eps_sub, eps_rem, spent, eps_total, planned_users, size, sens, gamma, max_levels, last):
    """A sub-query's epsilon (Eqs. 5-9; the fixed schedule splits evenly), appended to ``spent``: returns
    ``(eps_q, eps_planned, last, sigma_target)``; the last sub-query takes what is left."""
    sig_t = None
    if p["schedule"] == "fixed":
        eps_tilde = eps_sub / max_levels
    else:
        sig_t = sigma_target(p["schedule"], float(p["c"]), planned_users, size, int(p["secagg_shard"]))
        eps_tilde = eps_for_std(gamma * sig_t, sens)
    if not last:
        _, last = schedule_epsilon(eps_rem, eps_tilde, float(p["b"]))
    eps_q = last_share(spent, eps_total) if last else eps_tilde
    spent.append(eps_q)
    if eps_q <= 0:
        raise EngineError("the privacy budget ran out before the final sub-query (internal error)")
    return eps_q, eps_tilde, last, sig_t


def _client_vectors(clients, lut, size: int, T: int, gamma: int, prop: bool, rng):
    """The clients' one-hot vectors over the reporting nodes (Section 4; several locations per user:
    Section 5.7; a proportion: Appendix B) as ``(client, key, value, signal)`` entries; out of core, each
    partition's task sums its clients' vectors instead (``signal``)."""
    if clients.remote is not None:
        return None, None, None, clients.remote.signal(lut, size)
    if clients.multi:
        ent_c, ent_k, ent_v = encode_multi(
            rng, clients.row_client, lut[clients.row_code], clients.row_weight, size, gamma
        )
        return ent_c, ent_k, ent_v, None
    ent_k = lut[clients.code].astype(np.int64)
    if prop:
        ent_k = ent_k + T * clients.flag.astype(np.int64)
    return np.arange(clients.n), ent_k, None, None


SEVERAL_LOCATIONS = (
    "no margin: with several locations per user the final counts' stochastic rounding adds a variance that depends "
    "on the data (repeated runs only)"
)


@dataclass
class _Trace:
    """What the sub-queries leave for the release: their diagnostics and snapshots, vector lengths, warnings,
    the effective epsilon so far and (add/remove user) what the exact client count decided."""

    warnings: list[str]
    levels: list[dict] = field(default_factory=list)
    snapshots: list[Level] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    shard_eval: list[dict] = field(default_factory=list)
    server_view_eps: list[float] = field(default_factory=list)
    eff_total: float = 0.0


def _thresholds(p, private: bool, ss, eps_q, eps_rem, sens, gamma, prop: bool) -> tuple[float, float]:
    """The split threshold (Eq. 6, or the fixed one) and the collapse threshold of a sub-query."""
    if p["threshold_rule"] == "adaptive" and private:
        t = float(p["k"]) * math.sqrt(ss.alpha_total) * dl_std(max(eps_q, eps_rem), sens) / gamma
        if prop:
            t *= math.sqrt(2.0)
    else:
        t = float(p["fixed_threshold"])
    return t, max(float(p["collapse_min"]), t / 4.0)


def _split_rule(p, prop: bool, ci):
    """Appendix B's rule on a proportion's confidence interval: which nodes may split, which must."""
    if not (prop and p["split_on"] == "ci_width"):
        return None, None
    width = ci[2] - ci[1]
    return width <= float(p["max_ci_width"]) / 2.0, width > float(p["max_ci_width"])


# ============================================================ adaptive (Alg. 2)
@register
class AdaptiveHH(Mechanism):
    """Adaptive hierarchical histograms under distributed DP (Bagdasaryan et al. 2022,
    Algorithm 2, Sections 4-5 and Appendices A-B).

    Protocol. The server keeps a prefix tree over the quadtree of the public
    domain (Section 5.6; partially split and orphaned nodes allowed; node ids in
    :mod:`.tree`). In sub-query q every client encodes its location as a
    one-hot vector over the T nodes with fewer than four children, at its
    longest matching prefix, adds ``Polya(1/N, r) - Polya(1/N, r)`` to every
    coordinate (``r = exp(-eps_q/Δ)``, N the DP shard size), wraps it modulo 2^q
    and sends it through secure aggregation in shards of at most S_max clients;
    every full shard's sum carries discrete Laplace noise (Theorem 4.1, Eqs. 2-4).
    The server adds the shards (Algorithm 1), splits nodes whose noisy count
    exceeds the threshold t and collapses (deletes) nodes at or below t/4
    (UpdateTree), then plans the next sub-query.

    Schedule (Section 5.4). ``sigma~ = c U/T sqrt(ceil(S_max/U))`` (Eq. 7 as
    printed) or the reference code's ``c sqrt(S_max/U) U/T / 2`` (the default, see
    below); ``eps~ = phi(sigma~)`` (Eq. 8,
    inverting Eq. 5); ``eps_q = eps~`` if ``b eps~ <= eps_rem`` else ``eps_rem``
    (Eq. 9). The last sub-query spends everything left; it is also the last when
    ``max_levels`` is reached or when the previous update added no node (the
    tree is final: Section 5.3, "reports final counts for this partition").
    Threshold (Eq. 6): ``t = k sqrt(A) tau(max(eps_q, eps_rem), Δ)``, with ``tau``
    the discrete-Laplace standard deviation of Eq. 5 and ``A`` the number of
    full shards' worth of noise in the sum (the adaptive threshold of Table 3).
    The release is the last sub-query's counts on its tree; the heatmap spreads
    each node's count uniformly over the pixels it covers that no present
    descendant covers (Section 6.1).

    Release. ``density``: estimated user counts per pixel; ``partition``: the
    squares of the final tree's reporting nodes, coarse first (a partially split
    node's square contains its present children's squares: draw in order);
    ``extras['tree']``: every node id of the final tree, the reporting ids and
    their counts; ``levels[q]``: per sub-query node ids, noisy counts, squares,
    threshold and epsilon (``level_map(release, q)`` rebuilds that sub-query's
    heatmap for a level slider); ``diagnostics['levels']``:
    T, epsilon, threshold, splits, collapses, shard facts and the effective
    epsilon per sub-query; communication per sub-query and in total.

    Extensions. Several locations per user (Section 5.7): each user's vector
    over the nodes is its weighted location histogram normalised to L1 = 1,
    scaled by gamma and stochastically rounded; sensitivity ``gamma + d`` (d =
    vector length, or a public cap on locations); counts are divided by gamma.
    Proportion estimation (Appendix B): one-hot over (node, flag), 2T
    coordinates, sensitivity 1; per-node rates with confidence intervals (normal
    approximation with binomial and DP variance), optional split/collapse on the
    interval width. Dropouts (Section 4, Appendix A.3): a fraction of each shard
    drops before sending; with fewer survivors than N a shard's noise is weaker
    than discrete Laplace; the effective epsilon is computed and reported (or the
    shard withheld). Verification mode: real pairwise-masked secure aggregation
    (:mod:`engine.core.secagg`) on every shard with per-client noise.

    Threat model: see ``threat_model``; the server's view is the aggregate only.
    Guarantee: epsilon-DP for every user (the same users answer every
    sub-query: basic sequential composition over sub-queries; shards are
    disjoint, so a sub-query costs its epsilon however many shards it has),
    computational because it rests on SecAgg (Lemma 5.1); the ledger lists each
    sub-query. Neighbouring datasets (Theorem 4.1: a client's vector has L1 norm
    at most Δ) differ in one user's vector being replaced by zeros while the user
    still sends its noise shares ("zero-out"); under this relation the number of
    clients U, the shards and the Pólya shapes are public (U is recorded as side
    information). A user whose one-hot vector moves to another cell changes the
    sum by 2Δ, i.e. replace-one-user neighbours get 2 epsilon. Under excess
    dropout with policy 'release' the actual guarantee is the effective epsilon,
    which the ledger books as spent (the planned epsilon beside it, the note
    flagged); secure mode withholds such shards instead (engine.core.noise).

    Departures from the paper and from its public code (google-research/federated's
    analytics/location_heatmaps and the authors' ebagdasa/location-heatmaps):
    noise is sampled in float64/int64 (the reference uses float16); nodes at the
    maximum depth are kept (the reference drops them); a sub-query after which
    nothing was split spends the whole remainder on the final tree (the
    reference stops and leaves it unspent); the default schedule is the
    reference code's reading of Eq. 7 (``c sqrt(S_max/U) U/T`` as two standard
    deviations), because it is what produced the published results (it gives
    the communication of Table 1, 340 elements at 10k users and about 1,250 at
    100k, and Table 3's "first 4 levels, 0.76 left for the last") and because
    Eq. 7 as printed, ``sqrt(ceil(S_max/U))``, equals 1 whenever U >= S_max and so
    does not account for the noise accumulated over shards as its text says;
    ``schedule = 'paper'`` applies Eq. 7 as printed; the initial tree is
    the root's four children by default (as the reference; ``start_level = 0``
    starts from the root as Algorithm 2's init); the same sampled users answer
    every sub-query (as the reference; the budget composes sequentially);
    dropouts remove an exact fraction of each shard; without clipping the sum of
    the shards' noise is drawn at once (the same law); Eq. 6's sigma_rem includes
    the accumulation over shards and is taken at ``max(eps_q, eps_rem)`` (as the
    reference code); b = 2 by default (the reference code's value; the paper
    gives none). The proportion
    interval and the CI-width split rule are this workbench's reading of
    Appendix B, which leaves them open.

    Add/remove user (``relation = 'add/remove'``; not in the paper).
    Under zero-out the exact client count U is public and read three times: by the
    schedule (Eq. 7, ``sigma~`` grows with U), by the shard layout (``ceil(U/S_max)``
    shards, Algorithm 1 line 7) and by the Pólya shapes (``1/N`` with N from each shard's
    size, Section 4 "Handling dropouts"). The audit measures eps >= 1.56 at a claimed 1
    under add/remove. This variant reads U nowhere that reaches the release:

    1. *Planned clients L.* Either the analyst's public lower bound (``clients_bound``,
       declared as side information), or a private count: ``U~ = U + Z``, Z discrete
       Laplace with ``r = e^-eps_c`` (Eq. 4 with Δ = 1: one person changes U by one),
       ``eps_c = count_share x epsilon``, booked in the ledger; ``L = max(1, U~ - s)`` with
       ``s = ceil(ln(1/beta)/eps_c)``, so ``P(L > U) = P(Z > s) = r^(s+1)/(1+r) < beta``
       (``count_failure``). The server knows how many clients report anyway (it runs
       secure aggregation with them), so the count's noise is added by the aggregator; it
       protects the release, not the server's view.
    2. *Plan from L only.* The schedule uses L for U in Eq. 7 (and the fixed schedule
       splits ``epsilon - eps_c``); ``k = ceil(L/S_max)`` shards; in each shard a random
       committee of ``n_c = floor(L/k)`` clients adds ``Polya(1/N) - Polya(1/N)`` shares
       (``N = dp_shard`` or ``floor((1 - planned_dropout) n_c)``); the other clients add none.
       Every shard's noise is ``Polya(n_c/N) - Polya(n_c/N)`` and the sub-query's released
       total carries ``Polya(A) - Polya(A)``, ``A = k n_c / N >= 1``: discrete Laplace(r_q)
       plus independent noise (Theorem 4.1, Eqs. 3-4; the law is infinitely divisible), a
       law fixed by L and the parameters. With U >= L clients every shard (an even split of
       the U clients into k shards) holds its committee; with fewer, the aggregator adds
       the absent members' shares before the release, so the released law is the same.
       Eq. 6's threshold reads the planned A, never the realised shard sizes.
    3. *Why it is DP.* For D' = D plus one person u, given L and the tree (functions of
       earlier DP outputs), sub-query q releases ``sum_i v_i + Z_q`` under D and
       ``sum_i v_i + v_u + Z_q`` under D', Z_q of the same law in both, ``|v_u|_1 <= Δ``
       (Δ = 1; gamma + d with several locations, Section 5.7): eps_q-DP by Eq. 4 and
       post-processing (adding the independent rest of Z_q). The count, then the
       sub-queries, compose sequentially (Section 5.5): ``eps_c + sum_q eps_q = epsilon``.
       Shards do not enter the argument: without clipping the released total does not
       depend on how the clients were split.

    Why not "every client adds shares sized for L": then D' carries one more share
    than D, and ``Polya(A + 1/N) - Polya(A + 1/N)`` has polynomially heavier tails than
    ``Polya(A)`` (pmf ~ ``k^(alpha-1) r^k``), so the privacy-loss ratio is unbounded: with
    one client in the sink (N = 1) a shift of 1 gives ``P1(> 3) / P0(> 3) = e^1.8`` at a
    claimed epsilon of 1. A fixed committee keeps the noise's law independent of U.

    What the server sees: the number of reports (hence U exactly), each shard's size and
    each shard's noisy sum. Under add/remove the guarantee is about the released map and
    everything published with it (the tree, the levels, the ledger); the server's own
    view is epsilon-DP only under zero-out, as in the paper (Lemma 5.1), because it sees
    who takes part; when L > U (probability < beta with a private count; a wrong public
    bound) the short shards it sees carry less noise (``server_view_epsilon`` in the
    evaluation). Exact U, shard sizes, the communication of all clients and the client
    notes (which depend on how many locations people have) go to the evaluation, not to
    the release; datasets with user ids always take the multi-location encoding
    (Section 5.7), so the encoding and its sensitivity follow from the columns, not from
    whether someone has a second location.
    Departures and limits: actual dropouts and modular clipping are refused under
    add/remove (a dropped committee member, or a per-shard wrap, would tie the release to
    who took part or to the split); S_max caps the planned clients per shard, so with
    U > L the shards hold ``U/k`` clients, a few percent over S_max when L is a private
    lower bound; the count costs ``eps_c`` and lowers L below U by about
    ``ln(1/beta)/eps_c`` clients (277 at epsilon 1 with the defaults), which plans the
    schedule for slightly fewer clients than there are.
    """

    key = "adaptive_hh"
    margin = "closed form"
    margin_note = "the final sub-query's Pólya noise per node, given the released tree (one location per user)"
    planner = "simulated"
    audit_plan = ONE_OTHER
    # under add/remove user (``relation = "add/remove"``) the person is the 11th client, one past a shard edge
    relation_plans = {
        "add/remove user": AuditPlan(
            base_users=10,
            params={"secagg_shard": 10},
            note="10 others and SecAgg shards of at most 10 clients: the person added is the 11th client, one past "
            "a shard boundary, where a plan read from the exact count changes (a second shard, and its Pólya noise, "
            "in the zero-out variant; the schedule of Eq. 7)",
        )
    }
    label = "Adaptive hierarchical histograms (distributed DP + SecAgg)"
    family = "distributed"
    guarantee = (
        "epsilon-DP under zero-out user, the number of clients U public (distributed: central-DP sum via Pólya "
        "shares and secure aggregation; computational); with relation = add/remove: epsilon-DP of the released map "
        "under add/remove user, planned from a private count or a public lower bound of the clients"
    )
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    summary = (
        "Interactive quadtree: each round users send a noisy one-hot vector over the current tree's cells through "
        "secure aggregation; cells with enough signal are split, noisy ones merged; the budget per round follows "
        "the noise the next split decision needs."
    )
    paper = PAPER
    equations = "Thm 4.1, Eqs. 2-9, Algorithms 1-2, Sections 5.6-5.7, 6.1, Appendices A-B"
    params = schedule_params() + secagg_params() + relation_params() + extension_params()
    private = True

    @classmethod
    def neighbouring_for(cls, params: dict | None = None) -> str:
        """``relation = 'add/remove'`` makes a private run add/remove user (see the class docstring)."""
        if cls.neighbouring == "zero-out user" and params and params.get("relation") == "add/remove":
            return "add/remove user"
        return super().neighbouring_for(params)

    # --------------------------------------------------------------------- run
    def run(self, data, domain, epsilon, params, ctx):
        p = params
        D = domain.depth
        private = self.private
        eps_total = check_epsilon(epsilon) if private else math.inf
        prop = p["attribute"] == "flag"
        # add/remove user (class docstring): nothing that reaches the release reads the exact U
        addrem = private and p.get("relation", "zero-out") == "add/remove"
        clients = prepare_clients(
            data,
            domain,
            ctx.rng,
            multi_location=p["multi_location"],
            max_locations=int(p["max_locations"]),
            need_flag=prop,
            remote_ok=True,
            always_multi=addrem,
        )
        U = clients.n
        check_secagg(p, U)
        gamma = int(p["gamma"]) if clients.multi else 1
        max_levels = int(p["max_levels"])
        schedule = p["schedule"]
        kw = secagg_kwargs(p)
        tr = _Trace(warnings=[] if addrem else list(clients.notes))
        if kw["dp_shard"] and kw["dp_shard"] > kw["secagg_shard"]:
            tr.warnings.append("the DP shard size exceeds the SecAgg shard size: no shard can reach it")

        tree = PrefixTree.initial(D, int(p["start_level"]))
        ledger = Ledger()
        spent: list[float] = []
        plan = None
        planned_users = U  # the number of clients the schedule is planned for
        if addrem:
            plan, eps_count = add_remove_plan(p, U, eps_total, ctx, ledger)
            planned_users = plan["lower_bound"]
            kw.update(n_shards=plan["shards"], committee=plan["committee"])
            if eps_count:
                spent.append(eps_count)
            if plan["dp_shard_size"] > plan["committee"]:
                tr.warnings.append("the DP shard size exceeds the planned committee per shard: the noise is weaker")
            ctx.record_evaluation(users=U, clients_notes=list(clients.notes), lower_bound_held=U >= planned_users)
        elif private:
            note_clients(ledger, "and, through Eq. 7, the epsilon schedule" if schedule != "fixed" else "")
        eps_rem = last_share(spent, eps_total) if private else eps_total
        eps_sub = eps_rem  # what the sub-queries share (epsilon less the client count's)
        grew = True
        tr.eff_total = math.fsum(spent)  # the client count's epsilon (add/remove), then each sub-query's
        final = None
        for q in range(max_levels):
            ctx.check_cancelled()
            ctx.progress(q / max_levels, f"clients answer sub-query {q + 1} of at most {max_levels}")
            rep = tree.reporting()
            T = int(rep.size)
            size = 2 * T if prop else T
            d = min(size, int(p["max_locations"])) if (clients.multi and p["max_locations"]) else size
            sens = gamma + d if clients.multi else 1
            forced_last = q == max_levels - 1 or not grew
            sig_t = None
            if private:
                eps_q, eps_tilde, last, sig_t = _subquery_epsilon(
                    p, eps_sub, eps_rem, spent, eps_total, planned_users, size, sens, gamma, max_levels, forced_last
                )
                eps_rem = last_share(spent, eps_total)
            else:
                eps_q, eps_tilde, last = None, math.inf, forced_last

            lut = paint_lut(rep, D)
            ent_c, ent_k, ent_v, signal = _client_vectors(clients, lut, size, T, gamma, prop, ctx.rng)
            ss = secure_sum(ctx, ent_c, ent_k, ent_v, U, size, eps_q, sens, signal=signal, **kw)
            values = ss.total.astype(np.float64) / gamma
            noise_sd = ss.noise_std / gamma  # per coordinate, in users
            n0, n1 = (values[:T], values[T:]) if prop else (None, None)
            counts = n0 + n1 if prop else values
            count_sd = math.sqrt(2.0) * noise_sd if prop else noise_sd
            t, t_collapse = _thresholds(p, private, ss, eps_q, eps_rem, sens, gamma, prop)
            if private:
                tr.eff_total += ss.effective_epsilon
                spend_sharded(
                    ledger,
                    f"sub-query {q + 1}: counts of {size} cells",
                    eps_q,
                    ss,
                    f"discrete Laplace via Pólya shares, sensitivity {sens}, {ss.shard_sizes.size} disjoint "
                    f"SecAgg shard(s) (parallel within the sub-query)"
                    + (
                        f"; add/remove user: a committee of {ss.committee:,} clients per shard adds the shares"
                        if addrem
                        else ""
                    ),
                )
            ci = None
            if prop:
                ci = proportion_ci(n0, n1, noise_sd**2, float(p["ci_level"]))
            level_diag = {
                "subquery": q + 1,
                "T": T,
                "vector_length": size,
                "epsilon": None if eps_q is None else float(eps_q),
                "epsilon_planned": None if not math.isfinite(eps_tilde) else float(eps_tilde),
                "sigma_target": sig_t,
                "sensitivity": int(sens),
                "noise_std": float(count_sd),
                "threshold": float(t),
                "collapse_threshold": float(t_collapse),
                "max_node_level": int(node_level(rep).max()),
                "last": bool(last),
            }
            if addrem:  # what follows from the exact U goes to the evaluation
                public, own = shard_diagnostics_public(ss)
                level_diag.update(public)
                tr.shard_eval.append(own)
                tr.server_view_eps.append(ss.server_epsilon)
            else:
                level_diag.update(shard_diagnostics(ss))
            tr.sizes.append(size)
            snapshot = Level(
                node_rects(rep, domain),
                counts=counts,
                threshold=float(t),
                epsilon=None if eps_q is None else float(eps_q),
                nodes=rep,
                positive=n1 if prop else None,
            )
            if last:
                level_diag.update({"splits": 0, "collapses": 0, "added": 0})
                tr.levels.append(level_diag)
                tr.snapshots.append(snapshot)
                final = (tree, rep, lut, counts, ci, noise_sd, n1)
                break
            can_split, force = _split_rule(p, prop, ci)
            counts_for_update = counts if force is None else np.where(force, -np.inf, counts)
            tree, info = tree.update(rep, counts_for_update, t, t_collapse, can_split)
            grew = info["added"] > 0
            level_diag.update(info)
            tr.levels.append(level_diag)
            tr.snapshots.append(snapshot)
        ctx.progress(0.95, "rebuilding the heatmap")

        return self._release(domain, p, clients, ctx, ledger, ss, final, tr, plan, eps_total, addrem, prop, gamma)

    def _release(self, domain, p, clients, ctx, ledger, ss, final, tr, plan, eps_total, addrem, prop, gamma) -> Release:
        """The release after the last sub-query: the density on the final tree, its diagnostics (levels,
        communication, the add/remove plan), the extras (levels, tree, standard errors, proportions)."""
        D, U, private, schedule = domain.depth, clients.n, self.private, p["schedule"]
        tree_q, rep, lut, counts, ci, noise_sd, n1 = final
        sizes, warnings, eff_total = tr.sizes, tr.warnings, tr.eff_total
        density = rebuild_density(lut, counts, D)
        bits = word_bits(p)
        total_elems = int(sum(sizes))
        comm = Communication(
            float(total_elems),
            float(total_elems * bits),
            rounds=len(sizes),
            shards=int(ss.shard_sizes.size),
            note=(
                f"vector lengths summed over {len(sizes)} sub-queries (Table 1): {', '.join(map(str, sizes))}; "
                f"{bits}-bit SecAgg words"
                + ("" if addrem else f"; all clients together upload {U * total_elems:,} elements")
            ),
        )
        diag = {
            "levels": tr.levels,
            "subqueries": len(sizes),
            "users": U,
            "final_cells": int(rep.size),
            "final_max_level": int(node_level(rep).max()),
            "communication_per_subquery": sizes,
            "communication_per_client": total_elems,
            "communication_all_clients": U * total_elems,
            "schedule": schedule,
            "threshold_rule": p["threshold_rule"],
            "multi_location": bool(clients.multi),
            "gamma": gamma,
        }
        if addrem:
            del diag["users"], diag["communication_all_clients"]
            diag["clients_plan"] = plan
            ctx.record_evaluation(
                communication_all_clients=U * total_elems,
                shards_by_subquery=tr.shard_eval,
                # the server's own view of the sub-queries, composed (it knows the count exactly)
                server_view_epsilon=math.fsum(tr.server_view_eps),
            )
        if private:
            diag["epsilon_spent"] = ledger.total()
            diag["effective_epsilon"] = eff_total
            w = degradation_warning(eff_total, eps_total)
            if w:
                warnings.append(w)
        extras = {
            "tree": {
                "node_ids": tree_q.nodes,
                "reporting": rep,
                "counts": counts,
                "depth": D,
                "id_encoding": "(1 << 2*level) | quadtree path (x bit then y bit per level, MSB first)",
            },
        }
        # the final counts carry fresh noise, drawn after the tree was fixed, so their SE given the
        # released tree is the Pólya sum's (ss: the last sub-query's sum). Not with several locations per user:
        # their stochastic rounding adds a data-dependent variance
        noise = NO_CLOSED_FORM if not private else SEVERAL_LOCATIONS
        if private and not clients.multi:
            sd = noise_sd * (math.sqrt(2.0) if prop else 1.0)
            basis = "the final sub-query's Pólya noise per node, spread over the node's cells"
            noise = polya_noise_model(ss, p, sd, lut, density, basis)
        proportion = None
        if ci is not None:
            rate, lo, hi, nn = ci
            pix = lut[morton_of_pixels(D)]
            proportion = Proportions(
                rate,
                lo,
                hi,
                nn,
                n1,
                float(p["ci_level"]),
                rate[pix].astype(np.float32),
                (hi - lo)[pix].astype(np.float32),
            )
            diag["mean_ci_width"] = float(np.mean(hi - lo))
            diag["mean_ci_width_weighted"] = float(np.sum((hi - lo) * nn) / np.sum(nn))
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=comm,
            server_view=self._view(),
            partition=node_rects(rep, domain),
            diagnostics=diag,
            extras=extras,
            levels=tuple(tr.snapshots),
            noise=noise,
            proportion=proportion,
            warnings=tuple(warnings),
        )

    @classmethod
    def level_map(cls, release: Release, index: int) -> np.ndarray:
        return level_density(release, index)

    @classmethod
    def planning(cls, params: dict, regions=None, user_ids: bool = False) -> tuple[str, str]:
        """With user ids a person may have several locations, and then the release states no margin."""
        if user_ids and cls.planner != "none":
            return "none", SEVERAL_LOCATIONS
        return super().planning(params, regions, user_ids)

    dp_outputs = (
        "levels",
        "subqueries",
        "final_cells",
        "final_max_level",
        "communication_per_subquery",
        "communication_per_client",
        "tree",
        "proportion",
        "mean_ci_width",
        "mean_ci_width_weighted",
        "epsilon_spent",
        "ledger",
        "communication",
        "noise",
        "clients_plan",
    )
    side_information_keys = ("users", "communication_all_clients", "effective_epsilon", "warnings")

    def _view(self) -> ServerView:
        return aggregate_view(VIEW_DISTRIBUTED)


def level_density(release: Release, index: int) -> np.ndarray:
    """Heatmap of sub-query ``index`` from ``release.levels`` (for the dashboard's level slider): each node's
    count spread over its exclusive pixels."""
    lv = release.levels[index]
    D = release.domain.depth
    return rebuild_density(paint_lut(lv.nodes, D), lv.counts, D)
