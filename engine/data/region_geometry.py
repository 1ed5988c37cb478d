"""Regions a release is reported over: the grid's own cells, H3 hexagons at a chosen resolution, or the
analyst's polygons (:mod:`engine.data.files.polygons`). Public geography: nothing here reads locations,
except :meth:`Regions.members` (the evaluation's true regional counts: a location counts in every region
holding it) and :meth:`Regions.assign` (the direct mechanism Laplace over regions: the first region).

A region's share of the grid is its **area-weight matrix** ``A`` (sparse, regions x cells, row-major
cells ``iy * n + ix``): ``A[r, c]`` is the fraction of cell c's area inside region r. Any release's
regional estimate is ``A @ density`` (post-processing). A cell that straddles a region's boundary is
split by area, i.e. as if its people were spread evenly over it; the error this makes is at most the
count of the boundary cells, so it shrinks with the cells' size: the boundary cells of a region of
perimeter P are about P / cell of them, holding a share of about 2 P cell / area of its people (under
even density), halving with each step of depth. The margins (:mod:`engine.regions.margins`) count it.
Parts of a region outside the map's square are not estimated (``inside`` gives the share inside).
The weights are computed exactly without intersecting polygons (:mod:`engine.data.overlay`).

A polygon file's edges are straight in longitude and latitude (RFC 7946; a file in a projected CRS is
densified in it before it is converted, :mod:`engine.data.files.vector`), not in the map's metric CRS: a
region is clipped to a longitude/latitude box around the map (so a polygon covering the globe is clipped,
not projected whole) and its edges are split into as many steps as keep their projection within
:data:`BEND` of a cell of their course before it is projected vertex by vertex
(:func:`~engine.data.files.reproject.reproject`): a box from 10°W to 10°E along 51.1°N projected by its
corners alone runs 50 km north of that parallel at London, across the map. A file's regions are read and weighed in a child
process under the memory and time budgets of :mod:`engine.data.files.isolate`, and kept by the file's
digest and the map, so a page that reruns does not weigh them again.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core.errors import DataError, ParamError
from ..core.grid import Domain
from .overlay import MAX_PAIRS, area_weights  # noqa: F401 (the weights are this module's)
from .projection import to_local, to_lonlat

MAX_H3 = 50_000
KEPT = 16  # regions of uploaded files kept per process, by the file's digest and the map
KEPT_BYTES = 256 << 20  # and at most this much of them (weights and outlines), the least recently used going first
OVERLAP = 1e-6  # cells' area shared by regions before they are said to overlap
BEND = 1e-4  # a projected edge is kept within this share of a cell of its course (straight in lon/lat)
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

    def members(self, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(location, region) index pairs: a location is in every region whose interior holds it (regions
        that overlap each count it); one on a boundary and inside none goes to the first region holding it,
        so regions that share a boundary count it once."""
        xy = np.asarray(xy, dtype=np.float64)
        if self.kind == "grid":
            idx = self.assign(xy)
            return np.flatnonzero(idx >= 0), idx[idx >= 0]
        import shapely

        tree = shapely.STRtree(self.geoms)
        pts = shapely.points(xy)
        pi, ri = tree.query(pts, predicate="within")
        rest = np.setdiff1d(np.arange(len(xy)), pi)
        edge = self.assign(xy[rest])
        on = edge >= 0
        loc, reg = np.concatenate([pi, rest[on]]), np.concatenate([ri, edge[on]])
        order = np.lexsort((reg, loc))
        return loc[order], reg[order]

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


HASHED = re.compile(r"(?P<name>.+?)(?::(?P<col>[^:()]+))? \(sha256:(?P<sha>[0-9a-f]{64})\)")


def parse_spec(spec: str) -> tuple[str, str | int | None, str | None]:
    """``grid`` | ``h3:RES`` | ``h3:auto`` | ``PATH[:ID_COLUMN]`` | ``NAME[:ID_COLUMN] (sha256:HEX)`` (an uploaded
    file, :func:`keep_upload`) -> (kind, resolution or path or name, id column)."""
    text = str(spec).strip()
    hashed = HASHED.fullmatch(text)
    if hashed:
        return "file", hashed["name"], hashed["col"]
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
    if HASHED.fullmatch(str(spec).strip()):
        return str(spec).strip()
    name = Path(str(arg)).name + (f":{id_col}" if id_col else "")
    return f"{name} (sha256:{sha256})" if sha256 else name


