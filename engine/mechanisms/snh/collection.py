"""SNH's data collection (Zeighami et al. 2022, Section 4.1): the public auxiliary data, the cell
width ``rho`` (given, or ParamSelect of Section 5.1 on public features), contribution bounding and the
noisy grid ``Q_D``, the one step that reads the private data. Shared by SNH and IDENTITY@ParamSelect."""

from __future__ import annotations

import math

import numpy as np

from ...core.accounting import Ledger
from ...core.errors import ParamError
from ...core.grid import Domain
from ..common import bound_contributions, laplace_counts, points_in_domain

MAX_CELLS_PER_SIDE = 2048


# ====================================================================== geometry
class CellGrid:
    """The data-collection grid ``Q_D``: ``m x m`` cells of width ``rho`` from the domain's
    south-west corner (the last row/column may overhang the domain, where counts are 0)."""

    def __init__(self, domain: Domain, rho: float):
        if not (rho > 0 and math.isfinite(rho)):
            raise ParamError(f"the cell width rho must be a positive number of metres (got {rho})")
        m = math.ceil(domain.side / rho - 1e-9)
        if m > MAX_CELLS_PER_SIDE:
            raise ParamError(
                f"a cell width of {rho:.3g} m gives {m} cells per side (limit {MAX_CELLS_PER_SIDE}); use a wider cell"
            )
        self.domain = domain
        self.x0, self.y0, self.side = domain.x0, domain.y0, domain.side
        self.rho = float(rho)
        self.m = max(1, int(m))

    def counts(self, xy: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """Counts per cell, ``grid[iy, ix]``."""
        m = self.m
        ix = np.clip(((xy[:, 0] - self.x0) / self.rho).astype(np.int64), 0, m - 1)
        iy = np.clip(((xy[:, 1] - self.y0) / self.rho).astype(np.int64), 0, m - 1)
        return np.bincount(iy * m + ix, weights=w, minlength=m * m).astype(np.float64).reshape(m, m)


# ====================================================================== shared steps
def query_bounds(params: dict, domain: Domain) -> tuple[float, float]:
    lo, hi = float(params["query_min_pct"]) / 100.0, float(params["query_max_pct"]) / 100.0
    if not lo < hi:
        raise ParamError(f"query side min ({lo * 100:g}%) must be smaller than query side max ({hi * 100:g}%)")
    return lo * domain.side, hi * domain.side


def synthetic_proxy(data, domain: Domain, n: int, seed: int = 1) -> tuple[np.ndarray, str]:
    """Public proxy of a synthetic city: ``n`` points from a *sibling* city of the same
    preset (same centres, river and coast; its own neighbourhood fields and parks, from
    field seed ``seed + 1000 + city seed``), i.e. another dataset of the same region that
    resembles the private one without being drawn from it."""
    from ...data.synthetic import PRESETS, RASTER, intensity

    meta = data.meta
    preset = meta.extra.get("preset") if meta.synthetic else None
    if preset not in PRESETS:
        raise ParamError(
            "aux = proxy needs a synthetic city; for this dataset choose aux = dataset (another dataset of "
            "the same region) or none"
        )
    city_seed = int(meta.extra.get("seed", 0))
    sib = 1000 + int(seed) + city_seed
    prob = intensity(preset, sib).ravel()
    rng = np.random.default_rng([sib, 99, int(n)])  # public data: its own fixed generator
    cells = rng.choice(prob.size, size=int(n), p=prob)
    side = float(meta.extra.get("side_m", PRESETS[preset].side_km * 1000.0))
    cell = side / RASTER
    x = (cells % RASTER + rng.random(len(cells))) * cell - side / 2
    y = (cells // RASTER + rng.random(len(cells))) * cell - side / 2
    pts = np.column_stack([x, y])
    pts = pts[domain.inside(pts)]
    text = (
        f"public auxiliary data: a synthetic proxy of {n:,} points from a sibling of the '{preset}' city (same "
        "centres, river and coast; different neighbourhood fields and parks), treated as public"
    )
    return pts, text


def aux_points(data, domain: Domain, params: dict) -> tuple[str, np.ndarray | None, str]:
    """Resolve the auxiliary-data choice: ``(mode, public points or None, description)``."""
    mode = params["aux"]
    if mode == "auto":
        mode = "proxy" if data.meta.synthetic and data.meta.extra.get("preset") else "none"
    if mode == "proxy":
        pts, text = synthetic_proxy(data, domain, int(params["aux_n"]))
        return mode, pts, text
    if mode == "dataset":
        key = str(params["aux_dataset"]).strip()
        if not key:
            raise ParamError("aux = dataset needs aux_dataset, the registry key of a public dataset of the region")
        if key == data.meta.source:
            raise ParamError(f"the auxiliary dataset {key!r} is the private dataset itself; choose another source")
        from ...data import load
        from ...data.projection import to_local

        aux = load(key)
        pts = to_local(aux.lonlat[:, 0], aux.lonlat[:, 1], data.crs)
        pts = pts[domain.inside(pts)]
        if len(pts) == 0:
            raise ParamError(f"no point of the auxiliary dataset {key!r} lies inside this region")
        text = f"public auxiliary data: the dataset {key!r} ({len(pts):,} points in the region), treated as public"
        return mode, pts, text
    return "none", None, "no public auxiliary data"


def workload_mode(params: dict, aux) -> str:
    mode = params["workload"]
    if mode == "auto":
        return "aux" if aux is not None else "noisy"
    if mode == "aux" and aux is None:
        raise ParamError("workload = aux needs public auxiliary data (aux = proxy or dataset)")
    return mode


def choose_rho(data, domain: Domain, eps: float, params: dict, ledger: Ledger, aux_pts) -> tuple[float, dict]:
    """The cell width in metres: given, or ParamSelect (Algorithm 3) on public features."""
    rho_m = float(params["rho_m"])
    lo, hi = query_bounds(params, domain)
    if rho_m > 0:
        return rho_m, {"source": "given", "rho_m": rho_m}
    from .paramselect import entropy_512, predict_rho

    # data: the bounded contributions, so n is the number of users (unit = user) or of records
    n = float(len(data)) if data.weight is None else float(np.sum(data.weight))
    # the note declares n without its value: a release prints its ledger's notes, and n is an exact count
    ledger.note_side_information(
        f"ParamSelect: the data size n (the number of {params['unit']}s) is treated as public to choose the cell "
        "width (Algorithm 3 of Zeighami et al.)"
    )
    ent = entropy_512(aux_pts, domain) if aux_pts is not None else None
    frac, info = predict_rho(n, eps, lo / domain.side, hi / domain.side, ent)
    info.update(
        {
            "source": "ParamSelect",
            "rho_m": frac * domain.side,
            "entropy_from": "public auxiliary data" if ent is not None else "none (data-independent regressor)",
        }
    )
    return frac * domain.side, info


def collect(
    bounded, domain: Domain, grid: CellGrid, eps: float, ctx, ledger: Ledger, step: str
) -> tuple[np.ndarray, np.ndarray]:
    """Section 4.1: true counts on the rho grid plus Laplace(1/eps) per cell (parallel composition).
    ``bounded`` comes from :func:`bound_contributions`: each unit adds at most 1 in total (L1 sensitivity 1)."""
    xy, w = points_in_domain(bounded.data, domain)
    counts = grid.counts(xy, w)
    # secure mode: OpenDP's Laplace on the counts
    noisy = laplace_counts(
        counts, eps, ctx.noise, ledger, step, "snh-grid", "Laplace(1/eps) per disjoint cell of width rho", bounded
    )
    return noisy, counts


def collect_step(data, domain: Domain, eps: float, params: dict, ctx, step: str, check=None, aux_given=None) -> dict:
    """The part SNH and IDENTITY@ParamSelect share: public auxiliary data (side information),
    contribution bounding, the cell width (given or ParamSelect), the noisy grid (one ledger
    entry) and their diagnostics. ``check(aux)`` validates parameters against the aux data.
    ``aux_given = (points, description)`` supplies public points directly (scripts and
    benchmarks with their own public data), in place of the ``aux`` parameter."""
    ledger = Ledger()
    if aux_given is None:
        mode, aux, aux_text = aux_points(data, domain, params)
    else:
        aux = np.asarray(aux_given[0], dtype=np.float64)
        mode, aux, aux_text = "given", aux[domain.inside(aux)], str(aux_given[1])
    if check is not None:
        check(aux)
    if aux is not None:
        ledger.note_side_information(aux_text)
    bounded = bound_contributions(data, domain, params["unit"])
    rho, rho_info = choose_rho(bounded.data, domain, eps, params, ledger, aux)
    grid = CellGrid(domain, rho)
    ctx.progress(0.01, f"data collection: {grid.m}x{grid.m} grid of {rho:.1f} m cells")
    noisy, _ = collect(bounded, domain, grid, eps, ctx, ledger, step)
    diag = {
        **bounded.diagnostics(),
        "epsilon": eps,
        "rho_m": rho,
        "rho_frac": rho / domain.side,
        "rho_choice": rho_info,
        "grid_cells_per_side": grid.m,
        "noise_scale": 1.0 / eps,
        "aux": mode,
        "aux_description": aux_text,
    }
    return {"ledger": ledger, "aux": aux, "aux_text": aux_text, "grid": grid, "noisy": noisy, "diagnostics": diag}
