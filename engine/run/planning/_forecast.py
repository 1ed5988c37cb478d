"""The release planner: how accurate a release will be, predicted before any ε is spent and without
reading the private data.

What it reads is public only:

* the mechanism, its parameters and ε;
* the grid (depth) or the regions (grid, H3 hexagons, the analyst's polygons), over the dataset's
  **public frame** (its catalogue region; for a file whose region was read off its locations, that
  frame is the side information a release of it declares too, and the plan says so);
* a **user count**: a public bound the analyst states (declared as side information), or the total of
  a release already published and booked (a DP output: post-processing, no new cost).

How: the mechanism runs, with seeded noise, on a **public proxy** of that many users over the same
frame: a synthetic city (:mod:`engine.data.synthetic`, the ``polycentric`` preset by default, or another
preset the analyst finds closer), or the map of a **pilot release** already published and booked (its
clipped counts say where people are: post-processing of a DP output, no new cost). Each proxy
release's 95 % margins come from its DP outputs and public parameters alone
(:mod:`engine.regions.margins`), exactly as a real release states them; the plan reports their
median and worst tenth (90th percentile) per cell and per region, and the proxy's relative
range-query error (SNH's metric, :func:`engine.metrics.range_query_errors`).

What the planner may do is the mechanism's to say (``Mechanism.planner`` and ``Mechanism.planning``,
:data:`engine.mechanisms.capabilities.PLANNING`). For mechanisms whose margins do not depend on where
people are ("exact": the noise has a closed form fixed by ε, the grid and the user count, and no released
unit is split), one proxy run gives the exact figure ("closed form"). For the others ("simulated": UG's
blocks, PrivTree's or Adaptive HH's leaves, cells that straddle a region's boundary: their margins grow
with the counts of the units a region cuts) the figure is simulated over several proxy draws, and the
real data's differs by where its people are. BENCHMARKS.md ("plan") measures by how much: with a
synthetic proxy alone, the same public inputs can meet figures more than 4 times apart, so no plan from
public inputs alone is within a factor 2 of all; a pilot release brings it within 2. The others ("none":
AG, Sparse EMD, SNH, the kernel density estimates, Adaptive HH on data whose people may have several
locations...) get no margin, said so, and the simulated range-query error only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...core.epsilon import EPS_MAX, EPS_MIN
from ...core.errors import Cancelled, ParamError
from ...core.grid import Domain
from ...data.dataset import Dataset, DatasetMeta
from ..execution import released_map

PROXY_PRESET = "polycentric"
SIMULATED_RUNS = 5
MIN_USERS, MAX_USERS = 1, 5_000_000
SEARCH_STEPS = 12  # bisection steps of smallest_epsilon
PLAN_SECONDS = 60.0  # default of HEATMAP_PLAN_SECONDS: the wall time one plan may take


@dataclass(frozen=True)
class Frame:
    """The public frame a plan is made over: the region (``meta.bbox``), its local CRS, the side information the
    frame itself declares (a region read off the data), and whether the dataset has user ids (its schema: a
    person may then have several locations)."""

    meta: DatasetMeta
    crs: str
    label: str
    side_information: tuple[str, ...] = ()
    user_ids: bool = False

    def domain(self, depth: int) -> Domain:
        from ...data.projection import bbox_to_local

        return Domain.around(*bbox_to_local(self.meta.bbox, self.crs), int(depth))


@dataclass(frozen=True)
class Users:
    """The user count a plan assumes and where it comes from (public bound, or a published release)."""

    n: int
    basis: str
    side_information: tuple[str, ...] = ()


@dataclass
class Deadline:
    """A plan's time budget: ``seconds`` of wall time from its start (``HEATMAP_PLAN_SECONDS``)."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def expired(self) -> bool:
        return time.monotonic() - self.start > self.seconds

    def stop(self, mechanism: str, epsilon: float) -> ParamError:
        return ParamError(
            f"the plan was stopped at its time budget of {self.seconds:g} s (HEATMAP_PLAN_SECONDS) while simulating "
            f"{mechanism} at ε {epsilon:g}: plan fewer mechanisms or ε values, fewer proxy runs or a coarser grid, "
            "or raise the budget"
        )


