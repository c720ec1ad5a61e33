"""The communication matrix heatmap: its figure holds the analysis' pairs (a pipeline sample, by hand from its
bytes), none without MPI, and it draws in headless chromium with no console error."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from gpt2trace.format.reader import load
from gpt2trace.report import build, write

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
PIPELINE = SAMPLES / "small_2ranks_pp2_1f1b.parquet"


def figure(html: str) -> dict | None:
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html).group(1))
    return data["figures"]["fig-comm-matrix"]


def test_heatmap_holds_the_pairs():
    fig = figure(build(load(PIPELINE)).html)
    heat = fig["data"][0]
    assert heat["type"] == "heatmap" and heat["x"] == ["0", "1"] and heat["y"] == ["0", "1"]
    # analyzed steps 1-7: 1 -> 0 3,670,128 bytes, 0 -> 1 3,670,072 (tests/gpt2trace/cli/test_cli_comm_matrix.py)
    # + the embedding group's 1,835,008 each way; the diagonal is empty
    z = np.array([[np.nan if v is None else v for v in row] for row in heat["z"]])
    assert np.isnan(z[0, 0]) and np.isnan(z[1, 1])
    assert z[0, 1] == pytest.approx((3_670_072 + 1_835_008) / 1e6) and z[1, 0] == pytest.approx(
        (3_670_128 + 1_835_008) / 1e6)
    assert heat["text"][1][0].startswith("rank 1 -> rank 0: 5,505,136 bytes in 49 messages")


def test_no_mpi_no_heatmap():
    html = build(load(SAMPLES / "tiny_2threads.parquet")).html
    assert figure(html) is None and "Communication matrix" in html      # said, not silently left out


@pytest.mark.browser
def test_heatmap_draws_in_chromium(browser, tmp_path, screenshots):
    out = tmp_path / "pipeline.html"
    write(load(PIPELINE), out)
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(out.as_uri())
    end = time.monotonic() + 60
    while not page.evaluate("document.body.dataset.ready === '1' || !!document.body.dataset.error"):
        assert time.monotonic() < end, "the report did not finish loading"
        time.sleep(0.05)
    assert not page.evaluate("document.body.dataset.error")
    page.locator("#fig-comm-matrix").scroll_into_view_if_needed()     # the charts draw when scrolled near
    while not page.evaluate("document.querySelectorAll('#fig-comm-matrix .main-svg').length > 0"):
        assert time.monotonic() < end, "the communication matrix was not drawn once in view"
        time.sleep(0.05)
    # plotly draws the heatmap as an image of its cells
    assert page.evaluate("document.querySelectorAll('#fig-comm-matrix .hm image').length") == 1
    page.locator("#fig-comm-matrix").screenshot(path=str(screenshots / "comm_matrix.png"))
    assert errors == []
    page.close()
