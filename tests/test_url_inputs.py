"""What a link can make the server do.

Every invalid URL parameter gets a specific message naming it; with ``run=1`` an invalid link runs
nothing and spends nothing; a download address in the URL is ignored (only the catalogue's address
is ever fetched).
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import time

import pytest
from streamlit.testing.v1 import AppTest

from tests.support.app import APP, SMALL, rerun_until, unescaped
from tests.support.waiting import wait_until

# (page, parameter, value, fragment of the message)
BAD = [
    ("explore", "eps", "abc", "is not a number"),
    ("explore", "eps", "-1", "between"),
    ("explore", "eps", "0", "between"),
    ("explore", "eps", "1e9", "between"),
    ("explore", "eps", "nan", "finite number"),
    ("explore", "eps", "inf", "finite number"),
    ("explore", "seed", "-1", "whole number"),
    ("explore", "seed", "1.5", "whole number"),
    ("explore", "seed", str(2**64), "at most"),
    ("explore", "seed", "1e30", "whole number"),
    ("explore", "seed", "abc", "whole number"),
    ("explore", "n", "-5", "whole number"),
    ("explore", "n", "1e30", "whole number"),
    ("explore", "n", str(2**40), "at most"),
    ("explore", "n", "x", "whole number"),
    ("explore", "res", "100", ""),
    ("explore", "res", "0", ""),
    ("explore", "res", "2048", ""),
    ("explore", "res", "abc", ""),
    ("explore", "mech", "nonexistent", "unknown mechanism"),
    ("explore", "mech", "../../etc/passwd", "unknown mechanism"),
    ("explore", "mech", "<script>alert(1)</script>", "unknown mechanism"),
    ("explore", "ds", "nonexistent", "unknown dataset"),
    ("explore", "ds", "file:0123456789abcdef", "unknown dataset"),
    ("explore", "ds", "upload:AAAAAAAAAAAAAAAAAAAAAAAA", "unknown dataset"),
    ("explore", "ds", "../../etc/passwd", "unknown dataset"),
    ("explore", "ds", "file", "unknown dataset"),
    ("explore", "d.n", "-1", ""),
    ("explore", "d.n", "abc", "not a valid int"),
    ("explore", "d.n", "1e30", ""),
    ("explore", "scale", "xyz", "expected one of"),
    ("explore", "units", "parsecs", "expected one of"),
    ("explore", "cmap", "jet", "expected one of"),
    ("explore", "basemap", "maybe", "expected 1/0"),
    ("explore", "outlines", "2", "expected 1/0"),
    ("explore", "secure", "2", "expected 1/0"),
    ("explore", "baselines", "perhaps", "expected 1/0"),
    ("compare", "mechs", "identity,zzz", "unknown mechanism"),
    ("compare", "mechs", "identity,../x", "unknown mechanism"),
    ("tradeoffs", "trials", "999", "from 1 to 50"),
    ("tradeoffs", "trials", "abc", "whole number"),
    ("tradeoffs", "trials", "0", "from 1 to 50"),
    ("tradeoffs", "eps_list", "a,b", "is not a number"),
    ("tradeoffs", "eps_list", "0.1,1e9", "between"),
    ("tradeoffs", "users_list", "1000,7", "expected one of"),
    ("tradeoffs", "x", "time", "expected one of"),
    ("tradeoffs", "logy", "sometimes", "expected 1/0"),
    ("ranges", "wq", "1e30", "whole number"),
    ("ranges", "wq", "3", "from 10 to 5,000"),
    ("methods", "family", "quantum", "expected one of"),
]


def open_with(page: str, **qp) -> AppTest:
    """The app opened from a link to ``page`` with the query ``qp``. AppTest always starts on the default
    page (Explore) and a page switch clears the query, so for another page the link's query is captured
    on a first run without ``run`` and ``run`` is then put in the captured link, as opening the link on
    that page would have it."""
    at = AppTest.from_file(APP, default_timeout=90)
    run = qp.pop("run", None) if page != "explore" else None
    at.query_params.update({**SMALL, **qp})
    at.run()
    if page != "explore":
        if run is not None:
            at.session_state["_url0"] = {**at.session_state["_url0"], "run": run}
        at.switch_page(f"pages/{page}.py").run()
        at.run()
    return at


@pytest.mark.parametrize("page,name,value,fragment", BAD, ids=[f"{p}-{n}={v}"[:60] for p, n, v, _ in BAD])
def test_an_invalid_link_is_named_and_spends_nothing(page, name, value, fragment):
    at = open_with(page, **{name: value, "run": "1"})
    assert not at.exception, [e.value for e in at.exception]
    warns = " ".join(unescaped(w.value) for w in at.warning)
    assert f"URL parameter '{name}=" in warns, warns
    assert fragment in warns, warns
    from tests.support.budget import evaluated_total, ledger_total

    state = at.session_state
    assert ledger_total("synthetic:polycentric", {"n": 3000}) == 0  # nothing released, no ε spent
    assert evaluated_total("synthetic:polycentric", {"n": 3000}) == 0  # nor run
    assert not (state["_groups"] if "_groups" in state else {})  # nothing submitted


def test_a_valid_link_still_runs():
    at = open_with("explore", eps="0.5", seed="3", run="1", baselines="0")
    from tests.support.budget import evaluated_total

    rerun_until(at, lambda a: evaluated_total("synthetic:polycentric", {"n": 3000}) != 0, "the link's run", poll=0)
    assert evaluated_total("synthetic:polycentric", {"n": 3000}) == pytest.approx(0.5)  # the link ran and booked


class Recorder:
    """An HTTP server on 127.0.0.1 recording each request's path (serves a small file)."""

    def __init__(self):
        got = self.paths = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                got.append(self.path)
                body = b"0123456789" * 100
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_a_download_address_in_the_url_is_never_fetched():
    """``?ds=…&d.url=http://attacker`` plus Download fetched the attacker's address (a port scanner, and
    a way to make the server download 2 GiB). Only the catalogue's address may be fetched."""
    from engine.core.params import Param
    from engine.data.online import download, is_cached
    from engine.data.registry import _SOURCES, Source, add
    from engine.data.synthetic import generate

    catalogue, attacker = Recorder(), Recorder()
    good = catalogue.url + "/city.bin"

    def loader(url):
        download(url, sha256=hashlib.sha256(b"0123456789" * 100).hexdigest(), max_bytes=10**6)
        return generate("monocentric", 2000, 0)

    add(
        Source(
            key="_test_online_url",
            label="Test online city",
            kind="online",
            description="Served by the test on 127.0.0.1.",
            loader=loader,
            params=(Param("url", "str", good, "address"),),
            offline=False,
            extra={"cached": lambda: is_cached(good)},
        )
    )
    try:
        at = AppTest.from_file(APP, default_timeout=90)
        at.query_params.update({**SMALL, "ds": "_test_online_url", "d.url": attacker.url + "/probe"})
        at.run()
        assert not [w for w in at.sidebar.text_input if w.key and w.key.endswith(".url")]  # no address field
        at.sidebar.button(key="dl__test_online_url").click().run()
        wait_until(lambda: is_cached(good), "the download")
        time.sleep(0.3)
        assert catalogue.paths == ["/city.bin"]
        assert attacker.paths == []
        assert "d.url" not in at.query_params
    finally:
        _SOURCES.pop("_test_online_url", None)
        catalogue.close()
        attacker.close()


def test_a_region_path_on_the_server_is_read_only_from_the_command_line(tmp_path, monkeypatch):
    """Laplace over regions reads a polygon file by its path on the command line; on the dashboard it counts the
    analysis's regions (the sidebar's Regions: grid, hexagons or an upload), so a link naming a file of the server
    as its parameter is never read, and no field takes a path."""
    import engine.data.region_geometry as regions

    secret = tmp_path / "server_only.geojson"
    secret.write_text('{"type": "FeatureCollection", "features": []}')
    opened = []
    monkeypatch.setattr(regions, "parse_spec", lambda spec, _f=regions.parse_spec: opened.append(spec) or _f(spec))
    at = open_with("explore", mech="laplace_regions", **{"p.laplace_regions.regions": str(secret)}, run="1")
    assert not at.exception, [e.value for e in at.exception]
    assert not any(str(secret) in s for s in opened)  # never parsed, so never opened
    assert not [w for w in at.sidebar.text_input if w.key == "cfg.p.laplace_regions.regions"]
    assert at.segmented_control(key="regions.kind").value == "H3 hexagons"  # what it counts, in the sidebar
    assert any(s.startswith("h3:") for s in opened)
