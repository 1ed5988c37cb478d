"""The study planner: the mechanism and ε of every release of a study, under one budget.

A study (:mod:`engine.run.planning._study_file`) is several products of one dataset: a map, counts over regions,
range queries, some released ``repeat`` times; each with a target margin. The single-release planner
(:mod:`engine.run.planning._forecast`) predicts each product's figure at any ε on its public proxy; here each
(product, mechanism) becomes a **curve**, the predicted figure as a function of ε, and the plan chooses
on the curves:

* without a budget, the split meeting every target at the least total ε: each product takes, across its
  mechanisms, the one meeting its target at the least ε (APEx, Ge et al. SIGMOD 2019: the mechanism, not
  only ε, chosen for the accuracy asked at the least privacy loss); the targets are separate, so the least
  total is each product's least ε;
* with a budget B, the split minimising the worst product's figure / target: every product reaches the same
  ratio r (a product below it could give ε to the worst one), found by bisection on r with the mechanism
  chosen anew at every r. For closed forms (figure c_i / ε_i) the ratio is exact: r = Σ k_i c_i / t_i / B.

A curve is exact where the planner's figure is a closed form c / ε (:func:`engine.run.planning.exact` and the
figure at two ε in proportion: Identity, HDMM, Laplace over its own regions); elsewhere it is sampled at a few
ε and interpolated on log-log axes, and the ε chosen is then predicted again until the figure there is a
prediction, not an interpolation (:data:`CHECK_ROUNDS`): the figure a plan states is always the planner's
own at that ε.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core.epsilon import EPS_MAX, EPS_MIN
from ...core.errors import Cancelled, ParamError
from ._forecast import (
    PROXY_PRESET,
    Deadline,
    Frame,
    Prediction,
    Proxy,
    Users,
    budget_of,
    ceil_3sf,
    exact,
    frame_of,
    frame_regions,
    json_value,
    ledger_key,
    plan_seconds,
    predict,
    released_proxy,
    released_users,
    stated_users,
    synthetic_proxy,
    what_was_read,
)
from ._study_bias import SeveralProxy, Split, several
from ._study_bias import split as split_error
from ._study_file import Product, Study

SAMPLE_EPS = (0.1, 1.0, 10.0)  # where a curve without a closed form is first predicted
CHECK_EPS = (1.0, 0.25)  # a closed form is c / ε when its figure at these two is in proportion
PROPORTION_TOL = 1e-6
INTERVAL_DRAWS = 8  # redrawn pilots behind a simulated prediction's interval
CHECK_ROUNDS = 4  # predictions at the chosen ε until it is a sampled point of its curve
RATIO_STEPS = 200  # bisection steps on log r: far below the 2 % the ratio must be found within


# ------------------------------------------------------------------ curves
@dataclass
class Curve:
    """The figure a product's release by ``mechanism`` is predicted to state, as a function of ε:
    ``c`` / ε when it is a closed form in proportion to 1/ε, else interpolated between ``points``."""

    mechanism: str
    c: float | None = None
    points: dict[float, float] = field(default_factory=dict)
    predictions: dict[float, Prediction] = field(default_factory=dict)

    @property
    def no_margin(self) -> bool:
        """Whether the release states no figure at any ε sampled (no prediction is made for it)."""
        return self.c is None and bool(self.points) and not any(math.isfinite(v) for v in self.points.values())

    def value(self, eps: float) -> float:
        if self.c is not None:
            return self.c / eps
        xs = sorted(self.points)
        ys = np.minimum.accumulate([self.points[x] for x in xs])  # more ε never widens the best margin
        if not np.all(np.isfinite(ys)):
            return math.nan
        lx, ly = np.log(xs), np.log(ys)
        x = math.log(eps)
        if x <= lx[0]:  # below the samples, as 1/ε: Laplace noise's law
            return float(math.exp(ly[0] - (x - lx[0])))
        if x >= lx[-1]:  # above them, no better than the last (a figure may have a floor)
            return float(ys[-1])
        return float(math.exp(np.interp(x, lx, ly)))

    def epsilon_for(self, figure: float) -> float | None:
        """The least ε in [EPS_MIN, EPS_MAX] whose figure is at most ``figure``; None when none is."""
        if not (figure > 0 and math.isfinite(figure)):
            return None
        if self.c is not None:
            eps = self.c / figure
            return None if eps > EPS_MAX * (1 + 1e-12) else max(EPS_MIN, eps)
        if not self.value(EPS_MAX) <= figure:
            return None
        if self.value(EPS_MIN) <= figure:
            return EPS_MIN
        lo, hi = math.log(EPS_MIN), math.log(EPS_MAX)
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self.value(math.exp(mid)) <= figure else (mid, hi)
        return math.exp(hi)


def figure(p: Prediction, product: Product) -> float:
    """The figure a product's target is checked against: its statistic of the cells' or regions' margins,
    or the relative range-query error."""
    if product.kind == "ranges":
        v = p.range_rel_error
    elif product.kind == "regions":
        v = p.region_p90 if product.statistic == "p90" else p.region_median
    else:
        v = p.cell_p90 if product.statistic == "p90" else p.cell_median
    return math.nan if v is None else float(v)


class StudyWatch(Deadline):
    """The plan's time budget, and the caller's Cancel: both stop the mechanism at its next check."""

    def __init__(self, seconds: float, cancelled: Callable[[], bool] | None):
        super().__init__(seconds)
        self.cancelled = cancelled

    def expired(self) -> bool:
        return bool(self.cancelled and self.cancelled()) or super().expired()

    def stop(self, mechanism: str, epsilon: float):
        if self.cancelled and self.cancelled():
            return Cancelled("the study plan was cancelled")
        return super().stop(mechanism, epsilon)


@dataclass
class Inputs:
    """What every prediction of a study shares: the public frame, the users, the proxy, the time budget."""

    frame: Frame
    users: Users
    proxy: Proxy
    runs: int
    watch: StudyWatch
    progress: Callable[[float, str], None]
    calls: int = 0
    expected: int = 1
    regions: dict = field(default_factory=dict)
    pilot_scale: float | None = None  # the pilot release's Laplace scale per cell (its interval's redraws)

    def regions_of(self, product: Product):
        key = (product.regions, product.depth)
        if product.regions is not None and key not in self.regions:
            self.regions[key] = frame_regions(self.frame, product.depth, product.regions)
        return self.regions.get(key)

    def predict(self, product: Product, mechanism: str, eps: float) -> Prediction:
        self.progress(min(0.99, self.calls / max(self.expected, 1)), f"{product.name}: {mechanism} at ε {eps:.3g}")
        if self.watch.expired():
            raise self.watch.stop(mechanism, eps)
        params = _product_params(product, mechanism)
        p = predict(
            mechanism,
            eps,
            self.frame,
            self.users,
            product.depth,
            params,
            self.regions_of(product),
            self.runs,
            proxy=self.proxy,
            deadline=self.watch,
        )
        self.calls += 1
        return p


def _product_params(product: Product, mechanism: str) -> dict:
    from ..execution import with_regions

    # a mechanism that counts regions counts the product's own (one region set, however it is named)
    return with_regions(mechanism, dict(product.params.get(mechanism, {})), product.regions)


def _sample(inp: Inputs, product: Product, curve: Curve, eps: float) -> float:
    if eps not in curve.points:
        p = inp.predict(product, curve.mechanism, eps)
        curve.points[eps], curve.predictions[eps] = figure(p, product), p
    return curve.points[eps]


def curve_of(inp: Inputs, product: Product, mechanism: str) -> Curve:
    """The product's curve for ``mechanism``: a closed form c / ε where the planner's figure is exact and in
    proportion to 1/ε, else its samples at :data:`SAMPLE_EPS`."""
    curve = Curve(mechanism)
    closed = product.kind != "ranges" and exact(mechanism, inp.regions_of(product))
    if closed:
        a, b = (_sample(inp, product, curve, e) for e in CHECK_EPS)
        if math.isfinite(a) and a > 0 and abs(a * CHECK_EPS[0] - b * CHECK_EPS[1]) <= PROPORTION_TOL * a:
            curve.c = a * CHECK_EPS[0]
            return curve
    for e in SAMPLE_EPS:
        _sample(inp, product, curve, e)
    return curve


# ------------------------------------------------------------------ the split
def _cheapest(curves: list[Curve], figure_: float) -> tuple[Curve, float] | None:
    best = None
    for c in curves:
        e = c.epsilon_for(figure_)
        if e is not None and (best is None or e < best[1]):
            best = (c, e)
    return best


def split(products: list[Product], curves: list[list[Curve]], budget: float | None):
    """The ratio r and each product's (curve, ε) or None: at r = 1 without a budget (the least total meeting
    every target), else at the least r whose total fits the budget (the worst figure / target minimised)."""

    def choose(r: float):
        return [_cheapest(cs, r * p.target) for p, cs in zip(products, curves)]

    if budget is None:
        return 1.0, choose(1.0)

    def total(r: float) -> float:
        picks = choose(r)
        if any(x is None for x in picks):
            return math.inf
        return sum(p.repeat * x[1] for p, x in zip(products, picks))

    lo, hi = math.log(1e-9), math.log(1e9)
    if total(math.exp(hi)) > budget:
        return math.exp(hi), choose(math.exp(hi))
    for _ in range(RATIO_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if total(math.exp(mid)) <= budget else (mid, hi)
    r = math.exp(hi)
    return r, choose(r)


@dataclass
class Choice:
    """A product's plan: its mechanism and ε per release, the figure predicted there and how."""

    product: Product
    mechanism: str | None
    epsilon: float | None
    predicted: float | None
    method: str
    candidates: dict[str, float | None]
    side_information: list[str]
    error: Split | None = (
        None  # bias and noise apart (engine.run.planning._study_bias.Split), where contributions are bounded
    )
    interval: tuple[float, float] | None = None  # the prediction's own 10th-90th percentile (see :func:`interval`)

    def to_dict(self) -> dict:
        p = self.product
        return {
            "name": p.name,
            "kind": p.kind,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "repeat": p.repeat,
            "predicted": json_value(self.predicted) if self.predicted is not None else None,
            "target": p.target,
            "statistic": "relative error" if p.kind == "ranges" else p.statistic,
            "method": self.method,
            "candidates": {k: json_value(v) for k, v in self.candidates.items()},
            "side_information": self.side_information,
            "error": None if self.error is None else self.error.to_dict(),
            "interval": None if self.interval is None else [json_value(v) for v in self.interval],
        }


