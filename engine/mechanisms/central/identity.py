"""Laplace per cell, ``identity`` (Dwork et al. 2006), with negatives clipped and the top-t% filter of
Ghazi et al. 2023, Section 4 (``identity_topt``; :func:`laplace_baseline` is also the sparse-EMD
family's baseline), and ``uniform``, the noisy total spread evenly."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.params import Param
from ..base import Mechanism, Release, register
from ..capabilities import AuditPlan, NoiseCase
from ..common import (
    LAPLACE_SD,
    TOTAL_PARAMS,
    UNIT_PARAM,
    blank_postprocessed,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
    noise_source,
)
from ..noise_model import Measurements, NoiseModel


# ================================================================== Identity
def top_t_count(n_cells: int, top_t: float) -> int:
    """Number of cells kept by top-t% thresholding: ceil(t/100 * cells), at least 1."""
    if not (0 < top_t <= 100):
        raise ParamError(f"top t must be a percentage in (0, 100] (got {top_t})")
    return int(min(n_cells, max(1, math.ceil(n_cells * top_t / 100.0 - 1e-9))))


def laplace_baseline(
    truth: np.ndarray,
    eps: float,
    rng,
    clip: bool = True,
    top_t: float | None = None,
    sensitivity: float = 1.0,
) -> np.ndarray:
    """The Laplace baseline of Ghazi et al. (2023, Section 4, "Baselines"): add
    Laplace(sensitivity/eps) to every cell of ``truth``; with ``top_t`` (a percentage,
    e.g. 0.01 for the paper's top-0.01%) keep only the ``top_t_count`` largest noisy
    cells and zero the rest; with ``clip`` zero the negative cells. eps-DP for an
    L1 sensitivity of ``sensitivity`` (1 for counts, or for per-user distributions
    summing to 1 under add/remove-one-user). ``rng``: numpy Generator or NoiseSource.
    """
    eps = check_epsilon(eps)
    noise = noise_source(rng)
    truth = np.asarray(truth, dtype=np.float64)
    noisy = noise.add_laplace(truth, float(sensitivity) / eps)
    if top_t is not None and top_t > 0:
        noisy = keep_top(noisy, top_t_count(noisy.size, float(top_t)))
    if clip:
        noisy = np.clip(noisy, 0.0, None)
    return noisy


def keep_top(noisy: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest cells of ``noisy``, the others zeroed (post-processing)."""
    flat = np.asarray(noisy, dtype=np.float64).ravel()
    if k >= flat.size:
        return noisy
    keep = np.argpartition(flat, flat.size - k)[flat.size - k :]
    out = np.zeros_like(flat)
    out[keep] = flat[keep]
    return out.reshape(np.shape(noisy))


TOPT_FALSE_CELLS = 0.01  # empty cells expected to pass the default threshold on noise alone, per map
FILL_PARAM = Param(
    "fill",
    "choice",
    "bayes",
    "how the cells the rule does not keep share the rest of the noisy total: by empirical-Bayes weights from their "
    "noisy counts (bayes), or evenly (even); both are post-processing",
    choices=("bayes", "even"),
    label="fill of the cells not kept",
)
# the fill is post-processing of the released counts and total, so the audit of the rule may leave it even: the
# empirical-Bayes fit costs about 25 ms a run, and the rule's rare events need 100,000 runs per dataset
FILL_AUDIT_NOTE = "the cells not kept filled evenly (the fill is post-processing; its fit would cost 25 ms a run)"
TOPT_TOTAL_SHARE = 0.05  # share of epsilon on the total whose remainder fills the cells not kept


@dataclass
class TopTRelease:
    """The default top-t release (:func:`topt_release`): ``density`` (kept cells' noisy counts,
    the rest filled), ``raw`` (every cell's noisy count at ``eps_cells``), ``kept`` (mask),
    ``fill`` (the mean value of the cells not kept), ``fill_model`` (how the fill was weighted:
    :func:`.ebfill.fill_weights`), ``n_hat`` (the noisy total at ``eps_total``)."""

    density: np.ndarray
    raw: np.ndarray
    kept: np.ndarray
    fill: float
    n_hat: float
    eps_cells: float
    eps_total: float
    threshold: float
    fill_model: str = "even"

    def noise_model(self) -> NoiseModel:
        """The release's units: each kept cell, with its Laplace(1/eps_cells); and the cells not kept together,
        which share the remainder ``n_hat - kept mass`` (the total's draw and the kept cells' draws, given which
        cells were kept), each its share of it by the fill's weights. The weights come from the noisy counts too;
        over repeated runs a filled cell also moves with them, as a PrivTree leaf with its tree, and that part is
        not in the noise. A share of 0 (a remainder of 0) is a choice made on the noise: those cells are blank."""
        from scipy import sparse

        kept = self.kept.ravel()
        rest = int(kept.size - np.count_nonzero(kept))
        var_rest = LAPLACE_SD**2 / self.eps_total**2 + np.count_nonzero(kept) * LAPLACE_SD**2 / self.eps_cells**2
        dens = np.asarray(self.density, dtype=np.float64).ravel()
        filled = np.where(kept, 0.0, dens)
        whole = float(filled.sum())  # the remainder, less what the fill's cap left unshared
        cells = np.flatnonzero(kept)
        rows, cols, vals = [np.arange(cells.size)], [cells], [np.ones(cells.size)]
        sd, counts = [np.full(cells.size, LAPLACE_SD / self.eps_cells)], [dens[cells]]
        if rest and whole > 0:  # one unit: the cells not kept, each its share of the remainder
            shared = np.flatnonzero(filled > 0)
            rows.append(np.full(shared.size, cells.size))
            cols.append(shared)
            vals.append(filled[shared])
            sd.append([math.sqrt(var_rest) * whole / (self.fill * rest)])  # the remainder's sd, times the part shared
            counts.append([whole])
        k = cells.size + (len(rows) - 1)
        weights = sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(k, kept.size)
        )
        blank = ~kept & (filled <= 0)
        basis = (
            "kept cells: Laplace(1/eps_cells), sqrt(2)/eps_cells; the others: their share of the noisy remainder of "
            "the total, given the fill's weights"
        )
        return NoiseModel.of_areas(np.concatenate(counts), np.concatenate(sd), weights, basis, blank=blank)


