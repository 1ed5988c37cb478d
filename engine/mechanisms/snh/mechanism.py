"""Spatial Neural Histograms (SNH) for private range-count queries, with ParamSelect
(Zeighami, Ahuja, Ghinita, Shahabi, "A Neural Database for Differentially Private
Spatial Range Queries", PVLDB 15(5), 2022), and the IDENTITY@ParamSelect ablation.

Pipeline (Sections 3.3-4.3), all in the run's public square domain:

1. **Data collection** (Section 4.1): an equi-width grid of cell width ``rho`` laid from
   the domain's south-west corner (``m = ceil(side / rho)`` cells per side); each
   cell's count plus Laplace(1/eps). The cells are disjoint, so the whole grid costs
   eps by parallel composition: one ledger entry.
2. **Spatial data augmentation** (Algorithm 1): ``k`` sizes
   ``R = {l + (u - l)/k (i + 1/2)}``; for each size ``r`` and each grid-aligned corner
   ``c``, ``Y_A^r[c] = sum_c' |(c, r) ∩ (c', rho)| / rho^2 Y_D[c']`` (uniformity
   assumption inside partly covered cells), computed exactly in O(1) per query with
   the bilinear interpolation of the noisy grid's integral image.
3. **Training** (Section 4.2, Eq. 6): one fully connected network per size, input
   the query location, loss ``sum w_(c,r) / max(Y, psi) (f(c) - Y)^2``; JAX + optax
   (Adam), the ``k`` networks trained together with ``vmap``, early stopping on the
   training loss (see :mod:`.networks`).
4. **Model utilisation** (Section 4.3): a query ``(c, r)`` is answered by the network of
   the nearest size ``r*`` scaled by ``(r / r*)^2``; or, with ``variant = snh_qs``
   (SNH+QS, Section 6.3.2), by a network that also takes the query size as input.

**ParamSelect** (Section 5.1, :mod:`.paramselect`) picks ``rho`` from public
features when ``rho_m = 0``.

Threat model: a trusted curator holds every location, runs the whole pipeline and
publishes the trained networks (and the density grid derived from them). The
adversary sees the networks. Guarantee: epsilon-DP (central, Theorem 5.1): only the
data-collection grid reads the private data (Laplace(1/eps) per disjoint cell); the
augmentation, training, utilisation and the density grid are post-processing.
ParamSelect, the workload weights and the input normalisation use only public
information: the public domain, the public auxiliary dataset, and ``n`` (the number
of records, public in Algorithm 3; recorded as side information when ParamSelect runs).
The unit of privacy is the ``unit`` parameter shared with the central baselines: by
default one user (a user's k locations weighted 1/k, so every user adds at most 1 to
the grid: user-level eps-DP); ``record`` protects one location as the paper does (a
user with k locations is then protected at k*eps). The two agree on datasets with one
location per user.

Departures from the paper (and from the reference code, szeighami/SNH):

* Coordinates are normalised with the **public** domain (the reference uses the private
  data's own min/max, which is not DP), to ``[-5, 5]`` as in the reference.
* Noise comes from the run's seeded generator (the reference's seed is always 0).
* The optimiser is optax Adam (the reference's ``jax.experimental.optimizers`` is not in current JAX).
* Workload weights ``w_(c,r)`` (Eq. 6) with ``workload = aux``: the workload ``Q_W`` is
  one square per public auxiliary point, centred on it, of side uniform in ``[l, u]``;
  ``w`` is the expected number of workload squares that overlap ``(c, r)`` (4-point
  midpoint rule over the side; auxiliary points counted on the ``rho`` grid with the
  uniformity assumption). The reference counts auxiliary points inside the training
  query instead. Other workloads: ``uniform`` (every training query weighs 1: queries
  anywhere, like the paper's test queries) and ``noisy`` (squares centred where the
  *noisy grid* has mass: the same weights computed on the signed noisy grid, whose noise
  averages out in the box sums, clipped at 0 afterwards, so their expectation is the
  weights of a workload drawn like the data; post-processing, no side information; not in the paper, the
  default when there is no public data).
* ``weight_floor`` (default 1; 0 = the paper) adds that fraction of the mean weight to
  every training query, i.e. mixes a uniform workload of equal total weight into
  ``Q_W``. With the paper's pure workload a training query that meets no workload
  query has weight 0 and drops out of Eq. 6, so the network is unconstrained there:
  on the coastal city (sea) and the SF cabs (empty blocks) queries centred uniformly
  at random then got relative errors of 0.18-0.20 against 0.03-0.06 with the floor,
  while data-centred queries were unchanged (``python -m engine bench snh``).
* Public auxiliary data: ``aux = proxy`` draws a public proxy of a synthetic city from a
  sibling city of the same preset (same centres, river and coast, different
  neighbourhood fields and parks): another dataset of the same region, never the
  private points. ``aux = dataset`` uses another registered dataset (e.g. Gowalla for
  the SF cabs, as in Section 6.1.1). It is recorded as side information.
* Training corners extend ``ceil(r / rho)`` cells beyond the west and south edges (and
  the grid's own overhang beyond the north and east edges), where the count is known to
  be 0, so queries that stick out of the domain are inside the training range (the
  reference also pads its training queries).
* Augmented labels are not clipped by default (the paper does not say; the reference
  clips them at 0, ``clip_labels``, which biases sparse areas upwards).
* Network outputs are reparametrised as ``s_j * net_j(c)`` with ``s_j`` the RMS of
  model j's labels (post-processing of the noisy grid), so every network learns an O(1)
  target; the loss is Eq. 6 divided by constants. ``psi`` is 0.1% of the noisy total
  (the paper uses 0.1% of n).
* One "epoch" is one pass over the training queries in mini-batches (the reference uses
  one full batch per epoch). Presets: ``paper`` = depth 20, width 80, Adam lr 1e-3,
  1,000 epochs, the reference code's He-uniform initialisation; ``fast`` (default,
  interactive on a CPU) = depth 4, width 64, at most 3,000 steps per network of batch 256, lr 3e-3
  with a cosine decay to 5%, and the sin layer's weights scaled by 2.5 (higher initial
  frequencies: a small network trained briefly otherwise underfits the city's structure);
  ``quality`` = 1,500 steps of batch 1,024 (twice the training work, within the
  seed-to-seed spread of ``fast`` on the synthetic cities, BENCHMARKS.md).
* Model utilisation extends to rectangles and to sizes outside ``[l, u]``: a rectangle is
  clipped to the domain and cut into ``a x b`` near-square pieces of side close to
  ``clip(min side, l, u)``; each piece is answered by the Section 4.3 rule with
  ``r = sqrt(piece area)``. A square of side in ``[l, u]`` is one piece, i.e. exactly
  Section 4.3. Answers are clipped at 0 (a count is never negative).
* ``corners_per_cell`` (default 1 = Algorithm 1): s > 1 also trains on corners every
  ``rho / s``, answered from the same noisy grid (post-processing). Training corners
  only at the cell corners sample ``f(c)`` every ``rho``, which aliases when the query
  side is below ``rho``.
* SNH+QS: each network covers ``[l + (u-l) j/k, l + (u-l)(j+1)/k]``, trained on
  ``qs_sizes`` sizes spaced in that interval; its output is scaled by ``(r / r_mid)^2``
  so the network learns the correction to the uniformity assumption.
* The density grid (heatmap) is the model's answer for every output cell taken as a
  range query (Section 4.3 rule), clipped at 0.

**Does SNH add anything beyond its grid?** (``scripts/snh_vs_grid.py``, BENCHMARKS.md)
The training targets of Algorithm 1 are IDENTITY@ParamSelect's own answers at the grid corners, so a
network that fits them exactly answers as IDENTITY does: on the polycentric and sprawl cities at eps 0.2,
n 100k, data-point centres, rho 202 m, the zero-loss fit of the targets is 1.00-1.01x IDENTITY on the same
noisy grid, and the noisy grid smoothed with the best Gaussian sigma chosen on the test queries (an
optimistic stand-in for a network's implicit smoothing) is 1.00-1.08x; the exact grid would be 0.48-0.86x.
Fitting the targets better (more epochs, larger networks) therefore cannot reach SNH <= 0.9x IDENTITY
here, and our measured SNH is 0.98-1.04x IDENTITY.
"""

