"""``python -m ui.bench SUITE [--json] [--quick]``: one benchmark of the dashboard (:data:`ui.bench.SUITES`)."""

from __future__ import annotations

import argparse
import sys

from engine.bench import render_table, to_json

from . import SUITES, run_suite


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ui.bench", description="benchmarks of the dashboard in Chromium")
    p.add_argument("suite", choices=SUITES)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="smaller sizes (for smoke tests)")
    args = p.parse_args(argv)
    figs = run_suite(args.suite, quick=args.quick, progress=lambda *a: print(*a, file=sys.stderr))
    print(to_json(figs) if args.json else render_table(figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
