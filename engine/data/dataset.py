"""The Dataset model: individual locations in metres, with attributes and provenance.

Coordinates are projected from WGS84 to a local azimuthal equidistant CRS centred
on the dataset's *public* region (its catalogue bounding box), so distances and
areas are in metres with negligible distortion at city scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..core.errors import DataError, shown
from ..core.grid import Domain

MAX_POINTS = 20_000_000


@dataclass(frozen=True)
class DatasetMeta:
    name: str
    source: str  # registry key or "file:<name>"
    citation: str = ""
    license: str = ""
    description: str = ""
    synthetic: bool = False
    # public region, (lon_min, lat_min, lon_max, lat_max); lon_max > 180 for a region across the antimeridian
    bbox: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    bbox_from_data: bool = False  # True: the region was read off the data (side information)
    value_name: str = ""  # what `value` means, e.g. "age (years)"
    flag_name: str = ""  # what `flag` means, e.g. "tested positive"
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset:
    xy: np.ndarray  # (n, 2) float64 metres, local CRS
    lonlat: np.ndarray  # (n, 2) float64 WGS84 degrees
    crs: str  # PROJ string of the local CRS
    meta: DatasetMeta
    user_id: np.ndarray | None = None  # (n,) int64, several rows per user allowed
    weight: np.ndarray | None = None  # (n,) float64 >= 0
    value: np.ndarray | None = None  # (n,) float64 numeric attribute
    flag: np.ndarray | None = None  # (n,) bool binary attribute

    def __post_init__(self):
        n = self.xy.shape[0]
        if self.xy.ndim != 2 or self.xy.shape[1] != 2:
            raise DataError("coordinates must be an (n, 2) array")
        for name in ("lonlat", "user_id", "weight", "value", "flag"):
            arr = getattr(self, name)
            if arr is not None and arr.shape[0] != n:
                raise DataError(f"{name} has {arr.shape[0]} rows but there are {n} locations")

    def __len__(self) -> int:
        return int(self.xy.shape[0])

    @property
    def n_users(self) -> int:
        if self.user_id is None:
            return len(self)
        return int(np.unique(self.user_id).size)

    @property
    def attributes(self) -> list[str]:
        return [a for a in ("user_id", "weight", "value", "flag") if getattr(self, a) is not None]

    def public_domain(self, depth: int) -> Domain:
        """Square domain around the public region (the catalogue bbox in metres)."""
        from .projection import bbox_to_local

        xmin, ymin, xmax, ymax = bbox_to_local(self.meta.bbox, self.crs)
        return Domain.around(xmin, ymin, xmax, ymax, depth)

    def subset(self, idx: np.ndarray) -> Dataset:
        def take(a):
            return None if a is None else a[idx]

        return replace(
            self,
            xy=self.xy[idx],
            lonlat=self.lonlat[idx],
            user_id=take(self.user_id),
            weight=take(self.weight),
            value=take(self.value),
            flag=take(self.flag),
        )

    def in_domain(self, domain: Domain) -> Dataset:
        return self.subset(np.flatnonzero(domain.inside(self.xy)))

    def sample_users(self, n_users: int | None, rng: np.random.Generator) -> Dataset:
        """``n_users`` users drawn without replacement (all locations of each user kept).
        Without ``user_id`` every location is its own user. ``None`` keeps everyone."""
        if n_users is None or n_users >= self.n_users:
            return self
        if n_users < 1:
            raise DataError("the number of users must be at least 1")
        if self.user_id is None:
            idx = np.sort(rng.choice(len(self), size=n_users, replace=False))
            return self.subset(idx)
        users = np.unique(self.user_id)
        chosen = rng.choice(users, size=n_users, replace=False)
        return self.subset(np.flatnonzero(np.isin(self.user_id, chosen)))

    def user_index(self) -> tuple[np.ndarray, int]:
        """Dense user index 0..U-1 for each row, and U."""
        if self.user_id is None:
            return np.arange(len(self)), len(self)
        uniq, inv = np.unique(self.user_id, return_inverse=True)
        return inv.astype(np.int64), int(uniq.size)

    def true_histogram(self, domain: Domain, per_user_normalised: bool = False) -> np.ndarray:
        """Counts per cell of the points inside the domain. With ``per_user_normalised``
        each user contributes total weight 1 spread over its locations."""
        inside = domain.inside(self.xy)
        w = None if self.weight is None else self.weight.astype(np.float64)
        if per_user_normalised and self.user_id is not None:
            inv, u = self.user_index()
            counts = np.bincount(inv, minlength=u).astype(np.float64)
            if w is None:
                w = 1.0 / counts[inv]
            else:
                tot = np.bincount(inv, weights=w, minlength=u)[inv]
                # a user whose weights sum to zero contributes nothing (not NaN)
                w = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
        xy = self.xy[inside]
        return domain.histogram(xy, None if w is None else w[inside])


MAX_WEIGHT_TOTAL = 1e15  # beyond this a float count loses whole units, and near 1e308 sums overflow


def make_dataset(
    lon: np.ndarray,
    lat: np.ndarray,
    meta: DatasetMeta,
    *,
    user_id=None,
    weight=None,
    value=None,
    flag=None,
) -> Dataset:
    """Validate WGS84 coordinates and attributes and project them to metres.

    Raises :class:`DataError` with a specific message for every kind of bad input.
    """
    from .projection import bbox_to_local, local_crs, lon_extent, public_frame, to_local

    lon = _numeric(lon, "longitude")
    lat = _numeric(lat, "latitude")
    if lon.shape != lat.shape:
        raise DataError("longitude and latitude have different lengths")
    n = lon.size
    if n == 0:
        raise DataError("the dataset has no locations")
    if n > MAX_POINTS:
        raise DataError(f"the dataset has {n:,} locations; the limit is {MAX_POINTS:,}")
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    if bad.any():
        raise DataError(
            f"{int(bad.sum())} row(s) have missing or non-numeric coordinates (first at row {int(np.argmax(bad))})"
        )
    if (np.abs(lat) > 90).any():
        i = int(np.argmax(np.abs(lat) > 90))
        raise DataError(
            f"latitude {shown(lat[i])} at row {i} is beyond ±90 degrees (are the columns swapped, or is the file not in WGS84?)"
        )
    if (np.abs(lon) > 180).any():
        i = int(np.argmax(np.abs(lon) > 180))
        raise DataError(
            f"longitude {shown(lon[i])} at row {i} is beyond ±180 degrees (is the file in a projected CRS?)"
        )
    bbox = meta.bbox
    extent = bbox  # what the locations span: the region, or their own box when the region is read off them
    if bbox == (0.0, 0.0, 0.0, 0.0) or meta.bbox_from_data:
        west, east = lon_extent(lon)
        extent = (west, float(lat.min()), east, float(lat.max()))
        # never the exact box: its edges are four people's coordinates
        bbox, step = public_frame(extent)
        frame = f"the locations' bounding box rounded outward to a {step:g}° grid"
        meta = replace(meta, bbox=bbox, bbox_from_data=True, extra={**meta.extra, "region_frame": frame})
        if east > 180:
            note = (
                f"The locations cross the antimeridian (180°): the region runs east from {bbox[0]:.4f}° to "
                f"{bbox[2] - 360:.4f}° ({bbox[2] - bbox[0]:.4f}° of longitude), not round the world; its box gives "
                f"the east edge past 180 ({bbox[2]:.4f})."
            )
            extra = {**meta.extra, "notes": [*meta.extra.get("notes", []), note]}
            meta = replace(meta, description=f"{meta.description} {note}".strip(), extra=extra)
    if not (extent[2] > extent[0] and extent[3] > extent[1]):
        raise DataError("the region is a single point or a line: it needs some width and height")
    crs = local_crs(bbox)
    xy = to_local(lon, lat, crs)
    x0, y0, x1, y1 = bbox_to_local(extent, crs)
    if max(x1 - x0, y1 - y0) < 1.0:  # a grid over less than a metre: cells below float precision
        raise DataError(
            f"the locations span less than a metre ({x1 - x0:.2g} m by {y1 - y0:.2g} m): a heatmap needs a region "
            "at least 1 m across"
        )

    def opt(a, name, kind):
        if a is None:
            return None
        if kind == "int":
            arr = np.asarray(a)
            if arr.dtype.kind in "iu":
                return arr.astype(np.int64)
            # a blank id is no id, not one person shared by every row without one (checked on the distinct ids)
            ids, arr = np.unique(arr.astype(str), return_inverse=True)
            blank = np.isin(np.char.lower(np.char.strip(ids)), ("", "na", "nan", "null", "none", "inf", "-inf"))[arr]
            if blank.any():
                raise DataError(
                    f"{int(blank.sum()):,} row(s) have no {name} (first at row {int(np.argmax(blank))}): fill them "
                    f"in, or leave out the {name} column to count each row as its own person"
                )
            return arr.astype(np.int64)
        if kind == "bool":
            arr = np.asarray(a)
            if arr.dtype == bool:
                return arr
            arr = _numeric(arr, name)
            if not np.isin(arr[np.isfinite(arr)], (0, 1)).all():
                raise DataError(f"{name} must be 0/1 or true/false")
            return np.nan_to_num(arr, nan=0).astype(bool)
        arr = _numeric(a, name)
        if np.isinf(arr).any():
            raise DataError(f"{name} has an infinite value at row {int(np.argmax(np.isinf(arr)))}")
        if name == "weight":
            if np.isnan(arr).any():
                raise DataError(f"weight is missing at row {int(np.argmax(np.isnan(arr)))}")
            if (arr < 0).any():
                raise DataError("weights must be non-negative")
            if not (arr > 0).any():
                raise DataError("every weight is 0: the map would be empty")
            with np.errstate(over="ignore"):
                total = float(arr.sum())
            if not total <= MAX_WEIGHT_TOTAL:  # sums, scales and legends overflow near 1e308
                raise DataError(
                    f"the weights add up to {total:.3g}, over {MAX_WEIGHT_TOTAL:.0e}: scale them down (the map is the "
                    "same up to a factor)"
                )
        return arr

    return Dataset(
        xy=xy,
        lonlat=np.column_stack([lon, lat]),
        crs=crs,
        meta=meta,
        user_id=opt(user_id, "user id", "int"),
        weight=opt(weight, "weight", "float"),
        value=opt(value, "value", "float"),
        flag=opt(flag, "flag", "bool"),
    )


def _numeric(a, name: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float64).ravel()
    try:
        import pandas as pd

        out = pd.to_numeric(pd.Series(arr.ravel()), errors="coerce").to_numpy(dtype=np.float64)
    except Exception as exc:  # pragma: no cover
        raise DataError(f"{name} is not numeric") from exc
    bad = np.isnan(out) & ~pd.isna(pd.Series(arr.ravel())).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{name} has a non-numeric value {arr.ravel()[i]!r} at row {i}")
    return out
