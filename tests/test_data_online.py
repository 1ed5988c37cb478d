"""Online sources, exercised end to end against a real HTTP server on 127.0.0.1.

The files are small ones the tests make in the formats of the real ones (SNAP
check-ins .txt.gz, the SF cabs .npy, a population GeoTIFF, bare or zipped).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import socket
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from engine.core.errors import DataError, OfflineError, ParamError
from engine.data import catalogue, online, sources
from engine.data.download import UncheckedDownloadWarning, cache_path


class _Server:
    """A real HTTP server serving in-memory files; counts requests per path."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.lie_length: dict[str, int] = {}  # path -> Content-Length announced (to cut a transfer short)
        self.hits: dict[str, int] = {}
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                srv.hits[self.path] = srv.hits.get(self.path, 0) + 1
                body = srv.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(srv.lie_length.get(self.path, len(body))))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server():
    s = _Server()
    yield s
    s.close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stray() -> list:
    """Files in the download folder that are not a cached download (a temporary left behind)."""
    return [p for p in online.downloads_dir().iterdir() if p.is_file() and not re.match(r"^[0-9a-f]{12}-", p.name)]


def _inside(key, n, rng):
    lon0, lat0, lon1, lat1 = catalogue.city(key).bbox
    return rng.uniform(lat0, lat1, n), rng.uniform(lon0, lon1, n)


def _checkins_gz(rng) -> tuple[bytes, dict]:
    """SNAP format: user, ISO time, lat, lon, location id (tab separated)."""
    lines, truth = [], {"sf": 0, "sf_jan": 0, "chicago": 0, "sf_users": set()}
    lat, lon = _inside("san_francisco", 300, rng)
    for i in range(300):
        month = "2010-01" if i % 3 == 0 else "2010-03"
        user = i % 40
        lines.append(f"{user}\t{month}-15T12:00:00Z\t{lat[i]:.6f}\t{lon[i]:.6f}\t{1000 + i}")
        truth["sf"] += 1
        truth["sf_jan"] += month == "2010-01"
        truth["sf_users"].add(user)
    lat, lon = _inside("chicago", 120, rng)
    for i in range(120):
        lines.append(f"{500 + i % 10}\t2010-02-01T00:00:00Z\t{lat[i]:.6f}\t{lon[i]:.6f}\t{2000 + i}")
        truth["chicago"] += 1
    lines.append("7\t2010-01-02T00:00:00Z\t0.0\t0.0\t9")  # unknown position, as in the SNAP files
    lines.append("8\t2010-01-02T00:00:00Z\t\t\t9")
    lines.append("9\t2010-01-02T00:00:00Z\t48.85\t2.35\t10")  # Paris: outside every US box
    return gzip.compress(("\n".join(lines) + "\n").encode()), truth


# ------------------------------------------------------------------ check-ins
def test_gowalla_download_progress_cache_and_cut(server, rng):
    data, truth = _checkins_gz(rng)
    server.files["/snap/loc-gowalla_totalCheckins.txt.gz"] = data
    url = server.url("/snap/loc-gowalla_totalCheckins.txt.gz")
    calls = []
    ds = online.load_checkins(
        "gowalla", "san_francisco", url=url, progress=lambda done, total: calls.append((done, total))
    )
    assert len(ds) == truth["sf"]
    assert ds.user_id is not None and ds.n_users == len(truth["sf_users"])
    assert ds.meta.source == "gowalla:san_francisco" and ds.meta.bbox == catalogue.city("san_francisco").bbox
    assert "Cho" in ds.meta.citation and ds.meta.extra["dropped_no_location"] == 2
    assert calls[0] == (0, len(data)) and calls[-1] == (len(data), len(data))
    assert all(b >= a for (a, _), (b, _) in zip(calls, calls[1:]))
    assert server.hits["/snap/loc-gowalla_totalCheckins.txt.gz"] == 1
    assert online.is_cached(url) and not _stray()
    # second load: from the cache, no request
    again = online.load_checkins("gowalla", "san_francisco", url=url)
    np.testing.assert_array_equal(again.lonlat, ds.lonlat)
    # another city and a period: cut from the cached file, still no request
    chi = online.load_checkins("gowalla", "chicago", url=url)
    assert len(chi) == truth["chicago"]
    jan = online.load_checkins("gowalla", "san_francisco", url=url, start="2010-01-01", end="2010-02-01")
    assert len(jan) == truth["sf_jan"]
    assert server.hits["/snap/loc-gowalla_totalCheckins.txt.gz"] == 1
    with pytest.raises(DataError, match="no Gowalla check-ins inside"):
        online.load_checkins("gowalla", "tokyo", url=url)


