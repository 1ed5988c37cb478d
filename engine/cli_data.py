"""The command line's side of the analyst's own files: the regions options (``--regions``, ``--region-names``,
``--regions-crs``), the regions they name, and the location check of a file of locations
(:func:`engine.data.geography.file_warning`, which the dashboard shows too) printed on stderr before any run."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from .core.errors import EngineError, ParamError

_WARNED: set[str] = set()  # files already checked in this process (a sweep configures each mechanism)


def regions_spec(text: str) -> str:
    from .data.region_geometry import parse_spec

    try:
        parse_spec(text)
    except ParamError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def crs(text: str) -> str:
    """A CRS the analyst gives (an EPSG code or a PROJ string), checked before any work starts."""
    from .data.files.crs import check_crs

    try:
        check_crs(text)
    except EngineError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def add_region_options(sp, what: str = "also report over regions", names: bool = True) -> None:
    sp.add_argument(
        "--regions",
        type=regions_spec,
        default=None,
        metavar="SPEC",
        help=f"{what}: grid (each cell), h3:RES (H3 hexagons), or PATH[:ID_COLUMN] (polygons)",
    )
    if names:
        sp.add_argument("--region-names", default=None, metavar="COLUMN", help="the polygon file's name column")
    sp.add_argument(
        "--regions-crs",
        type=crs,
        default=None,
        metavar="CRS",
        help="the polygon file's CRS when it declares none (a Shapefile without .prj): EPSG:27700, or a PROJ string",
    )


def region_args(args) -> tuple[str | None, str | None]:
    """The analysis's one region set from ``--regions`` and ``--regions-crs`` (None, None without them)."""
    return getattr(args, "regions", None), getattr(args, "regions_crs", None)


def regions(args, domain, local_crs: str):
    """The regions of ``--regions`` over ``domain`` (None without it)."""
    if not args.regions:
        return None
    from .data.region_geometry import build

    return build(args.regions, domain, local_crs, name_column=args.region_names, file_crs=args.regions_crs)


def polygon_file(args):
    """The polygon file of ``--regions`` read in the CRS of ``--regions-crs`` (None without both)."""
    if not (args.regions and args.regions_crs):
        return None
    from .data.files.polygons import load_polygons
    from .data.region_geometry import parse_spec

    kind, path, id_column = parse_spec(args.regions)
    return load_polygons(path, id_column=id_column, crs=args.regions_crs) if kind == "file" else None


def warn_about_file(key: str, options: dict) -> None:
    """Print on stderr what the location check says of the analyst's file (points at sea, far from any town, or
    longitude and latitude swapped), once per file and process; the file is read as the run will read it."""
    from .data.geography import file_warning
    from .run import load_dataset

    seen = json.dumps(options, sort_keys=True, default=str)
    if seen in _WARNED:
        return
    _WARNED.add(seen)
    got = file_warning(load_dataset(key, options))
    if got is None:
        return
    msg, swap = got
    if swap is not None:
        opts = " ".join(f"--data-opt {shlex.quote(f'{k}={v}')}" for k, v in swap.items())
        msg += f" To read them exchanged: {opts}."
    elif not options.get("crs"):
        msg += " Give it with --data-opt crs=... (an EPSG code or a PROJ string)."
    print(f"warning: {msg}", file=sys.stderr)


def options(pairs, what: str) -> dict:
    """``KEY=VALUE`` pairs of a repeated option as a dict; a key given twice is refused."""
    out: dict = {}
    for k, v in pairs or []:
        if k in out:
            raise ParamError(f"{what} {k!r} is given twice")
        out[k] = v
    return out