def build(
    spec: str, domain: Domain, crs: str, name_column: str | None = None, polygons=None, file_crs: str | None = None
) -> Regions:
    """The regions of ``spec`` (:func:`parse_spec`) over ``domain`` (in the local CRS ``crs``).
    ``polygons``: an already read :class:`engine.data.files.polygons.PolygonFile` (an upload); ``file_crs``: the
    CRS of a polygon file that does not declare one (a Shapefile without its .prj).
    Built once per process for each spec, map and file version (a mechanism builds them on every run, a
    page on every rerun); a file's regions are built in a bounded child process (the module docstring). An
    uploaded file's spec (:func:`keep_upload`) finds its polygons among those this process keeps."""
    if polygons is None and HASHED.fullmatch(str(spec).strip()):
        polygons = uploaded(spec)
    if polygons is not None:
        key = (polygons.digest, domain, crs, str(spec))
        with _KEPT_LOCK:
            if key in _KEPT:
                _KEPT.move_to_end(key)
                return _KEPT[key]
        regions = _isolated(polygon_regions, (polygons, domain, crs, spec), polygons.size, polygons.name)
        with _KEPT_LOCK:
            _KEPT[key] = regions
            while len(_KEPT) > KEPT or (len(_KEPT) > 1 and sum(map(_footprint, _KEPT.values())) > KEPT_BYTES):
                _KEPT.popitem(last=False)
        return regions
    kind, arg, _ = parse_spec(spec)
    stamp = None
    if kind == "file":
        try:
            st = Path(arg).stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            pass  # the reader says the file is missing
    return _build(str(spec).strip(), domain, crs, name_column, stamp, file_crs or None)


_KEPT: OrderedDict = OrderedDict()
_KEPT_LOCK = threading.Lock()
_UPLOADS: OrderedDict = OrderedDict()  # an uploaded polygon file by its spec (name, id column, content hash)


def keep_upload(pf) -> str:
    """Keep an uploaded polygon file (:class:`engine.data.files.polygons.PolygonFile`) in this process and return
    its spec, ``NAME:ID_COLUMN (sha256:HEX)``: the name a release gives it, by which a run's configuration names
    the regions (a public input, named by its content, like every file a release names)."""
    spec = public_spec(f"{pf.name}:{pf.id_column}" if pf.id_column else pf.name, pf.sha256)
    with _KEPT_LOCK:
        _UPLOADS[spec] = pf
        _UPLOADS.move_to_end(spec)
        while len(_UPLOADS) > KEPT:
            _UPLOADS.popitem(last=False)
    return spec


def uploaded(spec: str):
    """The polygon file an upload's spec names (:func:`keep_upload`); a DataError when this process has not got it."""
    with _KEPT_LOCK:
        pf = _UPLOADS.get(str(spec).strip())
    if pf is None:
        raise DataError(f"the regions {str(spec)[:80]!r} are not loaded here: upload the polygon file again")
    return pf


def _footprint(regions: Regions) -> int:
    """Bytes a kept Regions holds, about: its weights and its outlines' coordinates."""
    import shapely

    w = regions.weights
    return int(
        w.data.nbytes + w.indices.nbytes + w.indptr.nbytes + 16 * shapely.get_num_coordinates(regions.geoms).sum()
    )


@lru_cache(maxsize=16)
def _build(spec: str, domain: Domain, crs: str, name_column: str | None, stamp, file_crs: str | None) -> Regions:
    kind, arg, id_col = parse_spec(spec)
    if kind == "grid":
        return grid_regions(domain, crs)
    if kind == "h3":
        return h3_regions(domain, crs, auto_resolution(domain) if arg == "auto" else int(arg))
    size = stamp[1] if stamp else 0
    return _isolated(file_regions, (arg, id_col, name_column, domain, crs, spec, file_crs), size, Path(arg).name)


def file_regions(
    path: str, id_column, name_column, domain: Domain, crs: str, spec: str, file_crs: str | None = None
) -> Regions:
    """The regions of a polygon file over ``domain``: read, then :func:`polygon_regions`."""
    from .files.polygons import load_polygons

    return polygon_regions(
        load_polygons(path, id_column=id_column, name_column=name_column, crs=file_crs), domain, crs, spec
    )


def _isolated(fn, args: tuple, size: int, name: str) -> Regions:
    from ..core.errors import shown_text
    from .files.isolate import run_isolated
    from .files.polygons import ADVICE

    work = "read and weigh against the map's cells"
    return run_isolated(
        fn, args, size, shown_text(name), work=work, advice=f"{ADVICE}, or choose a coarser grid"
    ).result


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
    """A polygon file's regions over ``domain``: clipped to a longitude/latitude box around the map, densified,
    projected and clipped to the map's square (see the module docstring)."""
    import shapely

    from .files.reproject import reproject

    ll, cut = _clip_lonlat(pf.geoms, lonlat_window(domain, crs))
    metric = reproject(ll, lambda xy: to_local(xy[:, 0], xy[:, 1], crs), domain.cell * BEND, pf.name)
    total = shapely.area(metric)
    if cut.any():  # the share of a region beyond the box, from areas on the sphere (equal-area lon/lat)
        total[cut] *= _sphere_area(pf.geoms[cut]) / np.maximum(_sphere_area(ll[cut]), 1e-300)
    reg = _clipped(np.asarray(metric, dtype=object), pf.ids, pf.names, domain, crs, "file", spec, pf.notes, total)
    return replace(reg, sha256=pf.sha256)


