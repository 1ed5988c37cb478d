"""The calibration of ``LR_CRIT`` in engine/mechanisms/central/ebfill.py: how large twice the log-likelihood ratio of
a fitted prior over one common value gets on maps with no structure.

Maps of 256 x 256 cells with the same true count in every cell (in units of the Laplace scale b = 1), noisy counts
``c + Laplace(1)``, the top-t default's threshold (:func:`topt_threshold` at eps 1) deciding the cells kept; on the
cells not kept, as :func:`fill_weights` fits them: the block model on the sums of 16 x 16 blocks (256 blocks, each
sum's noise variance 2 x its cells), and the cell model on all the cells not kept (about 65,536) and on one eighth
of them (8,192, one of ``CLASSES`` density classes). Prints, per level and true count, the 99 % and 99.9 % quantiles
of the statistic over the maps and the share of maps at or above ``LR_CRIT`` (a fitted prior used on noise alone).

Run: PYTHONPATH=. nice python scripts/topt_fill_calibration.py [MAPS] [COUNTS, comma-separated]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from engine.mechanisms.central.ebfill import BLOCKS, CLASSES, LR_CRIT, block_posterior, cell_posterior
from engine.mechanisms.central.identity import topt_threshold

SIDE = 256


def statistics_of_one_map(c: float, rng: np.random.Generator) -> dict[str, float]:
    raw = c + rng.laplace(0.0, 1.0, (SIDE, SIDE))
    top = topt_threshold(raw.size, 1.0)
    free = raw <= top
    side = SIDE // BLOCKS
    blocks = lambda a: a.reshape(BLOCKS, side, BLOCKS, side).sum(axis=(1, 3)).ravel()  # noqa: E731
    k_free = blocks(free.astype(np.float64))
    _, lr_blocks = block_posterior(blocks(np.where(free, raw, 0.0)), 2.0 * np.maximum(k_free, 1))
    y = raw[free]
    _, lr_cells = cell_posterior(y, 1.0, top)
    _, lr_class = cell_posterior(rng.choice(y, y.size // CLASSES, replace=False), 1.0, top)
    return {"blocks (256)": lr_blocks, "cells (65,536)": lr_cells, f"cells (1/{CLASSES})": lr_class}


def main(maps: int, counts: list[float]) -> None:
    t0 = time.process_time()
    for c in counts:
        rng = np.random.default_rng([2026, int(round(c * 1000))])
        runs = [statistics_of_one_map(c, rng) for _ in range(maps)]
        for level in runs[0]:
            v = np.array([r[level] for r in runs])
            q99, q999 = np.quantile(v, [0.99, 0.999])
            share = float(np.mean(v >= LR_CRIT))
            print(
                f"true count {c:g} b, {level:15s}: 99 % quantile {q99:.2f}, 99.9 % {q999:.2f}, "
                f"share >= {LR_CRIT:g}: {share:.4f} ({maps} maps)",
                flush=True,
            )
    print(f"CPU {time.process_time() - t0:.0f} s")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    cs = [float(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0.0, 0.1, 0.5, 1.0, 3.0]
    main(n, cs)
