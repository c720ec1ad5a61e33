"""The page as a file: self-contained, its scripts pinned by the Content-Security-Policy, no string of a trace
left unescaped, bars without outlines, the same colors across reports, and a size cap."""
import base64
import hashlib
import json
import re

import pytest
from report_traces import KERNEL_EVIL, META_EVIL, MPI_EVIL, PHASE_EVIL

from gpt2trace.format.reader import Trace, load
from gpt2trace.report import build
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp


def page_data(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html).group(1))


@pytest.fixture(scope="module")
def sample_html(sample_trace) -> str:
    return build(load(sample_trace)).html


def test_self_contained(sample_html):
    assert sample_html.startswith("<!DOCTYPE html>")
    assert "<script src" not in sample_html and "<link" not in sample_html
    assert "plotly.js" in sample_html                                     # embedded, not fetched


def test_only_the_pages_own_scripts_may_run(sample_html):
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', sample_html).group(1)
    assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    inline = re.findall(r"<script>(.*?)</script>", sample_html, flags=re.S)
    assert len(inline) == 2                                               # plotly.js and the page's script
    for code in inline:
        digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp


def test_figures_bars_have_no_outline(sample_html):
    figs = page_data(sample_html)["figures"]
    bars = [t for f in figs.values() if f for t in f["data"] if t["type"] == "bar"]
    assert bars and all(t["marker"]["line"]["width"] == 0 for t in bars)


def test_no_string_from_the_trace_is_left_raw(malicious_trace):
    html = build(load(malicious_trace)).html
    for evil in (KERNEL_EVIL, PHASE_EVIL, MPI_EVIL, META_EVIL, "<img src=x onerror=alert(5)>"):
        assert evil not in html
    data = page_data(html)                                               # the data still holds the names as they are
    names = {c["name"] for v in data["timeline"]["views"] for c in v["cats"]}
    assert {KERNEL_EVIL, PHASE_EVIL, MPI_EVIL} <= names


def test_a_kernel_has_the_same_color_in_every_report(sample_html, two_rank_trace):
    colors = []
    for html in (sample_html, build(load(two_rank_trace)).html):
        kernels = next(v for v in page_data(html)["timeline"]["views"] if v["key"] == "kernels")
        colors.append({c["name"]: c["color"] for c in kernels["cats"]})
    common = set(colors[0]) & set(colors[1])
    assert "matmul_forward" in common and all(colors[0][k] == colors[1][k] for k in common)


def test_a_page_over_the_cap_loses_its_finest_levels():
    trace = Trace.from_table(syn.generate(syn.SyntheticConfig(ranks=2, threads=4, steps=40, layers=4)))
    full = build(trace)
    capped = build(trace, max_bytes=len(full.html) - 1)
    levels = lambda html: sum(len(v["levels"]) for v in page_data(html)["timeline"]["views"])  # noqa: E731
    assert levels(capped.html) < levels(full.html) and len(capped.html) <= len(full.html) - 1


def test_a_pipeline_has_its_section_and_chart(sample_html):
    trace = Trace.from_table(sp.generate(sp.PipelineConfig(stages=4, micro_batches=4, slow_stage=(1, 2.0))))
    html = build(trace).html
    section = re.search(r'<section id="pipeline">(.*?)</section>', html, flags=re.S).group(1)
    for text in ("ideal bubble (P-1)/(M+P-1)", "42.9%", "Bubble per stage", "Late Sender waits between stages",
                 "What the late stage computed", "from stage 1 (rank 1)"):
        assert text in section
    fig = page_data(html)["figures"]["fig-pipeline"]
    assert [t["name"] for t in fig["data"]] == ["p2p MPI (waiting for a neighbour)", "other MPI", "idle", "bubble"]
    assert fig["layout"]["shapes"][0]["y0"] == pytest.approx(100 * 3 / 7)        # the ideal, dashed
    # no pipeline: no section, no chart
    assert 'id="pipeline"' not in sample_html and page_data(sample_html)["figures"]["fig-pipeline"] is None
