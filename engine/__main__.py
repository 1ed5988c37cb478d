"""Command line: ``python -m engine {datasets,mechanisms,run,sweep,bench}``.

Errors meant for the user (bad parameters, bad files) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import sys

from .errors import EngineError


def _cmd_datasets(args) -> int:
    from .data import sources

    rows = []
    for key, s in sorted(sources().items()):
        rows.append({"key": key, "kind": s.kind, "label": s.label, "offline": s.offline, "license": s.license})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['key']:<32} {r['kind']:<10} {'offline' if r['offline'] else 'online':<8} {r['label']}")
    return 0


def _cmd_mechanisms(args) -> int:
    from .mechanisms import registry

    reg = registry()
    if args.json:
        print(json.dumps([c.describe() for c in reg.values()], indent=2, default=str))
    else:
        for key, c in sorted(reg.items()):
            print(f"{key:<28} {c.family:<12} {c.label}")
    return 0


def _config_from_args(args, mechanism=None, epsilon=None, seed=None):
    from .jobs import RunConfig
    from .params import parse_kv

    return RunConfig(
        dataset=args.dataset,
        dataset_options=parse_kv(args.data_opt or []),
        mechanism=mechanism or args.mechanism,
        params=parse_kv(args.param or []),
        epsilon=float(epsilon if epsilon is not None else args.epsilon),
        n_users=args.users,
        depth=args.depth,
        seed=int(seed if seed is not None else args.seed),
        secure=args.secure,
    )


def _resolved(config):
    """Coerce dataset option strings with the source's schema (so the cache key is stable)."""
    from dataclasses import replace

    from .data.registry import get_source

    src = get_source(config.dataset)
    return replace(config, dataset_options=src.schema().resolve(config.dataset_options))


def _cmd_run(args) -> int:
    from .jobs import run

    cfg = _resolved(_config_from_args(args))
    res = run(cfg, use_cache=not args.no_cache)
    out = res.summary()
    if args.format == "json":
        print(json.dumps(out, indent=2, default=float))
    else:
        w = csv.writer(sys.stdout)
        w.writerow(["metric", "value"])
        for k, v in res.metrics.items():
            w.writerow([k, v])
    return 0


def _cmd_sweep(args) -> int:
    from .jobs import run

    mechs = args.mechanisms.split(",")
    epss = [float(e) for e in args.epsilons.split(",")]
    seeds = range(args.seeds)
    rows = []
    for m, e, s in itertools.product(mechs, epss, seeds):
        cfg = _resolved(_config_from_args(args, mechanism=m, epsilon=e, seed=s))
        res = run(cfg, use_cache=not args.no_cache)
        row = {"mechanism": m, "epsilon": e, "seed": s, "n_users": res.n_users}
        row.update(res.metrics)
        rows.append(row)
        print(f"{m} eps={e} seed={s} done", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=float))
    else:
        buf = io.StringIO()
        keys = list(dict.fromkeys(k for r in rows for k in r))
        w = csv.DictWriter(buf, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
        print(buf.getvalue(), end="")
    return 0


def _cmd_bench(args) -> int:
    from .bench import render_table, run_suite, to_json

    figs = run_suite(args.suite, quick=args.quick, progress=lambda *a: print(*a, file=sys.stderr))
    print(to_json(figs) if args.json else render_table(figs))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine", description="Private location heatmap workbench engine")
    sub = p.add_subparsers(dest="cmd", required=True)

    d = sub.add_parser("datasets", help="list dataset sources")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=_cmd_datasets)

    m = sub.add_parser("mechanisms", help="list mechanisms")
    m.add_argument("--json", action="store_true")
    m.set_defaults(fn=_cmd_mechanisms)

    def common(sp):
        sp.add_argument("--dataset", default="synthetic:polycentric")
        sp.add_argument("--data-opt", action="append", metavar="KEY=VALUE", help="dataset option, e.g. n=100000")
        sp.add_argument("--param", action="append", metavar="KEY=VALUE", help="mechanism parameter")
        sp.add_argument("--users", type=int, default=None, help="users sampled (default: all)")
        sp.add_argument("--depth", type=int, default=8, help="2^depth cells per side")
        sp.add_argument("--secure", action="store_true", help="OpenDP samplers")
        sp.add_argument("--format", choices=("json", "csv"), default="json")
        sp.add_argument("--no-cache", action="store_true")

    r = sub.add_parser("run", help="run one mechanism")
    r.add_argument("--mechanism", default="identity")
    r.add_argument("--epsilon", type=float, default=1.0)
    r.add_argument("--seed", type=int, default=0)
    common(r)
    r.set_defaults(fn=_cmd_run)

    s = sub.add_parser("sweep", help="grid over mechanisms x epsilon x seeds")
    s.add_argument("--mechanisms", default="identity")
    s.add_argument("--epsilons", default="0.1,1")
    s.add_argument("--seeds", type=int, default=3)
    common(s)
    s.set_defaults(fn=_cmd_sweep)

    b = sub.add_parser("bench", help="benchmark suite")
    b.add_argument("suite")
    b.add_argument("--json", action="store_true")
    b.add_argument("--quick", action="store_true", help="smaller sizes (for smoke tests)")
    b.set_defaults(fn=_cmd_bench)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