from __future__ import annotations

import time

import numpy as np

from ...core.epsilon import check_epsilon
from ...core.params import Param
from ..base import Mechanism, Release, aggregate_view, register
from ..capabilities import AuditPlan, NoiseCase
from ..common import LAPLACE_SD, UNIT_PARAM, curator_communication
from ..noise_model import Measurements, NoiseModel
from .answers import GridAnswerer
from .collection import collect_step
from .training import fit_snh, training_work


# ====================================================================== params
def _aux_params() -> tuple[Param, ...]:
    return (
        Param(
            "aux",
            "choice",
            "auto",
            "public auxiliary dataset of the same region, TREATED AS PUBLIC (it sets the workload weights of "
            "Eq. 6 and ParamSelect's entropy feature, and never spends budget): proxy = a synthetic proxy "
            "(synthetic cities only); dataset = another dataset of the region (aux_dataset); none = no public "
            "data; auto = proxy for synthetic cities, else none",
            choices=("auto", "proxy", "dataset", "none"),
            label="public auxiliary data",
        ),
        Param(
            "aux_dataset",
            "str",
            "",
            "registry key of the public dataset of the same region when aux = dataset (e.g. gowalla:san_francisco)",
        ),
        Param("aux_n", "int", 50_000, "points in the synthetic proxy (aux = proxy)", min=100, max=5_000_000, log=True),
    )


