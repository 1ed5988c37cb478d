"""Mechanism families, one package per paper, all behind :class:`base.Mechanism`.

Importing a family package registers its mechanisms; :func:`load_all` imports every
package listed in ``FAMILY_MODULES`` (a new family is added by naming it there). The
registry's lookups (:func:`base.registry`, :func:`base.get`) call it through the hook
:func:`base.add_loader`.
"""

from __future__ import annotations

import importlib

from .base import (  # noqa: F401
    Communication,
    Mechanism,
    Release,
    RunContext,
    ServerView,
    add_loader,
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
    "dawa",
    "hdmm",
    "hdg",
    "privelet",
    "quadtree",
    "ahp",
    "mwem",
    "dpcube",
)

_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in FAMILY_MODULES:
        importlib.import_module(f"{__name__}.{name}")


add_loader(load_all)  # the registry's lookups import the families first


def heatmap_keys() -> list[str]:
    """Registry keys of the mechanisms that map locations (those that need no attribute), sorted."""
    reg = registry()
    return [k for k in sorted(reg) if "value" not in reg[k].needs]