def lonlat_window(domain: Domain, crs: str) -> tuple[float, float, float, float]:
    """A longitude/latitude box holding the map's square with a margin: (west, south, east, north), east
    past 180 for a map across the antimeridian; the whole globe around a map holding a pole."""
    x0, y0, x1, y1 = domain.bounds
    t = np.linspace(0.0, 1.0, 65)
    xs = np.concatenate([x0 + (x1 - x0) * t, np.full(t.size, x1), x1 - (x1 - x0) * t, np.full(t.size, x0)])
    ys = np.concatenate([np.full(t.size, y0), y0 + (y1 - y0) * t, np.full(t.size, y1), y1 - (y1 - y0) * t])
    ll = to_lonlat(xs, ys, crs)
    lon0 = float(to_lonlat(np.array([(x0 + x1) / 2]), np.array([(y0 + y1) / 2]), crs)[0, 0])
    lon = lon0 + (ll[:, 0] - lon0 + 180.0) % 360.0 - 180.0  # continuous across the antimeridian
    poles = to_local(np.zeros(2), np.array([90.0, -90.0]), crs)
    holds = (poles[:, 0] >= x0) & (poles[:, 0] <= x1) & (poles[:, 1] >= y0) & (poles[:, 1] <= y1)
    if holds.any() or np.ptp(lon) >= 180:
        south, north = (-90.0 if holds[1] else ll[:, 1].min()), (90.0 if holds[0] else ll[:, 1].max())
        return -180.0, float(south), 180.0, float(north)
    pad = 0.01 * max(np.ptp(lon), np.ptp(ll[:, 1])) + 1e-9
    return (
        float(lon.min() - pad),
        float(max(ll[:, 1].min() - pad, -90.0)),
        float(lon.max() + pad),
        float(min(ll[:, 1].max() + pad, 90.0)),
    )


def _clip_lonlat(geoms: np.ndarray, window) -> tuple[np.ndarray, np.ndarray]:
    """The regions inside ``window`` (a region west of -180 or east of 180 of a window across the
    antimeridian shifted by 360°), and whether each lost some of its area to it."""
    import shapely

    w, s, e, n = window
    out = shapely.intersection(geoms, shapely.box(w, s, e, n))
    for shift in (-360.0, 360.0):
        if w - shift < 180.0 and e - shift > -180.0 and (w < -180.0 or e > 180.0):
            part = shapely.intersection(geoms, shapely.box(w - shift, s, e - shift, n))
            out = shapely.union(out, shapely.transform(part, lambda xy, d=shift: xy + [d, 0.0]))
    cut = _sphere_area(out) < _sphere_area(geoms) * (1 - 1e-9)
    return np.asarray(out, dtype=object), cut


def _sphere_area(geoms) -> np.ndarray:
    """Areas (on a unit sphere) of lon/lat polygons, in the cylindrical equal-area projection."""
    import shapely

    return shapely.area(
        shapely.transform(geoms, lambda xy: np.column_stack([np.radians(xy[:, 0]), np.sin(np.radians(xy[:, 1]))]))
    )


def _clipped(geoms, ids, names, domain, crs, kind, spec, notes, total=None) -> Regions:
    """Regions clipped to the domain (regions outside it dropped, with a note) and their weights. ``total``:
    each region's whole area (default: its area in ``geoms``)."""
    import shapely

    box = shapely.box(*domain.bounds)
    area = shapely.area(geoms) if total is None else np.asarray(total, dtype=np.float64)
    clipped = shapely.intersection(geoms, box)
    inside = np.clip(np.divide(shapely.area(clipped), area, out=np.zeros(len(geoms)), where=area > 0), 0.0, 1.0)
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
    notes += _overlap_note(weights)
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


def _overlap_note(weights) -> list[str]:
    """A note when regions overlap: a location in several counts in each (see :meth:`Regions.members`)."""
    total = np.asarray(weights.sum(axis=0)).ravel()
    over = total > 1.0 + OVERLAP
    if not over.any():
        return []
    excess = float((total[over] - 1.0).sum())
    amount = f"{excess:,.1f}" if excess >= 0.1 else f"{excess:.1g}"
    return [
        f"Some regions overlap one another: about {amount} cells' area (over {int(over.sum()):,} cells) lies in "
        "more than one. A location inside several regions counts in each of them, so the regions' counts add up to "
        "more than the map's."
    ]
