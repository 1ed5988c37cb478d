"""A run's configuration and its result.

A run has one of two modes, ``RunConfig.mode``:

* ``"evaluate"``: deterministic given the configuration (seed included), with the truth
  and metrics against it; results are cached on disk under the configuration's hash
  (:mod:`engine.run.execution._result_cache`, data only: nothing read from the cache can run code). Seeded
  numpy noise is neither floating-point safe nor secret, so what it makes is not a private
  release (its exports carry ``engine.run.execution.EVALUATION``). Callers draw a fresh seed with
  :func:`fresh_seed` when the user did not fix one.
* ``"release"``: OpenDP samplers (secure mode) and fresh operating-system entropy for every
  other draw (user sampling, the mechanism's numpy stream); no seed is used or recorded,
  nothing is cached, and neither the truth nor any metric is computed: the result holds the
  release alone (``truth`` None, ``metrics`` empty, ``n_users``/``n_points`` None).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ... import __version__
from ...core.epsilon import EPS_MIN, check_epsilon
from ...core.errors import ParamError

CACHE_VERSION = 3  # the entries' format (data-only .npz, the release's typed parts), in every key: an entry of another format is never read
ROOT = Path(__file__).resolve().parents[3]
MODES = ("evaluate", "release")
RESOLUTIONS = ("fixed", "auto")
FRAMES = ("region", "dp")
MAX_SHARE = 0.5  # of ε, for each step before the mechanism
# Fresh seeds stay below 2^31: the dashboard's seed field and URL take at most 2^31 - 1 (and a
# browser holds integers exactly only to 2^53). An Evaluate seed is shown and exported, so its
# size is no privacy property; a Release has no seed at all.
FRESH_SEED_BITS = 31


def fresh_seed() -> int:
    """A seed drawn from the operating system's entropy, for an Evaluate run whose user did
    not fix one: the run is not seed 0 like every other, and the seed is recorded (shown,
    exported) so the run can be reproduced on purpose."""
    return secrets.randbits(FRESH_SEED_BITS)


@lru_cache(maxsize=4)
def source_fingerprint(root: Path = ROOT) -> str:
    """Digest of what decides a release: the engine's Python sources (benchmarks aside) and the
    tables shipped in ``data/`` (ParamSelect's). Part of every run's cache key, so a changed
    engine never serves a release computed by other code or tables."""
    h = hashlib.sha256()
    files = [p for p in sorted(root.glob("engine/**/*.py")) if "bench" not in p.relative_to(root).parts[:2]]
    for p in files + sorted((root / "data").glob("*.csv")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def with_regions(mechanism: str, params: dict, regions: str | None, regions_crs: str | None = None) -> dict:
    """``params`` of ``mechanism`` with the analysis's one region set: a mechanism that counts regions (Laplace over
    regions) counts exactly the regions the analysis plans, reports and downloads (``regions``: a spec of
    :func:`engine.data.region_geometry.parse_spec`; None: the mechanism's own default). A regions parameter given besides
    must name the same regions, or the configuration is refused."""
    from ...data.region_geometry import parse_spec
    from ...mechanisms import get

    names = get(mechanism).region_params
    if not names or not regions:
        return dict(params)
    given = params.get(names[0])
    if given not in (None, "") and parse_spec(given) != parse_spec(regions):
        raise ParamError(
            f"the regions are given twice: {str(regions)[:80]!r} and the parameter {names[0]}={str(given)[:80]!r}; "
            "give them once (--regions on the command line, the sidebar's Regions on the dashboard)"
        )
    out = {**params, names[0]: str(regions).strip()}
    if regions_crs and len(names) > 1:
        out[names[1]] = regions_crs
    return out


@dataclass(frozen=True)
class RunConfig:
    dataset: str = "synthetic:polycentric"
    dataset_options: dict = field(default_factory=dict)
    mechanism: str = "identity"
    params: dict = field(default_factory=dict)
    epsilon: float = 1.0
    n_users: int | None = None  # users sampled; None = all
    depth: int = 8  # 2^depth cells per side
    seed: int = 0
    secure: bool = False  # OpenDP samplers for the noise that supports it (always on in release mode)
    mode: str = "evaluate"  # or "release": see the module docstring
    metrics: tuple[str, ...] = ()  # extra metrics beyond the default set
    emd_max_cells: int = 64  # EMD coarsened to at most this many cells per side in runs
    # what the caller read off the private data to choose this configuration, declared in the run's ledger in
    # both modes: the release manifest carries it too
    side_information: tuple[str, ...] = ()
    # the grid and frame where they depend on the data (engine.run.execution._frame): "auto" resolution from `people`, a
    # public number, or else from a DP count with `count_share` of ε (`depth` is then unused); the "dp" frame
    # from DP quantiles `frame_quantile`, 1 - `frame_quantile` with `frame_share` of ε, or the dataset's "region"
    resolution: str = "fixed"
    people: int | None = None
    count_share: float = 0.0
    frame: str = "region"
    frame_share: float = 0.0
    frame_quantile: float = 0.01

    def to_dict(self) -> dict:
        d = asdict(self)
        d["metrics"] = list(self.metrics)
        d["side_information"] = list(self.side_information)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        d = dict(d)
        for name in ("metrics", "side_information"):
            if name in d:
                d[name] = tuple(d[name])
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ParamError(f"unknown configuration field(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    @property
    def budgeted_share(self) -> float:
        """The share of ε spent before the mechanism on the frame and grid (:mod:`engine.run.execution._frame`)."""
        return float(self.count_share) + float(self.frame_share)

    @property
    def mechanism_epsilon(self) -> float:
        """The ε the mechanism gets: what the frame and grid leave of ε."""
        return float(self.epsilon) * (1.0 - self.budgeted_share)

    def key(self) -> str:
        """Stable hash of the configuration and of the engine that runs it (version, cache
        format and :func:`source_fingerprint`)."""
        payload = json.dumps(
            {"config": self.to_dict(), "engine": __version__, "cache": CACHE_VERSION, "source": source_fingerprint()},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def validate(self) -> None:
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float)):
            raise ParamError(f"epsilon must be a number (got {self.epsilon!r})")
        check_epsilon(self.epsilon)
        if not (isinstance(self.depth, int) and 1 <= self.depth <= 10):
            raise ParamError(f"resolution depth must be 1..10 (2x2 to 1024x1024 cells), got {self.depth}")
        if self.n_users is not None and (not isinstance(self.n_users, int) or self.n_users < 1):
            raise ParamError(f"number of users must be a positive integer (got {self.n_users})")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ParamError(f"seed must be a non-negative integer (got {self.seed})")
        if not all(isinstance(s, str) for s in self.side_information):
            raise ParamError("side information is a list of sentences")
        if self.mode not in MODES:
            raise ParamError(f"mode must be 'evaluate' or 'release' (got {self.mode!r})")
        self._validate_frame()
        if self.mode == "release":
            from ...mechanisms import get

            if self.seed != 0:
                raise ParamError(
                    f"a release draws fresh noise from the operating system and takes no seed (got seed {self.seed})"
                )
            if self.metrics:
                raise ParamError("a release computes no metric against the true data (got metrics to compute)")
            cls = get(self.mechanism)
            if not cls.uses_epsilon:  # a non-private reference would publish the truth
                raise ParamError(f"{cls.label or cls.key} spends no epsilon and is not private: it cannot be released")

    def _validate_frame(self) -> None:
        if self.resolution not in RESOLUTIONS:
            raise ParamError(f"resolution must be one of {', '.join(RESOLUTIONS)} (got {self.resolution!r})")
        if self.frame not in FRAMES:
            raise ParamError(f"frame must be one of {', '.join(FRAMES)} (got {self.frame!r})")
        auto_dp = self.resolution == "auto" and self.people is None
        if self.people is not None and (
            self.resolution != "auto" or not isinstance(self.people, int) or isinstance(self.people, bool)
        ):
            raise ParamError("a number of people for the resolution needs resolution 'auto' and a whole number")
        if self.people is not None and self.people < 1:
            raise ParamError(f"the number of people for the resolution must be at least 1 (got {self.people})")
        for name, used in (("count_share", auto_dp), ("frame_share", self.frame == "dp")):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not (0 < v <= MAX_SHARE if used else v == 0):
                need = (
                    f"between 0 and {MAX_SHARE:g} (a share of ε)"
                    if used
                    else "0 here: "
                    + ("the resolution is not from a DP count" if name == "count_share" else "the frame is not DP")
                )
                raise ParamError(f"{name} must be {need} (got {v})")
        if not (isinstance(self.frame_quantile, (int, float)) and 0 < self.frame_quantile < 0.5):
            raise ParamError(f"frame_quantile must be between 0 and 0.5 (got {self.frame_quantile})")
        if self.budgeted_share:  # the mechanism's part of ε is checked by the same rule as the run's
            try:
                check_epsilon(self.mechanism_epsilon)
            except ParamError:
                raise ParamError(
                    f"the frame and grid's shares leave the mechanism ε = {self.mechanism_epsilon:g}, below the "
                    f"smallest a run accepts ({EPS_MIN:g}): give a larger ε or smaller shares"
                ) from None


@dataclass
class RunResult:
    config: RunConfig
    release: Any  # mechanisms.Release
    truth: np.ndarray | None  # true map on the same grid in the release's unit (release_truth); None in release mode
    metrics: dict[str, float]  # empty in release mode
    timings: dict[str, float]
    n_users: int | None  # None in release mode
    n_points: int | None  # None in release mode
    dataset_meta: Any
    cached: bool = False
    # what the mechanism computed from the truth (RunContext.evaluation): errors against the true
    # data, exact counts, attacks on the true locations; never part of the release
    evaluation: dict = field(default_factory=dict)
    crs: str = ""  # PROJ string of the local CRS the release's domain is in

    @property
    def epsilon_spent(self) -> float:
        """The ε the run really spent (its release's ledger: above the plan under excess client dropout)."""
        return float(self.release.ledger.total())

    def summary(self) -> dict:
        """The run as a JSON-able record. Evaluate: configuration, exact counts, metrics,
        diagnostics, stamped ``evaluation``. Release: the manifest of
        :func:`engine.run.execution._release_files.manifest` (DP outputs, ledger, parameters, side information)."""
        from ._release_files import EVALUATION, manifest, side_information

        if self.config.mode == "release":
            return manifest(self)
        rel = self.release
        return {
            "evaluation": EVALUATION,
            "mode": self.config.mode,
            "config": self.config.to_dict(),
            "key": self.config.key(),
            "n_users": self.n_users,
            "n_points": self.n_points,
            "metrics": self.metrics,
            "timings": self.timings,
            "ledger": {**rel.ledger.to_dict(), "side_information": side_information(self)},
            "communication": rel.communication.to_dict(),
            "server_view": rel.server_view.description,
            "diagnostics": _jsonable(rel.diagnostics),
            "warnings": list(rel.warnings),
        }


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist() if x.size <= 4096 else f"<array {x.shape}>"
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return x
