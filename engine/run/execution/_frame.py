"""The frame and grid of a run, where they depend on the data: bought with a stated share of ε, or given.

Two public parameters of a heatmap depend on where and how many the people are:

* the **resolution** (``RunConfig.resolution = "auto"``): the side of the grid from a number of people
  (:func:`auto_side`), either a public number given with the run (``RunConfig.people``: the size a
  catalogue publishes, or a bound the analyst states) or a **DP count** of the people drawn with
  ``count_share`` of ε (discrete Laplace of scale ``1/(count_share ε)``: one person more or fewer moves the
  count by 1);
* the **frame** (``RunConfig.frame = "dp"``): instead of the dataset's region (its catalogue entry, a box or
  place the analyst states, or an upload's box rounded outward to a coarse grid), the square around **DP
  quantiles** of the people's coordinates, ``frame_quantile`` and ``1 - frame_quantile`` on each axis, each
  drawn by the exponential mechanism (:meth:`engine.core.noise.NoiseSource.quantile`, OpenDP's
  ``make_private_quantile`` in Release mode) over :data:`CANDIDATES` public candidates spanning the
  dataset's region, with a quarter of ``frame_share`` of ε. People outside the square are left out of the
  map (a function of the DP frame, so stating that costs nothing more); only Evaluate counts them.

Each step is an entry of the run's ledger beside the mechanism's, which gets the rest of ε
(:attr:`RunConfig.mechanism_epsilon`), so the ledger sums to ε. The steps count what the mechanism
protects: people (one value per person, the mean of their locations) under a user-level relation,
locations under a record-level one; a "replace" relation changes two values, so the quantiles' noise
doubles. Release mode draws them with OpenDP on fresh entropy; Evaluate with the seeded stream (the same
rule, so Evaluate predicts Release), whose exact count and clipped people it records as evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ...core.accounting import LedgerEntry
from ...core.errors import DataError, ParamError
from ...core.grid import Domain
from ...core.noise import NoiseSource, quantile_scale
from ...data.dataset import Dataset

if TYPE_CHECKING:
    from ...data.parquet_source import PartitionedPoints

PER_CELL = 2.0  # the automatic grid aims at this many people per cell on average over the region
AUTO_SIDES = (16, 512)
UNKNOWN_SIDE = 256  # the side when the number of people is not known
CANDIDATES = 512  # quantile candidates per axis: the region's side in 512 steps
COUNT_SHARE = 0.05  # the default share of ε of the DP count
FRAME_SHARE = 0.1  # the default share of ε of the DP frame
FRAME_QUANTILE = 0.01
RECORD_RELATIONS = ("add/remove record", "replace record")


def neighbouring_of(config) -> str:
    """The neighbouring relation a run of ``config`` is private under (``Mechanism.neighbouring``,
    or ``neighbouring_for(params)`` where parameters change it); "" where the mechanism names none."""
    from ...mechanisms import get

    cls = get(config.mechanism)
    if hasattr(cls, "neighbouring_for"):
        return cls.neighbouring_for(config.params)
    return getattr(cls, "neighbouring", "")


def auto_side(n_people: int | None) -> int:
    """Cells per side for ``n_people``: the power of two nearest (in ratio) to sqrt(n / PER_CELL), within
    AUTO_SIDES; :data:`UNKNOWN_SIDE` when the number is not known. Finer grids only spread the same people
    thinner, and every cell's noise costs the same whatever it holds (Qardaji et al.'s argument for UG's size
    rule)."""
    if not n_people or n_people < 1:
        return UNKNOWN_SIDE
    side = 2 ** round(math.log2(math.sqrt(n_people / PER_CELL)))
    return int(min(max(side, AUTO_SIDES[0]), AUTO_SIDES[1]))


def auto_depth(n_people: int | None) -> int:
    return int(math.log2(auto_side(n_people)))


@dataclass
class Setup:
    """What :func:`choose` decided: the data inside the frame, the domain, the ledger steps it spent, what
    the frame is (None: the dataset's region), the public inputs it declares, and (Evaluate only) the exact
    values behind its DP outputs. The runner keeps ``declared`` for the analyst's own file only (a catalogue's
    size is public)."""

    data: Dataset | PartitionedPoints
    domain: Domain
    steps: list[LedgerEntry] = field(default_factory=list)
    frame: str | None = None
    declared: list[str] = field(default_factory=list)
    evaluation: dict = field(default_factory=dict)


def _step_units(relation: str) -> tuple[str, int]:
    """What one unit of the data is under ``relation`` (people or locations), and how many values of a
    quantile's input a neighbour changes."""
    unit = "locations" if relation in RECORD_RELATIONS else "people"
    return unit, 2 if relation.startswith("replace") else 1


