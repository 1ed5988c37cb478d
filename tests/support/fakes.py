"""Stand-ins: fake quick suites for the server's reproductions, and a registered dataset whose coordinates fail
the test when read."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

FAKE = r"""
import json, os, subprocess, sys, time
mode, gate = sys.argv[1], sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # what a suite starts
with open(gate + ".pids", "a") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
t = time.time()
while not os.path.exists(gate) and time.time() - t < 120:
    print(f"step {time.time() - t:.1f}", file=sys.stderr, flush=True)
    time.sleep(0.2)
if mode == "fail":
    print("figure 2: ValueError: the suite broke", file=sys.stderr, flush=True)
    sys.exit(3)
print(json.dumps({"fig": {"value": 1.5}}))
"""


class Fakes:
    """Fake quick suites: suite ``NAME-fail`` fails, any other finishes once its gate file exists."""

    def __init__(self, tmp: Path):
        self.tmp = tmp

    def __call__(self, suite: str) -> list[str]:
        return [sys.executable, "-c", FAKE, "fail" if suite.endswith("-fail") else "ok", str(self.tmp / suite)]

    def open(self, suite: str) -> None:
        (self.tmp / suite).touch()

    def pids(self, suite: str) -> list[int]:
        path = self.tmp / f"{suite}.pids"
        return [int(p) for p in path.read_text().split()] if path.exists() else []


class Tripwire(np.ndarray):
    """Coordinates that fail the test when any value of them is read (shape and dtype stay readable)."""

    def __getitem__(self, key):
        raise AssertionError("the planner read a private location")

    def __array__(self, *args, **kwargs):
        raise AssertionError("the planner read a private location")

    def __array_ufunc__(self, *args, **kwargs):
        raise AssertionError("the planner read a private location")

    def __array_function__(self, *args, **kwargs):
        raise AssertionError("the planner read a private location")


def sentinel_source(key: str, xy: np.ndarray):
    """A registered dataset whose points are a tripwire: the public frame of the Polycentric city."""
    from dataclasses import replace

    from engine.data.registry import Source, add
    from engine.data.synthetic import generate

    city = generate("polycentric", n=10, seed=0)
    meta = replace(city.meta, name="sentinel", source=key, synthetic=False)

    def load():
        from engine.data.dataset import Dataset

        ds = Dataset(xy=xy.copy(), lonlat=xy.copy(), crs=city.crs, meta=meta)
        object.__setattr__(ds, "xy", ds.xy.view(Tripwire))
        object.__setattr__(ds, "lonlat", ds.lonlat.view(Tripwire))
        return ds

    add(Source(key, "sentinel", "builtin", "test data", load))
