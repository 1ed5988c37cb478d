"""The HTML report is a Jinja template beside the code, rendered with autoescaping."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from engine.run import RunConfig, run
from ui import report
from ui.colors import ColourScale


@pytest.fixture(scope="module")
def small_run():
    return run(RunConfig(dataset="synthetic:polycentric", dataset_options={"n": 3000}, mechanism="identity", depth=5))


def _doc(r, link=""):
    return report.html_report(r, ColourScale.shared(r.truth, r.release.domain.cell**2 / 1e6), link)


def test_the_template_files_sit_beside_the_code():
    assert (report.TEMPLATES / "report.html.j2").is_file() and (report.TEMPLATES / "report.css").is_file()
    assert report.TEMPLATES.parent == report.Path(report.__file__).parent


def test_values_from_the_data_are_text_never_markup_or_template_code(small_run):
    meta = replace(
        small_run.dataset_meta,
        name="{{ 7 * 7 }} {% raw %}",
        description='<img src=x onerror="alert(1)"> & co',
        license='it\'s "open"',
    )
    doc = _doc(replace(small_run, dataset_meta=meta), link='http://127.0.0.1/?a=1&b="2"')
    assert "{{ 7 * 7 }} {% raw %}" in doc and ">49<" not in doc  # shown, not evaluated
    assert "<img src=x" not in doc and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt; &amp; co" in doc
    assert "it&#39;s &#34;open&#34;" in doc
    assert 'href="http://127.0.0.1/?a=1&amp;b=&#34;2&#34;"' in doc  # the one link, its quote escaped
    assert len(re.findall(r"<img ", doc)) == 3  # the true map, the private map, the legend: nothing injected


def test_the_css_is_inline_and_whole(small_run):
    doc = _doc(small_run)
    css = (report.TEMPLATES / "report.css").read_text().strip()
    style = re.search(r"<style>(.*?)</style>", doc, re.S).group(1)
    assert style.strip() == css  # included raw: its quotes ("Segoe UI") are not escaped
    assert '"Segoe UI"' in style
