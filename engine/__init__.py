"""Engine of the private location heatmap workbench.

Pure Python (numpy/scipy/geopandas); it never imports Streamlit. The dashboard in
``app.py``/``pages/`` and the CLI in ``engine/__main__.py`` are its two clients.
"""

__version__ = "0.1.0"

from .core import astguard as _astguard

_astguard.install()  # background runs and source parsing share ast's constructor: one thread at a time