def topt_threshold(n_cells: int, eps: float, sensitivity: float = 1.0) -> float:
    """The level ``(sensitivity / eps) ln(C / (2 alpha))`` that a Laplace(sensitivity/eps) draw passes
    with probability ``alpha / C`` (alpha = ``TOPT_FALSE_CELLS``): over the C cells of an empty map
    about alpha cells pass on noise alone."""
    return float(sensitivity) / float(eps) * math.log(max(n_cells / (2.0 * TOPT_FALSE_CELLS), 1.0))


def share_capped(total: float, w: np.ndarray, cap: float) -> np.ndarray:
    """``total`` shared in proportion to the weights ``w`` >= 0, no share above ``cap`` (water-filling:
    ``min(lam w, cap)`` with the ``lam`` that makes them sum to ``total``; every positive weight at
    ``cap`` when even that falls short). A cell the threshold did not keep is not shown above it."""
    w = np.asarray(w, dtype=np.float64)
    if total <= 0 or not w.sum() > 0:
        return np.zeros(w.shape)
    if total >= cap * np.count_nonzero(w):
        return np.where(w > 0, cap, 0.0)
    lo, hi = total / w.sum(), cap / w[w > 0].min()  # lam lies between: no share capped, every share capped
    for _ in range(100):  # the sum of min(lam w, cap) grows with lam
        lam = math.sqrt(lo * hi)
        lo, hi = (lam, hi) if np.minimum(lam * w, cap).sum() < total else (lo, lam)
    out = np.minimum(hi * w, cap)
    return out * (total / out.sum())