def test_local_copy_of_a_snap_file(rng, tmp_path):
    data, truth = _checkins_gz(rng)
    local = tmp_path / "loc-gowalla_totalCheckins.txt.gz"
    local.write_bytes(data)
    ds = online.load_checkins("gowalla", "chicago", path=local)
    assert len(ds) == truth["chicago"]
    plain = tmp_path / "checkins.txt"
    plain.write_bytes(gzip.decompress(data))
    assert len(online.load_checkins("gowalla", "chicago", path=plain)) == truth["chicago"]
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(data[:40])
    with pytest.raises(DataError, match="unusable"):
        online.load_checkins("gowalla", "chicago", path=bad)
    assert bad.exists()  # the user's own file is never deleted


def test_brightkite_through_the_registry_source(server, rng):
    data, truth = _checkins_gz(rng)
    server.files["/bk/loc-brightkite_totalCheckins.txt.gz"] = data
    src = sources()["brightkite:chicago"]
    assert src.kind == "online" and src.schema().defaults()["url"] == online.BRIGHTKITE_URL
    ds = src.load(url=server.url("/bk/loc-brightkite_totalCheckins.txt.gz"))
    assert len(ds) == truth["chicago"] and ds.meta.name.startswith("Brightkite")
    with pytest.raises(Exception, match="2010-01-31"):
        src.load(url=server.url("/bk/loc-brightkite_totalCheckins.txt.gz"), start="Jan 2010")


def test_http_404_is_a_data_error_not_offline(server):
    with pytest.raises(DataError, match="HTTP 404") as exc:
        online.load_checkins("gowalla", "miami", url=server.url("/missing/loc-gowalla_totalCheckins.txt.gz"))
    assert not isinstance(exc.value, OfflineError)


def test_truncated_gzip_is_rejected_and_nothing_is_cached(server, rng):
    data, _ = _checkins_gz(rng)
    path = "/trunc/loc-gowalla_totalCheckins.txt.gz"
    server.files[path] = data[: len(data) // 2]  # complete transfer of an incomplete archive
    url = server.url(path)
    with pytest.raises(DataError, match="gzip"):
        online.load_checkins("gowalla", "san_francisco", url=url)
    assert not online.is_cached(url)
    assert not _stray()


def test_transfer_cut_short_is_reported(server, rng):
    data, _ = _checkins_gz(rng)
    path = "/short/loc-gowalla_totalCheckins.txt.gz"
    server.files[path] = data
    server.lie_length[path] = len(data) + 5000  # the server closes before sending all it announced
    url = server.url(path)
    with pytest.raises(DataError, match="cut short"):
        online.load_checkins("gowalla", "san_francisco", url=url)
    assert not online.is_cached(url)


def test_corrupt_cached_file_is_removed_with_a_clear_error(server):
    url = server.url("/never-served/loc-gowalla_totalCheckins.txt.gz")
    p = cache_path(url)
    p.write_bytes(b"\x1f\x8b\x08\x00garbage that is not deflate data")
    with pytest.raises(DataError, match="corrupt.*removed"):
        online.load_checkins("gowalla", "boston", url=url)
    assert not p.exists()


def test_size_limit(server, rng):
    data, _ = _checkins_gz(rng)
    server.files["/big/loc-gowalla_totalCheckins.txt.gz"] = data
    url = server.url("/big/loc-gowalla_totalCheckins.txt.gz")
    with pytest.raises(DataError, match="over the limit"):
        online.load_checkins("gowalla", "san_francisco", url=url, max_bytes=100)
    assert not online.is_cached(url)


def _closed_port_url(path: str) -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}{path}"


