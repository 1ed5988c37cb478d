"""Datasets larger than memory: a (Geo)Parquet directory read with dask.dataframe, partition
by partition.

What is read. A directory (or one file) of Parquet files holding one location per row, in
WGS84: longitude and latitude columns (``lon``/``lat`` by default), or GeoParquet's primary
geometry column of WKB points (its CRS OGC:CRS84 / EPSG:4326, GeoParquet's default). Each row
is one user: out of core there are no user ids, weights or attributes (read the directory
into memory with ``in_memory=true`` for those, up to ``MAX_POINTS`` rows). Partitions are
dask.dataframe's (one per file or row group, in path order); every pass below is one task per
partition, on a Dask cluster's workers (:meth:`PartitionedPoints.with_client`) or on dask's
threaded scheduler in this process.

The public region (it fixes the local CRS and the grid) is, in order: the ``bbox`` option; the
region declared in the files' Parquet key-value metadata (key ``heatmap``, JSON
``{"public_bbox": [lon_min, lat_min, lon_max, lat_max], ...}``, which
``scripts/make_parquet_city.py`` writes for a synthetic city, public by construction); else the
extent of the data (one pass; recorded as side information, ``bbox_from_data``, as
:func:`engine.data.dataset.make_dataset` does).

What is computed out of core, with the same arithmetic as in memory (so the same numbers):

* the true histogram: each task projects its rows with :func:`engine.data.projection.to_local`
  (the transform of :func:`make_dataset`), keeps those inside the domain and bins them with
  :meth:`engine.core.grid.Domain.histogram` (the numba binning); the partitions' grids are summed
  pairwise, so only a few are alive at once. It is built once per public square at depth 10 and
  coarsened by block sums for smaller depths: exact, because the grids of two depths nest (their
  scales differ by a power of two, which floating point multiplies exactly).
* the clients of Adaptive HH (:class:`PartitionClients`): each partition's cell indices stay on
  the worker that read them; per sub-query one task per partition sums its clients' one-hot
  vectors and the server adds the sums and the noise.
* rows by position (the privacy-distance metric reads 500 users): only the partitions holding
  them are read.

Which mechanisms run on it (:data:`HISTOGRAM_ONLY`): those whose ``run`` reads nothing of the
data but its true histogram (and the public domain): the central baselines Identity, Identity
top-t, Uniform, PrivTree and the hierarchical tree (on data without user ids or weights
:func:`central.bound_contributions` leaves the data unchanged and they call ``true_histogram``),
UG (out of core its ``align = auto`` takes the aligned sizes, whose cells are blocks of output
cells: block sums of the histogram, the same integers as binning the points), Ghazi et al.'s Laplace baselines and sparse
EMD (through :func:`sparse_emd.user_distribution_sum`); plus ``adaptive_hh`` and its Table 3
variants, whose clients are read by :class:`PartitionClients`. Any other mechanism (AG, whose
second level bins each first-level cell at its own size, UG with ``align = off``, SNH, the KDEs,
the other federated baselines, bit pushing) reads individual locations and gets a
:class:`DataError` saying so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..core.errors import DataError, ParamError, shown
from ..core.grid import MAX_DEPTH, Domain, downsample
from ..core.params import Param
from .dataset import MAX_POINTS, Dataset, DatasetMeta, make_dataset
from .projection import bbox_to_local, local_crs, public_frame, to_local

HISTOGRAM_ONLY = (
    "identity",
    "identity_topt",
    "uniform",
    "ug",
    "privtree",
    "hierarchical",
    "laplace_gauss",
    "laplace_topt_gauss",
    "sparse_emd",
)
FEDERATED = ("adaptive_hh", "hh_fixed_eps", "hh_scheduled_fixed_t", "hh_interactive_nonprivate")
METADATA_KEY = b"heatmap"  # Parquet key-value metadata: {"public_bbox": [...], "name": ..., ...}
MAX_ROWS_READ = 100_000  # rows fetched by position (the metrics read 500)

NEEDS_POINTS = (
    "this mechanism reads individual locations, which a Parquet directory read out of core does not hold in "
    "memory. Out of core run: {histogram} (from the true histogram) and {federated} (clients in Dask tasks); "
    f"for any other mechanism read the directory into memory with in_memory=true (at most {MAX_POINTS:,} rows)"
).format(histogram=", ".join(HISTOGRAM_ONLY), federated=", ".join(FEDERATED))


# ------------------------------------------------------------------ layout
@dataclass(frozen=True)
class Layout:
    """How a partition's rows hold their coordinates: ``lonlat`` columns or ``wkb`` points."""

    encoding: str  # "lonlat" | "wkb"
    columns: tuple[str, ...]  # (lon, lat) or (geometry,)