def topt_release(truth: np.ndarray, eps: float, noise, sensitivity: float = 1.0, fill: str = "bayes") -> TopTRelease:
    """The top-t baselines' default (Ghazi et al. 2023, Section 4, with t chosen by the noise).

    ``TOPT_TOTAL_SHARE`` of eps buys a Laplace count ``n_hat`` of the total, the rest Laplace noise
    on every cell. Kept: every cell whose noisy count exceeds :func:`topt_threshold` (about one empty
    cell in a hundred maps gets through). The cells not kept share the remainder
    ``max(n_hat - kept mass, 0)`` instead of being zeroed, in proportion to empirical-Bayes
    posterior means computed from their noisy counts (:func:`.ebfill.fill_weights`: the blocks' and
    the cells' priors fitted to the noisy counts, each used only when it beats one common value;
    evenly when neither does). Why: the paper's fixed top 0.01% (7 of 65,536 cells, for 200 users)
    and then a threshold at one false cell per map, both zeroing the rest, put all the mass on a
    handful of cells (up to 3,040x the uniform map's MSE); an even fill is the uniform map wherever no
    single cell stands out, and gave away what Identity keeps there (Identity 0.82x the uniform map's
    EMD on the synthetic cities at eps 0.1, 0.23x at eps 1 against the even fill's 1x and 0.65-0.87x;
    BENCHMARKS.md, "defaults on data nobody tuned them on"). The remainder needs its own total: the
    noisy cells' sum has sd sqrt(2C)/eps (362/eps at 256 x 256), more than the mass of small maps
    (392 Snow deaths at eps = 1: 12x the uniform map's MSE without it, 0.82x with 5% spent on it).
    Everything after the two Laplace draws is post-processing."""
    from .ebfill import fill_weights

    eps = float(eps)
    eps_total = TOPT_TOTAL_SHARE * eps
    eps_cells = eps - eps_total
    truth = np.asarray(truth, dtype=np.float64)
    n_hat = float(noise.add_laplace(np.array([truth.sum()]), float(sensitivity) / eps_total)[0])
    raw = noise.add_laplace(truth, float(sensitivity) / eps_cells)
    tau = topt_threshold(raw.size, eps_cells, sensitivity)
    kept = raw > tau
    rest = raw.size - int(np.count_nonzero(kept))
    remainder = max(n_hat - float(raw[kept].sum()), 0.0)
    if rest and fill == "bayes":
        w, model = fill_weights(raw, kept, float(sensitivity) / eps_cells, tau)
        filled = share_capped(remainder, w, tau)
    elif rest:  # evenly: what the weights give when no prior beats one common value
        filled, model = share_capped(remainder, np.where(kept, 0.0, 1.0), tau), "even"
    else:
        filled, model = np.zeros(raw.shape), "even"
    density = np.where(kept, raw, filled)
    fill = remainder / rest if rest else 0.0
    return TopTRelease(density, raw, kept, fill, n_hat, eps_cells, eps_total, tau, model)