def plan_seconds() -> float:
    """The time budget of one plan: ``HEATMAP_PLAN_SECONDS`` (default :data:`PLAN_SECONDS`)."""
    from ..server import env_float

    return env_float("HEATMAP_PLAN_SECONDS", PLAN_SECONDS)


@dataclass
class Prediction:
    mechanism: str
    epsilon: float
    users: int
    method: str  # "closed form" or "simulated on ..."
    cell_median: float | None
    cell_p90: float | None
    region_median: float | None = None
    region_p90: float | None = None
    regions: int | None = None
    range_rel_error: float | None = None
    margin_basis: str = ""
    runs: int = 1

    def to_dict(self) -> dict:
        return {k: json_value(v) for k, v in self.__dict__.items()}


@dataclass
class Plan:
    """A plan: the frame, the users, and one prediction per (mechanism, ε)."""

    frame: str
    proxy: str
    depth: int
    regions: str | None
    users: Users
    predictions: list[Prediction] = field(default_factory=list)
    side_information: list[str] = field(default_factory=list)
    budget: dict | None = None  # the dataset's ledger: spent, limit, remaining
    suggested: dict[str, float | None] = field(default_factory=dict)  # smallest ε meeting a target
    read: str = "no dataset was read; no location entered the prediction"  # what was read of the dataset

    def to_dict(self) -> dict:
        return {
            "kind": "release plan (predicted from public inputs and declared side information)",
            "read": self.read,
            "frame": self.frame,
            "proxy": self.proxy,
            "depth": self.depth,
            "regions": self.regions,
            "users": {"n": self.users.n, "basis": self.users.basis},
            "side_information": self.side_information,
            "budget": self.budget,
            "predictions": [p.to_dict() for p in self.predictions],
            "suggested_epsilon": {k: json_value(v) for k, v in self.suggested.items()},
        }


def json_value(v):
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


# ------------------------------------------------------------------ public inputs
def frame_of(dataset: str, options: dict) -> Frame:
    """The public frame of a registered dataset (see :func:`frame_from`)."""
    from ..execution import load_dataset

    return frame_from(load_dataset(dataset, options))


def frame_from(ds: Dataset) -> Frame:
    """A dataset's public frame: its region and CRS; its locations are not read."""
    side: tuple[str, ...] = ()
    if ds.meta.bbox_from_data:
        side = ("the region: the bounding box of the locations, read off the data (as a release of it declares)",)
    return Frame(ds.meta, ds.crs, ds.meta.name, side, ds.user_id is not None)


@lru_cache(maxsize=4)
def default_frame(preset: str = PROXY_PRESET) -> Frame:
    """The synthetic city's own frame (a plan not tied to a dataset)."""
    from ...data.synthetic import generate

    ds = generate(preset, n=1, seed=0)
    return Frame(ds.meta, ds.crs, ds.meta.name)


def stated_users(n: int) -> Users:
    """A user count the analyst states as a public bound (declared as side information)."""
    if not isinstance(n, (int, np.integer)) or not MIN_USERS <= int(n) <= MAX_USERS:
        raise ParamError(f"the number of users must be {MIN_USERS}..{MAX_USERS:,} (got {n})")
    n = int(n)
    return Users(n, "a public bound the analyst states", (f"the number of users, about {n:,}, stated by the analyst",))


def released_users(folder) -> Users:
    """The user count read off a release already published (its map's total: a DP output, so using it
    costs nothing more). ``folder``: the release's folder (manifest.json and heatmap.csv)."""
    grid, _, doc = released_map(folder)
    n = min(MAX_USERS, max(MIN_USERS, int(round(float(grid.sum())))))
    return Users(n, f"the total of release {_release_key(doc)} (ε {doc['parameters']['epsilon']:g}, already booked)")


def _release_key(doc: dict) -> str:
    from ...core.errors import shown_text

    return shown_text(doc.get("release_key", "unkeyed"), 60)


