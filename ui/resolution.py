"""The sidebar's grid and frame: the resolution (a side, or automatic) and the frame (the dataset's region, or
fitted by DP quantiles), as the run configuration states them (:mod:`engine.run.execution._frame` decides in the run).

The automatic resolution of a dataset whose size is public (a catalogue's, or the users the analyst samples)
uses that number; of the analyst's own file, a number the analyst states as a public bound, or a DP count
bought with a share of ε. No exact statistic of an upload is shown in Release mode; Evaluate may show it,
labelled as evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.core.errors import EngineError
from engine.run.execution import COUNT_SHARE, FRAME_SHARE, PER_CELL, UNKNOWN_SIDE, auto_side

from . import state, uploads
from .widgets import int_widget

SIDES = [2**d for d in range(4, 11)]
AUTO = "auto"
SHARES = (0.02, 0.05, 0.1, 0.2)


@dataclass
class GridChoice:
    """The RunConfig fields the sidebar chose (``config_fields``) and the link's entries (``url``)."""

    depth: int = 8
    resolution: str = "fixed"
    people: int | None = None
    count_share: float = 0.0
    frame: str = "region"
    frame_share: float = 0.0
    url: dict = field(default_factory=dict)

    def config_fields(self) -> dict:
        return {
            "depth": self.depth,
            "resolution": self.resolution,
            "people": self.people,
            "count_share": self.count_share,
            "frame": self.frame,
            "frame_share": self.frame_share,
        }


def source_is_data(key: str) -> bool:
    """A session's upload: its size is read off the private data, not a catalogue's."""
    return key.startswith(uploads.UPLOAD_PREFIX)


def public_people(key: str, opts: dict, src, sampled: int | None) -> tuple[int | None, str]:
    """A public number of people for the automatic resolution, and where it comes from: the users the analyst
    samples, or a catalogue dataset's published size; (None, "") for the analyst's own file or a dataset not
    on this machine yet."""
    if sampled:
        return sampled, "the number of users you chose to sample"
    if src is None or not getattr(src, "offline", True) or source_is_data(key):
        return None, ""
    try:
        from engine.run import load_dataset

        return load_dataset(key, opts).n_users, "the dataset's published size"
    except EngineError:
        return None, ""


def _res(raw):
    if str(raw).strip().lower() == AUTO:
        return AUTO
    v = int(raw)
    if v not in SIDES:
        raise ValueError("resolution must be auto, 16, 32, 64, 128, 256, 512 or 1024 cells per side")
    return v


def _share(raw) -> float:
    v = float(raw)
    if v not in SHARES:
        raise ValueError("the share of ε must be one of " + ", ".join(f"{s:g}" for s in SHARES))
    return v


def _pct(v: float) -> str:
    return f"{100 * v:g} %"


def grid_controls(c, key: str, opts: dict, src, sampled: int | None, mode: str) -> GridChoice:
    """The resolution and frame widgets in container ``c`` for dataset ``key`` (``src`` its source, ``sampled``
    the users drawn, 0/None for all) in ``mode``."""
    own = source_is_data(key)
    people, source = public_people(key, opts, src, sampled)
    state.seed("cfg.res", AUTO, "res", coerce=_res)
    side = c.select_slider(
        "Resolution (cells per side)",
        [AUTO, *SIDES],
        **state.bind("cfg.res"),
        format_func=lambda v: (
            (f"auto: {auto_side(people)} × {auto_side(people)}" if people else "auto") if v == AUTO else f"{v} × {v}"
        ),
        help=f"The public grid: 2^L × 2^L cells over the square region. Auto aims at about {PER_CELL:g} people "
        "per cell on average: from a public number of people, or for your own file from a number you state or a "
        "DP count bought with a share of ε.",
    )
    out = GridChoice()
    if side != AUTO:
        out.depth, out.url["res"] = int(math.log2(side)), side
    elif people:
        auto = auto_side(people)
        out.resolution, out.people = "auto", int(people)
        c.caption(f"Resolution {auto} × {auto} chosen automatically from {people:,} people ({source}).")
    elif own:
        _own_file(c, key, mode, out)
    else:
        out.depth = int(math.log2(UNKNOWN_SIDE))
        c.caption("Resolution 256 × 256 (automatic; the number of people is not known before a download).")
    _frame(c, own, out)
    return out


def _own_file(c, key: str, mode: str, out: GridChoice) -> None:
    """Automatic resolution of the analyst's own file: a public number they state, or a DP count."""
    stated = int_widget(
        "People: a public number you state (0: a DP count)",
        "cfg.people",
        "people",
        0,
        container=c,
        step=100,
        help="A number of people you may publish (a bound you know from outside the file): the grid follows from "
        "it and the release declares it. 0: the grid follows from a DP count bought with a share of ε.",
    )
    out.resolution = "auto"
    if stated:
        auto = auto_side(stated)
        out.people, out.url["people"] = stated, stated
        c.caption(f"Resolution {auto} × {auto} chosen automatically from {stated:,} people, a number you state.")
        return
    state.seed("cfg.count_share", COUNT_SHARE, "count_share", coerce=_share)
    out.count_share = float(
        c.select_slider(
            "Share of ε for the count",
            list(SHARES),
            **state.bind("cfg.count_share"),
            format_func=_pct,
            help="The count is a DP output (discrete Laplace), booked as its own step of the ledger; the mechanism "
            "gets the rest of ε.",
        )
    )
    if out.count_share != COUNT_SHARE:
        out.url["count_share"] = out.count_share
    c.caption(
        f"Resolution: automatic, from a DP count of the people ({_pct(out.count_share)} of ε, a step of the "
        "ledger); the grid is set when the run starts."
    )
    if mode == "evaluate":
        up = uploads.get(key)
        if up is not None:
            n = up.dataset.n_users
            c.caption(
                f"Evaluation only: your file holds {n:,} people ({auto_side(n)} × {auto_side(n)} without "
                "noise). A release never shows this number."
            )


def _frame(c, own: bool, out: GridChoice) -> None:
    region = "the box of your locations, rounded outward" if own else "the dataset's region"
    labels = {
        "region": region.capitalize(),
        "dp": f"Fitted: DP quantiles of the locations ({_pct(FRAME_SHARE)} of ε)",
    }
    state.seed("cfg.frame", "region", "frame", coerce=state.one_of({k: k for k in labels}))
    out.frame = c.selectbox(
        "Frame",
        list(labels),
        **state.bind("cfg.frame"),
        format_func=labels.get,
        help="The square the grid covers. Fitted: the square around the 1 % and 99 % quantiles of the locations on "
        "each axis, drawn with DP within the region (a step of the ledger); locations outside it are left out.",
    )
    if out.frame == "dp":
        out.frame_share, out.url["frame"] = FRAME_SHARE, "dp"
