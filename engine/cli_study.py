"""The command line's study: ``plan --study FILE [--json] [--reserve | --cancel]`` and
``release --study FILE --product NAME`` (:mod:`engine.run.planning._study_plan`, :mod:`engine.run.bookkeeping._reserve`)."""

from __future__ import annotations

import json
import sys

from .core.errors import ParamError


def add_plan_options(pl) -> None:
    pl.add_argument("--study", default=None, metavar="FILE", help="plan a whole study (a TOML file; README.md)")
    act = pl.add_mutually_exclusive_group()
    act.add_argument("--reserve", action="store_true", help="with --study: reserve the plan's ε in the ledger")
    act.add_argument("--cancel", action="store_true", help="with --study: cancel its reservation (unspent ε returns)")


def add_release_options(rl) -> None:
    rl.add_argument("--study", default=None, metavar="FILE", help="release a product of a reserved study")
    rl.add_argument("--product", default=None, metavar="NAME", help="with --study: the product to release")


def plan(args) -> int:
    """``plan --study``: the plan on stdout (JSON or text), progress on stderr; reserved or cancelled."""
    from .run import planning

    single = [a for a in ("users", "users_from", "proxy", "proxy_from", "target_margin", "dataset") if getattr(args, a)]
    if single:
        raise ParamError(f"--study takes its inputs from the file, not --{single[0].replace('_', '-')}")
    study = planning.load_study(args.study)
    if args.cancel:
        freed = planning.cancel(study)
        print(json.dumps({"study": study.key, "cancelled": True, "returned_epsilon": round(freed, 12)}))
        return 0
    plan = planning.make_study_plan(study, progress=planning.stderr_progress())
    doc = plan.to_dict()
    if args.reserve:
        if doc["unmet"]:
            print(f"note: reserving a plan that does not meet {', '.join(doc['unmet'])}", file=sys.stderr)
        res = planning.reserve(plan, note=f"python -m engine plan --study ({study.name})")
        doc["reserved"] = round(res.added, 12)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(planning.describe_study(plan))
        if args.reserve:
            print(f"reserved ε {doc['reserved']:g} in the dataset's ledger for this study ({study.key})")
    return 0


def release_args(args) -> tuple[str, str] | None:
    """With ``--study``: ``args`` set to the product's reservation (dataset, mechanism, ε, grid, regions,
    parameters) and the (study, product) its release books against; None without it."""
    if args.study is None:
        if args.product is not None:
            raise ParamError("--product names a product of a study: give the study too (--study FILE)")
        return None
    if not args.product:
        raise ParamError("--study needs --product NAME: the product to release")
    from .run import planning

    study = planning.load_study(args.study)
    study.product(args.product)  # an unknown product is told the study's products
    held = {h.product: h for h in planning.held(study)}
    h = held.get(args.product)
    if h is None:
        raise ParamError(
            f"nothing is reserved for {args.product!r}: reserve the study's plan first "
            f"(python -m engine plan --study {args.study} --reserve)"
        )
    args.dataset, args.data_opt = study.dataset, [(k, str(v)) for k, v in study.options.items()]
    args.mechanism, args.epsilon = h.mechanism, h.epsilon
    args.depth, args.regions = h.config["depth"], h.config["regions"]
    args.param = [(k, str(v)) for k, v in h.config["params"].items()]
    print(
        f"release {h.used + 1} of {h.repeat} reserved for {args.product!r}: {h.mechanism} at ε {h.epsilon:g}",
        file=sys.stderr,
    )
    return study.key, args.product
