import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpt2trace.cli import json_text

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_reads_back_as_json_dumps_would(value):
    assert json.loads(json_text.dumps(value)) == json.loads(json.dumps(value))


def test_keys_and_special_floats_as_json_dumps_writes_them():
    value = {7: "a", 2.5: [1, 2], True: None, None: {}, "x": (1, {"y": [math.inf]}), "n": float("nan")}
    back, expected = json.loads(json_text.dumps(value)), json.loads(json.dumps(value))
    assert back.keys() == expected.keys() and math.isnan(back.pop("n")) and math.isnan(expected.pop("n"))
    assert back == expected


def test_objects_one_key_a_line_and_tables_one_row_a_line():
    text = json_text.dumps({"summary": {"steps": 3, "ranks": [0, 1]},
                            "imbalance": [{"kernel": "matmul", "s": 1.5}, {"kernel": "gelu", "s": 0.25}],
                            "empty": [], "none": {}})
    assert text.splitlines() == [
        "{",
        ' "summary": {',
        '  "steps": 3,',
        '  "ranks": [0, 1]',
        " },",
        ' "imbalance": [',
        '  {"kernel": "matmul", "s": 1.5},',
        '  {"kernel": "gelu", "s": 0.25}',
        " ],",
        ' "empty": [],',
        ' "none": {}',
        "}",
    ]


def test_text_from_files_stays_inside_its_string():
    line_breaks = {"kernel\nname": "host\r\n01\u2028", "nul": "a\x00b"}
    text = json_text.dumps(line_breaks)
    assert len(text.splitlines()) == 4 and "\x00" not in text
    assert json.loads(text) == line_breaks