def _count(data, unit: str) -> int:
    return len(data) if unit == "locations" else int(data.n_users)


def _values(data, unit: str) -> np.ndarray:
    """One (x, y) per unit: each location, or each person's mean location."""
    if data.user_id is None or unit == "locations":
        return np.asarray(data.xy, dtype=np.float64)
    inv, u = data.user_index()
    counts = np.bincount(inv, minlength=u)
    return np.column_stack([np.bincount(inv, weights=data.xy[:, k], minlength=u) / counts for k in (0, 1)])


def _of(unit: str) -> str:
    return "'s" if unit == "people" else "'"


def _pct(q: float) -> str:
    return f"{100 * q:g} %"


def dp_frame(data, region: Domain, epsilon: float, q: float, relation: str, noise: NoiseSource):
    """The square around DP quantiles ``q`` and ``1 - q`` of each coordinate (module docstring), kept inside
    ``region`` where it fits; with its ledger entry and the sentence that states it."""
    if not isinstance(data, Dataset):
        raise DataError("a DP frame reads every location: read the Parquet folder into memory (in_memory=true)")
    unit, d_in = _step_units(relation)
    scale = quantile_scale(q, epsilon / 4, d_in)
    xy = _values(data, unit)
    step = region.side / CANDIDATES
    box = []
    for axis, origin in ((0, region.x0), (1, region.y0)):
        cands = origin + step * np.arange(CANDIDATES + 1)
        lo, hi = sorted(noise.quantile(xy[:, axis], cands, a, scale) for a in (q, 1 - q))
        box.append((lo, max(hi, lo + step)))  # a degenerate draw still spans one candidate step
    (x0, x1), (y0, y1) = box
    dom = Domain.around(x0, y0, x1, y1, region.depth)
    if dom.side < region.side:  # post-processing: slide the square back into the region where it juts out
        lim = region.side - dom.side
        dom = replace(
            dom,
            x0=min(max(dom.x0, region.x0), region.x0 + lim),
            y0=min(max(dom.y0, region.y0), region.y0 + lim),
        )
    else:
        dom = region
    text = (
        f"the square around DP quantiles {_pct(q)} and {_pct(1 - q)} of the {unit}{_of(unit)} coordinates on each axis "
        f"(exponential mechanism over {CANDIDATES + 1} public candidates per axis, ε {epsilon:g} in all), within "
        f"the dataset's region; {unit} outside it are left out of the map"
    )
    entry = LedgerEntry(
        "frame: DP quantiles of the coordinates",
        float(epsilon),
        note=f"4 quantiles, ε {epsilon / 4:g} each (score noise scale {scale:.4g} {unit}); {unit} outside the "
        "frame are left out of the map",
    )
    return dom, entry, text


