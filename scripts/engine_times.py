"""Engine seconds of every heatmap mechanism at its defaults, in the tree at ROOT (a before/after of two commits).

    python scripts/engine_times.py ROOT OUT.json [MECHANISM ...]

ROOT is a checkout of this project (e.g. a `git worktree` of an older commit), so two trees are compared
with the same script. Each mechanism: one warm-up run (its first in the process: imports, compilation,
the dataset), then the median of 3 seeded runs (1 when the first took over SLOW_S: SNH) of ``engine.run.execution.run`` with the default
``RunConfig`` (polycentric city, 100,000 locations), its own timings (mechanism, metrics, total: wall) and the
process's CPU seconds (``first_cpu_s``, ``cpu_s``).
"""

import json
import os
import statistics
import sys
import time

root, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
os.chdir(root)
os.environ.setdefault("HEATMAP_CACHE_DIR", os.path.join(os.path.dirname(os.path.abspath(out)), "engine_times_cache"))
from engine.mechanisms import registry  # noqa: E402
from engine.run import RunConfig, run  # noqa: E402

reg = registry()
mechs = sys.argv[3:] or [k for k in sorted(reg) if "value" not in getattr(reg[k], "needs", ())]
res = {}
SLOW_S = 10.0  # a mechanism whose first run took longer is timed once more, not 3 times (SNH trains networks)
for m in mechs:
    try:
        t, c = time.perf_counter(), time.process_time()
        run(RunConfig(mechanism=m, seed=99), use_cache=False)
        first, first_cpu = time.perf_counter() - t, time.process_time() - c
        reps = 1 if first > SLOW_S else 3
        rows, cpu = [], []
        for s in range(reps):
            c = time.process_time()
            rows.append(run(RunConfig(mechanism=m, seed=100 + s), use_cache=False).timings)
            cpu.append(time.process_time() - c)
        res[m] = {"first_s": first, "first_cpu_s": first_cpu, "reps": reps, "load": os.getloadavg()[0]}
        for k in ("mechanism_s", "metrics_s", "total_s"):
            res[m][k] = statistics.median(r[k] for r in rows)
        res[m]["cpu_s"] = statistics.median(cpu)  # the load does not inflate it
    except Exception as e:  # an older tree may lack a mechanism or a default
        res[m] = {"error": repr(e)[:200]}
    print(m, res[m], flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