@register
class Identity(Mechanism):
    """Identity: Laplace(1/epsilon) noise on every cell of the true histogram.

    Paper: the Laplace mechanism (Dwork, McSherry, Nissim, Smith 2006), the "Identity"
    baseline of DPBench (Hay et al., SIGMOD 2016). Variants from Ghazi et al. (2023,
    Section 4, "Baselines"): negatives set to zero (``clip_negatives``), and the
    thresholding variant that keeps only the top t% noisy cells (``top_t`` as a
    percentage; the paper used 0.01% and 0.001%).

    Threat model: a trusted curator sees every location and publishes the noisy
    histogram. Guarantee: epsilon-DP (central) for the chosen ``unit``; the
    histogram has L1 sensitivity 1, so one Laplace(1/epsilon) draw per cell
    composes in parallel. Clipping and thresholding are post-processing.

    Unit of privacy (see the module docstring): ``user`` (default) counts each of a
    user's k locations 1/k, so the histogram is the sum of the users' normalised
    distributions and one user changes it by at most 1 in L1: user-level epsilon-DP,
    which is Ghazi et al.'s unit (each user's distribution normalised). ``record``:
    plain location counts, a user with k locations protected at k*epsilon.

    Departures: top-t keeps ceil(t% of the cells), at least one cell (the paper does
    not say how t% of a cell count is rounded).

    Noise model (``Release.noise``): every cell is a unit of standard deviation sqrt(2)/epsilon,
    the Laplace(1/epsilon) draw's, exact and the same whatever the data (in secure mode OpenDP's
    Laplace, rounded to a fine float lattice: the same to within that rounding); the cells' noises
    are independent. Cells that clipping or top-t set to 0 are blank: their 0 is a choice made on
    the noisy value, biased towards 0, not noisy around the truth, so no noise-based margin applies.
    A kept cell's SE is its noise's; keeping selects draws above a threshold, so over repeated
    runs a cell whose truth is near the threshold also spreads by being kept or not.
    """

    key = "identity"
    data_independent = True
    margin = "closed form"
    margin_note = "Laplace(1/eps) per cell"
    planner = "exact"
    noise_cases = (NoiseCase("identity", float_attack=True),)
    label = "Identity (Laplace per cell)"
    family = "central"
    guarantee = "user-level epsilon-DP (central) under add/remove user; add/remove record with unit = record"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy histogram."
    summary = "Add Laplace noise of scale 1/epsilon to every cell's count."
    paper = "Dwork et al. 2006; DPBench (Hay et al. 2016); top-t variant: Ghazi et al. 2023"
    equations = "Laplace mechanism (Dwork et al. 2006, Prop. 1); Ghazi et al. 2023 Section 4 (baselines)"
    params = (
        UNIT_PARAM,
        Param("clip_negatives", "bool", False, "set negative noisy counts to zero (post-processing)"),
        Param(
            "top_t",
            "float",
            0.0,
            "keep only the top t% of cells by noisy count and zero the rest (Ghazi et al. Section 4); 0 = off",
            min=0.0,
            max=100.0,
            label="top t (%)",
        ),
    )
    dp_outputs = ("cells_kept", "noise", "measurements")

    @classmethod
    def matrix_mechanism(cls, params: dict | None = None) -> bool:
        """The Laplace mechanism on the cells, unless clipping or top-t (biased towards 0) changes its map."""
        p = cls.schema().resolve(params or {})
        return not p["clip_negatives"] and not float(p["top_t"])

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        truth = bounded.data.true_histogram(domain)
        raw = laplace_baseline(truth, eps, ctx.noise, clip=False)
        kept, top_t = self._cells_kept(raw, eps, float(params["top_t"]))
        noisy = keep_top(raw, kept)
        if params["clip_negatives"]:
            noisy = np.clip(noisy, 0.0, None)
        stderr = blank_postprocessed(np.full(raw.shape, LAPLACE_SD / eps), noisy, raw)
        ledger = Ledger()
        ledger.spend(
            "cell counts", eps, composition="parallel", group="cells", note=f"Laplace(1/eps) per cell; {bounded.short}"
        )
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "noise_scale": 1.0 / eps,
                "cells": int(truth.size),
                "clip_negatives": bool(params["clip_negatives"]),
                "top_t_percent": top_t,
                "cells_kept": kept,
            }
        )
        basis = "Laplace(1/eps) per cell: sqrt(2)/eps; cells set to 0 after the noise have none"
        return Release(
            density=noisy,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the noisy histogram"),
            diagnostics=diag,
            noise=NoiseModel.of_cells(noisy, stderr, basis),
            measurements=Measurements(grid=raw, cell_m=domain.cell, scale=1.0 / eps),
        )

    def _cells_kept(self, noisy: np.ndarray, eps: float, top_t: float) -> tuple[int, float | None]:
        """(cells kept, t in %): top t% when ``top_t > 0``, else every cell."""
        if top_t > 0:
            return top_t_count(noisy.size, top_t), top_t
        return int(noisy.size), None