@dataclass
class StudyPlan:
    study: Study
    choices: list[Choice]
    ratio: float
    budget: dict | None
    read: str
    side_information: list[str]

    @property
    def total(self) -> float:
        return sum(c.product.repeat * c.epsilon for c in self.choices if c.epsilon is not None)

    @property
    def unmet(self) -> list[str]:
        return [
            c.product.name
            for c in self.choices
            if c.predicted is None or not c.predicted <= c.product.target * (1 + 1e-9)
        ]

    def to_dict(self) -> dict:
        b = self.budget or {}
        remaining = b.get("remaining")
        total = round(self.total, 12)
        return {
            "study": self.study.key,
            "mode": "fixed budget" if self.study.budget is not None else "least total",
            "products": [c.to_dict() for c in self.choices],
            "total_epsilon": total,
            "budget": self.study.budget,
            "ratio": json_value(self.ratio) if self.study.budget is not None else None,
            "limit": b.get("limit"),
            "remaining_before": remaining,
            "remaining_after": None if remaining is None else round(remaining - total, 12),
            "studies_that_fit": None if remaining is None or total <= 0 else int(remaining / total + 1e-9),
            "unmet": self.unmet,
            "read": self.read,
            "side_information": self.side_information,
        }


def _settle(inp: Inputs, products, curves, budget):
    """Split, then predict again at each chosen ε until every figure stated is a prediction there."""
    up = budget is None
    for _ in range(CHECK_ROUNDS):
        r, picks = split(products, curves, budget)
        todo = [(p, c, _round(e, up)) for p, x in zip(products, picks) if x is not None for c, e in [x]]
        todo = [(p, c, e) for p, c, e in todo if c.c is None and e not in c.points]
        if not todo:
            return r, picks
        for p, c, e in todo:
            _sample(inp, p, c, e)
    return split(products, curves, budget)


