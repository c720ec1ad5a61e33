"""Names in formats that cannot hold any text: the escapes of .pcf/.row labels and the shortened names of Chrome
events (`interop.labels`)."""
import random

import pytest

from gpt2trace.interop.labels import LONG_NAME, escape, shorten, unescape
from gpt2trace.interop.paraver_pcf import EventType, read_pcf, write_pcf

ESCAPES = [
    ("matmul_forward", "matmul_forward"),              # ordinary names are written as they are
    ("gemm_bwd[i] matmul[/]backward é漢", "gemm_bwd[i] matmul[/]backward é漢"),
    ("matmul\nbackward", "matmul\\nbackward"),
    ("a\r\nb\tc", "a\\r\\nb\\tc"),
    ("nul\0x", "nul\\x00x"),
    ("bell\x07 del\x7f nel\x85", "bell\\x07 del\\x7f nel\\x85"),
    ("back\\slash", "back\\\\slash"),
    (" padded  ", "\\x20padded \\x20"),             # white space at the ends would be stripped by a reader
    ("\u3000wide", "\\u3000wide"),
    ("line\u2028sep", "line\u2028sep"),             # not a line break for Paraver (or for our reader)
    ("", "\\e"),
    ("\\e", "\\\\e"),                               # the name backslash-e is not the empty name
]


@pytest.mark.parametrize("name, label", ESCAPES)
def test_escape_mapping(name, label):
    assert escape(name) == label
    assert unescape(label) == name


def test_every_name_comes_back():
    rng = random.Random(7)
    alphabet = "ab \\\n\r\t\0ex2u0\x85\u2028\u3000\xa0é[]/\x7f"
    for _ in range(20_000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
        label = escape(name)
        assert label and label == label.strip() and not any(c in label for c in "\n\r\0\t"), repr(name)
        assert unescape(label) == name, repr(name)


def test_pcf_labels_round_trip_and_foreign_ones_stay_as_written(tmp_path):
    path = tmp_path / "a.pcf"
    names = {1: "matmul\nbackward", 2: "nul\0x", 3: " spaced ", 4: ""}
    write_pcf(path, [EventType(60000019, "User function", {0: "End", **names})])
    text = path.read_text()
    assert "\0" not in text and "matmul\\nbackward" in text
    assert read_pcf(path, escaped=True).values[60000019] == {0: "End", **names}
    # a label another tool wrote, with a backslash in it, is kept as written
    path.write_text("EVENT_TYPE\n0 60000019 User function\nVALUES\n1 C:\\new\\tmp [a.c:3]\n")
    assert read_pcf(path).values[60000019] == {1: "C:\\new\\tmp [a.c:3]"}


def test_long_names_are_shortened_with_a_hash():
    assert shorten("x" * LONG_NAME) == "x" * LONG_NAME
    a, b = "k" * 10_000 + "a", "k" * 10_000 + "b"
    # the first 200 characters, an ellipsis, a space, '#' and 12 hex digits: 215 characters
    assert len(shorten(a)) == 215 and shorten(a).startswith("k" * 200 + "… #")
    assert shorten(a) != shorten(b) and shorten(a) == shorten("k" * 10_000 + "a")