TOPT_RULE_HELP = (
    "0 = the default rule: 5% of epsilon counts the total; keep every cell whose noisy count exceeds "
    "ln(cells/0.02)/epsilon (one empty cell in a hundred maps passes on noise alone) and share the rest of the "
    "total over the other cells by empirical-Bayes estimates from their noisy counts (evenly where those show "
    "no structure: with no cell kept, the uniform map); the number kept is in the diagnostics ('cells_kept'). > 0: keep "
    "exactly the top t% and zero the rest (the paper used 0.01 and 0.001)"
)


@register
class IdentityTopT(Identity):
    """Identity with top-t% thresholding: the "baseline with top t%" of Ghazi et al.
    (2023, Section 4 and Figures 1-3): Laplace(1/epsilon) per cell, negatives zeroed,
    then only the top t% noisy cells kept. ``top_t > 0`` keeps exactly that percentage
    (the paper reports 0.01% and 0.001%, chosen for 256 x 256 cells and 200 users).

    Default (``top_t = 0``, departure): t follows the noise, :func:`topt_release`: 5% of
    epsilon buys a Laplace count of the total, the cells get Laplace(1/(0.95 epsilon)); every
    cell above :func:`topt_threshold` (one empty cell in a hundred maps passes on noise alone)
    is kept and the rest of the noisy total is shared out over the other cells instead of
    zeroing them, in proportion to empirical-Bayes posterior means computed from their noisy
    counts (:mod:`.ebfill`; evenly where the fitted priors do not beat one common value). The
    paper's fixed 0.01% kept 7 of 65,536 cells whatever the users, and any rule that zeroes the
    rest puts all the mass on the few cells above the noise: up to 3,000x the uniform map's MSE;
    an even fill gave away the structure Identity keeps below the threshold (BENCHMARKS.md,
    "defaults on data nobody tuned them on"). The default is measured never worse than the
    better of Identity and the uniform map in MSE and EMD on the built-in and test cities at
    eps 0.1-10 except where Identity is within 2.5% of the uniform map (there the fill is mostly
    even, the uniform map when no cell is kept, and Identity measured at most 2.2% better).
    ``diagnostics["cells_kept"]`` holds the number kept, ``"fill"`` the mean value of the
    others, ``"fill_model"`` which priors the fill used.

    Guarantee: epsilon-DP under the same relation as ``identity``: the total (sensitivity 1)
    at 5% of epsilon and the cells (parallel, sensitivity 1) at 95% compose sequentially; the
    threshold and the fill are post-processing. Same threat model, unit of privacy (``user``
    by default: Ghazi et al.'s per-user normalised histogram) and ``top_t > 0`` departures as
    ``identity``; a separate key so comparisons can show both baselines side by side.
    """

    key = "identity_topt"
    data_independent = False  # which cells are kept, and the fill, read the noisy counts
    planner = "none"
    # the top-t rule keeps an empty cell with probability 1/C and the person's cell about e^eps / C: rare events
    audit_plan = AuditPlan(runs=100_000, params={"fill": "even"}, note=FILL_AUDIT_NOTE)
    noise_cases = ()
    label = "Identity + top-t% threshold (Ghazi et al. baseline)"
    summary = "Laplace noise per cell; keep the cells that stand out of the noise, share the rest of the total by empirical-Bayes weights."
    params = (
        UNIT_PARAM,
        Param("clip_negatives", "bool", True, "set negative noisy counts to zero (post-processing)"),
        Param("top_t", "float", 0.0, TOPT_RULE_HELP, min=0.0, max=100.0, label="top t (%)"),
        FILL_PARAM,
    )
    dp_outputs = ("cells_kept", "noise", "measurements", "fill", "fill_model", "top_t_percent")

    def run(self, data, domain, epsilon, params, ctx):
        if float(params["top_t"]) > 0:
            return super().run(data, domain, epsilon, params, ctx)
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        tt = topt_release(bounded.data.true_histogram(domain), eps, ctx.noise, fill=params["fill"])
        ledger = Ledger()
        ledger.spend("total count", tt.eps_total, note=f"Laplace count; its remainder fills the rest; {bounded.short}")
        ledger.spend(
            "cell counts",
            tt.eps_cells,
            composition="parallel",
            group="cells",
            note=f"Laplace(1/eps) per cell; {bounded.short}",
        )
        kept = int(np.count_nonzero(tt.kept))
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update(
            {
                "noise_scale": 1.0 / tt.eps_cells,
                "cells": int(tt.raw.size),
                "clip_negatives": True,
                "top_t_percent": 100.0 * kept / tt.raw.size,
                "cells_kept": kept,
                "threshold": tt.threshold,
                "fill": tt.fill,
                "fill_model": tt.fill_model,
            }
        )
        return Release(
            density=tt.density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the noisy histogram and the noisy total"),
            diagnostics=diag,
            noise=tt.noise_model(),
            measurements=Measurements(grid=tt.raw, cell_m=domain.cell, scale=1.0 / tt.eps_cells),
        )