def parquet_files(path: str | Path) -> list[Path]:
    """The Parquet files of a directory (sorted; hidden and ``_`` files skipped) or the file itself."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise DataError(f"{p} is neither a Parquet file nor a directory")
    files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
    if not files:
        raise DataError(f"{p} holds no Parquet file")
    return files


def _geo_column(schema_meta: dict) -> str | None:
    """GeoParquet's primary geometry column when it holds WKB in WGS84, None without "geo" metadata."""
    raw = schema_meta.get(b"geo")
    if raw is None:
        return None
    try:
        geo = json.loads(raw)
        col = geo["primary_column"]
        spec = geo["columns"][col]
    except (ValueError, KeyError, TypeError):
        raise DataError('the GeoParquet "geo" metadata does not name its geometry column') from None
    if str(spec.get("encoding", "")).upper() != "WKB":
        raise DataError(
            f"GeoParquet encoding {spec.get('encoding')!r} is not read out of core: write WKB points or lon/lat columns"
        )
    if "crs" in spec:  # absent: OGC:CRS84, GeoParquet's default
        from pyproj import CRS

        try:
            ok = spec["crs"] is not None and CRS.from_user_input(spec["crs"]).equals(
                CRS.from_epsg(4326), ignore_axis_order=True
            )
        except Exception:
            ok = False
        if not ok:
            raise DataError("the GeoParquet geometry is not in WGS84 longitude/latitude: reproject it first")
    return col


def inspect_parquet(path: str | Path, lon: str = "lon", lat: str = "lat") -> tuple[Layout, int, dict]:
    """(layout, number of rows, the ``heatmap`` metadata dict) from the files' footers only."""
    import pyarrow.parquet as pq

    files = parquet_files(path)
    try:
        schema = pq.read_schema(files[0])
        n_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception as exc:  # pyarrow's errors for a file that is not Parquet
        raise DataError(f"{path} could not be read as Parquet ({type(exc).__name__}: {exc})") from None
    meta = dict(schema.metadata or {})
    if lon in schema.names and lat in schema.names:
        layout = Layout("lonlat", (lon, lat))
    else:
        col = _geo_column(meta)
        if col is None:
            raise DataError(
                f"the Parquet files have no {lon!r}/{lat!r} columns and no GeoParquet geometry; their columns: "
                f"{', '.join(schema.names[:20])} (name the coordinate columns with lon=... and lat=...)"
            )
        layout = Layout("wkb", (col,))
    try:
        info = json.loads(meta.get(METADATA_KEY, b"{}"))
    except ValueError:
        raise DataError(f"the Parquet metadata {METADATA_KEY.decode()!r} is not valid JSON") from None
    return layout, int(n_rows), info if isinstance(info, dict) else {}


# ------------------------------------------------------------ partition tasks
# Module-level functions: Dask ships them to the workers by reference.
def _lonlat(df, layout: Layout, part: int) -> tuple[np.ndarray, np.ndarray]:
    """A partition's WGS84 coordinates, checked as make_dataset checks them."""
    if layout.encoding == "wkb":
        import shapely

        try:
            geoms = shapely.from_wkb(df[layout.columns[0]].to_numpy())
        except Exception:
            raise DataError(f"partition {part}: a geometry is not valid WKB") from None
        if (shapely.get_type_id(geoms) != 0).any():
            raise DataError(f"partition {part}: out of core only points are read (found another geometry type)")
        lon, lat = shapely.get_x(geoms), shapely.get_y(geoms)
    else:
        try:
            lon = df[layout.columns[0]].to_numpy(dtype=np.float64, na_value=np.nan)
            lat = df[layout.columns[1]].to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError):
            raise DataError(f"partition {part}: the coordinate columns are not numeric") from None
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    if bad.any():
        raise DataError(f"partition {part}: row {int(np.argmax(bad))} has missing or non-numeric coordinates")
    if (np.abs(lat) > 90).any() or (np.abs(lon) > 180).any():
        i = int(np.argmax((np.abs(lat) > 90) | (np.abs(lon) > 180)))
        raise DataError(
            f"partition {part}: row {i} ({shown(lon[i])}, {shown(lat[i])}) is not a WGS84 longitude/latitude"
        )
    return lon, lat


