"""Command line: ``python -m engine {datasets,mechanisms,run,sweep,release,plan,bench,audit}``.

Errors meant for the user never print a traceback: a malformed argument or a bad value
met later (unknown mechanism, dataset or suite, a bad file) prints one ``error:`` line and
exits 2. Every list, number and ``key=value`` pair is checked before any work starts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from dataclasses import replace

from . import cli_data, cli_plan, cli_study, progress
from .cli_grid import add_options as add_grid_options
from .cli_grid import depth as grid_depth
from .core.csvtext import csv_text
from .core.errors import EngineError, ParamError

MAX_SEEDS = 1000  # seeds per sweep
MAX_RUNS = 10_000  # runs per sweep (mechanisms x epsilons x seeds)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like the engine's own errors (no usage block)
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


# ------------------------------------------------------------- argument types
def _epsilon(text: str) -> float:
    from .core.epsilon import check_epsilon

    try:
        return check_epsilon(text.strip())
    except ParamError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _epsilons(text: str) -> list[float]:
    parts = text.split(",")
    if any(not p.strip() for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers without empty items (got {text!r})")
    return [_epsilon(p) for p in parts]


def _names(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names without empty items (got {text!r})")
    return parts


def _int_in(lo: int, hi: int | None = None):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number (got {text!r})") from None
        if v < lo or (hi is not None and v > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"must be {bound} (got {v})")
        return v

    return parse


def _key_value(text: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (got {text!r})")
    return k.strip(), v.strip()


def _cluster(text: str) -> str:
    from .run.execution import parse_cluster

    try:
        return parse_cluster(text)
    except ParamError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _url(text: str) -> str:
    from urllib.parse import urlparse

    u = urlparse(text.strip())
    if u.scheme not in ("http", "https") or not u.netloc:
        raise argparse.ArgumentTypeError(f"a download address starts with http:// or https:// (got {text!r})")
    return text.strip()


def _cmd_datasets(args) -> int:
    from .data import sources
    from .mechanisms import load_all

    load_all()  # families register the datasets of their papers
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


def _config_from_args(args, mechanism, epsilon, seed, mode="evaluate"):
    """The run's configuration, its dataset options and mechanism parameters checked against
    their schemas (coerced, so the cache key is stable) before anything runs. A release has
    no seed and always uses secure noise."""
    from .cli_grid import config_fields
    from .data.registry import get_source
    from .mechanisms import get, load_all
    from .run.execution import RunConfig, with_regions

    load_all()
    src = get_source(args.dataset)
    data_opts = cli_data.options(args.data_opt, "dataset option")
    if args.url is not None:
        if "url" not in {p.name for p in src.schema()}:
            raise ParamError(f"dataset {args.dataset!r} is not downloaded: --url does not apply to it")
        if "url" in data_opts:
            raise ParamError("give the download address once, with --url or with --data-opt url=...")
        data_opts["url"] = args.url
    # the regions reported are the regions counted: one set, given by --regions or by the parameter
    params = cli_data.options(args.param, "mechanism parameter")
    named = params.get("regions") if get(mechanism).region_params else None
    if named and hasattr(args, "regions") and not args.regions:
        args.regions = cli_data.regions_spec(named)
    params = with_regions(mechanism, params, *cli_data.region_args(args))
    # unknown names and bad values fail here; resolved, so the CLI and the dashboard name one configuration
    # alike (one cache entry, one ledger key)
    params = get(mechanism).schema().resolve(params)
    data_opts = src.schema().resolve(data_opts)
    if src.kind == "file":  # the analyst's own file: warned of points at sea or swapped, as on the dashboard
        cli_data.warn_about_file(args.dataset, data_opts)
    return RunConfig(
        dataset=args.dataset,
        dataset_options=data_opts,
        mechanism=mechanism,
        params=params,
        epsilon=epsilon,
        n_users=args.users,
        seed=seed,
        secure=mode == "release" or args.secure,
        mode=mode,
        **config_fields(args, src, data_opts),
    )


def _evaluations():
    """The booking protocol of the Evaluate commands: as on the dashboard, an evaluation goes on unbooked when the
    ledger cannot be written (a read-only or full cache folder), with one note on stderr saying so."""
    from .run.bookkeeping import Bookkeeper, LedgerPolicy

    told = []

    def note(exc) -> None:
        if not told:
            told.append(exc)
            print(f"note: {exc}; evaluation runs go on unbooked (a release would be refused)", file=sys.stderr)

    return Bookkeeper(policy=LedgerPolicy("tolerant", evaluate_unbooked=True, tell=note))


def _cmd_run(args) -> int:
    from .run.execution import fresh_seed, run

    seed = fresh_seed() if args.seed is None else args.seed
    cfg = _config_from_args(args, args.mechanism, args.epsilon, seed)
    bk = _evaluations()
    with progress.bar(1, "run") as bar:  # on a terminal: which run, and its time so far when it ends
        bar.set_postfix_str(progress.label(cfg))
        if args.cluster:
            res, _ = bk.run(cfg, lambda c: _on_cluster(args, [c])[0], note="python -m engine run")
        else:
            res, _ = bk.run(cfg, lambda c: run(c, use_cache=not args.no_cache), note="python -m engine run")
        bar.update(1)
    if args.seed is None:  # after the run, so a bad argument stays the only line
        print(f"seed {seed} (drawn at random; --seed {seed} repeats this run)", file=sys.stderr)
    out = res.summary()
    report = _regions_report(args, cfg, res)
    if report is not None:
        out["regions"] = report.rows()
        out["regions_info"] = report.describe()
    if args.format == "json":
        print(json.dumps(out, indent=2, default=float))
    elif report is not None:
        print(report.as_csv(), end="")
    else:
        print(csv_text(list(res.metrics.items()), ["metric", "value"]), end="")
    return 0


def _regions_report(args, cfg, res, evaluate: bool = True):
    """The run's regional table for ``--regions`` (None without it); in Evaluate with the true counts."""
    if not getattr(args, "regions", None):
        return None
    from .regions import regional_report
    from .run import prepare

    regions = cli_data.regions(args, res.release.domain, res.crs)
    data = prepare(cfg)[0] if evaluate and cfg.mode == "evaluate" else None
    return regional_report(res, regions, data, people=_counts_people(cfg))


