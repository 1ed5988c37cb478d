"""Datasets: the model, the source registry, loaders.

``sources()`` lists every source (synthetic presets, libpysal's bundled real
datasets, online datasets of the papers, user files); ``load(key, **options)``
returns a :class:`Dataset`. The CLI and the dashboard read only this registry.
"""

from .dataset import Dataset, DatasetMeta, make_dataset  # noqa: F401
from .registry import Source, load, sources  # noqa: F401