def _workload_param() -> Param:
    return Param(
        "workload",
        "choice",
        "auto",
        "workload Q_W of Eq. 6: aux = squares centred on the public auxiliary points (the paper's experiments); "
        "uniform = squares anywhere (equal weights); noisy = squares centred where the noisy grid has mass "
        "(post-processing, no public data; not in the paper); auto = aux when there is public data, else noisy",
        choices=("auto", "aux", "uniform", "noisy"),
    )


def _rho_params() -> tuple[Param, ...]:
    return (
        Param(
            "rho_m",
            "float",
            0.0,
            "cell width of the data-collection grid in metres; 0 = chosen by ParamSelect from public features",
            min=0.0,
            max=1e6,
            label="cell width rho (m)",
        ),
        Param(
            "query_min_pct",
            "float",
            0.5,
            "smallest query side l, % of the domain side (the models are trained for sides in [l, u])",
            min=0.01,
            max=50.0,
            log=True,
            label="query side min (%)",
        ),
        Param(
            "query_max_pct",
            "float",
            2.0,
            "largest query side u, % of the domain side",
            min=0.01,
            max=100.0,
            log=True,
            label="query side max (%)",
        ),
    )


# ====================================================================== SNH
@register
class SNH(Mechanism):
    __doc__ = __doc__
    key = "snh"
    cost_variants = ({"preset": "quality"}, {"preset": "fast", "k": 4})
    cost_grows_with_points = False  # the training does not depend on the locations; the density grid on the cells
    margin_note = "no closed form: the map comes from networks trained on the noisy grid; estimated from repeats"
    # one network of one hidden layer of 8 units, 5 training steps; each run still compiles its network
    audit_plan = AuditPlan(
        runs=200,
        test_runs=36,
        params={"preset": "custom", "depth": 1, "width": 8, "epochs": 1, "max_steps": 5, "batch_size": 4096, "k": 1},
        statistic="measurement",
        note="a network of one hidden layer of 8 units trained 5 steps (the release is post-processing of the "
        "noisy grid, which the statistic reads); each run compiles its network, about 0.1-0.4 s",
    )
    label = "SNH (Spatial Neural Histograms)"
    family = "central"
    guarantee = (
        "epsilon-DP (central) under add/remove user (add/remove record with unit = record); training and answers "
        "are post-processing of one Laplace grid"
    )
    neighbouring = "add/remove user"
    threat_model = (
        "A trusted curator sees all locations, collects one noisy grid and trains the networks; "
        "the public sees the networks and the density grid."
    )
    summary = (
        "Noisy counts on a grid, augmented into range queries of k sizes, learned by k small neural networks "
        "that answer any range query; the grid width is chosen by ParamSelect from public data."
    )
    paper = "Zeighami, Ahuja, Ghinita, Shahabi. A Neural Database for Differentially Private Spatial Range Queries. PVLDB 15(5), 2022"
    equations = (
        "Sections 3.3-4.3 (Algorithm 1, Eq. 6), Section 5.1 (ParamSelect, Algorithms 2-3), Section 6.3.2 (SNH+QS)"
    )
    params = (
        UNIT_PARAM,
        *_rho_params(),
        Param("k", "int", 8, "number of networks / query sizes (Algorithm 1)", min=1, max=32),
        Param(
            "variant",
            "choice",
            "snh",
            "snh: one network per size, answers scaled (r/r*)^2 (Section 4.3); snh_qs: the size is an input (Section 6.3.2)",
            choices=("snh", "snh_qs"),
        ),
        Param(
            "corners_per_cell",
            "int",
            1,
            "training-query corners per cell side: 1 = the cell corners of Algorithm 1 (paper); s > 1 adds corners "
            "every rho/s (more augmented queries from the same noisy grid, for queries smaller than rho)",
            min=1,
            max=4,
        ),
        Param("qs_sizes", "int", 4, "SNH+QS: training sizes per network", min=2, max=16),
        Param(
            "anchor",
            "choice",
            "corner",
            "Section 4.3 scaling anchor: corner = the model's square shares the query's south-west corner (paper); "
            "centre = shares its centre (reference code)",
            choices=("corner", "centre"),
        ),
        *_aux_params(),
        _workload_param(),
        Param(
            "psi_pct", "float", 0.1, "smoothing psi of the loss, % of the (noisy) total", min=1e-4, max=100.0, log=True
        ),
        Param(
            "weight_floor",
            "float",
            1.0,
            "added to every workload weight, fraction of the mean weight: f mixes a uniform workload of f times the "
            "weight into Q_W (0 = the paper; with 0 the model is unconstrained where the workload has no query)",
            min=0.0,
            max=100.0,
        ),
        Param(
            "clip_labels",
            "bool",
            False,
            "clip augmented labels at 0 as the reference code does (biases sparse areas upwards; the paper does not clip)",
        ),
        Param(
            "preset",
            "choice",
            "fast",
            "fast: depth 4, width 64, at most 3,000 steps of batch 256 (interactive, ~10 s); quality: 1,500 steps "
            "of batch 1,024 (twice the training); paper: depth 20, width 80, lr 1e-3, 1,000 epochs (long); "
            "custom: the values below",
            choices=("fast", "quality", "paper", "custom"),
        ),
        Param("depth", "int", 20, "custom preset: swish hidden layers (paper: 20)", min=1, max=40),
        Param("width", "int", 80, "custom preset: units per layer (paper: 80)", min=4, max=512),
        Param("epochs", "int", 1000, "custom preset: maximum epochs", min=1, max=100_000, log=True),
        Param("batch_size", "int", 8192, "custom preset: mini-batch size", min=16, max=1_000_000, log=True),
        Param(
            "sin_scale",
            "float",
            1.0,
            "custom preset: first (sin) layer weights He uniform (std 1 for 2 inputs) times sin_scale; 1 = the reference",
            min=0.01,
            max=1000.0,
            log=True,
        ),
        Param("lr", "float", 1e-3, "custom preset: Adam learning rate (paper: 1e-3)", min=1e-6, max=1.0, log=True),
        Param(
            "lr_decay",
            "float",
            1.0,
            "custom preset: final learning rate as a fraction of lr, cosine schedule (1 = constant, as the paper)",
            min=0.0,
            max=1.0,
        ),
        Param(
            "patience",
            "int",
            50,
            "custom preset: epochs without improvement before a network stops",
            min=1,
            max=100_000,
        ),
        Param(
            "max_steps", "int", 0, "custom preset: cap on gradient steps per network (0 = none)", min=0, max=10_000_000
        ),
    )
    dp_outputs = (
        "psi",
        "epochs_run",
        "stopped_early",
        "best_training_loss",
        "gradient_steps",
        "augmentation_seconds",
        "training_seconds",
        "density_seconds",
        "output_scales",
        "measurements",
    )
    side_information_keys = (
        "rho_m",
        "rho_frac",
        "rho_choice",
        "grid_cells_per_side",
        "model_sizes_m",
        "training_queries_per_model",
        "model_bytes",
    )

    @classmethod
    def cost_features(cls, params: dict, depth: int, n_points: int) -> tuple[float, float]:
        return 1.0, training_work(params)

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        fit = fit_snh(data, domain, eps, params, ctx)
        model, ledger, diag = fit["model"], fit["ledger"], fit["diagnostics"]
        ctx.progress(0.96, "density grid from the model")
        t = time.perf_counter()
        density = model.density(domain)
        diag["density_seconds"] = time.perf_counter() - t
        diag["density_derivation"] = (
            f"each of the {domain.n}x{domain.n} cells ({domain.cell:.0f} m) is answered as a range query by the "
            "model (Section 4.3: the network of the nearest size r*, scaled by (cell/r*)^2), clipped at 0"
        )
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view(
                "The curator sees every location; the public sees only the released model and its density grid."
            ),
            range_answerer=model,
            diagnostics=diag,
            measurements=_grid_measurements(fit, eps),
        )


