"""The study file: several releases of one dataset under one budget, each with the accuracy it needs.

A TOML file (standard-library :mod:`tomllib`)::

    [study]
    dataset = "synthetic:polycentric"   # whose frame and ledger
    users = 20000                       # a public bound the analyst states (or users_from = FOLDER)
    budget = 2.0                        # optional: a fixed total; without it, the least total meeting every target
    [[product]]
    name = "city map"
    kind = "map"                        # map | regions | ranges
    depth = 6
    target = 20                         # ± people, 95 %
    statistic = "p90"                   # p90 (nine cells or regions in ten within the target; default) | median
    mechanisms = ["identity", "hierarchical", "privtree"]   # default: every mechanism with a margin

Every key is checked before any work starts, and a bad file is told what is wrong in one sentence
(:class:`~engine.core.errors.ParamError`), never with a traceback. Optional keys of ``[study]``: ``data``
(the dataset's options, as ``--data-opt``), ``proxy`` (a synthetic city) or ``proxy_from`` (a published
release's map), ``runs`` (proxy draws per simulated figure), ``name``, ``locations_per_user`` (a public bound
on the locations each person has: the proxy's people get that many, and the plan splits the error into
noise and the bias of bounding contributions, :mod:`engine.run.planning._study_bias`). Of a product: ``regions`` (``h3:RES``,
``grid`` or ``PATH[:ID_COLUMN]``, as ``--regions``; a ``regions`` product needs it), ``repeat`` (released that
many times at its ε each), ``params`` (``{mechanism = {key = value}}``). A ``ranges`` product's target is the
relative error of range queries (SNH's metric) on the proxy, a fraction, not people.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import ParamError

KINDS = ("map", "regions", "ranges")
STATISTICS = ("p90", "median")
MAX_BYTES = 1 << 20  # a study file is a few lines; a larger one is not a study
MAX_PRODUCTS = 20
MAX_REPEAT = 1000
DEPTHS = (1, 10)  # 2^depth cells a side, as --depth
DEFAULT_DEPTH = 8
DEFAULT_RUNS = 3  # proxy draws per simulated figure (the Plan panel's)
STUDY_KEYS = {
    "dataset",
    "data",
    "users",
    "users_from",
    "budget",
    "proxy",
    "proxy_from",
    "runs",
    "name",
    "locations_per_user",
}
MAX_LOCATIONS_PER_USER = 100
PRODUCT_KEYS = {"name", "kind", "depth", "regions", "target", "statistic", "repeat", "mechanisms", "params"}


@dataclass(frozen=True)
class Product:
    """One release (or ``repeat`` releases at the same ε each) the study needs, and the accuracy it must have."""

    name: str
    kind: str
    target: float
    statistic: str = "p90"
    repeat: int = 1
    depth: int = DEFAULT_DEPTH
    regions: str | None = None
    mechanisms: tuple[str, ...] = ()
    params: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def unit(self) -> str:
        """What the target and the predicted figure count."""
        return "relative error" if self.kind == "ranges" else "people"


@dataclass(frozen=True)
class Study:
    """A parsed, checked study file; ``key`` names it in the ledger (a hash of what it asks, not of its bytes)."""

    dataset: str
    products: tuple[Product, ...]
    options: dict = field(default_factory=dict, compare=False, hash=False)
    users: int | None = None
    users_from: str | None = None
    budget: float | None = None
    proxy: str | None = None
    proxy_from: str | None = None
    runs: int = DEFAULT_RUNS
    name: str = "study"
    locations_per_user: int = 1

    @property
    def key(self) -> str:
        doc = {k: v for k, v in self.__dict__.items() if k != "products"}
        doc["products"] = [p.__dict__ for p in self.products]
        return "study/" + hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def product(self, name: str) -> Product:
        for p in self.products:
            if p.name == name:
                return p
        raise ParamError(f"the study has no product {name!r}; its products: {', '.join(p.name for p in self.products)}")


def load_study(path) -> Study:
    """The study file at ``path`` (relative folders in it are read from the file's folder)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ParamError(f"the study file {path} is not a regular file")
        if size > MAX_BYTES:
            raise ParamError(f"the study file {path} is {size:,} bytes, over the {MAX_BYTES:,} a study file may have")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ParamError(f"the study file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise ParamError(f"cannot read the study file {path} ({exc.strerror or exc})") from None
    return parse_study(text, base=path.parent)


def parse_study(text: str, base: Path | None = None) -> Study:
    """A study from its TOML ``text``; every key checked (see the module docstring)."""
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise ParamError(f"the study file is over the {MAX_BYTES:,} bytes a study file may have")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParamError(f"the study file is not valid TOML ({exc})") from None
    unknown = set(doc) - {"study", "product"}
    if unknown:
        raise ParamError(f"the study file has an unknown table {sorted(unknown)[0]!r}; it has [study] and [[product]]")
    head = doc.get("study")
    if not isinstance(head, dict):
        raise ParamError("the study file needs a [study] table (dataset, users or users_from, budget)")
    _known(head, STUDY_KEYS, "[study]")
    dataset = _required(head, "dataset", "[study]")
    users, users_from = head.get("users"), head.get("users_from")
    if (users is None) == (users_from is None):
        raise ParamError("[study] needs either users (a public bound you state) or users_from (a release's folder)")
    if users is not None:
        from ._forecast import MAX_USERS, MIN_USERS

        users = _integer(users, "[study] users", MIN_USERS, MAX_USERS)
    budget = head.get("budget")
    if budget is not None:
        from ...core.epsilon import EPS_MAX, EPS_MIN

        budget = _number(budget, "[study] budget")
        if not EPS_MIN <= budget <= EPS_MAX * MAX_PRODUCTS * MAX_REPEAT:
            raise ParamError(f"[study] budget must be at least {EPS_MIN} (got {budget:g})")
    if head.get("proxy") is not None and head.get("proxy_from") is not None:
        raise ParamError("[study] names a proxy city and a proxy release: give one")
    data = head.get("data", {})
    if not isinstance(data, dict):
        raise ParamError("[study] data must be a table of dataset options, e.g. data = { n = 20000 }")
    raw = doc.get("product")
    if not isinstance(raw, list) or not raw:
        raise ParamError("the study file needs at least one [[product]]")
    if len(raw) > MAX_PRODUCTS:
        raise ParamError(f"a study has at most {MAX_PRODUCTS} products (got {len(raw)})")
    products = tuple(_product(p, i, users, base) for i, p in enumerate(raw))
    names = [p.name for p in products]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ParamError(f"two products are named {dup!r}: each needs a name of its own")
    return Study(
        dataset=dataset,
        products=products,
        options={str(k): v for k, v in data.items()},
        users=users,
        users_from=_path(users_from, base, "[study] users_from"),
        budget=budget,
        proxy=_text(head, "proxy", "[study]"),
        proxy_from=_path(head.get("proxy_from"), base, "[study] proxy_from"),
        runs=_integer(head.get("runs", DEFAULT_RUNS), "[study] runs", 1, 100),
        name=_text(head, "name", "[study]") or "study",
        locations_per_user=_integer(
            head.get("locations_per_user", 1), "[study] locations_per_user", 1, MAX_LOCATIONS_PER_USER
        ),
    )


def _product(p, i: int, users: int | None, base: Path | None = None) -> Product:
    where = f"product {i + 1}"
    if not isinstance(p, dict):
        raise ParamError(f"{where} must be a [[product]] table")
    name = _required(p, "name", where)
    where = f"product {name!r}"
    _known(p, PRODUCT_KEYS, where)
    kind = _text(p, "kind", where, required=True)
    if kind not in KINDS:
        raise ParamError(f"{where}: unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    target = _number(p.get("target"), f"{where} target")
    if not target > 0:
        raise ParamError(f"{where}: the target must be a positive number (got {target:g})")
    if kind == "ranges" and target > 10:
        raise ParamError(f"{where}: a ranges target is a relative error, such as 0.05 (got {target:g})")
    if kind != "ranges" and users is not None and target >= users:
        raise ParamError(
            f"{where}: a target of ±{target:g} people is not below the {users:,} users: any release meets it; "
            "state the margin you need"
        )
    statistic = _text(p, "statistic", where) or "p90"
    if statistic not in STATISTICS:
        raise ParamError(f"{where}: unknown statistic {statistic!r}; choose from {', '.join(STATISTICS)}")
    regions = _text(p, "regions", where)
    if kind == "regions" and regions is None:
        raise ParamError(f"{where}: a regions product needs regions (h3:RES, grid or PATH[:ID_COLUMN])")
    if kind != "regions" and regions is not None:
        raise ParamError(f"{where}: only a regions product takes regions (its kind is {kind})")
    if regions is not None:
        regions = _regions(regions, base, where)
    mechanisms = p.get("mechanisms", [])
    if not isinstance(mechanisms, list) or not all(isinstance(m, str) and m.strip() for m in mechanisms):
        raise ParamError(f'{where}: mechanisms must be a list of mechanism names, e.g. ["identity", "privtree"]')
    mechanisms = tuple(dict.fromkeys(m.strip() for m in mechanisms)) or default_mechanisms(kind)
    _check_mechanisms(mechanisms, kind, where)
    params = p.get("params", {})
    if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
        raise ParamError(f"{where}: params must be a table per mechanism, e.g. params = {{ privtree = {{ ... }} }}")
    stray = [m for m in params if m not in mechanisms]
    if stray:
        raise ParamError(f"{where}: params for {stray[0]!r}, which is not among its mechanisms")
    return Product(
        name=name,
        kind=kind,
        target=target,
        statistic=statistic,
        repeat=_integer(p.get("repeat", 1), f"{where} repeat", 1, MAX_REPEAT),
        depth=_integer(p.get("depth", DEFAULT_DEPTH), f"{where} depth", *DEPTHS),
        regions=regions,
        mechanisms=mechanisms,
        params={m: dict(v) for m, v in params.items()},
    )


def plannable(kind: str) -> list[str]:
    """The registered mechanisms the planner predicts a figure for, for a product of ``kind``: every one with a
    margin (Laplace over regions for regions only); for ranges those whose error the proxy measures too."""
    from ...mechanisms import get
    from ._forecast import plannable as planned

    return [k for k in planned() if kind == "regions" or not get(k).region_params]


def default_mechanisms(kind: str) -> tuple[str, ...]:
    return tuple(plannable(kind))


def _check_mechanisms(mechanisms, kind: str, where: str) -> None:
    from ...mechanisms import load_all, registry

    load_all()
    known = plannable(kind)
    for m in mechanisms:
        if m not in registry():
            raise ParamError(f"{where}: unknown mechanism {m!r}; with a margin: {', '.join(known)}")
        if m not in known:
            raise ParamError(
                f"{where}: {m!r} states no margin a {kind} target can be checked against; with one: {', '.join(known)}"
            )


def _regions(spec: str, base: Path | None, where: str) -> str:
    """A product's regions, checked; a polygon file's path read from the study file's folder."""
    from ...data.region_geometry import parse_spec

    try:
        kind, path, id_column = parse_spec(spec)
    except ParamError as exc:
        raise ParamError(f"{where}: {exc}") from None
    if kind != "file" or base is None or Path(str(path)).is_absolute():
        return spec
    return str(base / str(path)) + (f":{id_column}" if id_column else "")


def _known(table: dict, keys: set, where: str) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise ParamError(f"{where} has an unknown key {unknown[0]!r}; known: {', '.join(sorted(keys))}")


def _required(table: dict, key: str, where: str) -> str:
    """A text the file must give."""
    v = _text(table, key, where, required=True)
    assert v is not None  # _text raised without it
    return v


def _text(table: dict, key: str, where: str, required: bool = False) -> str | None:
    v = table.get(key)
    if v is None:
        if required:
            raise ParamError(f"{where} needs {key}")
        return None
    if not isinstance(v, str) or not v.strip():
        raise ParamError(f"{where} {key} must be a non-empty text (got {v!r})")
    return v.strip()


def _number(v, what: str) -> float:
    if v is None:
        raise ParamError(f"{what} is missing")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ParamError(f"{what} must be a finite number (got {v!r})")
    return float(v)


def _integer(v, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ParamError(f"{what} must be a whole number from {lo} to {hi:,} (got {v!r})")
    return int(v)


def _path(v, base: Path | None, what: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ParamError(f"{what} must be a folder's path (got {v!r})")
    p = Path(v.strip()).expanduser()
    return str(p if p.is_absolute() or base is None else base / p)
