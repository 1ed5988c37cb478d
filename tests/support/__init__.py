"""Helpers the tests share, by role; no test module imports another.

- :mod:`.app`: the dashboard in AppTest (open a page, click Run and wait for its jobs, read its texts and maps);
- :mod:`.mechanisms`: tiny test mechanisms for the pages generic over releases (the ``test_mechanisms`` fixture);
- :mod:`.budget`: the ε a dataset's runs booked in the test's own ledger;
- :mod:`.browser`: the dashboard in Chromium (a real server, console and network watch, drawn pixels);
- :mod:`.files`: input files as bytes (CSV, GeoPackage, GeoParquet, Shapefile, GeoJSON);
- :mod:`.datasets`: in-memory datasets on a square of known side;
- :mod:`.noise`: noise sources to run a mechanism with (none at all; plain numpy Laplace draws);
- :mod:`.fakes`: stand-ins (quick suites that wait for a gate file, a dataset whose points must not be read);
- :mod:`.releases`: comparing two releases part by part;
- :mod:`.defaults`: the cities, seeded runs and paired t check of the tests of the mechanisms' defaults;
- :mod:`.release_scan`: what identifies a private input, searched for in every byte of a release;
- :mod:`.waiting`: waiting on background work, with a ceiling that detects a hang (not a speed claim).

The fixtures stay in ``conftest.py``. The tests import these as ``tests.support.<module>`` (pytest puts the
repository on the path: ``pythonpath`` in pyproject.toml).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
