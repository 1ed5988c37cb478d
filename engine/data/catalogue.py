"""City catalogue: the public regions (bounding boxes) the papers used.

A city's box is *public*: it defines the map's domain and is never read off the
private data. Each entry says where its box comes from.

* SNH (Zeighami et al., PVLDB 2022, Section 6.1.1 and Table 2): "for each city,
  we consider a large spatial region covering a 20 x 20 km^2 area centred at
  [lat, lon]"; the centres are Table 2's. We build the 20 km square on the
  WGS84 ellipsoid (10 km north, south, east and west of the centre).
* Federated RFF KDE (Zong et al., PoPETs 2023, Appendix B.1, Table 1): two
  (lat, lon) corners per city for LA, London, Tokyo and Chicago downtown.
* Sparse EMD (Ghazi et al., AAAI 2023, Section 4): check-ins "roughly in the
  continental US (lon in (-135, -60) and lat in (0, 50))".
* Bagdasaryan et al. (PoPETs 2022, Section 6.1) used a New York Times heatmap of
  Manhattan and HDX rasters of Lagos and Mayotte, cropped to 1024 x 1024 pixels,
  without giving coordinates: those boxes are this workbench's choice (the
  island of Manhattan; 1024 arc-seconds, the HRSL pixel size, around central
  Lagos; the island of Mayotte) and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..core.errors import DataError

SNH = "Zeighami et al. 2022 (SNH), Section 6.1.1 and Table 2: 20 x 20 km square centred at"
ZONG = "Zong et al. 2023 (federated RFF KDE), Appendix B.1, Table 1: corners"


@dataclass(frozen=True)
class City:
    key: str
    name: str
    bbox: tuple[float, float, float, float]  # (lon_min, lat_min, lon_max, lat_max), WGS84
    source: str  # where the box comes from
    note: str = ""


def _square(lat: float, lon: float, half_m: float = 10_000.0) -> tuple[float, float, float, float]:
    """Box spanning ``half_m`` north, south, east and west of (lat, lon) on the WGS84 ellipsoid."""
    from pyproj import Geod

    g = Geod(ellps="WGS84")
    _, lat_n, _ = g.fwd(lon, lat, 0.0, half_m)
    _, lat_s, _ = g.fwd(lon, lat, 180.0, half_m)
    lon_e, _, _ = g.fwd(lon, lat, 90.0, half_m)
    lon_w, _, _ = g.fwd(lon, lat, 270.0, half_m)
    return (round(lon_w, 6), round(lat_s, 6), round(lon_e, 6), round(lat_n, 6))


def _corners(lat1: float, lon1: float, lat2: float, lon2: float) -> tuple[float, float, float, float]:
    return (min(lon1, lon2), min(lat1, lat2), max(lon1, lon2), max(lat1, lat2))


# (key, name, lat, lon, density category in SNH Table 2, role in SNH)
_SNH_CITIES = (
    ("fargo", "Fargo", 46.877, -96.789, "low", "training"),
    ("kansas_city", "Kansas City", 39.09, -94.59, "low", "test city"),
    ("salt_lake", "Salt Lake City", 40.73, -111.926, "low", "training"),
    ("tulsa", "Tulsa", 36.153, -95.992, "low", "training"),
    ("phoenix", "Phoenix", 33.448, -112.073, "medium", "training"),
    ("los_angeles", "Los Angeles", 34.02, -118.29, "medium", "training"),
    ("houston", "Houston", 29.747, -95.365, "medium", "training"),
    ("milwaukee", "Milwaukee", 43.038, -87.910, "medium", "test city"),
    ("miami", "Miami", 25.801, -80.256, "high", "test city"),
    ("chicago", "Chicago", 41.880, -87.70, "high", "training"),
    ("san_francisco", "San Francisco", 37.764, -122.43, "high", "training; the SF cab data's region"),
    ("boston", "Boston", 42.360, -71.058, "high", "training"),
)


@lru_cache(maxsize=1)
def cities() -> dict[str, City]:
    out: list[City] = []
    for key, name, lat, lon, density, role in _SNH_CITIES:
        out.append(
            City(
                key,
                f"{name} (SNH 20 km)",
                _square(lat, lon),
                f"{SNH} [{lat}, {lon}]",
                f"{density}-density city in SNH's Table 2 ({role})",
            )
        )
    out += [
        City(
            "la_downtown",
            "Los Angeles downtown (Zong)",
            _corners(34.11246, -118.42099, 34.00617, -118.21599),
            f"{ZONG} (34.11246, -118.42099), (34.00617, -118.21599)",
            "Gowalla and Brightkite; bandwidth h = 7e-3",
        ),
        City(
            "london",
            "London central (Zong)",
            _corners(51.52708, -0.16971, 51.50453, -0.10611),
            f"{ZONG} (51.52708, -0.16971), (51.50453, -0.10611)",
            "Gowalla; h = 2.2e-3",
        ),
        City(
            "tokyo",
            "Tokyo central (Zong)",
            _corners(35.70064, 139.75249, 35.65504, 139.77897),
            f"{ZONG} (35.70064, 139.75249), (35.65504, 139.77897)",
            "Brightkite; h = 1.4e-3",
        ),
        City(
            "chicago_downtown",
            "Chicago downtown (Zong)",
            _corners(41.93045, -87.66701, 41.85821, -87.61399),
            f"{ZONG} (41.93045, -87.66701), (41.85821, -87.61399)",
            "Gowalla and Brightkite; h = 3e-3",
        ),
        City(
            "manhattan",
            "Manhattan",
            (-74.0200, 40.7000, -73.9070, 40.8800),
            "workbench choice: the island of Manhattan (Bagdasaryan et al. 2022, Section 6.1, used the New York "
            "Times heatmap of Manhattan without coordinates)",
        ),
        City(
            "new_york",
            "New York (20 km)",
            _square(40.758, -73.9855),
            "workbench choice: SNH's 20 x 20 km convention centred on Midtown Manhattan [40.758, -73.9855]",
        ),
        City(
            "continental_us",
            "Continental US (Ghazi)",
            (-135.0, 0.0, -60.0, 50.0),
            "Ghazi et al. 2023 (sparse EMD), Section 4: lon in (-135, -60), lat in (0, 50)",
            "the paper then keeps the 30 busiest cells of a 300 x 300 grid; very large, prefer a city",
        ),
        City(
            "lagos",
            "Lagos",
            (3.237778, 6.377778, 3.522222, 6.662222),
            "workbench choice: 1024 x 1024 arc-seconds (HRSL pixels) around central Lagos [6.52, 3.38]; "
            "Bagdasaryan et al. 2022 cropped an HDX raster of Lagos to 1024 x 1024 without giving coordinates",
        ),
        City(
            "mayotte",
            "Mayotte",
            (44.98, -13.01, 45.32, -12.63),
            "workbench choice: the island of Mayotte (Grande-Terre and Petite-Terre); Bagdasaryan et al. 2022 "
            "cropped an HDX raster of Mayotte to 1024 x 1024 without giving coordinates",
        ),
    ]
    return {c.key: c for c in out}


RASTER_ONLY = ("lagos", "mayotte")  # regions with no check-in data worth cutting


def city(key: str) -> City:
    c = cities().get(key)
    if c is None:
        raise DataError(f"unknown city {key!r}; known: {', '.join(sorted(cities()))}")
    return c
