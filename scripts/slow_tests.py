"""Writes tests/slow_tests.txt from a test run's durations: the tests whose setup, call and teardown took
``--seconds`` (default 5) or more, which the fast tier (``pytest -m "not slow and not browser"``) leaves out.

Run: python -m pytest -m "not browser" --durations=0 -p no:randomly > durations.txt
     python scripts/slow_tests.py durations.txt [--seconds 5]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

LINE = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)")
OUT = Path(__file__).resolve().parents[1] / "tests" / "slow_tests.txt"


def slow(lines, seconds: float) -> list[str]:
    total = Counter()
    for line in lines:
        m = LINE.match(line)
        if m:
            total[m.group(2)] += float(m.group(1))
    return sorted(k for k, v in total.items() if v >= seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("durations")
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    ids = slow(Path(a.durations).read_text(encoding="utf-8").splitlines(), a.seconds)
    head = f"# tests taking {a.seconds:g} s or more (setup + call + teardown), written by scripts/slow_tests.py\n"
    OUT.write_text(head + "".join(i + "\n" for i in ids), encoding="utf-8")
    print(f"{len(ids)} slow tests written to {OUT}")


if __name__ == "__main__":
    main()
