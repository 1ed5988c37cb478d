"""Regions a release is reported over: the grid's own cells, H3 hexagons at a chosen resolution, or the
analyst's polygons (:mod:`engine.data.files.polygons`). Public geography: nothing here reads locations,
except :meth:`Regions.assign`, which the evaluation (true regional counts) and the direct mechanism
Laplace over regions use.

A region's share of the grid is its **area-weight matrix** ``A`` (sparse, regions x cells, row-major
cells ``iy * n + ix``): ``A[r, c]`` is the fraction of cell c's area inside region r. Any release's
regional estimate is ``A @ density`` (post-processing). A cell that straddles a region's boundary is
split by area, i.e. as if its people were spread evenly over it; the error this makes is at most the
count of the boundary cells, so it shrinks with the cells' size: the boundary cells of a region of
perimeter P are about P / cell of them, holding a share of about 2 P cell / area of its people (under
even density), halving with each step of depth. The margins (:mod:`engine.regions.margins`) count it.
Parts of a region outside the map's square are not estimated (``inside`` gives the share inside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core.errors import DataError, ParamError
from ..core.grid import Domain
from .projection import to_local, to_lonlat

MAX_PAIRS = 20_000_000  # (region, cell) pairs whose overlap is computed
MAX_H3 = 50_000
STRADDLE_NOTE = (
    "a cell crossing a region's boundary is split by area (its people taken as evenly spread over it); the "
    "margins count the error this may make, which shrinks with the cells' size"
)


@dataclass(frozen=True)
class Regions:
    """Regions over one domain. ``geoms``: shapely polygons in the domain's metric CRS (None for
    ``grid``); ``weights``: the area-weight matrix (see the module docstring); ``inside``: each
    region's share of its area inside the domain."""

    kind: str  # "grid", "h3" or "file"
    spec: str
    ids: tuple[str, ...]
    names: tuple[str, ...]
    domain: Domain
    crs: str
    weights: object  # scipy.sparse.csr_matrix (regions x cells)
    geoms: np.ndarray | None = None
    inside: np.ndarray | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    sha256: str = ""  # of a polygon file's bytes

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def public_spec(self) -> str:
        """How a release names these regions (:func:`public_spec`)."""
        return public_spec(self.spec, self.sha256)

    def aggregate(self, density: np.ndarray) -> np.ndarray:
        """Each region's estimate from a grid of counts: ``A @ density``."""
        return np.asarray(self.weights @ np.asarray(density, dtype=np.float64).ravel())

    def metric_geoms(self) -> np.ndarray:
        if self.geoms is not None:
            return self.geoms
        import shapely

        n, s = self.domain.n, self.domain.cell
        iy, ix = np.divmod(np.arange(n * n), n)
        x0, y0 = self.domain.x0 + ix * s, self.domain.y0 + iy * s
        return shapely.box(x0, y0, x0 + s, y0 + s)

    def lonlat_geoms(self) -> np.ndarray:
        """The regions in WGS84 (clipped to the domain), for maps and files."""
        import shapely

        return shapely.transform(self.metric_geoms(), lambda xy: to_lonlat(xy[:, 0], xy[:, 1], self.crs))

    def assign(self, xy: np.ndarray) -> np.ndarray:
        """The region of each location (index, -1 outside every region); a location on a boundary, or in
        regions that overlap, goes to the first region holding it, so it is counted once."""
        xy = np.asarray(xy, dtype=np.float64)
        if self.kind == "grid":
            out = np.full(len(xy), -1, dtype=np.int64)
            ok = self.domain.inside(xy)
            out[ok] = self.domain.flat_index(xy[ok])
            return out
        import shapely

        tree = shapely.STRtree(self.geoms)
        pi, ri = tree.query(shapely.points(xy), predicate="intersects")
        out = np.full(len(xy), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(out, pi, ri)
        out[out == np.iinfo(np.int64).max] = -1
        return out

    def overlapping(self) -> bool:
        """Whether some regions overlap (a cell's shares add up to more than 1)."""
        return bool((np.asarray(self.weights.sum(axis=0)).ravel() > 1.0 + 1e-6).any())


AUTO_HEXAGONS = 300  # h3:auto: the finest resolution with at most about this many hexagons on the map


def parse_spec(spec: str) -> tuple[str, str | int | None, str | None]:
    """``grid`` | ``h3:RES`` | ``h3:auto`` | ``PATH[:ID_COLUMN]`` -> (kind, resolution or path, id column)."""
    text = str(spec).strip()
    if text == "grid":
        return "grid", None, None
    if text == "h3:auto":
        return "h3", "auto", None
    m = re.fullmatch(r"h3:(\d{1,2})", text)
    if m:
        res = int(m.group(1))
        if not 0 <= res <= 15:
            raise ParamError(f"an H3 resolution is 0 to 15 (got {res})")
        return "h3", res, None
    if text.startswith("h3"):
        raise ParamError(f"write H3 regions as h3:RES with RES from 0 to 15 (got {text!r})")
    if not text:
        raise ParamError("regions: give grid, h3:RES or the path of a polygon file")
    if Path(text).is_file() or ":" not in text:
        return "file", text, None
    path, _, col = text.rpartition(":")
    return "file", path, col or None


def public_spec(spec: str, sha256: str = "") -> str:
    """How a release names regions: ``grid`` and ``h3:RES`` as they are; a polygon file, a public input, by its
    base name (and id column) and the SHA-256 of its bytes, which say which file and which version of it. Never
    its path: a server's folders say nothing about the release."""
    kind, arg, id_col = parse_spec(spec)
    if kind != "file":
        return str(spec).strip()
    name = Path(str(arg)).name + (f":{id_col}" if id_col else "")
    return f"{name} (sha256:{sha256})" if sha256 else name


def build(
    spec: str, domain: Domain, crs: str, name_column: str | None = None, polygons=None, file_crs: str | None = None
) -> Regions:
    """The regions of ``spec`` (:func:`parse_spec`) over ``domain`` (in the local CRS ``crs``).
    ``polygons``: an already read :class:`engine.data.files.polygons.PolygonFile` (an upload); ``file_crs``: the
    CRS of a polygon file that does not declare one (a Shapefile without its .prj).
    Built once per process for each spec, map and file version (a mechanism builds them on every run)."""
    if polygons is not None:
        return polygon_regions(polygons, domain, crs, spec)
    kind, arg, _ = parse_spec(spec)
    stamp = None
    if kind == "file":
        try:
            st = Path(arg).stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            pass  # the reader says the file is missing
    return _build(str(spec).strip(), domain, crs, name_column, stamp, file_crs or None)


@lru_cache(maxsize=16)
def _build(spec: str, domain: Domain, crs: str, name_column: str | None, stamp, file_crs: str | None) -> Regions:
    kind, arg, id_col = parse_spec(spec)
    if kind == "grid":
        return grid_regions(domain, crs)
    if kind == "h3":
        return h3_regions(domain, crs, auto_resolution(domain) if arg == "auto" else int(arg))
    from .files.polygons import load_polygons

    pf = load_polygons(arg, id_column=id_col, name_column=name_column, crs=file_crs)
    return polygon_regions(pf, domain, crs, spec)


@lru_cache(maxsize=8)  # a page redraws a result's margins on every rerun: a million cell names at 1024 a side
def grid_regions(domain: Domain, crs: str) -> Regions:
    from scipy import sparse

    n = domain.n
    iy, ix = np.divmod(np.arange(n * n), n)
    ids = tuple(f"{a}-{b}" for a, b in zip(ix.tolist(), iy.tolist()))
    names = tuple(f"cell ({a}, {b})" for a, b in zip(ix.tolist(), iy.tolist()))
    return Regions("grid", "grid", ids, names, domain, crs, sparse.identity(n * n, format="csr"), None, np.ones(n * n))


@lru_cache(maxsize=8)
def block_regions(domain: Domain, crs: str, k: int) -> Regions:
    """Squares of ``k`` x ``k`` cells (``k`` dividing the grid's side): the blocks a map's hover reports."""
    from scipy import sparse

    if k == 1:
        return grid_regions(domain, crs)
    n = domain.n
    if k < 1 or n % k:
        raise ParamError(f"a block of {k} cells does not divide a grid of {n}")
    m = n // k
    iy, ix = np.divmod(np.arange(n * n), n)
    block = (iy // k) * m + ix // k
    A = sparse.csr_matrix((np.ones(n * n), (block, np.arange(n * n))), shape=(m * m, n * n))
    by, bx = np.divmod(np.arange(m * m), m)
    ids = tuple(f"{a}-{b}" for a, b in zip(bx.tolist(), by.tolist()))
    names = tuple(f"block ({a}, {b}) of {k} x {k} cells" for a, b in zip(bx.tolist(), by.tolist()))
    return Regions("blocks", f"blocks:{k}", ids, names, domain, crs, A, None, np.ones(m * m))


def auto_resolution(domain: Domain) -> int:
    """The finest H3 resolution putting at most about :data:`AUTO_HEXAGONS` hexagons on the domain (public)."""
    import h3

    area_km2 = domain.side**2 / 1e6
    fits = [r for r in range(16) if area_km2 / h3.average_hexagon_area(r, unit="km^2") <= AUTO_HEXAGONS]
    return max(fits) if fits else 0


def h3_regions(domain: Domain, crs: str, res: int) -> Regions:
    """The H3 hexagons (resolution ``res``) meeting the domain's square, clipped to it."""
    import h3
    import shapely

    x0, y0, x1, y1 = domain.bounds
    t = np.linspace(0.0, 1.0, 17)[:-1]
    ring = np.concatenate(
        [
            np.column_stack([x0 + (x1 - x0) * t, np.full(t.size, y0)]),
            np.column_stack([np.full(t.size, x1), y0 + (y1 - y0) * t]),
            np.column_stack([x1 - (x1 - x0) * t, np.full(t.size, y1)]),
            np.column_stack([np.full(t.size, x0), y1 - (y1 - y0) * t]),
        ]
    )
    ll = to_lonlat(ring[:, 0], ring[:, 1], crs)
    area_km2 = (x1 - x0) * (y1 - y0) / 1e6
    expected = area_km2 / h3.average_hexagon_area(res, unit="km^2")
    if expected > MAX_H3:
        raise ParamError(
            f"H3 resolution {res} puts about {expected:,.0f} hexagons on this map, over the limit of {MAX_H3:,}: "
            "choose a coarser resolution"
        )
    poly = h3.LatLngPoly([(float(b), float(a)) for a, b in ll])
    cells = sorted(h3.h3shape_to_cells_experimental(poly, res, contain="overlap"))
    if not cells:
        raise ParamError(f"no H3 hexagon of resolution {res} meets the map")
    geoms = []
    for cell in cells:
        b = np.array(h3.cell_to_boundary(cell))  # (lat, lng) pairs
        geoms.append(shapely.Polygon(to_local(b[:, 1], b[:, 0], crs)))
    reg = _clipped(np.asarray(geoms, dtype=object), tuple(cells), tuple(cells), domain, crs, "h3", f"h3:{res}", ())
    return reg


def polygon_regions(pf, domain: Domain, crs: str, spec: str) -> Regions:
    import shapely

    metric = shapely.transform(pf.geoms, lambda xy: to_local(xy[:, 0], xy[:, 1], crs))
    reg = _clipped(np.asarray(metric, dtype=object), pf.ids, pf.names, domain, crs, "file", spec, pf.notes)
    return replace(reg, sha256=pf.sha256)


def _clipped(geoms, ids, names, domain, crs, kind, spec, notes) -> Regions:
    """Regions clipped to the domain (regions outside it dropped, with a note) and their weights."""
    import shapely

    box = shapely.box(*domain.bounds)
    area = shapely.area(geoms)
    clipped = shapely.intersection(geoms, box)
    inside = np.divide(shapely.area(clipped), area, out=np.zeros(len(geoms)), where=area > 0)
    keep = inside > 1e-12
    notes = list(notes)
    if not keep.any():
        raise DataError("none of the regions meets the map's square: are they in the same place as the data?")
    if not keep.all():
        notes.append(f"{int((~keep).sum()):,} region(s) outside the map's square were left out.")
    if (inside[keep] < 1 - 1e-9).any():
        notes.append(
            f"{int((inside[keep] < 1 - 1e-9).sum()):,} region(s) reach beyond the map's square: only the part "
            "inside is estimated."
        )
    idx = np.flatnonzero(keep)
    weights = area_weights(clipped[idx], domain)
    return Regions(
        kind,
        spec,
        tuple(ids[i] for i in idx),
        tuple(names[i] for i in idx),
        domain,
        crs,
        weights,
        clipped[idx],
        inside[idx],
        tuple(notes),
    )


def area_weights(geoms: np.ndarray, domain: Domain):
    """The sparse area-weight matrix of polygons in the domain's metric CRS: the share of each cell's area
    inside each polygon (exact polygon-box intersections, cells within the polygon's bounds only)."""
    import shapely
    from scipy import sparse

    n, s = domain.n, domain.cell
    b = shapely.bounds(geoms)
    ix0 = np.clip(np.floor((b[:, 0] - domain.x0) / s), 0, n - 1).astype(np.int64)
    ix1 = np.clip(np.floor((b[:, 2] - domain.x0) / s), 0, n - 1).astype(np.int64)
    iy0 = np.clip(np.floor((b[:, 1] - domain.y0) / s), 0, n - 1).astype(np.int64)
    iy1 = np.clip(np.floor((b[:, 3] - domain.y0) / s), 0, n - 1).astype(np.int64)
    sizes = (ix1 - ix0 + 1) * (iy1 - iy0 + 1)
    if int(sizes.sum()) > MAX_PAIRS:
        raise ParamError(
            f"the regions cover {int(sizes.sum()):,} (region, cell) pairs, over the limit of {MAX_PAIRS:,}: "
            "choose a coarser grid or fewer regions"
        )
    rows, cols, vals = [], [], []
    shapely.prepare(geoms)
    for r in range(len(geoms)):
        gx, gy, share = _shares(geoms[r], domain, ix0[r], ix1[r], iy0[r], iy1[r])
        ok = share > 1e-12
        rows.append(np.full(int(ok.sum()), r))
        cols.append(gy[ok] * n + gx[ok])
        vals.append(np.minimum(share[ok], 1.0))
    return sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(len(geoms), n * n)
    )


def _shares(geom, domain: Domain, ix0: int, ix1: int, iy0: int, iy1: int):
    """The share of each cell of a block of cells inside ``geom``. A cell the boundary does not cross is
    wholly in or out; the boundary crosses a cell only if its corners are not all strictly on one side
    (inside, or outside and off the boundary), or a vertex of the boundary lies in the cell (a straight
    edge cannot enter and leave by one side), so only those cells are intersected exactly."""
    import shapely

    s = domain.cell
    xs = domain.x0 + np.arange(ix0, ix1 + 2) * s
    ys = domain.y0 + np.arange(iy0, iy1 + 2) * s
    X, Y = np.meshgrid(xs, ys)
    inside = shapely.contains_xy(geom, X, Y)  # corners, (rows + 1, cols + 1); on the boundary: neither
    outside = ~shapely.intersects_xy(geom, X, Y)
    k = inside[:-1, :-1].astype(np.int8) + inside[1:, :-1] + inside[:-1, 1:] + inside[1:, 1:]
    o = outside[:-1, :-1].astype(np.int8) + outside[1:, :-1] + outside[:-1, 1:] + outside[1:, 1:]
    share = (k == 4).astype(np.float64)
    cross = (k < 4) & (o < 4)
    v = shapely.get_coordinates(geom)
    # a vertex on the map's far edge belongs to the last cell
    vx = np.minimum(np.floor((v[:, 0] - domain.x0) / s).astype(np.int64), domain.n - 1) - ix0
    vy = np.minimum(np.floor((v[:, 1] - domain.y0) / s).astype(np.int64), domain.n - 1) - iy0
    ok = (vx >= 0) & (vx < k.shape[1]) & (vy >= 0) & (vy < k.shape[0])
    cross[vy[ok], vx[ok]] = True
    cy, cx = np.nonzero(cross)
    if cy.size:
        x, y = xs[cx], ys[cy]
        share[cy, cx] = shapely.area(shapely.intersection(geom, shapely.box(x, y, x + s, y + s))) / (s * s)
    gx, gy = np.meshgrid(np.arange(ix0, ix1 + 1), np.arange(iy0, iy1 + 1))
    return gx.ravel(), gy.ravel(), share.ravel()
