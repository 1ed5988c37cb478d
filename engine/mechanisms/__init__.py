"""Mechanism families, one module each, all behind :class:`base.Mechanism`.

Importing a family module registers its mechanisms; :func:`load_all` imports every
module listed in ``FAMILY_MODULES`` that exists, so a family that lands later is
picked up by adding its name here.
"""

from __future__ import annotations

import importlib

from .base import (  # noqa: F401
    Communication,
    Mechanism,
    Release,
    RunContext,
    ServerView,
    aggregate_view,
    get,
    register,
    registry,
)

FAMILY_MODULES = (
    "central",
    "federated_hh",
    "sparse_emd",
    "bit_pushing",
    "rff_kde",
    "snh",
)

_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in FAMILY_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            # only a family module that does not exist yet is tolerated
            if exc.name != f"{__name__}.{name}":
                raise