@dataclass(frozen=True)
class Proxy:
    """Where the proxy's people are: a synthetic city (``preset``) stretched over the frame, or a published
    release's map (``density`` over ``domain``, clipped at 0: post-processing of a DP output)."""

    label: str
    preset: str | None = PROXY_PRESET
    density: np.ndarray | None = field(default=None, compare=False, hash=False)
    domain: Domain | None = None

    def sample(self, frame: Frame, n_users: int, seed: int) -> Dataset:
        key = (self.label, frame.label, frame.crs, tuple(frame.meta.bbox), int(n_users), int(seed))
        if key not in PROXIES:
            if len(PROXIES) >= 16:
                PROXIES.pop(next(iter(PROXIES)))
            xy = self._points(frame, n_users, seed)
            PROXIES[key] = proxy_dataset(frame, xy, f"public proxy: {self.label}, {n_users:,} users")
        return PROXIES[key]

    def _points(self, frame: Frame, n_users: int, seed: int) -> np.ndarray:
        if self.density is None:
            if self.preset is None:
                raise ParamError("a proxy needs a synthetic city (preset) or a release's map (density)")
            from ...data.synthetic import generate

            city = generate(self.preset, n=n_users, seed=seed)
            side = float(city.meta.extra["side_m"])
            dom = frame.domain(0)
            u = (city.xy + side / 2) / side  # in [0, 1]^2
            return dom.x0 + np.clip(u, 0.0, 1.0 - 1e-12) * dom.side
        if self.domain is None:
            raise ParamError("the release's map used as a proxy has no grid (domain)")
        rng = np.random.default_rng([int(seed), 29])
        w = np.clip(self.density, 0.0, None).ravel()
        if not w.sum() > 0:
            raise ParamError("the release used as a proxy has no positive cell")
        cells = rng.choice(w.size, size=n_users, p=w / w.sum())
        iy, ix = np.divmod(cells, self.domain.n)
        off = rng.random((n_users, 2))
        return np.column_stack(
            [self.domain.x0 + (ix + off[:, 0]) * self.domain.cell, self.domain.y0 + (iy + off[:, 1]) * self.domain.cell]
        )


PROXIES: dict[tuple, Dataset] = {}


def synthetic_proxy(preset: str = PROXY_PRESET) -> Proxy:
    from ...data.synthetic import PRESETS

    if preset not in PRESETS:
        raise ParamError(f"unknown proxy city {preset!r}; known: {', '.join(PRESETS)}")
    return Proxy(f"synthetic {preset} city", preset)


def released_proxy(folder) -> Proxy:
    """A published release's map as the proxy: where its (noisy, clipped) counts say people are."""
    grid, dom, doc = released_map(folder)
    return Proxy(f"the map of release {_release_key(doc)}", None, grid, dom)


def proxy_dataset(frame: Frame, xy: np.ndarray, name: str) -> Dataset:
    from ...data.projection import to_lonlat

    meta = replace(frame.meta, name=name, source="proxy", synthetic=True)
    return Dataset(xy=xy, lonlat=to_lonlat(xy[:, 0], xy[:, 1], frame.crs), crs=frame.crs, meta=meta)


def planning(mechanism: str, regions=None, params: dict | None = None, user_ids: bool = False) -> tuple[str, str]:
    """What the planner may do for ``mechanism`` (``Mechanism.planning``): "exact", "simulated" or "none", and
    why where it predicts no margin."""
    from ...mechanisms import get

    cls = get(mechanism)
    return cls.planning(cls.schema().resolve(dict(params or {})), regions, user_ids)


def exact(mechanism: str, regions=None, params: dict | None = None, user_ids: bool = False) -> bool:
    """Whether one proxy run gives the exact predicted margins: the mechanism's noise is fixed by public
    inputs and no released unit is split (the grid's cells, or regions of its own)."""
    return planning(mechanism, regions, params, user_ids)[0] == "exact"


def plannable() -> list[str]:
    """The mechanisms whose margins the planner predicts (exactly or by simulation)."""
    from ...mechanisms import registry

    return [k for k, cls in registry().items() if cls.planner != "none"]


def frame_regions(frame: Frame, depth: int, spec: str | None, polygons=None):
    if spec is None and polygons is None:
        return None
    from ...data.region_geometry import build

    return build(spec or "upload", frame.domain(depth), frame.crs, polygons=polygons)


