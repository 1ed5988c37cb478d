"""Datasets: the model, the source registry, loaders.

``sources()`` lists every source (synthetic presets, libpysal's bundled real
datasets, online datasets of the papers, user files, and the datasets a mechanism
family registers through :func:`.registry.add`); ``load(key, **options)``
returns a :class:`Dataset`. The CLI and the dashboard read only this registry.
"""

from .dataset import Dataset, DatasetMeta, make_dataset  # noqa: F401
from .registry import Source, add_provider, load, sources  # noqa: F401


def _own_sources() -> None:
    """Import the source modules of this package: each registers its sources with the registry."""
    from . import builtin, files, online, parquet_source, synthetic  # noqa: F401


add_provider(_own_sources)
