"""Does SNH add anything beyond its noisy grid?

One SNH network (model ``j`` of k = 8) and IDENTITY@ParamSelect on the *same* noisy grid
(same seed, same ParamSelect rho), scored on data-point-centred squares whose side falls
in model j's share of [l, u] (so every test query is answered by that network, Section
4.3), the paper's relative error (psi = 0.1% n). Rows:

* IDENTITY@ParamSelect: the noisy grid, uniformity assumption (GridAnswerer, clipped at 0);
* SNH's learning curve, fast architecture and the paper's (depth 20, width 80);
* the zero-loss fit of the targets: the augmented label function Y_A^{r*}(c) itself,
  evaluated at every query corner c (what a network that fits the targets exactly and
  interpolates them perfectly answers), scaled by (r / r*)^2;
* the exact grid (no noise; the floor of the uniformity targets) and the noisy grid
  Gaussian-smoothed with the best sigma chosen on the test queries (an optimistic bound
  on what smoothing the targets can gain).

    PYTHONPATH=. python scripts/snh_vs_grid.py --city polycentric --epochs 1000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.ndimage import gaussian_filter

from engine.bench.snh import _dataset, query_sets, rel_error
from engine.core.grid import box_sums, integral_image
from engine.mechanisms import RunContext, get
from engine.mechanisms.snh.answers import GridAnswerer
from engine.mechanisms.snh.collection import collect_step, query_bounds
from engine.mechanisms.snh.training import fit_snh


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--city", default="polycentric")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--eps", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=int, default=3, help="which of the k = 8 networks")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=1000, help="longest learning curve")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--skip-paper", action="store_true")
    ap.add_argument("--no-train", action="store_true", help="grid rows only (seconds, no network)")
    a = ap.parse_args()

    ds, dom = _dataset(a.city, a.n, a.seed)
    schema = get("snh").schema()
    base = {"rho_m": 0.0}
    lo, hi = query_bounds(schema.resolve(base), dom)
    k = 8
    mids = lo + (hi - lo) / k * (np.arange(k) + 0.5)
    rstar = float(mids[a.model])
    band = ((rstar - (hi - lo) / (2 * k)) / dom.side, (rstar + (hi - lo) / (2 * k)) / dom.side)
    rects, true = query_sets(ds, dom, np.random.default_rng([a.seed, 99]), *band, count=a.queries)["data"]

    def ctx():
        return RunContext(rng=np.random.default_rng([a.seed, 1]))

    def err(ans):
        return rel_error(ans, true, len(ds))

    rows = []

    def run(label, params, curve=False):
        pts = []

        def cb(e, model):
            pts.append((e, err(model(rects))))

        t = time.perf_counter()
        fit = fit_snh(ds, dom, a.eps, schema.resolve({**base, **params}), ctx(), [a.model], cb, a.every if curve else 0)
        d = fit["diagnostics"]
        final = err(fit["model"](rects))
        rows.append((label, final, d["epochs_run"][0], d["best_training_loss"][0], time.perf_counter() - t, pts))
        print(rows[-1], flush=True)
        return fit

    got = collect_step(ds, dom, a.eps, schema.resolve(base), ctx(), "noisy grid")
    noisy, grid = got["noisy"], got["grid"]
    rho = grid.rho
    if not a.no_train:
        fit = run("SNH fast preset (depth 4, width 64, <= 1,500 steps)", {"preset": "fast"})
        assert np.array_equal(fit["noisy"], noisy)  # the same noisy grid as IDENTITY's
        fast_long = dict(depth=4, width=64, sin_scale=2.5, lr=3e-3, lr_decay=1.0, batch_size=1024, max_steps=0)
        run(
            f"fast architecture, constant lr, {a.epochs} epochs",
            {"preset": "custom", **fast_long, "epochs": a.epochs, "patience": a.epochs},
            curve=True,
        )
        if not a.skip_paper:
            paper = dict(depth=20, width=80, sin_scale=1.0, lr=1e-3, lr_decay=1.0, batch_size=8192, max_steps=0)
            run(
                f"paper network (depth 20, width 80), {a.epochs} epochs",
                {"preset": "custom", **paper, "epochs": a.epochs, "patience": a.epochs},
                curve=True,
            )

    ident = err(GridAnswerer(noisy, grid)(rects))
    # zero-loss fit: Y_A^{r*} at the query's own south-west corner (anchor = corner), scaled
    s = integral_image(noisy)
    f = (rects[:, :2] - np.array([grid.x0, grid.y0])) / rho
    side = rects[:, 2] - rects[:, 0]
    rr = rstar / rho
    interp = np.maximum(box_sums(s, f[:, 0], f[:, 1], f[:, 0] + rr, f[:, 1] + rr) * (side / rstar) ** 2, 0)
    exact = err(GridAnswerer(grid.counts(ds.xy), grid)(rects))
    smooth = {
        sg: err(GridAnswerer(gaussian_filter(noisy, sg, mode="constant"), grid)(rects)) for sg in (0.5, 1, 1.5, 2)
    }
    best_sg = min(smooth, key=smooth.get)

    print()
    print(
        f"{a.city}, n {len(ds):,}, eps {a.eps}, rho {rho:.0f} m ({grid.m}^2 cells), model {a.model} of 8 "
        f"(r* {rstar:.0f} m; {a.queries} data-centred squares, sides {band[0] * dom.side:.0f}-{band[1] * dom.side:.0f} m)"
    )
    print("| answers | relative error | / IDENTITY@ParamSelect |")
    print("| --- | --- | --- |")
    print(f"| IDENTITY@ParamSelect (same noisy grid) | {ident:.4f} | 1.00 |")
    for label, final, ep, _loss, sec, pts in rows:
        curve = ", ".join(f"{e}: {v:.4f}" for e, v in pts if e in (50, 200, 500, 1000) or e == pts[-1][0])
        extra = f" (by epoch: {curve})" if curve else ""
        print(f"| {label}, {ep} epochs, {sec:.0f} s{extra} | {final:.4f} | {final / ident:.2f} |")
    print(
        f"| zero-loss fit of the targets (Y_A^r* at the query corner, x (r/r*)^2) | {err(interp):.4f} | {err(interp) / ident:.2f} |"
    )
    print(
        f"| noisy grid Gaussian-smoothed, best sigma {best_sg} cells (oracle) | {smooth[best_sg]:.4f} | {smooth[best_sg] / ident:.2f} |"
    )
    print(f"| exact grid, no noise (uniformity floor) | {exact:.4f} | {exact / ident:.2f} |")


if __name__ == "__main__":
    main()
