"""The command line's ``plan``: the release planner (:mod:`engine.run.planning._forecast`) and the study planner (``--study``,
:mod:`engine.cli_study`), with progress on stderr from the first read to the last proxy run."""

from __future__ import annotations

import json
import math

from . import cli_data, cli_study, progress
from .core.errors import ParamError


def command(args) -> int:
    """``python -m engine plan``: one release's accuracy before any ε is spent, or a study's plan (``--study``)."""
    from .mechanisms import load_all
    from .run import planning

    load_all()
    if args.study:
        return cli_study.plan(args)
    if args.reserve or args.cancel:
        raise ParamError("--reserve and --cancel act on a study: give it with --study FILE")
    if args.users is None and args.users_from is None:
        raise ParamError("the plan needs a user count: --users N (a public bound) or --users-from FOLDER")
    if args.users is not None and args.users > planning.MAX_USERS:
        raise ParamError(f"--users must be at most {planning.MAX_USERS:,} (got {args.users:,})")
    if args.target_margin is not None and not (math.isfinite(args.target_margin) and args.target_margin > 0):
        raise ParamError(f"--target-margin must be a positive number (got {args.target_margin})")
    users = planning.stated_users(args.users) if args.users is not None else planning.released_users(args.users_from)
    options = {}
    if args.dataset is not None:
        from .data.registry import get_source

        src = get_source(args.dataset)
        options = src.schema().resolve(cli_data.options(args.data_opt, "dataset option"))
        if src.kind == "file":
            cli_data.warn_about_file(args.dataset, options)
    bar, moved = progress.counted("plan")  # from here on the reads and the proxy runs show on a terminal
    with bar:
        plan = _make_plan(args, users, options, moved)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
        return 0
    print(planning.describe_plan(plan))
    return 0


def _make_plan(args, users, options: dict, moved):
    from .run import planning
    from .run.execution import auto_depth, with_regions

    frame = planning.frame_of(args.dataset, options) if args.dataset else None
    params = cli_data.options(args.param, "mechanism parameter")
    params = {m: with_regions(m, params, *cli_data.region_args(args)) for m in args.mechanism}
    proxy = (
        planning.released_proxy(args.proxy_from)
        if args.proxy_from
        else planning.synthetic_proxy(args.proxy or planning.PROXY_PRESET)
    )
    return planning.make_plan(
        args.mechanism,
        args.epsilon,
        users,
        frame=frame,
        depth=auto_depth(users.n) if args.depth == "auto" else args.depth or 8,
        regions_spec=args.regions,
        polygons=cli_data.polygon_file(args),
        params=params,
        target=args.target_margin,
        dataset=args.dataset,
        options=options,
        runs=args.runs,
        proxy=proxy,
        progress=moved,
    )