# ====================================================================== IDENTITY@ParamSelect
@register
class IdentityParamSelect(Mechanism):
    """IDENTITY@ParamSelect (Zeighami et al. 2022, Section 6.3.1): SNH's data-collection grid
    alone. An equi-width grid of cell width rho chosen by ParamSelect (Section 5.1) from
    public features, Laplace(1/eps) per cell; range queries are answered from the noisy
    grid with the uniformity assumption, and the density grid is the same answer for each
    output cell.

    Threat model: a trusted curator publishes the noisy grid. Guarantee: epsilon-DP
    (central), one Laplace(1/eps) draw per disjoint cell (parallel composition).
    Departures: as SNH's (public-domain grid from its south-west corner, ParamSelect
    table and query-size feature of :mod:`.paramselect`). Answers (and density
    cells) below zero are set to zero by default (``clip_answers``), as SNH's are, so the
    two are compared on the same post-processing; the paper does not say whether its
    IDENTITY clips. Noisy cells themselves are never clipped (that would bias sums up).

    Noise model (``Release.noise``): the rho-grid's cells are the released units, independent
    Laplace(1/eps) counts spread over the output cells by overlap (a cell overhanging the map keeps
    the share inside), exact given rho; the cells whose answer was clipped to 0 are blank. SNH itself
    has none in closed form (its density comes from networks trained on the noisy grid); the
    dashboard estimates it from repeated runs.
    """

    key = "identity_paramselect"
    margin = "closed form"
    margin_note = "Laplace(1/eps) per rho-grid cell, given rho"
    planner = "exact"
    audit_plan = AuditPlan(runs=2000, test_runs=150)  # ParamSelect's regressor: 12 ms per run
    # one 4 km cell width, answers not clipped, so the target's cell always shows
    noise_cases = (NoiseCase("identity_paramselect", {"rho_m": 4000.0, "clip_answers": False}),)
    label = "IDENTITY@ParamSelect (SNH's grid alone)"
    family = "central"
    guarantee = "epsilon-DP (central) under add/remove user (add/remove record with unit = record)"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees the noisy grid."
    summary = "The SNH data-collection grid, with ParamSelect's cell width, released as a noisy histogram."
    paper = SNH.paper
    equations = "Section 4.1 (data collection), Section 5.1 (ParamSelect), Section 6.3.1 (IDENTITY@ParamSelect)"
    params = (
        UNIT_PARAM,
        *_rho_params(),
        *_aux_params(),
        Param("clip_answers", "bool", True, "set answers below zero to zero (post-processing, as SNH's answers)"),
    )
    dp_outputs = ("noise", "measurements")
    side_information_keys = ("rho_m", "rho_frac", "rho_choice", "grid_cells_per_side", "noise")

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        got = collect_step(data, domain, eps, params, ctx, "noisy grid (Section 4.1)")
        ledger = got["ledger"]
        grid = got["grid"]
        ans = GridAnswerer(got["noisy"], grid, clip=params["clip_answers"])
        density = ans.density(domain)
        edges = np.arange(grid.m + 1, dtype=np.float64) * (grid.rho / domain.cell)
        blank = None
        if params["clip_answers"]:  # clipped to 0 after the noise: no margin there
            blank = density != GridAnswerer(got["noisy"], grid, clip=False).density(domain)
        basis = "Laplace(1/eps) per rho-grid cell, summed by overlap; cells clipped to 0 have none"
        diag = {
            **got["diagnostics"],
            "density_derivation": "each output cell is the noisy rho-grid's count over it (uniformity assumption)",
        }
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=aggregate_view("The curator sees every location; the public sees only the noisy grid."),
            range_answerer=ans,
            diagnostics=diag,
            noise=NoiseModel.of_grid(got["noisy"], LAPLACE_SD / eps, edges, domain.n, basis, blank),
            measurements=_grid_measurements(got, eps),
        )


def _grid_measurements(got: dict, eps: float) -> Measurements:
    """The noisy rho-grid ``Q_D`` (Section 4.1), one Laplace(1/eps) draw per cell: what SNH's release rests on."""
    noisy = np.asarray(got["noisy"], dtype=np.float64)
    return Measurements(grid=noisy, cell_m=got["grid"].rho, scale=1.0 / eps)