def predict(
    mechanism: str,
    epsilon: float,
    frame: Frame,
    users: Users,
    depth: int = 8,
    params: dict | None = None,
    regions=None,
    runs: int | None = None,
    seed: int = 0,
    proxy: Proxy | None = None,
    deadline: Deadline | None = None,
    on_run: Callable[[], None] | None = None,
) -> Prediction:
    """Predicted 95 % margins of one release (see the module docstring). ``regions``: a built
    :class:`engine.data.region_geometry.Regions` over ``frame.domain(depth)`` (or None: cells only). Past
    ``deadline`` the simulation stops (the mechanism at its next check) with a ParamError. ``on_run`` is
    called after each proxy run."""
    from ...regions.margins import cell_margins, region_margins, summary
    from ..execution import RunConfig, run

    mode, why = planning(mechanism, regions, params, frame.user_ids)  # an unknown mechanism fails here
    proxy = proxy or synthetic_proxy()
    closed = mode == "exact"
    asked, runs = runs, 1 if closed else int(runs or SIMULATED_RUNS)
    rows, basis, r = [], "", -1
    while (r := r + 1) < runs:
        if deadline is not None and deadline.expired():
            raise deadline.stop(mechanism, epsilon)
        ds = proxy.sample(frame, users.n, seed=seed + r)
        cfg = RunConfig(
            dataset=f"synthetic:{PROXY_PRESET}",  # a label only: the proxy is given as the dataset
            mechanism=mechanism,
            params=dict(params or {}),
            epsilon=float(epsilon),
            depth=int(depth),
            seed=seed + r,
            emd_max_cells=0,
        )
        try:
            res = run(cfg, dataset=ds, use_cache=False, cancelled=deadline.expired if deadline else None)
        except Cancelled:
            if deadline is None:
                raise
            raise deadline.stop(mechanism, epsilon) from None
        if mode == "none":
            row, basis = [math.nan] * 4, why
        else:
            cm = cell_margins(res.release, frame.crs)
            if closed and (regions is None or regions.kind == "grid") and not _whole_cells(res.release):
                # a cell's margin carries its share of a unit's count
                closed, runs = False, int(asked or SIMULATED_RUNS)
            row, basis = [*summary(cm.margin95)], cm.basis
            row += [*summary(region_margins(res.release, regions).margin95)] if regions is not None else [math.nan] * 2
        row.append(float(res.metrics.get("range_rel_error", math.nan)))
        rows.append(row)
        if on_run is not None:
            on_run()
    med = [_median(col) for col in np.array(rows, dtype=np.float64).T]
    method = "closed form" if closed else f"simulated on {runs} draws of {users.n:,} users from the {proxy.label}"
    return Prediction(
        mechanism=mechanism,
        epsilon=float(epsilon),
        users=users.n,
        method=method,
        cell_median=med[0],
        cell_p90=med[1],
        region_median=med[2] if regions is not None else None,
        region_p90=med[3] if regions is not None else None,
        regions=len(regions) if regions is not None else None,
        range_rel_error=med[4],
        margin_basis=basis,
        runs=runs,
    )


def _whole_cells(release) -> bool:
    """Whether each of the release's noise units is one cell of its grid (the hierarchical tree's leaves are
    coarser than the grid when its height rule stops above it): only then is a cell's margin its noise alone."""
    model = release.noise
    if isinstance(model, str):
        return False
    return int(model.spread(release.domain.n**2).getnnz(axis=0).max(initial=0)) <= 1