def _round(eps: float, up: bool = True) -> float:
    """ε as a plan states it: rounded up to three significant figures to meet a target (a larger ε only narrows
    the margin), down to four within a budget (so the total stays within it)."""
    if up:
        return ceil_3sf(eps)
    scale = 10.0 ** (math.floor(math.log10(eps)) - 3)
    return max(EPS_MIN, float(f"{math.floor(eps / scale + 1e-9) * scale:.4g}"))


def make_study_plan(
    study: Study,
    progress: Callable[[float, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    seconds: float | None = None,
) -> StudyPlan:
    """The study's plan (see the module docstring). ``progress(fraction, message)`` is told of every
    prediction; ``cancelled()`` stops it (:class:`Cancelled`); past ``seconds`` (default: one plan's time budget,
    ``HEATMAP_PLAN_SECONDS``, per product) it stops with a ParamError."""
    from ..bookkeeping import release_limit

    progress = progress or (lambda f, m: None)
    options = dataset_options(study)
    frame = frame_of(study.dataset, options)
    users = stated_users(study.users) if study.users is not None else released_users(study.users_from)
    proxy = released_proxy(study.proxy_from) if study.proxy_from else synthetic_proxy(study.proxy or PROXY_PRESET)
    proxy = several(proxy, study.locations_per_user)
    # a study is a plan per product: each has the time budget of one
    watch = StudyWatch(plan_seconds() * len(study.products) if seconds is None else float(seconds), cancelled)
    inp = Inputs(frame, users, proxy, study.runs, watch, progress, pilot_scale=_pilot_scale(study))
    products = list(study.products)
    inp.expected = sum(len(p.mechanisms) * len(SAMPLE_EPS) for p in products) + 2 * len(products)
    curves = [[curve_of(inp, p, m) for m in p.mechanisms] for p in products]
    ratio, picks = _settle(inp, products, curves, study.budget)
    choices = [_choice(inp, p, cs, x, ratio, study.budget is None) for p, cs, x in zip(products, curves, picks)]
    key = ledger_key(study.dataset, options)
    budget = budget_of(study.dataset, options, key)
    if budget is not None:
        budget["limit"] = release_limit(study.dataset)
    progress(1.0, "planned")
    return StudyPlan(
        study=study,
        choices=choices,
        ratio=ratio,
        budget=budget,
        read=what_was_read(study.dataset, options, frame, key),
        side_information=[*users.side_information, *frame.side_information, *_per_user(study)],
    )


def _pilot_scale(study: Study) -> float | None:
    """The Laplace scale per cell of the pilot release used as the proxy: 1 / its ε (Identity's; for a pilot by
    another mechanism, the scale of a count it could have been)."""
    if study.proxy_from is None:
        return None
    from ..execution import released_map

    return 1.0 / float(released_map(study.proxy_from)[2]["parameters"]["epsilon"])


def interval(inp: Inputs, product: Product, mechanism: str, eps: float) -> tuple[float, float] | None:
    """The prediction's own interval with a pilot release as the proxy: the least and greatest figure over
    :data:`INTERVAL_DRAWS` proxies drawn from two readings of the pilot, each with its people drawn again (the
    proxy's spread): the pilot as published, whose noise puts people where nobody is (over the sea of a
    sparse city), and the pilot with every cell under its own 95 % margin (ln 20 x its Laplace scale) emptied,
    which takes people from thin places that hold some. The data lies between the two (BENCHMARKS.md, study,
    measures how often). None with a synthetic proxy: how far a synthetic city is from the data no draw of it
    can tell."""
    if inp.proxy.density is None or inp.pilot_scale is None:
        return None
    per_user = getattr(inp.proxy, "per_user", 1)
    dens = inp.proxy.density
    readings = {"as published": dens, "thin cells emptied": np.where(dens < math.log(20) * inp.pilot_scale, 0, dens)}
    regions, params = inp.regions_of(product), _product_params(product, mechanism)
    figs = []
    for b in range(INTERVAL_DRAWS):
        name, d = list(readings.items())[b % 2]
        redrawn = several(Proxy(f"{inp.proxy.label}, {name}", None, d, inp.proxy.domain), per_user)
        p = predict(
            mechanism,
            eps,
            inp.frame,
            inp.users,
            product.depth,
            params,
            regions,
            1,
            seed=1 + b,
            proxy=redrawn,
            deadline=inp.watch,
        )
        figs.append(figure(p, product))
    v = np.array(figs, dtype=np.float64)
    v = v[np.isfinite(v)]
    return (float(v.min()), float(v.max())) if v.size else None


def _per_user(study: Study) -> list[str]:
    k = study.locations_per_user
    return [f"each user has up to {k} locations, stated by the analyst"] if k > 1 else []


def dataset_options(study: Study) -> dict:
    from ...data.registry import get_source
    from ...mechanisms import load_all

    load_all()
    return get_source(study.dataset).schema().resolve({k: str(v) for k, v in study.options.items()})


def _choice(inp: Inputs, product: Product, curves: list[Curve], pick, ratio: float, up: bool) -> Choice:
    goal = ratio * product.target
    candidates = {c.mechanism: (None if (e := c.epsilon_for(goal)) is None else _round(e, up)) for c in curves}
    side = [*inp.users.side_information, *inp.frame.side_information]
    if isinstance(inp.proxy, SeveralProxy):
        side.append(f"each user has up to {inp.proxy.per_user} locations, stated by the analyst")
    if product.regions is not None:
        regions = inp.regions_of(product)
        side.append(f"the regions: {regions.public_spec} (public)")
    if pick is None:
        silent = [c.mechanism for c in curves if c.no_margin]
        method = f"no mechanism listed meets it at any ε up to {EPS_MAX:g}"
        if silent:
            method += f"; no prediction for {', '.join(silent)}: its release states no margin here"
        return Choice(product, None, None, None, method, candidates, side)
    curve, eps = pick
    eps = _round(eps, up)
    span: tuple[float, float] | None
    if curve.c is not None:
        pred, method, span = curve.c / eps, "closed form", (curve.c / eps, curve.c / eps)
    else:
        pred = _sample(inp, product, curve, eps)  # predicted at the ε stated, never interpolated
        method = curve.predictions[eps].method
        span = interval(inp, product, curve.mechanism, eps)
        span = None if span is None else (min(span[0], pred), max(span[1], pred))  # the prediction's own draws too
        if span is None:
            method += "; no interval: how far a synthetic city is from the data is unknown (BENCHMARKS.md, study)"
        else:
            method += f"; interval over {INTERVAL_DRAWS} draws of two readings of the pilot"
    error = split_error(inp.proxy, inp.frame, inp.users, product, curve.mechanism, pred, inp.regions_of(product))
    return Choice(product, curve.mechanism, eps, pred, method, candidates, side, error, span)


def describe_study(plan: StudyPlan) -> str:
    """The plan as a few lines of text (the CLI's default output)."""
    d = plan.to_dict()
    mode = f"a budget of {plan.study.budget:g}" if plan.study.budget is not None else "the least total ε"
    lines = [f"Study plan ({mode}); predicted from public inputs only. {plan.read[0].upper()}{plan.read[1:]}."]
    lines.append(f"{'product':<26} {'mechanism':<16} {'ε each':>8} {'x':>4} {'predicted':>10} {'target':>8}  how")
    for c in d["products"]:
        pred = "—" if c["predicted"] is None else f"{c['predicted']:.3g}"
        eps = "—" if c["epsilon"] is None else f"{c['epsilon']:g}"
        lines.append(
            f"{c['name'][:26]:<26} {str(c['mechanism'] or '—'):<16} {eps:>8} {c['repeat']:>4} {pred:>10} "
            f"{c['target']:>8g}  {c['statistic']}; {c['method']}"
        )
    for c in d["products"]:
        if c["error"] is not None:
            e = c["error"]
            lines.append(
                f"{c['name']}: noise {e['noise']:.3g}, bias of bounding contributions {e['bias']:.3g} "
                f"(the {e['dominates']} dominates)"
            )
    lines.append(f"total ε: {d['total_epsilon']:g}")
    if d["limit"] is not None:
        lines.append(
            f"ledger: limit {d['limit']:g}; {d['remaining_before']:g} remains before, {d['remaining_after']:g} after; "
            f"studies like it that fit: {d['studies_that_fit']}"
        )
    if d["unmet"]:
        lines.append(f"targets not met: {', '.join(d['unmet'])}")
    for s in plan.side_information:
        lines.append(f"side information: {s}")
    return "\n".join(lines)


def stderr_progress(stream=None) -> Callable[[float, str], None]:
    """A progress callback printing one line per step on stderr (``plan --study``)."""
    stream = stream or sys.stderr

    def tell(f: float, message: str) -> None:
        print(f"planning {100 * f:3.0f}%  {message}", file=stream, flush=True)

    return tell


# ------------------------------------------------------------------ the ledger keeps the plan
def ledger_of(study: Study) -> str:
    """The key of the study's dataset's ledger."""
    key = ledger_key(study.dataset, dataset_options(study))
    assert key is not None  # a study always names its dataset
    return key


def reserve(plan: StudyPlan, store=None, note: str = ""):
    """Reserve the plan's ε in its dataset's ledger (:mod:`engine.run.bookkeeping._reserve`); :class:`Refused` past the
    operator's limit, nothing booked. Returns the :class:`~engine.run.bookkeeping._ledger.Spend`."""
    from ..bookkeeping import Refused, Reservations, release_limit

    study = plan.study
    products: list[dict[str, Any]] = [
        {
            "product": c.product.name,
            "mechanism": c.mechanism,
            "epsilon": c.epsilon,
            "repeat": c.product.repeat,
            "config": {"depth": c.product.depth, "regions": c.product.regions, "params": choice_params(c)},
        }
        for c in plan.choices
        if c.mechanism is not None
    ]
    limit = release_limit(study.dataset)
    res = Reservations(store).reserve(ledger_of(study), study.key, products, limit, note or f"study {study.name}")
    if not res.ok:
        raise Refused(sum(p["epsilon"] * p["repeat"] for p in products), res.spent, limit)
    return res


def choice_params(c: Choice) -> dict:
    if c.mechanism is None:
        raise ParamError(f"{c.product.name}: no mechanism meets its target, so it has no parameters to run")
    return _product_params(c.product, c.mechanism)


def cancel(study: Study, store=None) -> float:
    """Cancel the study's reservation; returns the ε it still held, now free."""
    from ..bookkeeping import Reservations

    return Reservations(store).cancel(ledger_of(study), study.key)


def held(study: Study, store=None) -> list:
    """The study's reservation in its dataset's ledger, one row per product (empty: nothing reserved)."""
    from ..bookkeeping import Reservations

    return Reservations(store).held(ledger_of(study), study.key)