def _counts_people(cfg) -> bool:
    """Whether the run counts people (else records): the dataset's schema and the mechanism's unit."""
    from .regions.regional_table import counts_people
    from .run import load_dataset

    return counts_people(load_dataset(cfg.dataset, cfg.dataset_options), cfg.params)


def _release_regions(args, cfg, domain=None):
    """``--regions`` over the release's ``domain``, or before the run over the dataset's (None without it)."""
    if not args.regions:
        return None
    from .mechanisms import get
    from .run import load_dataset

    cls = get(cfg.mechanism)
    if "value" in cls.needs:  # an attribute mean has no regional count: refused before any budget is spent
        raise ParamError(f"--regions reports counts, and {cls.label or cls.key} releases an attribute mean")

    ds = load_dataset(cfg.dataset, cfg.dataset_options)
    return cli_data.regions(args, domain or ds.public_domain(cfg.depth), ds.crs)


def _on_cluster(args, configs, keep=None) -> list:
    """The runs as tasks on the cluster of ``--cluster`` (engine/run/execution/_cluster.py), in order."""
    from .run.execution import connect, run_many

    with connect(args.cluster) as client:
        workers = len(client.scheduler_info().get("workers", {}))
        print(f"{len(configs)} run(s) on the Dask cluster {args.cluster} ({workers} workers)", file=sys.stderr)
        with progress.bar(len(configs), "sweep") as bar:
            return run_many(configs, client, use_cache=not args.no_cache, keep=keep, progress=progress.on_finished(bar))


def _cmd_sweep(args) -> int:
    from .run.execution import run, sweep_row

    mechs, epss, seeds = args.mechanisms, args.epsilons, range(args.seed0, args.seed0 + args.seeds)
    n_runs = len(mechs) * len(epss) * len(seeds)
    if n_runs > MAX_RUNS:
        raise ParamError(f"the sweep has {n_runs:,} runs, over the limit of {MAX_RUNS:,}; split it")
    # every mechanism's configuration is checked before the first run, so a typo fails at once
    base = {m: _config_from_args(args, m, epss[0], 0) for m in mechs}
    configs = [replace(base[m], epsilon=e, seed=s) for m, e, s in itertools.product(mechs, epss, seeds)]
    # evaluation runs publish nothing: booked in the dataset's evaluations, listed apart from its releases
    bk = _evaluations()
    if args.cluster:  # one task per run; the same rows as below
        bookings = bk.record(configs, note="python -m engine sweep")
        try:
            rows = _on_cluster(args, configs, keep=sweep_row)
        except BaseException:
            for b in bookings:
                if b is not None:  # None: run unbooked, the ledger could not be written
                    bk.unbook(b)
            raise
        for cfg, b, row in zip(configs, bookings, rows):
            if b is not None:
                bk.settle(cfg, b, row)
    else:
        rows = []
        with progress.bar(len(configs), "sweep") as bar:
            for cfg in configs:
                res, _ = bk.run(cfg, lambda c: run(c, use_cache=not args.no_cache), note="python -m engine sweep")
                rows.append(sweep_row(res))
                progress.finished(bar, cfg)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=float))
    else:
        print(csv_text(rows, dict.fromkeys(k for r in rows for k in r)), end="")
    return 0