def test_offline_is_an_offline_error():
    with pytest.raises(OfflineError, match="offline"):
        online.load_checkins(
            "gowalla", "milwaukee", url=_closed_port_url("/loc-gowalla_totalCheckins.txt.gz"), timeout=5
        )
    with pytest.raises(OfflineError):
        online.load_sf_cabs(url=_closed_port_url("/CABS_SFS.npy"), timeout=5)


def test_registry_offline_flag_follows_the_cache():
    key = "gowalla:kansas_city"
    assert sources()[key].offline is False
    p = cache_path(online.GOWALLA_URL)
    p.write_bytes(b"placeholder")
    try:
        assert sources()[key].offline is True
        assert sources()["gowalla:fargo"].offline is True  # every city is cut from the same file
    finally:
        p.unlink()
    assert sources()[key].offline is False
    assert all(s.offline for s in sources().values() if s.kind in ("synthetic", "builtin"))


def test_every_catalogue_city_has_its_check_in_sources():
    keys = set(sources())
    for city in catalogue.cities():
        if city in catalogue.RASTER_ONLY:
            assert f"hdx:{city}" in keys
            continue
        assert f"gowalla:{city}" in keys and f"brightkite:{city}" in keys
    assert "sf_cabs" in keys


# ------------------------------------------------------------------ SF cabs
def _cabs_npy(rng, n=400) -> tuple[bytes, np.ndarray]:
    lat = rng.uniform(37.70794, 37.81944, n)
    lon = rng.uniform(-122.50764, -122.35978, n)
    arr = np.column_stack([lat, lon])
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue(), arr


def test_sf_cabs_download_and_local_path(server, rng, tmp_path):
    data, arr = _cabs_npy(rng)
    server.files["/snh/CABS_SFS.npy"] = data
    url = server.url("/snh/CABS_SFS.npy")
    seen = []
    ds = online.load_sf_cabs(url=url, sha256=_sha(data), progress=lambda d, t: seen.append(d))
    assert len(ds) == arr.shape[0] and seen[-1] == len(data)
    np.testing.assert_allclose(ds.lonlat[:, 1], arr[:, 0])  # column 0 is latitude
    assert ds.meta.bbox == catalogue.city("san_francisco").bbox
    online.load_sf_cabs(url=url, sha256=_sha(data))
    assert server.hits["/snh/CABS_SFS.npy"] == 1
    local = tmp_path / "cabs.npy"
    local.write_bytes(data)
    assert len(online.load_sf_cabs(path=local)) == arr.shape[0]
    with pytest.raises(DataError, match="no SF cabs file"):
        online.load_sf_cabs(path=tmp_path / "nope.npy")


def test_sf_cabs_corrupt_download_is_discarded(server):
    server.files["/bad/CABS_SFS.npy"] = b"\x93NUMPY garbage"
    url = server.url("/bad/CABS_SFS.npy")
    with pytest.raises(DataError, match="discarded"):  # the bytes are the expected ones, the format is not
        online.load_sf_cabs(url=url, sha256=_sha(b"\x93NUMPY garbage"))
    assert not online.is_cached(url)


# ------------------------------------------------------------------ population rasters
def _geotiff(values: np.ndarray, bbox, crs="EPSG:4326") -> bytes:
    import rasterio
    from affine import Affine

    h, w = values.shape
    tr = Affine((bbox[2] - bbox[0]) / w, 0.0, bbox[0], 0.0, -(bbox[3] - bbox[1]) / h, bbox[3])  # north-up
    buf = io.BytesIO()
    with rasterio.MemoryFile() as mem:
        with mem.open(
            driver="GTiff", height=h, width=w, count=1, dtype="float32", crs=crs, transform=tr, nodata=-99999
        ) as dst:
            dst.write(values.astype(np.float32), 1)
        buf.write(mem.read())
    return buf.getvalue()


