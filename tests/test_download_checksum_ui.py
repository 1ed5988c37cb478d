"""The dashboard says, before a download, what the file will be checked against."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _info(ds: str) -> str:
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({"ds": ds, "res": "32"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return " ".join(str(i.value) for i in at.sidebar.info)


def test_the_download_box_names_the_hash_or_says_none_is_published():
    from engine.data.online import SF_CABS

    gowalla = _info("gowalla:chicago")
    assert "not on this machine yet" in gowalla and "No SHA-256 is published for this file" in gowalla
    cabs = _info("sf_cabs")
    assert f"SHA-256 {SF_CABS.sha256[:12]}" in cabs and "other bytes are refused" in cabs
