"""Data into the page: blobs round-trip, and JSON that no string from a trace can break out of."""
import json

import numpy as np
import pytest

from gpt2trace.report.pack import Blobs, script_json, unpack

EVIL = ["</script><script>alert(1)</script>", "<!--", "<img src=x onerror=alert(1)>", "a\u2028b\u2029c",
        "&lt;already escaped&gt;", "]]>", "\"'`"]


@pytest.mark.parametrize("text", EVIL)
def test_script_json_cannot_close_its_element(text):
    out = script_json({"name": text, "list": [text]})
    assert "<" not in out and ">" not in out and "&" not in out and "\u2028" not in out
    assert json.loads(out) == {"name": text, "list": [text]}      # the page reads back the same strings


def test_script_json_rejects_nan():
    with pytest.raises(ValueError):
        script_json({"x": float("nan")})


def test_blobs_round_trip_and_alignment():
    blobs = Blobs()
    arrays = {"a": np.arange(5, dtype=np.uint8), "b": np.array([1.5, -2.0]), "c": np.array([7, -1], np.int32),
              "d": np.array([], np.uint16)}
    ref = blobs.add(arrays)
    assert all(off % 8 == 0 for _, off, _ in ref["arrays"].values())   # typed arrays need aligned offsets
    back = unpack(dict(blobs.items)[ref["blob"]], ref)
    for k, v in arrays.items():
        assert back[k].tolist() == v.tolist() and back[k].dtype == v.dtype
    base64 = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    assert set(dict(blobs.items)[ref["blob"]]) <= base64                # nothing the HTML parser would read


def test_blobs_refuse_types_the_page_cannot_view():
    with pytest.raises(TypeError, match="int64"):
        Blobs().add({"x": np.arange(3, dtype=np.int64)})