def _median(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else math.nan


def target_value(p: Prediction) -> float:
    """The figure a margin target is checked against: the median region's margin, else the median cell's."""
    v = p.region_median if p.region_median is not None else p.cell_median
    return math.nan if v is None else float(v)


def smallest_epsilon(
    mechanism: str,
    target: float,
    frame: Frame,
    users: Users,
    depth: int = 8,
    params: dict | None = None,
    regions=None,
    runs: int | None = None,
    steps: int = SEARCH_STEPS,
    proxy: Proxy | None = None,
    deadline: Deadline | None = None,
    on_run: Callable[[], None] | None = None,
) -> float | None:
    """The smallest ε in [EPS_MIN, EPS_MAX] whose predicted margin (:func:`target_value`) is at most
    ``target``: bisection on log ε (margins shrink as ε grows; the proxy's seeds are the same at every ε,
    so a simulated curve is smooth). None when even EPS_MAX misses it or the mechanism has no margin."""
    if not (isinstance(target, (int, float)) and target > 0 and math.isfinite(target)):
        raise ParamError(f"the target margin must be a positive number (got {target})")

    def value(eps: float) -> float:
        p = predict(
            mechanism, eps, frame, users, depth, params, regions, runs, proxy=proxy, deadline=deadline, on_run=on_run
        )
        return target_value(p)

    hi_v = value(EPS_MAX)
    if not math.isfinite(hi_v) or hi_v > target:
        return None
    lo, hi = math.log(EPS_MIN), math.log(EPS_MAX)
    if value(EPS_MIN) <= target:
        return EPS_MIN
    for _ in range(steps):
        mid = (lo + hi) / 2
        if value(math.exp(mid)) <= target:
            hi = mid
        else:
            lo = mid
    return ceil_3sf(math.exp(hi))


def ceil_3sf(x: float) -> float:
    """``x`` rounded up to three significant figures (a larger ε only narrows the margin)."""
    scale = 10.0 ** (math.floor(math.log10(x)) - 2)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.3g}")


def ledger_key(dataset: str | None, options: dict) -> str | None:
    """The key of the dataset's ledger (:func:`engine.run.bookkeeping.fingerprint_source`); None without a dataset."""
    from ..bookkeeping import fingerprint_source

    return None if dataset is None else fingerprint_source(dataset, options)


def budget_of(dataset: str | None, options: dict, key: str | None = None) -> dict | None:
    """The dataset's ledger as a plan shows it: ε spent, the operator's limit, what remains."""
    if dataset is None:
        return None
    from ..bookkeeping import BudgetStore, fingerprint_source, release_limit

    spent = BudgetStore().spent(key or fingerprint_source(dataset, options))
    limit = release_limit(dataset)
    return {"spent": spent, "limit": limit, "remaining": max(0.0, limit - spent)}


def what_was_read(dataset: str | None, options: dict, frame: Frame | None, key: str | None) -> str:
    """What a plan read of the dataset, in one sentence: its frame and its ledger's key, and that no location
    entered the prediction (the proxy's people are drawn from public inputs)."""
    if frame is None and dataset is None:
        return "no dataset was read; no location entered the prediction"
    path = options.get("path")
    name = f"the file {Path(str(path)).name}" if path else f"the dataset {dataset or (frame and frame.meta.name)}"
    parts = []
    if frame is not None:
        meta = frame.meta
        if meta.bbox_from_data:
            parts.append(f"region frame ({meta.extra.get('region_frame', 'read off its locations')})")
        else:
            parts.append("public region")
    if key is not None:
        kind = {"people": "people fingerprint", "sha256": "content hash"}.get(key.split(":", 1)[0], "source options")
        parts.append(f"{kind} for the ledger")
    return f"read {name}'s {parts[0]}{''.join(f' and its {p}' for p in parts[1:])}; no location entered the prediction"


def _cost(m, epsilons, users, depth, params, regions, runs, target, user_ids=False) -> tuple[float, int]:
    """Seconds the plan of mechanism ``m`` should take (the engine's cost model, :mod:`engine.run.execution._estimates`)
    and the proxy runs it makes; 0 s when the model cannot tell."""
    from ..execution import RunConfig, predict_seconds

    mode, _ = planning(m, regions, params, user_ids)
    per_call = 1 if mode == "exact" else int(runs or SIMULATED_RUNS)
    searched = 0 if target is None else (2 + SEARCH_STEPS if mode != "none" else 1)
    n = per_call * (len(epsilons) + searched)
    cfg = RunConfig(
        dataset=f"synthetic:{PROXY_PRESET}",
        mechanism=m,
        params=dict(params or {}),
        epsilon=float(epsilons[0]),
        depth=int(depth),
        emd_max_cells=0,
    )
    try:
        return n * float(predict_seconds(cfg, n_points=users.n)), n
    except Exception:  # a model that cannot answer: the deadline still holds
        return 0.0, n


