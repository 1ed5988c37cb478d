"""Small real datasets bundled with libpysal (offline).

* ``snow_cholera``: John Snow's 1854 Soho cholera outbreak (libpysal example
  ``snow_maps``): 324 addresses with their number of deaths, EPSG:3857.
* ``berlin_airbnb``: 2,203 Airbnb listings in Berlin Prenzlauer Berg with their
  nightly price and features (libpysal example ``berlin``), EPSG:3857.

Both are reprojected to WGS84 with geopandas. The public region of each is a
public layer shipped beside the data, never the private points themselves: the
1854 street network for Soho, the neighbourhood boundary for Prenzlauer Berg.
The files are found in the installed package (``libpysal/examples``) or, failing
that, through ``libpysal.examples.get_path`` (which also searches libpysal's
download folder); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import numpy as np

from ..core.errors import DataError, OfflineError, ParamError
from ..core.params import Param
from .dataset import Dataset, DatasetMeta, make_dataset

LIBPYSAL_LICENSE = "BSD-3-Clause (libpysal)"

SNOW_CITATION = (
    "J. Snow. On the Mode of Communication of Cholera. London: John Churchill, 1849 (2nd ed. 1855, with the map "
    "of the 1854 Broad Street outbreak). Digitised deaths and pumps as bundled in libpysal (example 'snow_maps'), "
    "S. Rey et al., PySAL, https://pysal.org"
)
SNOW_LICENSE = "public domain (1854 data); digitised files distributed with libpysal under BSD-3-Clause"
BERLIN_CITATION = (
    "T. M. Oshan, Z. Li, W. Kang, L. J. Wolf, A. S. Fotheringham. mgwr: A Python Implementation of Multiscale "
    "Geographically Weighted Regression for Investigating Process Spatial Heterogeneity and Scale. ISPRS Int. J. "
    "Geo-Inf. 8(6):269, 2019 (preprint doi:10.31219/osf.io/bphw9); listings from Inside Airbnb "
    "(insideairbnb.com); bundled in libpysal (example 'berlin')"
)
BERLIN_LICENSE = "Inside Airbnb data CC BY 4.0; files distributed with libpysal under BSD-3-Clause"

BERLIN_VALUES = {
    "price": ("price", "nightly price (EUR)"),
    "review_score": ("review_sco", "review score (0-100)"),
    "accommodates": ("accommodat", "guests accommodated"),
    "bedrooms": ("bedrooms", "bedrooms"),
    "beds": ("beds", "beds"),
}


def example_file(folder: str, name: str) -> Path:
    """Path of a libpysal example file, without downloading; OfflineError if it is not there."""
    spec = importlib.util.find_spec("libpysal")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            p = Path(root) / "examples" / folder / name
            if p.is_file():
                return p
    if spec is not None:
        try:
            from libpysal import examples

            with contextlib.redirect_stdout(io.StringIO()):  # get_path prints when it finds nothing
                found = examples.get_path(name)
            if found and Path(found).is_file():
                return Path(found)
        except Exception:  # any failure here means "not available offline"
            pass
    raise OfflineError(
        f"the libpysal example file {folder}/{name} is not installed: it ships with libpysal>=4.12 "
        "(pip install libpysal); this workbench does not download it"
    )


def read_bundled(path: Path, layer_zip: bool = False):
    import geopandas as gpd

    try:
        return gpd.read_file(f"zip://{path}" if layer_zip else path)
    except Exception as exc:
        raise DataError(f"could not read the libpysal example {path.name}: {exc}") from None


def _lonlat(gdf) -> tuple[np.ndarray, np.ndarray]:
    g = gdf.to_crs(4326).geometry
    return g.x.to_numpy(), g.y.to_numpy()


def _bounds(gdf) -> tuple[float, float, float, float]:
    return tuple(float(v) for v in gdf.to_crs(4326).total_bounds)  # type: ignore[return-value]


def load_snow(unit: str = "death") -> Dataset:
    """John Snow's cholera deaths. ``unit="death"``: one location per death (392 rows; an
    address with k deaths appears k times). ``unit="address"``: the 324 addresses, ``value``
    = deaths there and ``flag`` = at least one death."""
    if unit not in ("death", "address"):
        raise ParamError(f"unit must be 'death' or 'address' (got {unit!r})")
    people = read_bundled(example_file("snow_maps", "SohoPeople.shp"))
    streets = read_bundled(example_file("snow_maps", "Soho_Network.shp"))
    lon, lat = _lonlat(people)
    deaths = people["Count"].to_numpy().astype(np.int64)
    meta = DatasetMeta(
        name="John Snow's cholera deaths, Soho 1854",
        source="snow_cholera",
        citation=SNOW_CITATION,
        license=SNOW_LICENSE,
        description=(
            f"{len(people)} Soho addresses with their cholera deaths in the 1854 Broad Street outbreak "
            f"({int(deaths.sum())} deaths at {int((deaths > 0).sum())} addresses in these files); the public "
            "region is the extent of the digitised 1854 street network."
        ),
        bbox=_bounds(streets),
        value_name="" if unit == "death" else "deaths at the address",
        flag_name="" if unit == "death" else "at least one death",
        extra={"unit": unit, "crs_in": str(people.crs), "deaths": int(deaths.sum()), "addresses": len(people)},
    )
    if unit == "death":
        idx = np.repeat(np.arange(deaths.size), deaths)
        return make_dataset(lon[idx], lat[idx], meta)
    return make_dataset(lon, lat, meta, value=deaths.astype(np.float64), flag=deaths > 0)


def load_berlin(value: str = "price") -> Dataset:
    """Airbnb listings in Berlin Prenzlauer Berg; ``value`` = the price (or another listed feature)."""
    if value not in BERLIN_VALUES:
        raise ParamError(f"value must be one of {', '.join(BERLIN_VALUES)} (got {value!r})")
    listings = read_bundled(example_file("berlin", "prenzlauer.zip"), layer_zip=True)
    boundary = read_bundled(example_file("berlin", "prenz_bound.zip"), layer_zip=True)
    lon, lat = _lonlat(listings)
    col, label = BERLIN_VALUES[value]
    meta = DatasetMeta(
        name="Airbnb listings, Berlin Prenzlauer Berg",
        source="berlin_airbnb",
        citation=BERLIN_CITATION,
        license=BERLIN_LICENSE,
        description=(
            f"{len(listings):,} Airbnb listings with price and features; the public region is the "
            "Prenzlauer Berg boundary."
        ),
        bbox=_bounds(boundary),
        value_name=label,
        extra={"crs_in": str(listings.crs), "columns": [c for c in listings.columns if c != "geometry"]},
    )
    return make_dataset(lon, lat, meta, value=listings[col].to_numpy(dtype=np.float64))


def _register() -> None:
    from .registry import Source, add

    add(
        Source(
            key="snow_cholera",
            label="John Snow's cholera deaths, Soho 1854 (libpysal)",
            kind="builtin",
            description="The 1854 Broad Street cholera outbreak: deaths by address (real, small, offline).",
            loader=load_snow,
            params=(
                Param(
                    "unit",
                    "choice",
                    "death",
                    "one location per death, or one per address with its deaths as value",
                    choices=("death", "address"),
                ),
            ),
            citation=SNOW_CITATION,
            license=SNOW_LICENSE,
            extra={"not_people": ("unit",)},  # deaths or addresses: the same deaths either way
        )
    )
    add(
        Source(
            key="berlin_airbnb",
            label="Airbnb listings, Berlin Prenzlauer Berg (libpysal)",
            kind="builtin",
            description="2,203 Airbnb listings with nightly prices (real, small, offline).",
            loader=load_berlin,
            params=(
                Param("value", "choice", "price", "listing feature used as the value", choices=tuple(BERLIN_VALUES)),
            ),
            citation=BERLIN_CITATION,
            license=BERLIN_LICENSE,
            extra={"not_people": ("value",)},  # which feature is the value: the same listings
        )
    )


_register()