def _population(rng, shape=(40, 30)) -> np.ndarray:
    v = rng.poisson(3.0, shape).astype(np.float64)
    v[:5, :] = 0  # an empty strip (the sea)
    v[10, 10] = -99999  # nodata
    return v


def test_population_raster_everyone_and_sampled(server, rng):
    vals = _population(rng)
    box = catalogue.city("mayotte").bbox
    server.files["/hdx/pop.tif"] = _geotiff(vals, box)
    url = server.url("/hdx/pop.tif")
    everyone = online.load_population_raster("mayotte", url=url, n=0, seed=1)
    people = vals[vals > 0].sum()  # integer counts: stochastic rounding is exact
    assert len(everyone) == people
    assert everyone.meta.source == "hdx:mayotte" and everyone.meta.license == "CC BY 4.0"
    lon, lat = everyone.lonlat.T
    assert (lat <= box[3]).all() and (lat >= box[1]).all()
    # rows 0-4 of the raster (the north) are empty: nobody lives there
    north = box[3] - 5 * (box[3] - box[1]) / vals.shape[0]
    assert (lat < north).all()
    sampled = online.load_population_raster("mayotte", url=url, n=2000, seed=1)
    assert len(sampled) == 2000
    again = online.load_population_raster("mayotte", url=url, n=2000, seed=1)
    np.testing.assert_array_equal(sampled.xy, again.xy)
    assert server.hits["/hdx/pop.tif"] == 1


def test_population_raster_zipped_and_projected(server, rng):
    from pyproj import Transformer

    vals = _population(rng, (20, 20))
    box = catalogue.city("lagos").bbox
    t = Transformer.from_crs("EPSG:4326", "EPSG:32631", always_xy=True)  # UTM 31N covers Lagos
    x0, y0 = t.transform(box[0], box[1])
    x1, y1 = t.transform(box[2], box[3])
    tif = _geotiff(vals, (x0, y0, x1, y1), crs="EPSG:32631")
    z = io.BytesIO()
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("population_nga_2018-10-01.tif", tif)
        zf.writestr("README.txt", "test")
    server.files["/hdx/population_nga.zip"] = z.getvalue()
    ds = online.load_population_raster("lagos", url=server.url("/hdx/population_nga.zip"), n=0)
    # the raster's corners stick out of the lon/lat box a little after reprojection: those people are cut
    assert 0.8 * vals[vals > 0].sum() <= len(ds) <= vals[vals > 0].sum()
    assert ds.meta.bbox == box


def test_population_raster_corrupt_and_not_covering(server, rng):
    server.files["/hdx/corrupt.tif"] = b"II*\x00" + bytes(rng.integers(0, 256, 500, dtype=np.uint8))
    url = server.url("/hdx/corrupt.tif")
    with pytest.raises(DataError, match="discarded"):
        online.load_population_raster("mayotte", url=url)
    assert not online.is_cached(url)
    server.files["/hdx/corrupt.zip"] = b"PK\x03\x04" + b"\x00" * 100
    with pytest.raises(DataError):
        online.load_population_raster("mayotte", url=server.url("/hdx/corrupt.zip"))
    server.files["/hdx/elsewhere.tif"] = _geotiff(_population(rng), (10.0, 10.0, 11.0, 11.0))
    with pytest.raises(DataError, match="does not cover"):
        online.load_population_raster("mayotte", url=server.url("/hdx/elsewhere.tif"))


def test_prefetch_reports_progress(server, rng):
    data, _ = _cabs_npy(rng, 50)
    server.files["/pre/CABS_SFS.npy"] = data
    seen = []
    p = online.prefetch(
        "sf_cabs", progress=lambda d, t: seen.append((d, t)), url=server.url("/pre/CABS_SFS.npy"), sha256=_sha(data)
    )
    assert p is not None and p.read_bytes() == data and seen[-1] == (len(data), len(data))
    assert online.prefetch("synthetic:polycentric") is None


