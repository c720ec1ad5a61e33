"""The charts draw the analysis' tables as given: hand-written result dicts in, plotly arrays out."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from gpt2trace.report import figures


def values(arr) -> np.ndarray:
    """A plotly array as the page gets it: a list, or {"dtype", "bdata", "shape"} (base64 of a typed array)."""
    if not isinstance(arr, dict):
        return np.array(arr, dtype=float)
    out = np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]).newbyteorder("<"))
    return out.reshape([int(n) for n in arr["shape"].split(",")]) if "shape" in arr else out


def test_step_durations():
    result = {"window": {"steps": [1, 2]}, "summary": {"outlier_steps": [2]},
              "step_phases": {"steps": [{"step": 0, "seconds": 0.006, "other_s": 0.001},
                                        {"step": 1, "seconds": 0.003, "other_s": 0.0},
                                        {"step": 2, "seconds": 0.004, "other_s": 0.0005}],
                              "phases": [{"step": s, "phase": p, "seconds": v} for p, vals in
                                         (("forward", (0.003, 0.002, 0.002)), ("backward", (0.002, 0.001, 0.0015)))
                                         for s, v in zip((0, 1, 2), vals)]}}
    fig = figures.step_durations(result)
    bars = [d for d in fig["data"] if d["type"] == "bar"]
    # one bar trace per phase in the analysis' order, then "other"; heights in ms
    assert [b["name"] for b in bars] == ["forward", "backward", "other (outside phases)"]
    assert values(bars[0]["y"]) == pytest.approx([3, 2, 2])
    assert values(bars[1]["y"]) == pytest.approx([2, 1, 1.5])
    assert values(bars[2]["y"]) == pytest.approx([1, 0, 0.5])
    # step 0 is outside the analyzed window: shaded; step 2 is labelled an outlier. Step 0 (6 ms) is not cut:
    # only steps over twice the tallest analyzed one (4 ms) are.
    assert [(s["x0"], s["x1"]) for s in fig["layout"]["shapes"]] == [(-0.5, 0.5)]
    assert [(a["x"], a["text"]) for a in fig["layout"]["annotations"]] == [(2, "outlier")]


def test_no_steps_no_chart():
    assert figures.step_durations({"step_phases": {"steps": [], "phases": []}}) is None
    assert figures.imbalance_heatmap({"kernel_threads": []}) is None
    assert figures.useful_histogram({"bursts": {"edges_s": [], "cells": []}}) is None


def test_imbalance_heatmap_leaves_threads_that_do_not_run_a_kernel_blank():
    rows = [{"kernel": "matmul_forward", "rank": 0, "thread": 0, "seconds": 2.0, "ratio": 0.5},
            {"kernel": "matmul_forward", "rank": 1, "thread": 0, "seconds": 6.0, "ratio": 1.5},
            {"kernel": "<b>enc</b>", "rank": 0, "thread": 0, "seconds": 1.0, "ratio": 1.0}]
    heat = figures.imbalance_heatmap({"kernel_threads": rows})["data"][0]
    assert heat["x"] == ["0.0", "1.0"] and heat["y"] == ["matmul_forward", "&lt;b&gt;enc&lt;/b&gt;"]
    z = values(heat["z"])
    assert z[0] == pytest.approx([0.5, 1.5])
    assert z[1][0] == 1 and np.isnan(z[1][1])                    # "<b>enc</b>" does not run on rank 1
    # the color scale is centered on 1 and spans the largest deviation, 0.5
    assert (heat["zmin"], heat["zmid"], heat["zmax"]) == pytest.approx((0.5, 1.0, 1.5))


def test_useful_histogram_places_each_cell():
    # edges 0.1, 1, 10 s (one bin per decade); thread 0.0: 3 bursts in bin 0 (20 % of its time) and one in
    # bin 1 (80 %); thread 0.1 only bin 1.
    result = {"bursts": {"edges_s": [0.1, 1.0, 10.0], "cells": [
        {"rank": 0, "thread": 0, "bin": 0, "count": 3, "seconds": 0.5, "share": 0.2},
        {"rank": 0, "thread": 0, "bin": 1, "count": 1, "seconds": 2.0, "share": 0.8},
        {"rank": 0, "thread": 1, "bin": 1, "count": 2, "seconds": 4.0, "share": 1.0}]}}
    heat = figures.useful_histogram(result)["data"][0]
    assert heat["y"] == ["0.0", "0.1"]
    # columns at the bins' geometric centers in µs, on a log axis: log10(sqrt(0.1 * 1) s) = 5.5, then 6.5
    assert values(heat["x"]) == pytest.approx([5.5, 6.5])
    z = values(heat["z"])
    # color = log10 of the share in %: 20 % -> 1.301, 80 % -> 1.903, 100 % -> 2; an empty cell is blank
    assert z[0] == pytest.approx([1.301, 1.903])
    assert np.isnan(z[1][0]) and z[1][1] == pytest.approx(2)
    assert "3 burst(s) of 100 ms-1 s" in heat["text"][0][0]