def _inside_xy(df, layout: Layout, part: int, crs: str, domain: Domain) -> np.ndarray:
    lon, lat = _lonlat(df, layout, part)
    xy = to_local(lon, lat, crs)
    return xy[domain.inside(xy)]


def _part_histogram(df, layout, part, crs, domain, rows) -> tuple[np.ndarray, np.ndarray]:
    """(grid of the partition's in-domain rows (``rows``: only those positions), [in-domain rows])."""
    xy = _inside_xy(df, layout, part, crs, domain)
    n_inside = np.array([len(xy)], dtype=np.int64)
    return domain.histogram(xy if rows is None else xy[rows]), n_inside


def _merge(a, b) -> tuple[np.ndarray, np.ndarray]:
    return a[0] + b[0], np.concatenate([a[1], b[1]])


def _part_extent(df, layout, part) -> np.ndarray:
    lon, lat = _lonlat(df, layout, part)
    return np.array([lon.min(), lat.min(), lon.max(), lat.max()]) if lon.size else np.full(4, np.nan)


def _part_cells(df, layout, part, crs, domain, rows) -> np.ndarray:
    """Flat cell index ``iy * n + ix`` (int32) of each in-domain (kept) row: a client's cell."""
    xy = _inside_xy(df, layout, part, crs, domain)
    return domain.flat_index(xy if rows is None else xy[rows]).astype(np.int32)


def _part_rows(df, layout, part, crs, domain, positions, what) -> np.ndarray:
    xy = _inside_xy(df, layout, part, crs, domain)
    if what == "xy":
        return xy[positions]
    lon, lat = _lonlat(df, layout, part)  # the same rows, in degrees
    keep = np.flatnonzero(domain.inside(to_local(lon, lat, crs)))[positions]
    return np.column_stack([lon[keep], lat[keep]])


def _shard_signal(cells: np.ndarray, lut_pix: np.ndarray, size: int) -> np.ndarray:
    """The sum of one partition's clients' one-hot vectors over the ``size`` reporting nodes."""
    return np.bincount(lut_pix[cells], minlength=size).astype(np.int64)


def partitions(path: str, layout: Layout) -> list:
    """One delayed pandas DataFrame per dask.dataframe partition (path order), coordinates only."""
    import dask.dataframe as dd

    return dd.read_parquet(path, columns=list(layout.columns)).to_delayed()


def compute(tasks: list, client=None) -> list:
    """Compute delayed tasks on ``client``'s cluster, or on dask's threaded scheduler here."""
    import dask

    return list(dask.compute(*tasks, scheduler=client if client is not None else "threads"))


# ------------------------------------------------------------------ the dataset
class _Rows:
    """``PartitionedPoints.xy`` / ``.lonlat``: rows by position only (an integer array); any
    other use means the mechanism needs every location, which is refused."""

    def __init__(self, points: PartitionedPoints, what: str):
        self._points, self._what = points, what

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self._points), 2)

    def __len__(self) -> int:
        return len(self._points)

    def __getitem__(self, idx):
        if isinstance(idx, np.ndarray) and idx.ndim == 1 and idx.dtype.kind in "iu" and idx.size <= MAX_ROWS_READ:
            return self._points._read_rows(idx, self._what)
        raise DataError(NEEDS_POINTS)

    def __array__(self, *args, **kwargs):
        raise DataError(NEEDS_POINTS)