# ------------------------------------------------------------------ content hashes
def test_a_tampered_file_is_refused_and_not_cached(server, rng):
    data, arr = _cabs_npy(rng)
    tampered = io.BytesIO()
    moved = arr.copy()
    moved[0] = (37.75, -122.45)  # one pick-up moved: still a valid file of the right shape
    np.save(tampered, moved)
    server.files["/tamper/CABS_SFS.npy"] = tampered.getvalue()
    url = server.url("/tamper/CABS_SFS.npy")
    with pytest.raises(DataError, match="does not have the expected SHA-256") as exc:
        online.load_sf_cabs(url=url, sha256=_sha(data))
    assert _sha(tampered.getvalue()) in str(exc.value) and "not cached" in str(exc.value)
    assert not online.is_cached(url) and not _stray()
    server.files["/tamper/CABS_SFS.npy"] = data  # the publisher's bytes again
    ds = online.load_sf_cabs(url=url, sha256=_sha(data))
    assert len(ds) == arr.shape[0] and ds.meta.extra["sha256"] == _sha(data)
    assert server.hits["/tamper/CABS_SFS.npy"] == 2


def test_a_mirror_must_serve_the_catalogues_bytes(server, rng):
    data, _ = _cabs_npy(rng)
    server.files["/mirror/CABS_SFS.npy"] = data
    url = server.url("/mirror/CABS_SFS.npy")
    assert online.SF_CABS.sha256 != _sha(data)
    with pytest.raises(DataError, match=online.SF_CABS.sha256):  # no sha256 given: the catalogue's applies
        online.load_sf_cabs(url=url)
    with pytest.raises(DataError, match=online.SF_CABS.sha256):
        online.prefetch("sf_cabs", url=url)
    assert not online.is_cached(url)


def test_a_cached_file_that_no_longer_matches_is_downloaded_again(server, rng):
    data, truth = _checkins_gz(rng)
    path = "/pinned/loc-gowalla_totalCheckins.txt.gz"
    server.files[path] = data
    url = server.url(path)
    assert len(online.load_checkins("gowalla", "chicago", url=url, sha256=_sha(data))) == truth["chicago"]
    other, _ = _checkins_gz(np.random.default_rng(7))
    cache_path(url).write_bytes(other)  # the cached copy changed on disk
    sf = online.load_checkins("gowalla", "san_francisco", url=url, sha256=_sha(data))  # a new cut reads the file again
    assert len(sf) == truth["sf"] and server.hits[path] == 2
    assert cache_path(url).read_bytes() == data


def test_a_file_without_a_known_hash_is_loaded_with_a_warning(server, rng):
    data, truth = _checkins_gz(rng)
    path = "/unchecked/loc-brightkite_totalCheckins.txt.gz"
    server.files[path] = data
    assert online.BRIGHTKITE.sha256 is None
    with pytest.warns(UncheckedDownloadWarning, match=_sha(data)):
        ds = online.load_checkins("brightkite", "chicago", url=server.url(path))
    assert len(ds) == truth["chicago"] and ds.meta.extra["sha256"] is None


def test_a_malformed_hash_is_a_parameter_error(server):
    with pytest.raises(ParamError, match="64 hexadecimal"):
        online.load_sf_cabs(url=server.url("/any/CABS_SFS.npy"), sha256="abc123")


def test_every_online_source_names_its_hash_or_why_none_is_known():
    online_sources = [s for s in sources().values() if s.kind == "online" and not s.key.startswith("_")]
    assert len(online_sources) > 20
    for src in online_sources:
        sha, why = src.extra["sha256"], src.extra["sha256_provenance"]
        assert sha is None or re.fullmatch(r"[0-9a-f]{64}", sha), src.key
        assert len(why) > 40, src.key
        if sha is None:
            assert "No SHA-256 is published" in src.description, src.key
        else:
            assert sha[:12] in src.description and "refused" in src.description, src.key
    assert sources()["sf_cabs"].extra["sha256"] == online.SF_CABS.sha256
