"""Uploaded CRS definitions never make PROJ open a server file or a URL.

A WKT ``BOUNDCRS`` with a ``PARAMETERFILE``, a WKT1 ``EXTENSION`` with ``+nadgrids=``, a PROJJSON
parameter holding a path, a geoid model: in a GeoParquet ``geo`` CRS, a Shapefile ``.prj`` or a
GeoPackage's ``gpkg_spatial_ref_sys``, each naming a FIFO. Opening a FIFO for reading blocks until a
writer comes, so a load that opened it would never end: the loads run in a child process with a
timeout, and the control (the same definition given straight to PROJ) is observed to block. Where
strace is installed, the child's file opens are traced as well.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import geopandas as gpd
import numpy as np
import pytest
import shapely
from pyproj import CRS

from engine.core.errors import DataError
from engine.data.files import load_file
from engine.data.files.crs import safe_crs
from tests.support.files import geoparquet, gp_blob, gpkg, shapefile_parts, zip_of

LON = np.linspace(-0.15, -0.07, 20)
LAT = np.linspace(51.50, 51.55, 20)
ROOT = Path(__file__).resolve().parents[1]

_OSGB = (
    'GEOGCRS["OSGB36",DATUM["OSGB 1936",ELLIPSOID["Airy 1830",6377563.396,299.3249646]],CS[ellipsoidal,2],'
    'AXIS["longitude",east],AXIS["latitude",north],UNIT["degree",0.0174532925199433]]'
)
_WGS84 = CRS.from_epsg(4326).to_wkt()


def bound_wkt(path: str, keyword: str = "PARAMETERFILE") -> str:
    return (
        f'BOUNDCRS[SOURCECRS[{_OSGB}],TARGETCRS[{_WGS84}],ABRIDGEDTRANSFORMATION["t",'
        f'METHOD["NTv2",ID["EPSG",9615]],{keyword}["Latitude and longitude difference file","{path}"]]]'
    )


def wkt1_extension(path: str, key: str = "nadgrids") -> str:
    return (
        'GEOGCS["OSGB36",DATUM["OSGB_1936",SPHEROID["Airy 1830",6377563.396,299.3249646]],PRIMEM["Greenwich",0],'
        f'UNIT["degree",0.0174532925199433],EXTENSION["PROJ4","+proj=longlat +ellps=airy +{key}={path} +no_defs"]]'
    )


def projjson(path: str) -> dict:
    return json.loads(CRS.from_wkt(bound_wkt("/dev/null-placeholder")).to_json().replace("/dev/null-placeholder", path))


def geoid_wkt(path: str) -> str:
    return (
        f'COMPOUNDCRS["c",{_OSGB.replace("CS[ellipsoidal,2]", "CS[ellipsoidal,2]")},'
        f'VERTCRS["h",VDATUM["v"],CS[vertical,1],AXIS["gravity-related height (H)",up],LENGTHUNIT["metre",1],'
        f'GEOIDMODEL["{path}"]]]'
    )


def definitions(path: str) -> dict:
    """Hostile CRS definitions naming ``path``, by name."""
    return {
        "boundcrs-parameterfile": bound_wkt(path),
        "boundcrs-parameterfile-lowercase": bound_wkt(path, "ParameterFile"),
        "boundcrs-relative": bound_wkt("./" + Path(path).name),
        "boundcrs-at-prefix": bound_wkt("@" + path),
        "boundcrs-url": bound_wkt("http://127.0.0.1:9/x.gsb"),
        "wkt1-nadgrids": wkt1_extension(path),
        "wkt1-geoidgrids": wkt1_extension(path, "geoidgrids"),
        "wkt1-init": wkt1_extension(path, "init"),
        "geoidmodel": geoid_wkt(path),
        "projjson-parameter-path": projjson(path),
        "projjson-as-string": json.dumps(projjson(path)),
    }


def _osgb_points():
    return gpd.GeoDataFrame(geometry=gpd.points_from_xy(LON, LAT))


def containers(name: str, definition) -> dict:
    """The definition in every file that can carry one, by file name."""
    out = {}

    def geo_edit(geo):
        geo["columns"]["geometry"]["crs"] = definition
        return json.dumps(geo).encode()

    out[f"{name}.parquet"] = geoparquet(_osgb_points().set_crs(4326), geo_edit)
    if isinstance(definition, str) and not definition.lstrip().startswith("{"):
        parts = shapefile_parts(_osgb_points().set_crs(4326))
        parts["points.prj"] = definition.encode()
        out[f"{name}.zip"] = zip_of(parts)
        rows = [(gp_blob(shapely.Point(x, y), 99), {}) for x, y in zip(LON, LAT)]
        out[f"{name}.gpkg"] = gpkg({"pts": rows}, srs=(99, "NONE", 99, definition))
    return out


_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from engine.core.errors import DataError, ParamError
    from engine.data.files import load_file
    out = {}
    for f in sorted(Path(sys.argv[1]).iterdir()):
        try:
            load_file(f.read_bytes(), f.name)
            out[f.name] = "loaded"
        except (DataError, ParamError) as exc:
            out[f.name] = str(exc)
    print(json.dumps(out))
    """
)

