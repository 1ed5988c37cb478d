"""The non-interactive baselines of Bagdasaryan et al. 2022, Section 5.1 and Table 1, with the same
Pólya-share secure sum as Algorithm 2 (flat one-hot, hierarchical one-hot, the count-min sketch),
and the non-private single quadtree level of Section 6.2."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.grid import morton_of_pixels
from ...core.params import Param
from ..base import Communication, Mechanism, Release, ServerView, aggregate_view, register
from ..capabilities import ZERO_OUT, NoiseCase
from ..noise_model import NO_CLOSED_FORM
from .param_groups import secagg_params
from .protocol import (
    PAPER,
    THREAT_DISTRIBUTED,
    VIEW_DISTRIBUTED,
    check_secagg,
    degradation_warning,
    note_clients,
    polya_noise_model,
    secagg_kwargs,
    shard_diagnostics,
    single_codes,
    spend_sharded,
    word_bits,
)
from .secure_sum import secure_sum
from .tree import make_ids, node_level, node_rects, paint_lut, prepare_clients, rebuild_density


# ============================================================ non-private level
def _level_lut(depth: int, level: int) -> np.ndarray:
    """``paint_lut`` of the complete raster at ``level``: each full-depth Morton code's cell there."""
    return (np.arange(4**depth, dtype=np.int64) >> (2 * (depth - level))).astype(np.int32)


def pixel_codes_at(depth: int, level: int) -> np.ndarray:
    return morton_of_pixels(depth) >> (2 * (depth - level))


