"""One registry of dataset sources, read by the CLI and the dashboard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..core.errors import DataError
from ..core.params import Param, Schema
from .dataset import Dataset

KINDS = ("synthetic", "builtin", "online", "file")


@dataclass(frozen=True)
class Source:
    key: str
    label: str
    kind: str  # synthetic | builtin | online | file
    description: str
    loader: Callable[..., Dataset]
    params: tuple[Param, ...] = ()
    citation: str = ""
    license: str = ""
    offline: bool = True  # usable without network right now (online sources: once cached)
    extra: dict = field(default_factory=dict)

    def schema(self) -> Schema:
        return Schema(self.params)

    def load(self, **options) -> Dataset:
        return self.loader(**self.schema().resolve(options))


_SOURCES: dict[str, Source] = {}


def add(source: Source) -> Source:
    if source.kind not in KINDS:
        raise ValueError(source.kind)
    _SOURCES[source.key] = source
    return source


def _ensure_loaded() -> None:
    # importing the modules registers their sources
    from . import synthetic  # noqa: F401

    for mod in ("builtin", "online", "files", "parquet_source"):
        try:
            __import__(f"{__package__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{mod}":
                raise
    # the Gaussian mixtures (a) and (b) of Zong et al. live with their KDE code
    from ..kde import register_mixture_sources

    register_mixture_sources()


def sources() -> dict[str, Source]:
    """Every source; an online source's ``offline`` is re-checked now (``extra["cached"]()``)."""
    _ensure_loaded()
    out = {}
    for key, src in _SOURCES.items():
        check = src.extra.get("cached")
        out[key] = replace(src, offline=bool(check())) if callable(check) else src
    return out


def get_source(key: str) -> Source:
    src = sources().get(key)
    if src is None:
        raise DataError(f"unknown dataset {key!r}; known: {', '.join(sorted(sources()))}")
    return src


def load(key: str, **options) -> Dataset:
    return get_source(key).load(**options)
