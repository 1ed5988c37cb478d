"""One registry of dataset sources, read by the CLI and the dashboard."""

from __future__ import annotations

import threading
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
_PROVIDERS: list[Callable[[], None]] = []
_PROVIDERS_LOCK = threading.RLock()


def add(source: Source) -> Source:
    """The registration hook: make ``source`` known (a later source with the same key replaces it).

    The modules of :mod:`engine.data` add theirs when the package loads them (:func:`add_provider`);
    a mechanism family that defines datasets of its paper adds them when its package is imported
    (Zong et al.'s mixtures: :mod:`engine.mechanisms.rff_kde`), so the registry never imports a
    family. Callers above the families (:mod:`engine.run`, the CLI, the dashboard) call
    :func:`engine.mechanisms.load_all` before they list or load datasets."""
    if source.kind not in KINDS:
        raise ValueError(source.kind)
    _SOURCES[source.key] = source
    return source


def add_provider(provider: Callable[[], None]) -> None:
    """Register ``provider()``, called once before the first listing to :func:`add` sources (so a
    package's source modules, and their imports, load only when datasets are needed)."""
    _PROVIDERS.append(provider)


def _ensure_loaded() -> None:
    if not _PROVIDERS:
        return
    with _PROVIDERS_LOCK:  # another thread listing meanwhile waits for the whole registry
        while _PROVIDERS:
            provider = _PROVIDERS[0]
            provider()
            if _PROVIDERS and _PROVIDERS[0] is provider:  # (a provider that listed sources itself popped it)
                _PROVIDERS.pop(0)


def sources() -> dict[str, Source]:
    """Every source; an online source's ``offline`` is re-checked now (``extra["cached"]()``)."""
    _ensure_loaded()
    out = {}
    for key, src in _SOURCES.items():
        check = src.extra.get("cached")
        out[key] = replace(src, offline=bool(check())) if callable(check) else src
    return out


def source(key: str) -> Source | None:
    """One source (its ``offline`` re-checked), or None: without checking every other source's cache."""
    _ensure_loaded()
    src = _SOURCES.get(key)
    check = None if src is None else src.extra.get("cached")
    return replace(src, offline=bool(check())) if callable(check) else src


def get_source(key: str) -> Source:
    src = source(key)
    if src is None:
        raise DataError(f"unknown dataset {key!r}; known: {', '.join(sorted(sources()))}")
    return src


def load(key: str, **options) -> Dataset:
    return get_source(key).load(**options)
