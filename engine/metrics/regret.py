"""Average regret, the way DPComp ranks algorithms (Hay, Machanavajjhala, Miklau, Chen, Zhang, "Principled
evaluation of differentially private algorithms using DPBench", SIGMOD 2016, and its DPComp site): in each
setting (a dataset, a scale, an epsilon, ...) an algorithm's regret is its error over the best error any
algorithm reached in that setting, so 1 is the best; the average over the settings ranks the algorithms
without letting the settings with the largest errors dominate, as a mean of raw errors would."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping


def regrets(errors: Mapping[Hashable, Mapping[str, float]]) -> dict[Hashable, dict[str, float]]:
    """Per setting, each method's error over the least error of that setting (NaN and infinite
    errors are left out; a setting whose best error is 0 gives the methods at 0 regret 1 and the
    others infinity)."""
    out = {}
    for setting, by in errors.items():
        vals = {m: float(v) for m, v in by.items() if v is not None and math.isfinite(float(v))}
        if not vals:
            continue
        best = min(vals.values())
        if best < 0:
            raise ValueError(f"regret needs non-negative errors (setting {setting!r} has {best})")
        out[setting] = {m: (v / best if best > 0 else (1.0 if v == 0 else math.inf)) for m, v in vals.items()}
    return out


def average_regret(errors: Mapping[Hashable, Mapping[str, float]], methods=None) -> dict[str, float]:
    """Each method's regret averaged over the settings, ``{method: average}``, sorted best first.

    ``errors[setting][method]`` is the method's error (a mean over trials) in that setting. Only the
    settings where every method of ``methods`` (default: those present in every setting) has an error
    count, so all averages are over the same settings."""
    if methods is None:
        sets = [set(by) for by in errors.values()]
        methods = sorted(set.intersection(*sets)) if sets else []
    methods = list(methods)
    complete = {
        s: by
        for s, by in errors.items()
        if all(m in by and by[m] is not None and math.isfinite(by[m]) for m in methods)
    }
    if not complete or not methods:
        return {}
    per = regrets({s: {m: by[m] for m in by} for s, by in complete.items()})
    avg = {m: sum(per[s][m] for s in per) / len(per) for m in methods}
    return dict(sorted(avg.items(), key=lambda kv: kv[1]))