def _clients_weighted(data, domain, rng) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(codes, weights, users): per-user normalised weights when users have several rows."""
    c = prepare_clients(data, domain, rng, multi_location="normalise")
    if c.multi:
        return c.row_code, c.row_weight, c.n
    return c.code, None, c.n


@register
class NonPrivateLevel(Mechanism):
    """Non-private baseline of Bagdasaryan et al. 2022, Section 6.2 (Table 1,
    "Non-private"): users report their locations in the clear (2 coordinates)
    and the server builds the histogram of one quadtree level, spread uniformly
    over the pixels of each cell. The paper picks the level with the best error
    against the ground truth (an oracle); ``level = 0`` here picks it by 2-fold
    cross-validation on the reports (the level whose half-sample map best
    predicts the other half's full-resolution map, normalised, squared error),
    which needs no ground truth; the benchmark also reports the oracle choice
    by sweeping ``level``. Users with several locations count with total weight
    one each. Threat model: the server sees every location (no privacy)."""

    key = "nonprivate_level"
    margin = "none"
    margin_note = "no noise: a non-private reference, the same map at every seed"
    label = "Non-private, best quadtree level (Table 1)"
    family = "none"
    guarantee = "none"
    neighbouring = "none"
    threat_model = "The server sees every user's location in the clear."
    summary = "Exact histogram at the quadtree level that best trades resolution against sampling error."
    paper = PAPER
    equations = "Section 6.2 (non-interactive non-private baseline)"
    uses_epsilon = False
    params = (
        Param(
            "level",
            "int",
            0,
            "quadtree level of the histogram (2^l cells per side); 0 = choose by 2-fold cross-validation",
            min=0,
            max=10,
        ),
    )
    dp_outputs = ("level", "cv_error_by_level", "users")

    def run(self, data, domain, epsilon, params, ctx):
        D = domain.depth
        codes, w, U = _clients_weighted(data, domain, ctx.rng)
        counts_d = np.bincount(codes, weights=w, minlength=4**D).astype(np.float64)
        level = int(params["level"])
        cv = None
        if level == 0:
            level, cv = self.cross_validate(codes, w, D, ctx.rng)
        level = min(level, D)
        block = 4 ** (D - level)
        counts_l = counts_d.reshape(-1, block).sum(axis=1)
        density = counts_l[pixel_codes_at(D, level)] / block
        ids = make_ids(np.arange(4**level), level)
        diag = {"level": level, "users": U, "level_choice": "cross-validation" if cv is not None else "given"}
        if cv is not None:
            diag["cv_error_by_level"] = cv
        return Release(
            density=density,
            domain=domain,
            ledger=Ledger(),
            communication=Communication(2.0, 64.0, note="each user sends its location (2 x 32-bit coordinates)"),
            server_view=ServerView("clear", "The server sees every user's location in the clear."),
            partition=node_rects(ids, domain) if level <= 7 else None,
            diagnostics=diag,
        )

    @staticmethod
    def cross_validate(codes, w, D, rng) -> tuple[int, list[float]]:
        half = rng.random(codes.size) < 0.5
        a = np.bincount(codes[half], weights=None if w is None else w[half], minlength=4**D).astype(np.float64)
        b = np.bincount(codes[~half], weights=None if w is None else w[~half], minlength=4**D).astype(np.float64)
        if a.sum() <= 0 or b.sum() <= 0:
            return D, []
        a /= a.sum()
        b /= b.sum()
        errs = []
        for lv in range(D + 1):
            block = 4 ** (D - lv)
            up = np.repeat(a.reshape(-1, block).sum(axis=1) / block, block)
            errs.append(float(np.sum((up - b) ** 2)))
        return int(np.argmin(errs)), errs


# ================================================================ flat one-hot
def _distributed_params(extra: tuple[Param, ...] = ()) -> tuple[Param, ...]:
    return extra + secagg_params()


def single_location_codes(data, domain, rng) -> tuple[np.ndarray, int, list[str]]:
    c = prepare_clients(data, domain, rng, multi_location="most_visited")
    return single_codes(c), c.n, c.notes


THRESHOLD_NOISE = (
    "no margin: the threshold rule releases a coarse cell because its own noisy count fell below the threshold, so "
    "given the cells chosen its noise is a truncated draw, not the Pólya law (repeated runs only)"
)


def distributed_release(
    density, domain, ledger, elements, p, rounds, note, diag, partition=None, extras=None, warnings=(), noise=None
) -> Release:
    bits = word_bits(p)
    return Release(
        density=density,
        domain=domain,
        ledger=ledger,
        communication=Communication(float(elements), float(elements * bits), rounds=rounds, note=note),
        server_view=aggregate_view(VIEW_DISTRIBUTED),
        partition=partition,
        diagnostics=dict(diag),
        extras=extras or {},
        warnings=tuple(warnings),
        noise=NO_CLOSED_FORM if noise is None else noise,
    )


@register
class FlatOneHot(Mechanism):
    """Flat one-hot encoding (Bagdasaryan et al. 2022, Section 5.1; Table 1 "Flat"):
    Algorithm 1 applied once to a uniform raster (by default the full resolution,
    4^D coordinates). Each client sends its one-hot cell plus Pólya shares
    through SecAgg shards; one sub-query with the whole budget, sensitivity 1.
    Threat model and guarantee as ``adaptive_hh`` (aggregate-only server,
    epsilon-DP). Users with several locations report their most visited cell.
    Noise model: the raster cells are the released units, each with the Pólya sum's standard
    deviation, exact and data-independent (:func:`.protocol.polya_noise_model`; none with dropouts or
    wrapping)."""

    key = "flat_onehot"
    margin = "closed form"
    margin_note = "the Pólya sum's noise per raster cell (none with dropouts or wrapped sums)"
    planner = "simulated"
    audit_plan = ZERO_OUT
    noise_cases = (NoiseCase("flat_onehot", {"secagg_shard": 100}, base_users=20),)
    label = "Flat one-hot (distributed DP, Table 1)"
    family = "distributed"
    guarantee = "epsilon-DP under zero-out user, the number of clients U public (distributed, Pólya shares + SecAgg)"
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    summary = "Every user sends a noisy one-hot vector over all cells of a fixed grid."
    paper = PAPER
    equations = "Section 5.1 (flat one-hot), Algorithm 1, Theorem 4.1"
    params = _distributed_params(
        (Param("level", "int", 0, "raster level (2^l cells per side); 0 = full resolution", min=0, max=10),)
    )
    dp_outputs = ("overflowed_coordinates", "noise")
    side_information_keys = (
        "noise",
        "shards",
        "shard_size_max",
        "dp_shard_size",
        "survivors_min",
        "alpha_min",
        "shards_withheld",
        "noise_alpha_total",
        "effective_epsilon",
        "verified_shards",
        "aggregation_path",
        "warnings",
        "users",
        "communication",
    )

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        D = domain.depth
        level = int(params["level"]) or D
        level = min(level, D)
        codes, U, notes = single_location_codes(data, domain, ctx.rng)
        check_secagg(params, U)
        keys = codes >> (2 * (D - level))
        ss = secure_sum(ctx, np.arange(U), keys, None, U, 4**level, eps, 1, **secagg_kwargs(params))
        block = 4 ** (D - level)
        density = ss.total.astype(np.float64)[pixel_codes_at(D, level)] / block
        ledger = Ledger()
        note_clients(ledger)
        spend_sharded(ledger, "one-hot counts", eps, ss, "discrete Laplace via Pólya shares, sensitivity 1")
        diag = {"level": level, "users": U}
        diag.update(shard_diagnostics(ss))
        w = degradation_warning(ss.effective_epsilon, eps)
        return distributed_release(
            density,
            domain,
            ledger,
            4**level,
            params,
            1,
            f"one vector of 4^{level} = {4**level:,} elements",
            diag,
            warnings=notes + ([w] if w else []),
            noise=polya_noise_model(ss, params, ss.noise_std, _level_lut(D, level), density),
        )


# ============================================================ hierarchical ones
def _selection_params() -> tuple[Param, ...]:
    return (
        Param(
            "selection",
            "choice",
            "threshold",
            "how the server picks a resolution per region: 'threshold' = descend into a cell's children while its "
            "noisy count exceeds the threshold (post-processing); 'level' = use one level everywhere",
            choices=("threshold", "level"),
        ),
        Param("level", "int", 0, "level used when selection = 'level' (0 = the deepest)", min=0, max=10),
        Param(
            "threshold",
            "float",
            0.0,
            "split threshold in users for the selection; 0 = k x the noise standard deviation",
            min=0.0,
            max=1e6,
        ),
        Param(
            "k",
            "float",
            4.0,
            "k of the automatic threshold (noise standard deviations); large k limits refinements caused by noise "
            "alone among the many deep cells",
            min=0.1,
            max=50.0,
        ),
        Param("first_level", "int", 1, "coarsest level reported (the paper: 1, i.e. 2x2)", min=0, max=10),
    )


def _select_top_down(level_counts: dict, first: int, D: int, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Leaves of a complete quadtree chosen top-down: a cell is replaced by its four
    children while its noisy count exceeds ``t``. ``level_counts[l](codes)`` returns
    the level-l estimates. Returns (node ids, values)."""
    ids, vals = [], []
    cur = np.arange(4**first, dtype=np.int64)
    for lv in range(first, D + 1):
        c = level_counts[lv](cur)
        refine = (c > t) & (lv < D)
        ids.append(make_ids(cur[~refine], lv))
        vals.append(c[~refine])
        cur = ((cur[refine][:, None] << 2) | np.arange(4, dtype=np.int64)).ravel()
        if cur.size == 0:
            break
    return np.concatenate(ids), np.concatenate(vals)


def _leaves_release_density(ids, vals, D):
    order = np.argsort(ids)
    ids, vals = ids[order], vals[order]
    lut = paint_lut(ids, D)
    return rebuild_density(lut, vals, D), ids


class _HierarchicalBase(Mechanism):
    family = "distributed"
    guarantee = (
        "epsilon-DP under zero-out user, the number of clients U public (distributed, Pólya shares + SecAgg; "
        "epsilon split evenly over levels)"
    )
    neighbouring = "zero-out user"
    threat_model = THREAT_DISTRIBUTED
    paper = PAPER
    dp_outputs = ("threshold", "cells", "level_counts", "sketches", "noise")
    side_information_keys = ("users", "effective_epsilon", "warnings", "noise_std", "threshold", "noise")

    def _levels(self, params, D):
        first = min(int(params["first_level"]), D)
        return first, list(range(first, D + 1))

    def _choose(self, params, D, first, estimators, noise_sd):
        if params["selection"] == "level":
            lv = int(params["level"]) or D
            lv = min(max(lv, first), D)
            codes = np.arange(4**lv, dtype=np.int64)
            return make_ids(codes, lv), estimators[lv](codes), None
        t = float(params["threshold"]) or float(params["k"]) * noise_sd
        ids, vals = _select_top_down(estimators, first, D, t)
        return ids, vals, t


@register
class HierarchicalOneHot(_HierarchicalBase):
    """Hierarchical one-hot encoding (Bagdasaryan et al. 2022, Section 5.1; Table 1
    "Hierarchical"): every client reports a one-hot vector at every level
    ``first_level..D`` (2x2 up to 2^D x 2^D: 1,398,100 elements for D = 10) with
    epsilon/L per level (L levels, sequential composition), through the same
    Pólya-share SecAgg. The server picks a resolution per region: the paper uses
    the split with the lowest error against the ground truth (an oracle, which
    the benchmark reproduces by sweeping ``selection = level``); the default here
    is a DP post-processing rule, descending into a cell's children while its
    noisy count exceeds k noise standard deviations. Each level is simulated as
    its own secure sum (the same law as one appended vector).

    Noise model: with ``selection = 'level'`` that level's cells, each with the Pólya sum's
    standard deviation, exact (:func:`.protocol.polya_noise_model`). None with the
    threshold rule: a coarse cell is released because its own noisy count fell below the
    threshold, so given the chosen leaves its noise is a truncated draw, not the Pólya law."""

    key = "hierarchical_onehot"
    margin = "closed form"
    margin_note = "the Pólya sum's noise per cell with selection = level; the threshold rule has none (repeats)"
    audit_plan = replace(
        ZERO_OUT,
        params={"first_level": 4},
        note=ZERO_OUT.note + "; one level (the map's), so the person's whole epsilon is on its one-hot cell (with "
        "5 levels each carries epsilon / 5 and the threshold rule hides most of them)",
    )
    label = "Hierarchical one-hot (distributed DP, Table 1)"
    summary = "One noisy one-hot vector per quadtree level (epsilon split evenly); the server picks resolutions."
    equations = "Section 5.1 (hierarchical one-hot), Algorithm 1"
    params = _selection_params() + secagg_params()

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        D = domain.depth
        first, levels = self._levels(params, D)
        codes, U, notes = single_location_codes(data, domain, ctx.rng)
        check_secagg(params, U)
        L = len(levels)
        eps_l = eps / L
        ledger = Ledger()
        note_clients(ledger)
        noisy: dict[int, np.ndarray] = {}
        sums = {}
        eff = 0.0
        sd = 0.0
        for i, lv in enumerate(levels):
            ctx.check_cancelled()
            ctx.progress(i / L, f"clients report tree level {lv} ({i + 1} of {L})")
            ss = secure_sum(
                ctx, np.arange(U), codes >> (2 * (D - lv)), None, U, 4**lv, eps_l, 1, **secagg_kwargs(params)
            )
            noisy[lv] = ss.total.astype(np.float64)
            sums[lv] = ss
            eff += ss.effective_epsilon
            sd = ss.noise_std
            spend_sharded(ledger, f"level {lv} one-hot", eps_l, ss, "discrete Laplace via Pólya shares, sensitivity 1")
        est = {lv: (lambda c, v=noisy[lv]: v[c]) for lv in levels}
        ids, vals, t = self._choose(params, D, first, est, sd)
        density, ids = _leaves_release_density(ids, vals, D)
        extras = {"level_counts": noisy}  # noisy counts per level, Morton order (for oracle sweeps)
        noise = THRESHOLD_NOISE
        if params["selection"] == "level":  # one level, released whatever its values
            lv = int(node_level(ids[:1])[0])
            noise = polya_noise_model(sums[lv], params, sums[lv].noise_std, _level_lut(D, lv), density)
        elements = sum(4**lv for lv in levels)
        diag = {"levels": levels, "users": U, "threshold": t, "cells": int(ids.size), "noise_std": sd}
        diag["effective_epsilon"] = eff
        w = degradation_warning(eff, eps)
        return distributed_release(
            density,
            domain,
            ledger,
            elements,
            params,
            1,
            f"one-hot vectors of every level {first}..{D} appended: {elements:,} elements",
            diag,
            partition=node_rects(ids, domain) if ids.size <= 200_000 else None,
            extras=extras,
            warnings=notes + ([w] if w else []),
            noise=noise,
        )


_MERSENNE31 = (1 << 31) - 1


@register
class CountMinHierarchical(_HierarchicalBase):
    """Count-min sketch hierarchical encoding (Bagdasaryan et al. 2022, Section 5.1;
    Table 1 "CM-sketch based"): per level a count-min sketch of ``depth`` rows and
    ``width`` columns (Cormode-Muthukrishnan; pairwise-independent hashes
    ``((a x + b) mod (2^31 - 1)) mod width`` drawn from the run's seed, public)
    replaces the one-hot vector; a client adds 1 in every row, so the level's L1
    sensitivity is ``depth``; epsilon/L per level; Pólya-share SecAgg as the
    other baselines. Cell estimates are the median (default) or the minimum over
    rows; resolutions are chosen as in ``hierarchical_onehot``. The public
    reference code for this baseline is broken (the authors' experiment code, ebagdasa/
    location-heatmaps), so this is re-derived from the paper's description (depth 20,
    width 2,000).

    Estimator (the paper does not name one): the minimum over rows is count-min's
    estimate for counters that only grow, where every row over-counts (Cormode &
    Muthukrishnan 2005, Section 4.1, Theorem 1). DP noise moves every counter down as
    well as up, and the minimum of ``depth`` noisy rows is then biased by the expected
    minimum of the noise, about -2 noise standard deviations for 20 rows, in every
    cell. The deep cells that the split threshold opens at large epsilon lose their
    mass, and the normalised map piles onto the few hot cells, so the error rises with
    epsilon (street grid with hot venues, 20k users, 256²: 0.99x, 1.7x, 4.2x
    a uniform map's MSE at eps 1, 3, 10; at eps 10 the released cells summed to -500
    for 20,000 users, 5,950 positive and -6,451 negative, and the 10 hottest cells got
    2.65x their share). Hash collisions at width 2,000 are not the cause: with the same
    sketches the median gives 0.99x, 0.23x, 0.017x. For counters that can decrease the
    same paper estimates by the median of the rows (Section 4.1, Theorem 2, the general
    case), which the symmetric noise leaves unbiased up to the collisions' median; it is
    the default. ``estimator = 'min'`` keeps count-min's own estimate for comparison."""

    key = "cms_hierarchical"
    margin_note = "no closed form: the median over the sketch's rows of noisy counters; estimated from repeats"
    audit_plan = replace(
        ZERO_OUT,
        params={"depth": 1, "first_level": 4},
        statistic="measurement",
        note=ZERO_OUT.note + "; one sketch row and one level (the map's), so the person's whole epsilon is on one "
        "counter, which the statistic reads (with 20 rows and 4 levels each counter carries epsilon / 80)",
    )
    label = "Count-min sketch hierarchical (distributed DP, Table 1)"
    summary = "One noisy count-min sketch per quadtree level instead of a one-hot vector."
    equations = "Section 5.1 (CM sketch hierarchical encoding), Algorithm 1"
    params = (
        (
            Param("depth", "int", 20, "count-min rows (hash functions); the L1 sensitivity per level", min=1, max=64),
            Param("width", "int", 2000, "count-min columns per row", min=16, max=1_000_000, log=True),
            Param(
                "estimator",
                "choice",
                "median",
                "cell estimate from the rows: 'median' (unbiased under the symmetric DP noise: count-min's estimate "
                "when counters can decrease) or 'min' (count-min for growing counters; biased down by about 2 noise "
                "standard deviations per cell under DP, so its error can rise with epsilon)",
                choices=("min", "median"),
            ),
        )
        + _selection_params()
        + secagg_params()
    )

    @classmethod
    def measured_at(cls, release: Release, x: float, y: float) -> float:
        """The sketches' estimate of the finest level's cell holding ``(x, y)`` (what the noise was added to)."""
        from ...core.grid import interleave, prefix

        dom = release.domain
        level = max(release.extras["sketches"])
        ix, iy = (np.array([min(max(int((v - o) / dom.cell), 0), dom.n - 1)]) for v, o in ((x, dom.x0), (y, dom.y0)))
        code = prefix(interleave(ix, iy, dom.depth), dom.depth, level)
        return float(cms_level_estimates(release, level)[int(code[0])])

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        D = domain.depth
        first, levels = self._levels(params, D)
        codes, U, notes = single_location_codes(data, domain, ctx.rng)
        check_secagg(params, U)
        dep, wid = int(params["depth"]), int(params["width"])
        L = len(levels)
        eps_l = eps / L
        ledger = Ledger()
        note_clients(ledger)
        sketches: dict[int, np.ndarray] = {}
        hashes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        eff, sd = 0.0, 0.0
        rows = np.arange(dep, dtype=np.int64)
        for i, lv in enumerate(levels):
            ctx.check_cancelled()
            ctx.progress(i / L, f"clients report tree level {lv} ({i + 1} of {L})")
            a = ctx.rng.integers(1, _MERSENNE31, dep, dtype=np.int64)
            b = ctx.rng.integers(0, _MERSENNE31, dep, dtype=np.int64)
            hashes[lv] = (a, b)
            ids = make_ids(codes >> (2 * (D - lv)), lv)  # < 2^21, so a*x < 2^52
            col = ((a[None, :] * ids[:, None] + b[None, :]) % _MERSENNE31) % wid
            key = (rows[None, :] * wid + col).ravel()
            client = np.repeat(np.arange(U), dep)
            ss = secure_sum(ctx, client, key, None, U, dep * wid, eps_l, dep, **secagg_kwargs(params))
            sketches[lv] = ss.total.astype(np.float64).reshape(dep, wid)
            eff += ss.effective_epsilon
            sd = ss.noise_std
            spend_sharded(
                ledger, f"level {lv} count-min sketch", eps_l, ss, f"discrete Laplace, sensitivity {dep} (rows)"
            )
        reduce = np.min if params["estimator"] == "min" else np.median

        def estimator(lv):
            def f(c):
                a, b = hashes[lv]
                ids = make_ids(c, lv)
                out = np.empty(c.size)
                for s in range(0, c.size, 65536):  # bounded memory for the deepest levels
                    x = ids[s : s + 65536]
                    col = ((a[None, :] * x[:, None] + b[None, :]) % _MERSENNE31) % wid
                    out[s : s + 65536] = reduce(sketches[lv][rows[None, :], col], axis=1)
                return out

            return f

        est = {lv: estimator(lv) for lv in levels}
        ids, vals, t = self._choose(params, D, first, est, sd)
        density, ids = _leaves_release_density(ids, vals, D)
        elements = L * dep * wid
        diag = {"levels": levels, "users": U, "threshold": t, "cells": int(ids.size), "noise_std": sd}
        diag["effective_epsilon"] = eff
        w = degradation_warning(eff, eps)
        return distributed_release(
            density,
            domain,
            ledger,
            elements,
            params,
            1,
            f"{L} count-min sketches of {dep} x {wid}: {elements:,} elements",
            diag,
            partition=node_rects(ids, domain) if ids.size <= 200_000 else None,
            extras={"sketches": sketches, "hashes": hashes, "estimator": params["estimator"]},
            warnings=notes + ([w] if w else []),
        )


def cms_level_estimates(release: Release, level: int) -> np.ndarray:
    """Estimates of every cell of ``level`` (Morton order) from a ``cms_hierarchical``
    release's sketches (post-processing; used for oracle level sweeps)."""
    sk = release.extras["sketches"][level]
    a, b = release.extras["hashes"][level]
    reduce = np.min if release.extras["estimator"] == "min" else np.median
    dep, wid = sk.shape
    rows = np.arange(dep)
    codes = np.arange(4**level, dtype=np.int64)
    out = np.empty(codes.size)
    for s in range(0, codes.size, 65536):
        x = make_ids(codes[s : s + 65536], level)
        col = ((a[None, :] * x[:, None] + b[None, :]) % _MERSENNE31) % wid
        out[s : s + 65536] = reduce(sk[rows[None, :], col], axis=1)
    return out