_CONTROL = textwrap.dedent(
    """
    import sys
    from pyproj import CRS, Transformer
    Transformer.from_crs(CRS.from_wkt(sys.argv[1]), 4326, always_xy=True).transform(-0.1, 51.5)
    print("done")
    """
)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "server_secret.gsb"
    os.mkfifo(path)
    return path


def test_proj_blocks_on_a_fifo_named_by_a_parameterfile(fifo, tmp_path):
    """The control: PROJ itself opens the file a BOUNDCRS names, so the FIFO observes an open."""
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", _CONTROL, bound_wkt(str(fifo))], cwd=tmp_path, timeout=15)


def test_hostile_crs_definitions_are_refused_without_opening_the_file(fifo, tmp_path):
    files = tmp_path / "uploads"
    files.mkdir()
    for name, definition in definitions(str(fifo)).items():
        for filename, data in containers(name, definition).items():
            (files / filename).write_bytes(data)
    n = len(list(files.iterdir()))
    assert n >= 27
    trace = tmp_path / "strace.txt"
    cmd = [sys.executable, "-c", _CHILD, str(files)]
    if shutil.which("strace"):
        cmd = ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(trace)] + cmd
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a load that opened the FIFO would block here until the timeout
    done = subprocess.run(cmd, cwd=fifo.parent, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == n
    for filename, msg in results.items():
        assert msg != "loaded", filename
        assert str(fifo) not in msg and tempfile.gettempdir() + "/" not in msg, (filename, msg)
        refused = "names a file, grid or network resource" in msg or "not understood" in msg
        assert refused or "does not describe a CRS" in msg, (filename, msg)
    flagged = [f for f, m in results.items() if "names a file, grid or network resource" in m]
    assert len(flagged) >= n - 3, results  # a few are malformed for PROJ anyway; none reach a transform
    if trace.exists():
        opened = [line for line in trace.read_text().splitlines() if fifo.name in line]
        assert opened == [], opened[:3]


def test_plain_crs_definitions_still_load(tmp_path):
    osgb = _osgb_points().set_crs(4326).to_crs(27700)
    parts = shapefile_parts(osgb)
    assert b"PROJCS" in parts["points.prj"]
    ds = load_file(zip_of(parts), "bng.zip")
    assert np.allclose(np.sort(ds.lonlat[:, 0]), np.sort(LON), atol=1e-6)
    ds = load_file(geoparquet(osgb), "bng.parquet")  # geopandas writes PROJJSON
    assert np.allclose(np.sort(ds.lonlat[:, 1]), np.sort(LAT), atol=1e-6)
    merc = _osgb_points().set_crs(4326).to_crs(3857)
    prj = CRS.from_epsg(3857).to_wkt("WKT1_GDAL")
    assert "+nadgrids=@null" in prj  # GDAL's Web Mercator: PROJ's built-in null grid, no file
    parts = shapefile_parts(merc)
    parts["points.prj"] = prj.encode()
    ds = load_file(zip_of(parts), "merc.zip")
    assert np.allclose(np.sort(ds.lonlat[:, 0]), np.sort(LON), atol=1e-6)


def test_safe_crs_checks_the_parsed_definition_too():
    """A definition without a suspicious token that PROJ still parses into a file parameter is refused."""
    with pytest.raises(DataError, match="names a file"):
        safe_crs(projjson("secret.gsb"), "x")
    assert safe_crs(CRS.from_epsg(27700).to_json_dict(), "x").to_epsg() == 27700
    assert safe_crs(CRS.from_epsg(27700).to_wkt(), "x").to_epsg() == 27700


def test_proj_network_is_off_and_no_search_path_is_an_upload_folder():
    import pyproj.datadir
    import pyproj.network

    assert not pyproj.network.is_network_enabled()
    tmp = os.path.realpath(tempfile.gettempdir())
    data = os.path.realpath(pyproj.datadir.get_data_dir())
    for path in data.split(os.pathsep):
        assert not os.path.realpath(path).startswith(tmp), path
