"""Margins of error of a private map, per cell (95 %: 1.96 standard errors).

Closed form where the release carries it (``extras["stderr"]``: the noise's known scale per cell);
otherwise estimated from repeated releases with the next seeds (Evaluate only: each is a release of
the same people, counted in the ledger), as dp_mobility_report gives a margin for every figure.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .config import RunConfig

SE_RUNS = 10  # repeated releases behind an empirical margin of error
Z95 = 1.96


def closed_form(result) -> tuple[np.ndarray, str] | None:
    """The release's own standard error per cell and how it was derived, or None."""
    se = (result.release.extras or {}).get("stderr")
    if se is None:
        return None
    basis = (result.release.diagnostics or {}).get("stderr_basis")
    return np.asarray(se, dtype=np.float64), "from the noise's known scale (closed form" + (
        f": {basis})" if basis else ")"
    )


def repeat_configs(cfg: RunConfig, runs: int = SE_RUNS) -> list[RunConfig]:
    """The repeated releases behind an empirical margin: ``cfg`` with the next ``runs`` seeds."""
    return [replace(cfg, seed=cfg.seed + 1 + i) for i in range(runs)]


def empirical(cfg: RunConfig, results: list) -> tuple[np.ndarray, str] | None:
    """The standard error per cell over the repeated releases that succeeded (at least 2), and how."""
    grids = [np.asarray(r.release.density, dtype=np.float64) for r in results]
    if len(grids) < 2:
        return None
    se = np.std(np.stack(grids), axis=0, ddof=1)
    return se, f"estimated from {len(grids)} releases with seeds {cfg.seed + 1}–{cfg.seed + len(grids)}"


def margin(se: np.ndarray) -> np.ndarray:
    """The 95 % margin of error per cell."""
    return Z95 * np.asarray(se, dtype=np.float64)


def cells_below(moe: np.ndarray, floor: float) -> int:
    """Cells whose margin is under ``floor`` (a colour scale's floor: drawn empty)."""
    return int(np.count_nonzero(np.isfinite(moe) & (moe < floor)))
