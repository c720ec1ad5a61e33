"""Names that the formats cannot hold as they are (line breaks, NUL, tabs, backslashes, spaces at the ends, a
1 MB name), through both exports and back through the import."""
import json

import chrome_checker
import prv_checker

from gpt2trace.format import schema
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.interop.chrome_export import export_chrome
from gpt2trace.interop.labels import LONG_NAME, shorten
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import import_paraver
from gpt2trace.interop.paraver_pcf import read_row
from gpt2trace.testing import synthetic as syn

US = 1e-6
KERNELS = ["matmul\nbackward", "nul\0x", "tab\there", " spaced ", "back\\slash", "", "gemm_bwd[i]"]
HOST = "node\n01 [/]"


def hostile() -> Trace:
    """One rank, one thread, 10 us Running; one kernel per name of KERNELS, 1 us each, back to back; a phase, an
    MPI call Extrae has no id for and a counter with line breaks in their names; a host name with one."""
    recs = [syn.state(0, 0, 0, 10 * US, State.RUNNING), syn.phase(0, 0, 10 * US, "fwd\r\nx", 0),
            syn.comm(0, 8 * US, 9 * US, "MPI_Weird\ncall"), syn.counter(0, 10 * US, "loss\n2", 1.5, 0)]
    recs += [syn.kernel(0, 0, i * US, (i + 1) * US, n) for i, n in enumerate(KERNELS)]
    meta = {schema.META_MACHINE: json.dumps({"hostname": HOST}).encode()}
    return Trace.from_table(syn.from_records(recs, meta))


def _names(trace: Trace, kind: str) -> set:
    return set(trace.records(kind).column("name").to_pylist())


def test_paraver_round_trip_keeps_every_name(tmp_path):
    out = export_paraver(hostile(), tmp_path / "h")
    assert prv_checker.check(out.prv) == []
    for f in (out.prv, out.pcf, out.row):
        assert b"\0" not in f.read_bytes()
    # one line per value: the kernels' VALUES block holds End and the 7 names, each on its line
    pcf = out.pcf.read_text().split("\n")
    assert "1        matmul\\nbackward" in pcf and "4        \\x20spaced\\x20" in pcf and "6        \\e" in pcf
    assert read_row(out.row, escaped=True)["NODE"] == [HOST]
    back = Trace.from_table(import_paraver(out.prv).table)
    original = hostile()
    for kind in ("kernel", "phase", "comm", "counter"):
        assert _names(back, kind) == _names(original, kind), kind


def test_without_our_metadata_the_labels_stay_escaped(tmp_path):
    out = export_paraver(hostile(), tmp_path / "h")
    out.meta.unlink()                                   # as if only the .prv, .pcf and .row were copied
    back = Trace.from_table(import_paraver(out.prv).table)
    assert "matmul\\nbackward" in _names(back, "kernel") and "\\e" in _names(back, "kernel")


def test_chrome_json_holds_every_name(tmp_path):
    out = export_chrome(hostile(), tmp_path / "h")
    assert chrome_checker.check(out.path) == []
    doc = json.loads(out.path.read_text())
    kernels = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert kernels == set(KERNELS)
    assert doc["otherData"]["gpt2trace.machine"]["hostname"] == HOST
    assert "long_names" not in doc["otherData"]


def test_a_long_name_is_written_once(tmp_path):
    """A 1 MB kernel name on 2000 kernel records: the Chrome file holds it once (in otherData.long_names), each
    event a 215-character short form; the .pcf holds it once and the import gives it back whole."""
    long = "matmul_" + "x" * (1 << 20)
    n = 2000
    recs = [syn.state(0, 0, 0, n * US, State.RUNNING)]
    recs += [syn.kernel(0, 0, i * US, (i + 1) * US, long if i % 2 else "short") for i in range(n)]
    trace = Trace.from_table(syn.from_records(recs))
    chrome = export_chrome(trace, tmp_path / "c")
    assert chrome_checker.check(chrome.path) == []
    size = chrome.path.stat().st_size
    # the name once (1 MiB) plus at most 400 bytes per event (a kernel event is about 330 bytes with the short
    # name); repeated in every event it would be 1000 x 1 MiB = 1 GB
    assert size < (1 << 20) + 400 * (n + 10), size
    doc = json.loads(chrome.path.read_text())
    assert doc["otherData"]["long_names"] == {shorten(long): long}
    assert {e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"} == {"short", shorten(long)}
    assert len(shorten(long)) < LONG_NAME
    prv = export_paraver(trace, tmp_path / "p")
    assert prv.pcf.stat().st_size < (1 << 20) + 10_000 and prv.prv.stat().st_size < 100 * (2 * n + 10)
    assert _names(Trace.from_table(import_paraver(prv.prv).table), "kernel") == {"short", long}
