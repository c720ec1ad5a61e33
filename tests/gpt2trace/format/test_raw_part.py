"""The file a raw window is written as (gpt2trace.format.raw_part): written by the part writer, read back by the
merge, and refused, with the file named, when it is not whole."""
from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import raw_part
from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.raw_window import RankDecoder, RawWindow, pieces, unpack
from gpt2trace.format.reader import check_states, load
from gpt2trace.format.writer import PartWriter, merge_parts, part_files, parts_dir, recover
from tests.gpt2trace.format.test_raw_window import META, _window

METADATA = {**META, b"odd \xff\x00 key": b"\x00\xfe any bytes"}


def _written(tmp_path, w: RawWindow = None, metadata=METADATA):
    trace = tmp_path / "trace.parquet"
    path = PartWriter(trace, 0).write_raw(raw_part.buffers(w or _window(), raw_part.metadata_json(metadata)))
    return trace, path


def test_a_window_read_back_is_the_window_written(tmp_path):
    w = _window()
    _, path = _written(tmp_path, w)
    assert path.name == "00000000.raw" and [p.name for p in path.parent.iterdir()] == [path.name]
    part = raw_part.read_file(path)
    assert part.metadata == METADATA                     # any bytes, through Latin-1 text
    info, flat, text = pieces(w)
    ints, names = unpack(info, w.times.reshape(-1), np.concatenate(flat), w.counter_values, text)
    assert names == part.names
    assert ints.keys() == part.ints.keys()
    for k, v in ints.items():
        assert np.array_equal(part.ints[k], v) and part.ints[k].flags.aligned, k
    assert part.info | {"ints": info["ints"]} == part.info and part.info["main_tid"] == w.main_tid
    got = raw_part.decoded(path, RankDecoder())
    assert got.equals(RankDecoder().window(info, ints, names, METADATA)) and got.num_rows > 0


def test_names_that_are_not_utf8_go_through(tmp_path):
    odd = os.fsdecode(b"caf\xe9_forward")              # a lone surrogate, as a file name's bytes decode
    _, path = _written(tmp_path, _window(names=(odd, "gelu_forward")))
    assert raw_part.read_file(path).names["kernel_names"] == [odd, "gelu_forward"]


def _cuts(size: int, header_end: int) -> list[int]:
    """Lengths to cut a file of `size` bytes to: inside the magic, the length, the header and each buffer."""
    return sorted({0, 5, 12, 20, header_end - 3, header_end, header_end + 8, size - 40, size - 1})


def test_a_part_cut_short_anywhere_is_refused(tmp_path):
    _, path = _written(tmp_path)
    data = path.read_bytes()
    header_end = 16 + int.from_bytes(data[8:16], "little")
    for n in _cuts(len(data), header_end):
        with pytest.raises(ValueError, match="raw trace part|cut short"):
            raw_part.read(np.frombuffer(data[:n], np.uint8).copy())
    with pytest.raises(ValueError, match="cut short, or not one part"):        # or grown
        raw_part.read(np.frombuffer(data + b"\0" * 8, np.uint8).copy())


def test_the_metadata_alone_is_read_from_the_header(tmp_path):
    _, path = _written(tmp_path)
    assert raw_part.read_metadata(path) == METADATA
    data = bytearray(path.read_bytes())
    data[8:16] = (1 << 62).to_bytes(8, "little")        # a damaged length: refused, not allocated
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="header is cut short, or its length damaged"):
        raw_part.read_metadata(path)


@pytest.mark.parametrize("edit,says", [
    (lambda h: h.replace(b'"window"', b'"wind0w"'), "header is damaged"),
    (lambda h: h.replace(b'{"window"', b'["window"'), "Expecting|header is damaged"),
    (lambda h: h.replace(b'"name_bytes": ', b'"name_bytes": 1'), "cut short, or not one part"),
])
def test_a_damaged_header_is_refused(tmp_path, edit, says):
    _, path = _written(tmp_path)
    data = path.read_bytes()
    size = int.from_bytes(data[8:16], "little")
    header = edit(data[16:16 + size])
    header = header[:size] if len(header) >= size else header + b" " * (size - len(header))
    with pytest.raises(ValueError, match=says):
        raw_part.read(np.frombuffer(data[:16] + header + data[16 + size:], np.uint8).copy())


def test_the_merge_names_a_part_that_is_not_whole_and_keeps_the_parts(tmp_path):
    trace, path = _written(tmp_path)
    path.write_bytes(path.read_bytes()[:-3])             # what no writer of ours leaves: a rename makes it whole
    with pytest.raises(TraceError, match=r"00000000.raw: not a readable trace part \(it holds .* bytes where its "
                                         r"header says .*\); move it out") as err:
        recover(trace)
    assert "\n" not in str(err.value) and not trace.exists() and part_files(parts_dir(trace)) == [path]


def test_a_write_that_fails_leaves_nothing(small_fs):
    disk = small_fs(64)
    w = _window()
    big = RawWindow(**{**w.__dict__, "times": np.zeros((4000, 3, 3), np.int64), "keys": np.zeros(4000, np.int64)})
    writer = PartWriter(disk / "trace.parquet", 0)
    with pytest.raises(OutputError, match=r"cannot write the trace part .*00000000.raw: No space left on device"):
        writer.write_raw(raw_part.buffers(big, raw_part.metadata_json(METADATA)))
    assert [p.name for p in (disk / "trace.parquet.parts" / "rank00000").iterdir()] == []
    assert writer.seq == 0 and writer.bytes == 0


def test_raw_parts_merge_into_a_trace(tmp_path):
    # two windows of one rank as the tracer writes them, merged: one thread numbering across the parts
    w = _window()
    shift = np.array([450, 450, 0])                      # times move, thread ids stay
    second = RawWindow(**{**w.__dict__, "start_ns": 500, "end_ns": 950, "times": w.times + shift,
                          "marks": np.array([[0, 4, 0]]), "phases": np.array([[540, 720, 4, 0, -1]]),
                          "comm_names": [], "comms": w.comms[:0], "counters": np.array([[780, 4, -1], [781, 4, -1]]),
                          "tasks": None})
    trace = tmp_path / "trace.parquet"
    writer = PartWriter(trace, 0)
    meta = raw_part.metadata_json(S.arrow_schema(META).metadata)
    for window in (w, second):
        writer.write_raw(raw_part.buffers(window, meta))
    merged = merge_parts(trace)
    assert merged.ranks == 1 and merged.steps == (3, 4) and not parts_dir(trace).exists()
    assert check_states(load(trace)) == []
    records = pq.read_table(trace).to_pandas()
    kernels = records[records[S.KIND] == S.Kind.KERNEL][[S.THREAD, S.START_NS, S.STEP]].astype(int)
    # each part's calls' blocks, and the first part's two tasks' bodies (at 401 and 453)
    assert sorted(kernels.values.tolist()) == [[0, 110, 3], [0, 215, 3], [0, 401, 3], [0, 560, 4], [0, 665, 4],
                                               [1, 120, 3], [1, 453, 3], [1, 570, 4]]
