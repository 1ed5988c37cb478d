"""The one protocol every mechanism follows, the release it returns, and the registry.

A mechanism simulates a whole pipeline (clients, noise, secure aggregation,
server post-processing) on a :class:`~engine.data.Dataset` over a public
:class:`~engine.core.grid.Domain` and returns a :class:`Release`.

How a mechanism declares its noise
----------------------------------
What a mechanism knows about its noise lives in the mechanism; nothing outside ``engine/mechanisms``
reads a key of ``Release.extras`` or ``Release.diagnostics``, nor compares a mechanism's key
(tests/test_noise_model.py). A mechanism states:

* **its noise model**, on the release: ``Release(..., noise=NoiseModel.of_cells(density, cell_sd, basis,
  label=...))`` (:mod:`.noise_model`): the released units (a label per cell, or area weights over the
  cells: :meth:`~.noise_model.NoiseModel.of_areas`, :meth:`~.noise_model.NoiseModel.of_grid`), each
  unit's noise sd and released count, the law in words (``basis``), cells changed after the noise
  (NaN in ``cell_sd``: no margin over them) and, where units share draws, a covariance
  (:class:`engine.mechanisms.central.trees.TreeCovariance`, :class:`engine.mechanisms.hdmm.mechanism.KronCovariance`).
  Without a closed form it puts the reason in ``noise`` (a sentence). :mod:`engine.regions.margins` makes every
  door's 95 % margin from it. A mechanism that knows each cell's noise sd passes it to ``NoiseModel.of_cells``
  with the cells that share a draw (dyadic blocks of them: ``NoiseModel.of_blocks``) and lists ``"noise"`` in
  ``dp_outputs``;
* **the typed parts others read** (:mod:`.outputs`): ``measurements`` (the raw noisy numbers, for the
  noise audits), ``levels``, ``heat``, ``regional``, ``proportion``, ``warnings``, ``regions_counted``;
  and, for figures a benchmark reads, a function in its own package (e.g. ``sparse_emd.readings``);
* **its capabilities**, on the class: ``margin`` (how its margin is known, :data:`.capabilities.MARGINS`)
  and ``margin_note`` (why); ``planner`` (:data:`.capabilities.PLANNING`, refined by :meth:`Mechanism.planning`);
  :meth:`Mechanism.cost_features` (the time estimate's W and P); ``audit_plan`` and ``relation_plans``
  (:class:`.capabilities.AuditPlan`); ``noise_cases`` (:class:`.capabilities.NoiseCase`);
  :meth:`Mechanism.level_map` and :meth:`Mechanism.measured_at` where the defaults do not fit;
  ``matrix_class`` (:meth:`Mechanism.matrix_mechanism`): whether the SVD lower bound applies to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..core.accounting import Ledger
from ..core.errors import Cancelled, ParamError
from ..core.grid import Domain, range_counts
from ..core.params import Param, Schema
from .capabilities import NOT_PLANNED, AuditPlan, NoiseCase
from .noise_model import NO_CLOSED_FORM, Measurements, NoiseModel
from .outputs import Heat, Level, Proportions, RegionalMeans

FAMILIES = ("none", "central", "distributed", "local", "federated")

# ------------------------------------------------------------ neighbouring relations
# Which pairs of datasets a guarantee is about (the "neighbours" of the DP definition):
# * "add/remove user": D' is D with one person (all of their locations) added or removed;
# * "replace user": one person's data replaced by any other (their number stays the same);
# * "zero-out user": one person's contribution replaced by zeros while they still take part
#   (the number of participants is public; distributed DP with secure aggregation);
# * "add/remove record" / "replace record": the same for one location (a person with k
#   locations is protected only as a group of k);
# * "none": no privacy claim (non-private references).
RELATIONS = ("add/remove user", "replace user", "zero-out user", "add/remove record", "replace record", "none")


def epsilon_under(
    epsilon: float, relation: str, target: str = "add/remove user", records_per_user: int | None = None
) -> tuple[float | None, str]:
    """The epsilon a guarantee of ``epsilon`` under ``relation`` implies under ``target``, or None
    where no bound follows; with the reason. The conversions are the standard ones (a change of
    one neighbour relation into a path of steps of the other, then group privacy):

    * add/remove user or zero-out user -> replace user: 2 epsilon (remove then add, or zero out
      then fill in: two steps). An upper bound, tight for a Laplace histogram (a person who
      moves changes two cells).
    * add/remove record -> add/remove user: k epsilon for people with at most k locations
      (group privacy), so only with ``records_per_user``; x 2 again for replace user.
      replace record -> replace user likewise (k epsilon).
    * replace user -> add/remove user: none. A replace-one guarantee fixes the number of
      people and says nothing about whether someone took part.
    * zero-out user -> add/remove user: none. The number of participants is public under
      zero-out, and these mechanisms read it (shard sizes, Pólya shapes, epsilon schedules);
      removing a participant also removes its noise shares, so the others' shares sum to a
      weaker law than planned.
    """
    if relation not in RELATIONS or target not in RELATIONS:
        raise ParamError(f"unknown neighbouring relation {relation!r} or {target!r}; known: {', '.join(RELATIONS)}")
    eps = float(epsilon)
    if relation == "none":
        return None, "no privacy claim"
    if relation == target:
        return eps, "the same relation"
    if relation in ("add/remove record", "replace record") and target in ("add/remove user", "replace user"):
        if relation == "replace record" and target == "add/remove user":
            return None, "a replace-one guarantee says nothing about whether someone took part"
        if not records_per_user:
            return None, "a person with k locations is protected at k x epsilon, and k is not bounded here"
        k = int(records_per_user)
        steps = 2 if (relation == "add/remove record" and target == "replace user") else 1
        return steps * k * eps, f"group privacy over at most {k} location(s) per person" + (
            ", removed then added" if steps == 2 else ""
        )
    if relation in ("add/remove user", "zero-out user") and target == "replace user":
        return 2 * eps, f"a replacement is two {relation.split()[0]} steps (group privacy for 2)"
    if relation == "replace user" and target == "add/remove user":
        return None, "a replace-one guarantee says nothing about whether someone took part"
    if relation == "zero-out user" and target == "add/remove user":
        return None, (
            "the number of participants is public under zero-out and the mechanism reads it (shards, Pólya "
            "shapes, schedules); removing a participant also removes its noise shares"
        )
    return None, f"not derived here ({relation} to {target})"


# --------------------------------------------------------------------- context
@dataclass
class RunContext:
    """What a running mechanism may use besides the data: its random stream, the
    noise source (seeded numpy, or in secure mode floating-point-safe samplers on OS
    entropy that check ``cancel_cb`` between batches of draws), progress and cancel,
    and the run's evaluation record.

    ``evaluation`` receives what a mechanism computes from the true data for the
    workbench (errors against the truth, exact counts, attacks on the true locations,
    timings) through :meth:`record_evaluation`: it never goes into the
    :class:`Release`, whose every field is a DP output, a public parameter or declared
    side information (``Mechanism.dp_outputs`` / ``Mechanism.side_information_keys``).
    ``engine.run.execution.run`` keeps it as ``RunResult.evaluation``; ``None`` (a release)
    records nothing.
    """

    rng: np.random.Generator
    secure: bool = False
    progress_cb: Callable[[float, str], None] | None = None
    cancel_cb: Callable[[], bool] | None = None
    evaluation: dict | None = field(default_factory=dict)

    def record_evaluation(self, **values) -> None:
        """Keep values computed from the truth out of the release (see the class docstring)."""
        if self.evaluation is not None:
            self.evaluation.update(values)

    def progress(self, fraction: float, message: str = "") -> None:
        if self.progress_cb is not None:
            self.progress_cb(float(min(max(fraction, 0.0), 1.0)), message)

    def check_cancelled(self) -> None:
        """Call between steps; raises :class:`Cancelled` if the user asked to stop."""
        if self.cancel_cb is not None and self.cancel_cb():
            raise Cancelled("the run was cancelled")

    @property
    def noise(self):
        from ..core.noise import NoiseSource

        ns = self.__dict__.get("_noise")
        if ns is None:
            ns = NoiseSource(self.rng, secure=self.secure, cancel_cb=self.cancel_cb)
            self.__dict__["_noise"] = ns
        return ns


# ---------------------------------------------------------------------- release
@dataclass
class Communication:
    """Upload cost of one client, in vector elements (and bits when known); with
    ``per_location`` the cost of one of its locations (what a client holds is data); ``shards``: the
    secure-aggregation shards the clients are split into in each round (None: no sharded aggregation)."""

    elements_per_client: float
    bits_per_client: float | None = None
    rounds: int = 1
    note: str = ""
    per_location: bool = False  # the figures are per location a client holds (central upload)
    shards: int | None = None

    def to_dict(self) -> dict:
        return {
            "elements_per_client": float(self.elements_per_client),
            "bits_per_client": None if self.bits_per_client is None else float(self.bits_per_client),
            "rounds": int(self.rounds),
            "note": self.note,
            "per_location": bool(self.per_location),
        }


@dataclass
class ServerView:
    """What the adversarial server observes, for the privacy-distance attack.

    ``kind`` is one of:
      * ``"clear"``: each user's location (no privacy);
      * ``"aggregate"``: only the released aggregate (central / distributed DP with
        secure aggregation); the attacker's belief about any user is the released
        density itself;
      * ``"per_user"``: something per user (local reports, a federated response
        surface); ``candidates(user_indices)`` then gives the attacker's weighted
        guesses for each user.
    """

    kind: str
    description: str
    candidates: Callable[[np.ndarray], list[tuple[np.ndarray, np.ndarray]]] | None = None
    surface: Callable[[int], np.ndarray] | None = None  # per-user received surface, if any


@dataclass
class Release:
    """What a mechanism publishes, plus what the workbench needs to explain it.

    ``density`` is the estimated count per cell of the run's domain grid
    (``grid[iy, ix]``), possibly unnormalised or negative; metrics normalise it.
    ``quantity`` says what ``density`` holds: ``"counts"`` (a location heatmap,
    the default) or ``"attribute_mean"`` (a regional mean of the dataset's
    ``value`` painted per cell; the attribute-mean family), which the metrics
    score by regional NRMSE instead of map distances.
    ``partition`` lists adaptive cells as rectangles in metres ``(k, 4)``.
    ``range_answerer`` answers rectangles from a model (e.g. SNH); without one,
    ranges are answered from :meth:`summed_map` with the uniformity assumption.

    Typed parts, the only ones read outside the mechanism's package: ``noise`` (the released units and
    their noise, :class:`.noise_model.NoiseModel`, or a sentence saying why there is none),
    ``measurements`` (the raw noisy numbers, for the noise audits), ``levels`` (the refinement levels),
    ``heat`` (a heat layer the mechanism publishes, e.g. Sparse EMD's smoothed map), ``regional`` (an
    attribute mean per region), ``proportion`` (a flag's share per node), ``warnings`` (shown to users)
    and ``regions_counted`` (how a release names the regions it counted). ``diagnostics`` is free-form, for
    display; ``extras`` holds what only the mechanism's own package reads.
    """

    density: np.ndarray
    domain: Domain
    ledger: Ledger
    communication: Communication
    server_view: ServerView
    partition: np.ndarray | None = None
    range_answerer: Callable[[np.ndarray], np.ndarray] | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)  # mechanism-specific arrays
    quantity: str = "counts"  # or "attribute_mean"
    noise: NoiseModel | str = NO_CLOSED_FORM
    measurements: Measurements | None = None
    levels: tuple[Level, ...] = ()
    heat: Heat | None = None
    regional: RegionalMeans | None = None
    proportion: Proportions | None = None
    warnings: tuple[str, ...] = ()
    regions_counted: str | None = None

    def answer_range(self, rects: np.ndarray) -> np.ndarray:
        rects = np.atleast_2d(np.asarray(rects, dtype=np.float64))
        if self.range_answerer is not None:
            return np.asarray(self.range_answerer(rects), dtype=np.float64)
        return range_counts(self.summed_map(), self.domain, rects)

    def summed_map(self) -> np.ndarray:
        """The map whose sums answer ranges: ``extras["least_squares"]`` where the release carries a
        linear unbiased estimate beside a ``density`` post-processed from the same noisy counts (the
        hierarchical tree's non-negative map, biased on sums), else ``density``. The noise model (``noise``) is then
        that estimate's."""
        return self.extras.get("least_squares", self.density)


# -------------------------------------------------------------------- protocol
class Mechanism:
    """Base class of all mechanisms. Subclasses set the class attributes and
    implement :meth:`run`. Register them with :func:`register`.

    Docstrings of subclasses cite the paper section and equations, state the
    threat model and the guarantee, and list every departure from the paper.
    ``neighbouring`` names the relation the guarantee is about (one of :data:`RELATIONS`),
    and ``guarantee`` says it in words; ``python -m engine audit`` checks the claim
    empirically on neighbours of that relation (:mod:`engine.run.analysis._audit`).
    """

    key: ClassVar[str] = ""
    label: ClassVar[str] = ""
    family: ClassVar[str] = "central"
    guarantee: ClassVar[str] = ""  # e.g. "epsilon-DP (central)"
    threat_model: ClassVar[str] = ""  # who sees what
    summary: ClassVar[str] = ""  # the idea in plain words
    paper: ClassVar[str] = ""  # citation
    equations: ClassVar[str] = ""  # sections / equations implemented
    params: ClassVar[tuple[Param, ...]] = ()
    uses_epsilon: ClassVar[bool] = True
    needs: ClassVar[tuple[str, ...]] = ()  # dataset attributes required, e.g. ("value",)
    # the parameters naming the regions the mechanism counts (and their file's CRS): filled from the analysis's
    # one region set (engine.run.execution.with_regions), never chosen apart from it
    region_params: ClassVar[tuple[str, ...]] = ()
    # the neighbouring relation the guarantee is stated for: one of RELATIONS; every mechanism sets it
    neighbouring: ClassVar[str] = ""
    # What a Release may hold: keys of ``Release.diagnostics`` / ``Release.extras`` and names of its typed
    # parts (``noise``, ``measurements``, ``levels``, ...; one field of a part as ``part.field``) whose
    # values are DP outputs (computed from the noisy values and public parameters; for mechanisms
    # without a privacy claim, their released outputs), and those that follow from the side
    # information the ledger declares (e.g. the number of clients); the names "ledger" (its steps and
    # notes), "communication" and "server_view" (its description) stand for those fields. Every other
    # key and part, and every other field but ``density``, ``partition``, ``range_answerer``, the ledger's
    # epsilons and side information and the server view's per-user callables, must be fixed by the
    # parameters and the public domain: values computed from the truth go to
    # ``RunContext.record_evaluation`` instead (tests/test_release_contents.py).
    dp_outputs: ClassVar[tuple[str, ...]] = ()
    side_information_keys: ClassVar[tuple[str, ...]] = ()
    # Capabilities (see the module docstring): how a release's 95 % margin is known and why; what the
    # planner may do; how the audits run it
    margin: ClassVar[str] = "repeats"
    margin_note: ClassVar[str] = "no closed form: estimated from releases with the next seeds"
    planner: ClassVar[str] = "none"
    audit_plan: ClassVar[AuditPlan] = AuditPlan()
    relation_plans: ClassVar[dict[str, AuditPlan]] = {}  # audit plans under another relation than the class's
    noise_cases: ClassVar[tuple[NoiseCase, ...]] = ()
    # the time estimate's calibration (scripts/calibrate_costs.py): parameter settings that move ``W``
    # (:meth:`cost_features`), and whether the work grows with the locations and with secure mode
    cost_variants: ClassVar[tuple[dict, ...]] = ()
    cost_grows_with_points: ClassVar[bool] = True
    # A matrix mechanism (Li et al. 2010): noise of data-independent scale on fixed linear queries of the
    # cells, the map their linear unbiased estimate. Its expected error on any workload is then at least the
    # SVD lower bound (engine.metrics.lower_bound); mechanisms outside the class can go below it.
    matrix_class: ClassVar[bool] = False
    # DPBench's classes: True when the queries measured, the noise's scale and the estimate never read the data;
    # None for a floor in neither class (the uniform map, DPComp's); False for every method that reads the data
    # (partitions, thresholds, or a grid or tree sized by a noisy total)
    data_independent: ClassVar[bool | None] = False

    @classmethod
    def matrix_mechanism(cls, params: dict | None = None) -> bool:
        """Whether a run with these parameters is a matrix mechanism (see ``matrix_class``)."""
        return cls.matrix_class

    @classmethod
    def schema(cls) -> Schema:
        return Schema(tuple(cls.params))

    @classmethod
    def neighbouring_for(cls, params: dict | None = None) -> str:
        """The relation of a run with these parameters: the class's, except that the ``unit``
        parameter the central baselines share, set to ``record``, makes it record-level."""
        if params and params.get("unit") == "record" and cls.neighbouring == "add/remove user":
            return "add/remove record"
        return cls.neighbouring

    @classmethod
    def epsilon_add_remove(
        cls, epsilon: float, params: dict | None = None, records_per_user: int | None = None
    ) -> tuple[float | None, str]:
        """This mechanism's epsilon under add/remove user, where it follows (:func:`epsilon_under`)."""
        return epsilon_under(epsilon, cls.neighbouring_for(params), "add/remove user", records_per_user)

    def run(self, data, domain: Domain, epsilon: float, params: dict, ctx: RunContext) -> Release:
        raise NotImplementedError

    @classmethod
    def planning(cls, params: dict, regions=None, user_ids: bool = False) -> tuple[str, str]:
        """What the planner may do for a release with ``params`` over ``regions`` (None: the cells; an
        :class:`engine.data.region_geometry.Regions`) of a dataset with user ids or not: one of
        :data:`.capabilities.PLANNING`, and why where it predicts nothing. An exact margin becomes simulated where
        regions cut the released units (the spreading term then depends on where people are)."""
        if cls.planner == "exact" and regions is not None and regions.kind != "grid":
            return "simulated", ""
        return cls.planner, NOT_PLANNED if cls.planner == "none" else ""

    @classmethod
    def cost_features(cls, params: dict, depth: int, n_points: int) -> tuple[float, float]:
        """What the time estimate (:mod:`engine.run.execution._estimates`) needs of this mechanism beyond the locations and
        cells: a factor on the locations ``P`` (work per location) and ``W``, the measure of its heavy step."""
        return 1.0, 0.0

    @classmethod
    def level_map(cls, release: Release, index: int) -> np.ndarray | None:
        """The map of refinement level ``index`` (``release.levels``) where the mechanism paints it itself (its
        nodes share pixels); None: the level's cells, each count spread over its rectangle."""
        return None

    @classmethod
    def measured_at(cls, release: Release, x: float, y: float) -> float:
        """The release's raw noisy measurement of the cell holding ``(x, y)`` (metres): the privacy audit's
        statistic where the map is a smoothed function of what was noised."""
        return release.measurements.at(x, y, release.domain)

    @classmethod
    def describe(cls) -> dict:
        return {
            "key": cls.key,
            "label": cls.label or cls.key,
            "family": cls.family,
            "guarantee": cls.guarantee,
            "threat_model": cls.threat_model,
            "summary": cls.summary,
            "paper": cls.paper,
            "equations": cls.equations,
            "params": [p.to_dict() for p in cls.params],
            "uses_epsilon": cls.uses_epsilon,
            "neighbouring": cls.neighbouring,
            "needs": list(cls.needs),
            "doc": (cls.__doc__ or "").strip(),
        }


_REGISTRY: dict[str, type[Mechanism]] = {}


def register(cls: type[Mechanism]) -> type[Mechanism]:
    if not cls.key:
        raise ValueError("mechanism without key")
    if cls.family not in FAMILIES:
        raise ValueError(f"{cls.key}: unknown family {cls.family}")
    if cls.key in _REGISTRY and _REGISTRY[cls.key] is not cls:
        raise ValueError(f"duplicate mechanism key {cls.key}")
    _REGISTRY[cls.key] = cls
    return cls


_LOADERS: list[Callable[[], None]] = []


def add_loader(loader: Callable[[], None]) -> None:
    """Register ``loader()``, called before every lookup (:func:`registry`, :func:`get`) to import the
    mechanism families; it must be idempotent. :mod:`engine.mechanisms` registers its ``load_all``, so
    this module never imports the families (or its own package)."""
    _LOADERS.append(loader)


def registry() -> dict[str, type[Mechanism]]:
    for loader in _LOADERS:
        loader()
    return dict(_REGISTRY)


def get(key: str) -> type[Mechanism]:
    reg = registry()
    if key not in reg:
        raise ParamError(f"unknown mechanism {key!r}; known: {', '.join(sorted(reg))}")
    return reg[key]


def aggregate_view(description: str) -> ServerView:
    return ServerView(kind="aggregate", description=description)
