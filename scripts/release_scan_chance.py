"""How often the release scan (tests/support/release_scan.py) finds a private statistic in a clean release by chance
(BENCHMARKS.md "The release scan's chance findings").

``--releases`` Release-mode runs of flat one-hot (``python -m engine release``, fresh entropy, regions off and on in
turn) on the scan test's private file (1,987 people, 4,632 records), each scanned as test_release_scan.py scans it
(findings, the noise check, the frame); then the GeoTIFF of the last one scanned ``--reads`` times (each read a
fresh in-memory file for GDAL); then the chance findings a release's undecoded binary bytes (compressed streams,
modelled as uniform random bytes: a k-byte form at a given place with probability 256^-k) would give, with the
forms the scan searches there and with the float32 forms too.

    python scripts/release_scan_chance.py [--releases 300] [--reads 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from engine.__main__ import main  # noqa: E402
from tests import test_release_scan as T  # noqa: E402
from tests.support import release_scan as R  # noqa: E402


def release(private, out: Path, regions: bool) -> tuple[dict, dict]:
    argv = ["release", "--dataset", "file", "--data-opt", f"path={private.csv}", "--mechanism", "flat_onehot"]
    argv += ["--epsilon", "1", "--depth", "5", "--out", str(out), "--format", "geotiff,geoparquet,geojson,csv"]
    if regions:
        argv += ["--regions", f"{private.regions}:code", "--region-names", "name"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}, json.loads(printed.getvalue())


def chance(files: dict, secrets: R.Secrets) -> tuple[int, float, float]:
    """(undecoded binary bytes, expected chance findings in them with the forms searched there, and with the
    float32 forms too)."""
    _, numeric, binary, _ = R._patterns(secrets)
    text = [f.encode() for f in numeric]
    wide = [b for b in binary if len(b) == 8]
    size, now, all_ = 0, 0.0, 0.0
    for name, data in files.items():
        for _, piece in R.parts(name, data):
            if not isinstance(piece, bytes) or isinstance(piece, R.Values):
                continue
            with contextlib.suppress(UnicodeDecodeError):
                piece.decode("utf-8")
                continue  # a text file: its numbers are the release's, checked as such
            size += len(piece)
            now += sum(max(len(piece) - len(f) + 1, 0) * 256.0 ** -len(f) for f in text + wide)
            all_ += sum(max(len(piece) - len(f) + 1, 0) * 256.0 ** -len(f) for f in text + list(binary))
    return size, now, all_


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", type=int, default=300)
    ap.add_argument("--reads", type=int, default=20_000)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="scan-chance"))
    os.environ["HEATMAP_CACHE_DIR"] = str(tmp / "cache")
    base = tmp / "srv-qzx7"
    csv = R.private_city(base / "srv-private-qzx7", "clinic_visits_qzx.csv")
    private = SimpleNamespace(base=base, csv=csv, regions=R.region_file(base / "srv-public-qzx7", "barrios.geojson"))
    found, noisy, frames = [], 0, set()
    t = time.process_time()
    for i in range(a.releases):
        os.environ["HEATMAP_LEDGER_DB"] = str(tmp / f"ledger{i}.sqlite3")  # a ledger of its own, as each test's
        files, printed = release(private, tmp / f"r{i}", regions=bool(i % 2))
        fp = R.hex_forms("the ledger's fingerprint of the file", printed["dataset_fingerprint"].split(":")[-1])
        secrets = T.secrets(private, files, folders=[tmp], texts=fp)
        found += [f"release {i}: {f}" for f in R.scan(files, secrets)]
        try:
            T.assert_noisy(files, private, "flat_onehot", bool(i % 2))
        except AssertionError as exc:
            noisy += 1
            print(f"release {i}: {exc}")
        g = json.loads(files["manifest.json"])["grid"]
        frames.add((g["x0_m"], g["y0_m"], g["cell_m"]))
    print(f"{a.releases} releases ({time.process_time() - t:.0f} s CPU): {len(found)} findings, {noisy} failures of")
    print(f"the noise check, {len(frames)} distinct frames (x0, y0, cell in metres): {sorted(frames)}")
    print("\n".join(found))
    tif = {"heatmap.tif": files["heatmap.tif"]}
    hits = sum(len(R.scan(tif, secrets)) for _ in range(a.reads))
    print(f"the last GeoTIFF read and scanned {a.reads} times: {hits} findings")
    size, now, all_ = chance(files, secrets)
    print(f"the last release's undecoded binary bytes: {size:,}; expected chance findings per release in them, as")
    print(f"uniform random bytes: {now:.1e} with the forms searched there, {all_:.1e} with the float32 forms too")


if __name__ == "__main__":
    run()