# =================================================================== Uniform
@register
class Uniform(Mechanism):
    """Uniform: the total count spread evenly over all cells.

    DPBench / DPComp (Hay et al., SIGMOD 2016): the data-independent floor; an
    algorithm whose error is close to Uniform's learns nothing about the shape.
    Threat model: trusted curator. Guarantee: with ``total = noisy``, epsilon-DP
    (the whole budget buys one Laplace(1/epsilon) count of the total); with
    ``total = public`` the true total is side information (declared in the ledger),
    no budget is spent, and the release is not private with respect to N.

    Unit of privacy: ``user`` (default) counts each of a user's k locations 1/k, so
    the total is the number of users and one user moves it by at most 1 (user-level);
    ``record``: the number of locations (a user with k locations at k*epsilon).

    Departures: a negative noisy total is set to zero (post-processing).

    Noise model: with ``total = noisy``, one unit, the whole map: sqrt(2)/epsilon spread over the
    C cells, sqrt(2)/(epsilon C) per cell (the one Laplace draw moves every cell together), none
    when the noisy total was set to 0; with ``total = public`` 0 (no noise). The release's error is
    mostly its bias (the map is flat), which the spreading term of its margin covers.
    """

    key = "uniform"
    data_independent = None  # DPComp's floor: a flat map
    margin = "closed form"
    margin_note = "one Laplace(1/eps) total spread over the cells"
    planner = "exact"
    label = "Uniform (total spread evenly)"
    family = "central"
    guarantee = (
        "user-level epsilon-DP (central) on the total under add/remove user (add/remove record with unit = "
        "record); none if public"
    )
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees one number (the total)."
    summary = "Estimate only the total and assume locations are spread evenly."
    paper = "DPBench (Hay et al. 2016)"
    equations = "DPBench data-independent baseline (Uniform)"
    params = (UNIT_PARAM, TOTAL_PARAMS[0])
    dp_outputs = ("total_used", "noise")
    side_information_keys = ("total_used",)

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        bounded = bound_contributions(data, domain, params["unit"])
        n_true = float(bounded.data.true_histogram(domain).sum())
        ledger = Ledger()
        if params["total"] == "public":
            ledger.note_side_information(f"the true {bounded.total_name} N (spread evenly; no budget spent)")
            n_used = n_true
        else:
            n_used = max(float(ctx.noise.add_laplace(n_true, 1.0 / eps)), 0.0)
            ledger.spend("total count N", eps, note=f"Laplace(1/eps) on the {bounded.total_name}; {bounded.short}")
        cells = domain.n * domain.n
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update({"total_used": n_used, "total": params["total"]})
        if params["total"] == "public":
            sd, basis = 0.0, "no noise: the true total spread evenly"
        else:
            sd = LAPLACE_SD / eps / cells if n_used > 0 else math.nan
            basis = "one Laplace(1/eps) total spread over every cell: sqrt(2)/(eps x cells)"
        density = np.full((domain.n, domain.n), n_used / cells)
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("the total count"),
            diagnostics=diag,
            noise=NoiseModel.of_cells(density, sd, basis, label=np.zeros(cells, dtype=np.int64)),
        )