def dp_count(data, epsilon: float, relation: str, noise: NoiseSource) -> tuple[int, int, LedgerEntry]:
    """A DP count of the units (discrete Laplace of scale 1/ε), the true count (for Evaluate only) and its
    ledger entry."""
    unit, _ = _step_units(relation)
    true = _count(data, unit)
    noisy = int(noise.add_discrete_laplace(np.array([true], dtype=np.int64), 1.0 / epsilon)[0])
    side = auto_side(max(noisy, 1))
    entry = LedgerEntry(
        f"count of the {unit} (automatic resolution)",
        float(epsilon),
        note=f"discrete Laplace of scale {1 / epsilon:.4g}; the grid, {side} × {side}, follows from the noisy "
        f"count ({PER_CELL:g} {unit} per cell on average, sides {AUTO_SIDES[0]}-{AUTO_SIDES[1]})",
    )
    return noisy, true, entry


def _spending(noise: NoiseSource | None, share: str) -> NoiseSource:
    """The noise of a step that spends ε, which :meth:`RunConfig.validate` gives a positive ``share``."""
    if noise is None:
        raise ParamError(f"{share} must be a positive share of ε for the step that spends it (got 0)")
    return noise


def choose(data, region: Domain, config, relation: str, rng: np.random.Generator, secure: bool) -> Setup:
    """The frame and grid of ``config`` over ``data`` (already inside ``region``, the dataset's public
    square, and sampled): the module docstring's steps in order, frame first (the count is of the people
    inside it). ``secure``: OpenDP on fresh entropy (Release); otherwise ``rng``."""
    out = Setup(data, region)
    noise = NoiseSource(rng, secure=secure) if config.budgeted_share else None  # only a step that spends ε draws
    eps = float(config.epsilon)
    unit, _ = _step_units(relation)
    if config.frame == "dp":
        dom, entry, text = dp_frame(
            data, region, eps * config.frame_share, config.frame_quantile, relation, _spending(noise, "frame_share")
        )
        inside = data.in_domain(dom)
        out.evaluation["frame_left_out"] = _count(data, unit) - _count(inside, unit)
        out.data, out.domain = inside, dom
        out.steps.append(entry)
        out.frame = text
        if len(inside) == 0:
            raise DataError("no location falls inside the DP frame: give the frame a larger share of ε")
    depth = config.depth
    if config.resolution == "auto":
        if config.people is not None:
            depth = auto_depth(config.people)
            out.declared.append(
                f"the resolution, {2**depth} × {2**depth}, chosen automatically from {config.people:,} {unit}: a "
                "public number given with the run (a bound the analyst states), not read off the data"
            )
        else:
            noisy, true, entry = dp_count(out.data, eps * config.count_share, relation, _spending(noise, "count_share"))
            depth = auto_depth(max(noisy, 1))
            out.steps.append(entry)
            out.evaluation.update(people_exact=true, people_dp_count=noisy)
    out.domain = out.domain.with_depth(depth)
    return out


def grid_fields(
    depth, people=None, count_share=None, frame="region", frame_share=None, frame_quantile=None, published=None
) -> dict:
    """The RunConfig fields for a resolution (a depth, or ``"auto"``) and a frame as the command line states
    them, with this module's default shares; an option that does not apply is refused. ``published``: the
    public number of people of a catalogue dataset, which an automatic resolution uses unless told otherwise."""
    from ...core.errors import ParamError

    auto = depth == "auto"
    if not auto and (people is not None or count_share is not None):
        raise ParamError("--people and --count-share choose an automatic resolution: give --depth auto with them")
    if people is not None and count_share is not None:
        raise ParamError("give --people (a public number) or --count-share (a DP count), not both")
    if frame != "dp" and (frame_share is not None or frame_quantile is not None):
        raise ParamError("--frame-share and --frame-quantile fit a DP frame: give --frame dp with them")
    out = {"depth": 8 if auto else int(depth), "frame": frame}
    if auto:
        people = people if people is not None or count_share is not None else published
        out.update(resolution="auto", people=people, count_share=0.0 if people else (count_share or COUNT_SHARE))
    if frame == "dp":
        out.update(frame_share=frame_share or FRAME_SHARE, frame_quantile=frame_quantile or FRAME_QUANTILE)
    return out
