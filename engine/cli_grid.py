"""The command line's options for a run's grid and frame (:mod:`engine.run.execution._frame`): ``--depth`` (a number, or
``auto``), ``--people``, ``--count-share``, ``--frame``, ``--frame-share``, ``--frame-quantile``, and the
RunConfig fields they give."""

from __future__ import annotations

import argparse


def depth(text: str) -> int | str:
    """``auto`` or a whole number 1..10."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (got {text!r})") from None
    if not 1 <= v <= 10:
        raise argparse.ArgumentTypeError(f"must be between 1 and 10 (got {v})")
    return v


def fraction(hi: float):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number (got {text!r})") from None
        if not 0 < v <= hi:
            raise argparse.ArgumentTypeError(f"must be above 0 and at most {hi:g} (got {text.strip()})")
        return v

    return parse


def add_options(sp, people_type) -> None:
    sp.add_argument("--depth", type=depth, default=8, help="2^depth cells per side (1..10), or auto")
    sp.add_argument("--people", type=people_type, help="with --depth auto: a public number of people you state")
    sp.add_argument("--count-share", type=fraction(0.5), help="with --depth auto: ε share of the DP count (0.05)")
    sp.add_argument("--frame", choices=("region", "dp"), default="region", help="dp: fit it by DP quantiles")
    sp.add_argument("--frame-share", type=fraction(0.5), help="with --frame dp: its share of ε (0.1)")
    sp.add_argument("--frame-quantile", type=fraction(0.49), help="with --frame dp: quantiles q, 1-q (0.01)")


def config_fields(args, src, options: dict) -> dict:
    """The RunConfig fields of the options (:func:`engine.run.execution.grid_fields`); an automatic resolution of a
    catalogue dataset (not the analyst's file) uses its public size, or the users sampled."""
    from .run.execution import grid_fields

    published = None
    if args.depth == "auto" and src.kind != "file":
        from .run import load_dataset

        published = args.users or load_dataset(args.dataset, options).n_users
    return grid_fields(
        args.depth, args.people, args.count_share, args.frame, args.frame_share, args.frame_quantile, published
    )