def _formats(text: str) -> tuple[str, ...]:
    from .run.execution import FORMATS

    names = _names(text)
    bad = [n for n in names if n not in FORMATS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown format {bad[0]!r}; choose from {','.join(FORMATS)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a format is given twice (got {text!r})")
    return tuple(names)


def _check_writable(folder) -> None:
    """Create ``folder`` and write a file in it, or a ParamError that says which folder and why."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as f:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise ParamError(
            f"cannot write the release to {folder} ({exc.strerror or exc}): choose another --out"
        ) from None


def _cmd_release(args) -> int:
    """A Release-mode run written to a folder (:func:`engine.run.execution.write_release`) and booked
    in the dataset's privacy ledger through the one booking protocol (:mod:`engine.run.bookkeeping._booking`: the
    extra ε spent under client dropout included); refused when the dataset's total would pass the
    operator's limit (:mod:`engine.run.bookkeeping._limits`), or ``--limit`` where that is lower. Nothing computed
    from the truth is printed."""
    from pathlib import Path

    from .run.bookkeeping import STRICT, Bookkeeper
    from .run.execution import FILE_NAMES, MANIFEST, run, write_release

    reserved = cli_study.release_args(args)  # a study's product: its reservation says what to release
    cfg = _config_from_args(args, args.mechanism, args.epsilon, 0, mode="release")
    cfg.validate()
    if not args.out.strip():
        raise ParamError("--out '' names no folder: give the folder for the release (--out . for this one)")
    out = Path(args.out)
    from .regions.margin_files import REGION_FILES

    names = [*(FILE_NAMES[f] for f in args.format), MANIFEST, *(REGION_FILES.values() if args.regions else ())]
    taken = [n for n in names if (out / n).exists()]
    if taken:  # checked before any ε is booked
        raise ParamError(f"{out} already holds {', '.join(taken)}: write each release to a folder of its own")
    created = not out.exists()
    _check_writable(out)  # before any ε is booked: a release nobody can write must not spend it
    bk = Bookkeeper(policy=STRICT, reserved=reserved)  # any ledger failure stops the command, before any noise
    try:
        regions = _release_regions(args, cfg)  # before any booking: a bad region file costs no budget
        with progress.bar(1, "release") as bar:
            bar.set_postfix_str(f"{cfg.mechanism} eps={cfg.epsilon:g}")  # its seed is drawn from fresh entropy
            res, booking = bk.run(cfg, run, args.limit, note="python -m engine release")
            bar.update(1)
    except BaseException:
        if created and not any(out.iterdir()):  # a refused or failed release leaves no folder behind
            out.rmdir()
        raise
    if regions is not None and (cfg.resolution == "auto" or cfg.frame == "dp"):  # a frame or grid the run chose
        regions = _release_regions(args, cfg, res.release.domain)
    # once a grid exists the booking stays, even if writing it fails half way
    paths = write_release(res, out, args.format, release_key=booking.key, regions=regions, people=_counts_people(cfg))
    report = {
        "files": {k: str(v) for k, v in paths.items()},
        "epsilon_spent": res.release.ledger.total(),
        "dataset_fingerprint": booking.fingerprint,
        "dataset_epsilon_spent": bk.store.spent(booking.fingerprint),
    }
    print(json.dumps(report, indent=2))
    return 0


def _cmd_bench(args) -> int:
    from .bench import DASHBOARD_HINT, available, render_table, run_suite, to_json

    if args.suite not in available():
        raise ParamError(f"unknown benchmark suite {args.suite!r}; available: {', '.join(available())}{DASHBOARD_HINT}")
    figs = run_suite(args.suite, quick=args.quick, progress=lambda *a: print(*a, file=sys.stderr))
    print(to_json(figs) if args.json else render_table(figs))
    return 0


def _runs(text: str) -> int:
    from .run.analysis import MAX_AUDIT_RUNS, MIN_AUDIT_RUNS

    return _int_in(MIN_AUDIT_RUNS, MAX_AUDIT_RUNS)(text)


def _cmd_audit(args) -> int:
    from .run.analysis import audit

    bar, moved = progress.fraction(f"audit {args.mechanism}")
    with bar:
        res = audit(
            args.mechanism,
            args.epsilon,
            args.runs,
            params=cli_data.options(args.param, "parameter"),
            relation=args.relation,
            seed=args.seed,
            progress=moved,
        ).to_dict()
    if args.json:
        print(json.dumps(res, indent=2, default=float))
        return 0
    claimed = "none (no privacy claim)" if res["eps_claimed"] is None else f"{res['eps_claimed']:g}"
    (k0, n0), (k1, n1) = res["counts"]["D0"], res["counts"]["D1"]
    for name, value in (
        ("mechanism", res["mechanism"] + "".join(f" {k}={v}" for k, v in res["params"].items())),
        (
            "relation",
            res["relation"]
            + (
                "" if res["relation"] == res["claimed_relation"] else f" (the claim is under {res['claimed_relation']})"
            ),
        ),
        ("eps claimed", claimed),
        ("eps_lb", f"{res['eps_lb']:.3f} (Clopper-Pearson {100 * (1 - res['alpha']):g}% lower bound)"),
        ("runs", f"{res['runs']:,} per dataset"),
        ("seconds", f"{res['seconds']:.1f}"),
        ("test", f"{res['test']} (D0: {k0:,} of {n0:,}, D1: {k1:,} of {n1:,} evaluation runs)"),
        ("datasets", res["datasets"]),
    ):
        print(f"{name:<12} {value}")
    return 0


def _add_plan_parser(sub) -> None:
    pl = sub.add_parser(
        "plan",
        help="predicted 95 %% margins of a release before spending (public inputs only; engine/run/planning/_forecast.py)",
    )
    pl.add_argument("--mechanism", type=_names, default=["identity"], help="comma-separated mechanism keys")
    pl.add_argument("--epsilon", type=_epsilons, default=[1.0], help="comma-separated epsilons")
    pl.add_argument(
        "--depth", type=grid_depth, default=None, help="2^depth cells per side (default 8), or auto (--users)"
    )
    cli_data.add_region_options(pl, "plan over regions", names=False)
    who = pl.add_mutually_exclusive_group()
    who.add_argument("--users", type=_int_in(1), default=None, help="a public bound on the users (side information)")
    who.add_argument("--users-from", default=None, metavar="FOLDER", help="a published release whose total to use")
    pl.add_argument("--dataset", default=None, help="the dataset whose public frame and ledger to plan for")
    pl.add_argument("--data-opt", action="append", type=_key_value, metavar="KEY=VALUE", help="dataset option")
    pl.add_argument("--param", action="append", type=_key_value, metavar="KEY=VALUE", help="mechanism parameter")
    proxy = pl.add_mutually_exclusive_group()
    proxy.add_argument("--proxy", default=None, metavar="CITY", help="synthetic city the proxy is drawn from")
    proxy.add_argument("--proxy-from", default=None, metavar="FOLDER", help="a published release's map as the proxy")
    pl.add_argument("--target-margin", type=float, default=None, metavar="X", help="find the smallest epsilon for ±X")
    pl.add_argument("--runs", type=_int_in(1, 100), default=None, help="proxy runs of a simulated mechanism (5)")
    pl.add_argument("--json", action="store_true")
    cli_study.add_plan_options(pl)
    pl.set_defaults(fn=cli_plan.command)


def main(argv=None) -> int:
    p = _Parser(prog="python -m engine", description="Private location heatmap workbench engine")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    d = sub.add_parser("datasets", help="list dataset sources")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=_cmd_datasets)

    m = sub.add_parser("mechanisms", help="list mechanisms")
    m.add_argument("--json", action="store_true")
    m.set_defaults(fn=_cmd_mechanisms)

    def common(sp, release=False):
        sp.add_argument("--dataset", default="synthetic:polycentric")
        sp.add_argument(
            "--data-opt", action="append", type=_key_value, metavar="KEY=VALUE", help="dataset option, e.g. n=100000"
        )
        sp.add_argument("--param", action="append", type=_key_value, metavar="KEY=VALUE", help="mechanism parameter")
        sp.add_argument(
            "--url", type=_url, help="download address of an online dataset (operators only; the dashboard has none)"
        )
        sp.add_argument("--users", type=_int_in(1), default=None, help="users sampled (default: all)")
        add_grid_options(sp, _int_in(1))
        cli_data.add_region_options(sp)
        if release:  # always secure, never cached, its own formats
            return
        sp.add_argument("--secure", action="store_true", help="OpenDP samplers")
        sp.add_argument("--format", choices=("json", "csv"), default="json")
        sp.add_argument("--no-cache", action="store_true")
        sp.add_argument(
            "--cluster",
            type=_cluster,
            default=None,
            metavar="local:N|tcp://HOST:PORT",
            help="run on Dask: N local worker processes, or a running scheduler (docs/dask.md; the data is sent to "
            "the workers)",
        )

    r = sub.add_parser("run", help="run one mechanism")
    r.add_argument("--mechanism", default="identity")
    r.add_argument("--epsilon", type=_epsilon, default=1.0)
    r.add_argument("--seed", type=_int_in(0), default=None, help="default: drawn at random (and printed)")
    common(r)
    r.set_defaults(fn=_cmd_run)

    s = sub.add_parser("sweep", help="grid over mechanisms x epsilon x seeds")
    s.add_argument("--mechanisms", type=_names, default=["identity"], help="comma-separated mechanism keys")
    s.add_argument("--epsilons", type=_epsilons, default=[0.1, 1.0], help="comma-separated epsilons")
    s.add_argument("--seeds", type=_int_in(1, MAX_SEEDS), default=3, help="seeds SEED0..SEED0+N-1")
    s.add_argument("--seed0", type=_int_in(0), default=0, help="first seed (default 0)")
    common(s)
    s.set_defaults(fn=_cmd_sweep)

    rl = sub.add_parser(
        "release", help="a private release (OpenDP noise, fresh entropy, no seed) written to a folder with a manifest"
    )
    rl.add_argument("--mechanism", default="identity")
    rl.add_argument("--epsilon", type=_epsilon, default=1.0)
    rl.add_argument("--out", required=True, metavar="FOLDER", help="folder for the grid files and manifest.json")
    rl.add_argument(
        "--format",
        type=_formats,
        default=("geotiff", "geoparquet", "csv"),
        help="comma-separated: geotiff,geoparquet,geojson,csv (the GeoTIFF and GeoParquet carry each cell's 95 %% margin)",
    )
    rl.add_argument(
        "--limit",
        type=_epsilon,
        default=None,
        help="refuse if the dataset's total epsilon would pass this limit (only lowers the operator's, "
        "$HEATMAP_RELEASE_LIMIT or $HEATMAP_LIMITS_FILE)",
    )
    common(rl, release=True)
    cli_study.add_release_options(rl)
    rl.set_defaults(fn=_cmd_release)

    b = sub.add_parser("bench", help="the engine's benchmark suites (the dashboard's: python -m ui.benchmarks.SUITE)")
    b.add_argument("suite", help="the suite's name (BENCHMARKS.md lists them)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--quick", action="store_true", help="smaller sizes (for smoke tests)")
    b.set_defaults(fn=_cmd_bench)

    _add_plan_parser(sub)

    a = sub.add_parser("audit", help="empirical lower bound on a mechanism's epsilon (engine/run/analysis/_audit.py)")
    a.add_argument("mechanism")
    a.add_argument("--epsilon", type=_epsilon, default=1.0)
    a.add_argument("--runs", type=_runs, default=None, help="runs per dataset (default: the mechanism's audit plan)")
    a.add_argument("--seed", type=_int_in(0), default=0)
    a.add_argument(
        "--param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="mechanism parameter over the audit plan's, e.g. relation=add/remove for adaptive_hh",
    )
    a.add_argument(
        "--relation",
        default=None,
        metavar="RELATION",
        help="build the neighbours under this relation instead of the mechanism's own (to see what it does not cover)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(fn=_cmd_audit)

    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage and the error (or the help)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.fn(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. ``head``) stopped reading: nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 1
    except OSError as exc:  # a file or folder the command needs: say which and why
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error: cannot use{where} ({exc.strerror or exc})", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug, not the user's input: one line (HEATMAP_DEBUG=1 for the traceback)
        if os.environ.get("HEATMAP_DEBUG"):
            raise
        print(f"error: the command failed unexpectedly ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