def make_plan(
    mechanisms: list[str],
    epsilons: list[float],
    users: Users,
    frame: Frame | None = None,
    depth: int = 8,
    regions_spec: str | None = None,
    polygons=None,
    params: dict[str, dict] | None = None,
    target: float | None = None,
    dataset: str | None = None,
    options: dict | None = None,
    runs: int | None = None,
    proxy: Proxy | None = None,
    seconds: float | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> Plan:
    """Predictions for every mechanism at every ε; with ``target``, the smallest ε meeting it. Within a time
    budget of ``seconds`` (default :func:`plan_seconds`): a mechanism the cost model says would take longer is
    refused before anything runs, and a plan that runs out of time stops, each with a ParamError.
    ``progress(done, total, what)`` is called after each proxy run (``total``: the most the plan can make; a
    search for the target's ε may stop early) and once at the end with ``done == total``."""
    from ..execution import with_regions

    deadline = Deadline(plan_seconds() if seconds is None else float(seconds))
    # a mechanism that counts regions is planned on the regions planned for, as it will be released
    params = {m: with_regions(m, (params or {}).get(m) or {}, regions_spec) for m in mechanisms}
    key = ledger_key(dataset, options or {})
    read = what_was_read(dataset, options or {}, frame, key)
    frame = frame or default_frame()
    regions = frame_regions(frame, depth, regions_spec, polygons)
    total = 0
    for m in mechanisms:
        need, n = _cost(m, epsilons, users, depth, params.get(m), regions, runs, target, frame.user_ids)
        total += n
        if need > deadline.seconds:
            raise ParamError(
                f"planning {m} would take about {need:,.0f} s here ({n} proxy runs of about {need / n:,.1f} s), over "
                f"the plan's time budget of {deadline.seconds:g} s (HEATMAP_PLAN_SECONDS): plan it at fewer ε values "
                "or with fewer proxy runs, or raise the budget"
            )
    proxy = proxy or synthetic_proxy()
    plan = Plan(
        frame=frame.label,
        proxy=proxy.label,
        depth=int(depth),
        regions=regions_spec,
        users=users,
        side_information=[*users.side_information, *frame.side_information],
        budget=budget_of(dataset, options or {}, key),
        read=read,
    )
    done, what = 0, ""

    def ran() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(min(done, total), total, what)

    for m in mechanisms:
        for e in epsilons:
            what = f"{m} ε {e:g}"
            p = predict(
                m, e, frame, users, depth, params.get(m), regions, runs, proxy=proxy, deadline=deadline, on_run=ran
            )
            plan.predictions.append(p)
        if target is not None:
            what = f"{m}: the smallest ε for ±{target:g}"
            plan.suggested[m] = smallest_epsilon(
                m, target, frame, users, depth, params.get(m), regions, runs, proxy=proxy, deadline=deadline, on_run=ran
            )
    if progress is not None:
        progress(total, total, "done")
    return plan


def _fmt(v) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.3g}"


def describe_plan(plan: Plan) -> str:
    """The plan as a few lines of text (the CLI's default output)."""
    where = f"regions {plan.regions} over " if plan.regions else ""
    lines = [
        f"Plan for {where}a {1 << plan.depth} x {1 << plan.depth} grid over {plan.frame}; "
        f"{plan.users.n:,} users ({plan.users.basis}). Predicted from public inputs only.",
        f"{plan.read[0].upper()}{plan.read[1:]}.",
        f"{'mechanism':<22} {'epsilon':>8} {'cell ±95% median':>17} {'worst tenth':>12} "
        f"{'region ±95% median':>19} {'worst tenth':>12} {'range rel. err':>15}  how",
    ]
    for p in plan.predictions:
        lines.append(
            f"{p.mechanism:<22} {p.epsilon:>8g} {_fmt(p.cell_median):>17} {_fmt(p.cell_p90):>12} "
            f"{_fmt(p.region_median):>19} {_fmt(p.region_p90):>12} {_fmt(p.range_rel_error):>15}  {p.method}"
        )
    for m, e in plan.suggested.items():
        lines.append(
            f"smallest epsilon meeting the target for {m}: {f'none up to {EPS_MAX:g}' if e is None else f'{e:g}'}"
        )
    if plan.budget is not None:
        b = plan.budget
        lines.append(f"ledger: {b['spent']:g} spent of the limit {b['limit']:g}; {b['remaining']:g} remains")
    for s in plan.side_information:
        lines.append(f"side information: {s}")
    return "\n".join(lines)