@dataclass(frozen=True, eq=False)
class PartitionedPoints:
    """A Parquet directory of points read out of core; quacks like :class:`Dataset` for what
    :func:`engine.run.execution.run` and the histogram-only mechanisms use (``public_domain``,
    ``in_domain``, ``sample_users``, ``true_histogram``, ``len``, ``n_users``, ``meta``,
    ``crs``; ``xy`` by position only). ``domain``: set by :meth:`in_domain` (rows outside are
    dropped in every pass); ``rows``: per partition, the positions among its in-domain rows kept
    by :meth:`sample_users`. ``client``: a Dask client whose workers run the partition tasks
    (None: dask's threaded scheduler here); it is not pickled."""

    path: str
    layout: Layout
    meta: DatasetMeta
    crs: str
    n_rows: int
    domain: Domain | None = None
    rows: tuple[np.ndarray, ...] | None = None
    client: Any = field(default=None, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    user_id: ClassVar[None] = None
    weight: ClassVar[None] = None
    value: ClassVar[None] = None
    flag: ClassVar[None] = None
    attributes: ClassVar[list] = []

    def __getstate__(self):
        return {**self.__dict__, "client": None}

    def with_client(self, client) -> PartitionedPoints:
        """The same dataset (sharing what was computed) with its passes on ``client``'s workers."""
        return replace(self, client=client, _memo=self._memo)

    # ----------------------------------------------------------- Dataset protocol
    def __len__(self) -> int:
        if self.rows is not None:
            return int(sum(r.size for r in self.rows))
        if self.domain is None:
            return self.n_rows
        return int(self._pass(self.domain)[1].sum())

    @property
    def n_users(self) -> int:
        return len(self)

    @property
    def xy(self) -> _Rows:
        return _Rows(self, "xy")

    @property
    def lonlat(self) -> _Rows:
        return _Rows(self, "lonlat")

    def user_index(self):
        raise DataError(NEEDS_POINTS)

    def subset(self, idx):
        raise DataError(NEEDS_POINTS)

    def public_domain(self, depth: int) -> Domain:
        xmin, ymin, xmax, ymax = bbox_to_local(self.meta.bbox, self.crs)
        return Domain.around(xmin, ymin, xmax, ymax, depth)

    def in_domain(self, domain: Domain) -> PartitionedPoints:
        if self.domain is not None and _square(self.domain) == _square(domain):
            return self
        if self.rows is not None:
            raise DataError("a sample of an out-of-core dataset cannot be moved to another domain")
        return replace(self, domain=domain, _memo=self._memo)

    def sample_users(self, n_users: int | None, rng: np.random.Generator) -> PartitionedPoints:
        """``n_users`` rows drawn without replacement, the same draw as :meth:`Dataset.sample_users`
        on the same rows in memory (every row its own user)."""
        if n_users is None or n_users >= len(self):
            return self
        if n_users < 1:
            raise DataError("the number of users must be at least 1")
        if self.domain is None or self.rows is not None:
            raise DataError("sample an out-of-core dataset once, after restricting it to its domain")
        idx = np.sort(rng.choice(len(self), size=n_users, replace=False))
        counts = self._pass(self.domain)[1]
        starts = np.concatenate([[0], np.cumsum(counts)])
        cut = np.searchsorted(idx, starts)
        rows = tuple(idx[cut[p] : cut[p + 1]] - starts[p] for p in range(counts.size))
        return replace(self, rows=rows, _memo={})

    def true_histogram(self, domain: Domain, per_user_normalised: bool = False) -> np.ndarray:
        """Counts per cell of the rows inside ``domain`` (every row is one user, so the per-user
        normalisation changes nothing)."""
        if self.domain is not None and _square(self.domain) != _square(domain):
            raise DataError("the histogram of an out-of-core dataset is asked on another domain than its own")
        full = self._pass(domain)[0]
        return downsample(full, 1 << (MAX_DEPTH - domain.depth)) if domain.depth < MAX_DEPTH else full.copy()

    # ----------------------------------------------------------- passes
    def _partitions(self) -> list:
        return partitions(self.path, self.layout)

    def _compute(self, tasks: list) -> list:
        return compute(tasks, self.client)

    def _pass(self, domain: Domain) -> tuple[np.ndarray, np.ndarray]:
        """(depth-10 histogram of the public square, in-domain rows per partition), computed once."""
        from dask import delayed

        key = ("histogram", _square(domain))
        if key not in self._memo:
            fine = domain.with_depth(MAX_DEPTH)
            parts = self._partitions()
            rows = self.rows or (None,) * len(parts)
            if len(rows) != len(parts):
                raise DataError("the Parquet directory changed since it was sampled")
            level = [delayed(_part_histogram)(d, self.layout, p, self.crs, fine, rows[p]) for p, d in enumerate(parts)]
            while len(level) > 1:  # pairwise sums in partition order: a few grids alive at a time
                level = [
                    delayed(_merge)(*level[i : i + 2]) if i + 1 < len(level) else level[i]
                    for i in range(0, len(level), 2)
                ]
            (self._memo[key],) = self._compute(level)
        return self._memo[key]

    def _read_rows(self, idx: np.ndarray, what: str) -> np.ndarray:
        """Rows ``idx`` (positions among the in-domain, kept rows) as metres or degrees."""
        from dask import delayed

        if self.domain is None:
            raise DataError("rows of an out-of-core dataset are read after restricting it to its domain")
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise DataError("a row position is outside the dataset")
        kept = [r.size for r in self.rows] if self.rows is not None else list(self._pass(self.domain)[1])
        starts = np.concatenate([[0], np.cumsum(kept)])
        part_of = np.searchsorted(starts, idx, side="right") - 1
        parts = self._partitions()
        out = np.empty((idx.size, 2))
        wanted = np.unique(part_of)
        tasks = []
        for p in wanted:
            local = idx[part_of == p] - starts[p]
            positions = local if self.rows is None else self.rows[p][local]
            tasks.append(delayed(_part_rows)(parts[p], self.layout, int(p), self.crs, self.domain, positions, what))
        for p, got in zip(wanted, self._compute(tasks)):
            out[part_of == p] = got
        return out

    def clients(self, domain: Domain) -> PartitionClients:
        return PartitionClients(self.in_domain(domain), domain)


def _square(domain: Domain) -> tuple[float, float, float]:
    return (domain.x0, domain.y0, domain.side)


class PartitionClients:
    """Adaptive HH's clients read from the partitions (Bagdasaryan et al. 2022, Algorithm 1 at
    scale). Every in-domain (kept) row is one client; its full-depth cell index is computed once
    by the task that reads its partition and stays there (on a cluster: in the worker's memory,
    recomputed from the file if the worker dies). Per sub-query, :meth:`signal` runs one task per
    partition: each client encodes its cell as the one-hot vector of its longest present prefix
    (the look-up table over pixels the server sends) and the task returns the sum of its clients'
    vectors, i.e. of the SecAgg shards it holds (shards are consecutive runs of S_max clients; a
    partition of the script's 1,000,000 rows holds 100 whole shards of 10,000). The server adds
    the partitions' sums; the noise (the sum of every client's Pólya shares, the same law) is then
    drawn on the server exactly as in process (:func:`engine.mechanisms.federated_hh.secure_sum.secure_sum`'s aggregated path), so
    the same seed gives the same release as the in-process run on the same rows."""

    def __init__(self, points: PartitionedPoints, domain: Domain):
        from dask import delayed

        self.domain = domain
        self.client = points.client
        parts = points._partitions()
        rows = points.rows or (None,) * len(parts)
        tasks = [delayed(_part_cells)(d, points.layout, p, points.crs, domain, rows[p]) for p, d in enumerate(parts)]
        if self.client is not None:
            self._cells = self.client.compute(tasks, retries=2)  # futures: the cells stay on the workers
        else:
            self._cells = points._compute(tasks)
        self.n = len(points)

    def signal(self, lut: np.ndarray, size: int) -> np.ndarray:
        """Sum over all clients of the one-hot vectors over the ``size`` reporting nodes (``lut``:
        the reporting node of every full-depth Morton code, :func:`engine.mechanisms.federated_hh.tree.paint_lut`)."""
        from ..core.grid import morton_of_pixels

        lut_pix = np.ascontiguousarray(lut[morton_of_pixels(self.domain.depth)].ravel())
        if self.client is None:
            sums = [_shard_signal(c, lut_pix, size) for c in self._cells]
        else:
            lf = self.client.scatter(lut_pix, broadcast=True, hash=False)
            sums = self.client.gather(self.client.map(_shard_signal, self._cells, lut_pix=lf, size=size, retries=2))
        return np.sum(sums, axis=0, dtype=np.int64) if sums else np.zeros(size, dtype=np.int64)


# ------------------------------------------------------------------ the source
def _parse_bbox(text: str) -> tuple[float, float, float, float]:
    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 4 or not all(math.isfinite(v) for v in vals):
        raise ParamError(f"bbox is lon_min,lat_min,lon_max,lat_max in degrees (got {text!r})")
    if not (-180 <= vals[0] < vals[2] <= 180 and -90 <= vals[1] < vals[3] <= 90):
        raise ParamError(
            f"bbox must have lon_min < lon_max within ±180 and lat_min < lat_max within ±90 (got {text!r})"
        )
    return vals


def load_parquet(
    path: str, lon: str = "lon", lat: str = "lat", bbox: str = "", in_memory: bool = False
) -> PartitionedPoints | Dataset:
    """The Parquet directory ``path`` out of core (:class:`PartitionedPoints`), or with
    ``in_memory`` read whole into a :class:`Dataset` (the same rows, region and CRS)."""
    if not path:
        raise ParamError("give the Parquet directory to read (path=...)")
    layout, n_rows, info = inspect_parquet(path, lon, lat)
    if n_rows == 0:
        raise DataError(f"{path} holds no rows")
    declared = bbox or info.get("public_bbox")
    name = str(info.get("name") or f"Parquet: {Path(path).name}")
    meta = DatasetMeta(
        name=name,
        source="parquet",
        citation=str(info.get("citation", "")),
        license=str(info.get("license", "")),
        description=str(info.get("description", "")),
        synthetic=bool(info.get("synthetic", False)),
    )
    if declared:
        box = _parse_bbox(declared if isinstance(declared, str) else ",".join(map(str, declared)))
        meta = replace(meta, bbox=box)
    from dask import delayed

    parts = partitions(str(path), layout)
    if in_memory:
        if n_rows > MAX_POINTS:
            raise DataError(f"{path} has {n_rows:,} rows; at most {MAX_POINTS:,} are read into memory")
        lonlat = np.concatenate(
            [np.column_stack(ll) for ll in compute([delayed(_lonlat)(d, layout, p) for p, d in enumerate(parts)])]
        )
        if not declared:  # make_dataset reads the region off the data and records it
            meta = replace(meta, bbox_from_data=True)
        return make_dataset(lonlat[:, 0], lonlat[:, 1], meta)
    if not declared:  # side information: the region read off the data
        ext = np.array(compute([delayed(_part_extent)(d, layout, p) for p, d in enumerate(parts)]))
        box = (
            float(np.nanmin(ext[:, 0])),
            float(np.nanmin(ext[:, 1])),
            float(np.nanmax(ext[:, 2])),
            float(np.nanmax(ext[:, 3])),
        )
        if box[2] - box[0] > 180:
            raise DataError("the points span more than 180 degrees of longitude: give the public region with bbox=...")
        if not (box[2] > box[0] and box[3] > box[1]):
            raise DataError("the region is a single point or a line: it needs some width and height")
        box, step = public_frame(box)
        frame = f"the locations' bounding box rounded outward to a {step:g}° grid"
        meta = replace(meta, bbox=box, bbox_from_data=True, extra={**meta.extra, "region_frame": frame})
    return PartitionedPoints(str(path), layout, meta, local_crs(meta.bbox), n_rows)


# ------------------------------------------------------------ a synthetic city, chunk by chunk
def city_chunk(preset: str, seed: int, chunk: int, n: int) -> np.ndarray:
    """``n`` WGS84 points (lon, lat) of the synthetic city ``(preset, seed)`` (the intensity of
    :func:`.synthetic.generate` with the same arguments), from the independent stream ``chunk``:
    chunks together are i.i.d. draws of that city, so a dataset of any size is written chunk by
    chunk in bounded memory. Drawn as ``generate`` draws homes: multinomial cell counts in random
    order, a uniform position inside each cell."""
    from .synthetic import PRESETS, RASTER, city_model, placement

    if preset not in PRESETS:
        raise ParamError(f"unknown synthetic preset {preset!r}; known: {', '.join(PRESETS)}")
    p, model, place = PRESETS[preset], city_model(preset, int(seed)), placement(preset)
    rng = np.random.default_rng([int(seed), 3, int(chunk)])
    side = p.side_km * 1000.0
    cell = side / RASTER
    cells = np.repeat(np.arange(RASTER * RASTER, dtype=np.int32), rng.multinomial(n, model.prob))
    rng.shuffle(cells)
    shift = RASTER.bit_length() - 1
    x = ((cells & (RASTER - 1)) + rng.random(n)) * cell - side / 2
    y = ((cells >> shift) + rng.random(n)) * cell - side / 2
    return place(x, y)


def write_city(
    out: str | Path,
    n: int,
    chunk: int = 1_000_000,
    preset: str = "polycentric",
    seed: int = 0,
    geo: bool = False,
    progress=None,
) -> list[Path]:
    """Write ``n`` points of a synthetic city to ``out/part-00000.parquet``, ... (``chunk`` rows
    each, one row group per file): ``lon``/``lat`` columns, or with ``geo`` a GeoParquet WKB
    ``geometry`` column. The public region (the city's square) goes into the ``heatmap``
    metadata. Memory: one chunk at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .synthetic import PRESETS, placement

    if not 1 <= n <= 10**10 or not 1 <= chunk <= 20_000_000:
        raise ParamError(f"points must be 1..1e10 and the chunk 1..20,000,000 (got {n:,} and {chunk:,})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    p = PRESETS.get(preset)
    if p is None:
        raise ParamError(f"unknown synthetic preset {preset!r}; known: {', '.join(PRESETS)}")
    info = {
        "public_bbox": list(placement(preset).bbox),
        "name": f"{p.label} (synthetic, {n:,} points in Parquet)",
        "description": p.description + " Synthetic data: no real person is represented.",
        "synthetic": True,
        "license": "CC0 (generated data)",
        "citation": "Synthetic city generated by this workbench (engine/data/synthetic.py), written chunk by chunk",
        "preset": preset,
        "seed": int(seed),
    }
    meta = {METADATA_KEY: json.dumps(info).encode()}
    if geo:
        meta[b"geo"] = json.dumps(
            {
                "version": "1.1.0",
                "primary_column": "geometry",
                "columns": {"geometry": {"encoding": "WKB", "geometry_types": ["Point"]}},
            }
        ).encode()
    paths = []
    for k, start in enumerate(range(0, n, chunk)):
        m = min(chunk, n - start)
        ll = city_chunk(preset, seed, k, m)
        if geo:
            import shapely

            table = pa.table({"geometry": pa.array(shapely.to_wkb(shapely.points(ll)), type=pa.binary())})
        else:
            table = pa.table({"lon": ll[:, 0], "lat": ll[:, 1]})
        path = out / f"part-{k:05d}.parquet"
        pq.write_table(table.replace_schema_metadata(meta), path, row_group_size=m)
        paths.append(path)
        if progress:
            progress(start + m, n)
    return paths


def _register() -> None:
    from .registry import Source, add

    add(
        Source(
            key="parquet",
            label="Parquet directory, out of core (Dask)",
            kind="file",
            description=(
                "A directory of Parquet files (lon/lat columns or GeoParquet WKB points, WGS84), read partition by "
                "partition with dask.dataframe: its true histogram, the mechanisms that need only it and Adaptive HH "
                "run on any number of rows (engine/data/parquet_source.py)."
            ),
            loader=load_parquet,
            params=(
                Param("path", "str", "", "path of the Parquet directory (or file)"),
                Param("lon", "str", "lon", "longitude column (when the files have no GeoParquet geometry)"),
                Param("lat", "str", "lat", "latitude column"),
                Param("bbox", "str", "", "public region lon_min,lat_min,lon_max,lat_max (empty: the files' own)"),
                Param("in_memory", "bool", False, f"read every row into memory (at most {MAX_POINTS:,})"),
            ),
            citation="the user's own files",
            license="the user's own data",
            extra={"out_of_core": True},
        )
    )


_register()
