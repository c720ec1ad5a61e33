"""The .pcf and .row companions: what we write reads back, and malformed .row levels name their line."""
import pytest

from gpt2trace.format.errors import TraceError
from gpt2trace.interop.paraver_format import MPI_CALLS, MPI_COLLECTIVE, MPI_P2P, STATE_COLORS, file_names
from gpt2trace.interop.paraver_pcf import EventType, read_pcf, read_row, write_pcf, write_row


def test_pcf_round_trip(tmp_path):
    path = tmp_path / "a.pcf"
    write_pcf(path, [EventType(60000019, "User function", {0: "End", 1: "matmul_forward"}),
                     EventType(71001001, "gpt2trace counter loss [value x 1e-9]")])
    pcf = read_pcf(path)
    assert pcf.states[1] == "Running" and len(pcf.states) == len(STATE_COLORS) == 17
    assert pcf.types == {60000019: "User function", 71001001: "gpt2trace counter loss [value x 1e-9]"}
    assert pcf.value_label(60000019, 1) == "matmul_forward" and pcf.value_label(71001001, 1) is None
    assert "\t" not in path.read_text()


def test_row_round_trip_and_errors(tmp_path):
    path = tmp_path / "a.row"
    write_row(path, {"CPU": ["1.n", "2.n"], "NODE": ["n"], "THREAD": ["THREAD 1.1.1", "THREAD 1.1.2"]})
    assert read_row(path)["THREAD"] == ["THREAD 1.1.1", "THREAD 1.1.2"]
    path.write_text("LEVEL CPU SIZE 3\n1.n\n")
    with pytest.raises(TraceError, match=r"a\.row:1: LEVEL CPU announces 3 names"):
        read_row(path)


def test_extrae_ids():
    # the ids of Extrae's MPI_EventEncoding.h the trainer's calls use
    assert MPI_CALLS["MPI_Allreduce"] == (MPI_COLLECTIVE, 10)
    assert MPI_CALLS["MPI_Reduce"] == (MPI_COLLECTIVE, 9) and MPI_CALLS["MPI_Bcast"] == (MPI_COLLECTIVE, 7)
    assert MPI_CALLS["MPI_Iallreduce"] == (MPI_COLLECTIVE, 155)
    assert MPI_CALLS["MPI_Reduce_scatter"] == (MPI_COLLECTIVE, 80)
    assert MPI_CALLS["MPI_Allgatherv"] == (MPI_COLLECTIVE, 18) and MPI_CALLS["MPI_Scatter"] == (MPI_COLLECTIVE, 15)
    assert MPI_CALLS["MPI_Waitall"] == (MPI_P2P, 6) and MPI_CALLS["MPI_Send"] == (MPI_P2P, 1)


@pytest.mark.parametrize("name, prv", [("t", "t.prv"), ("t.prv", "t.prv"), ("t.prv.gz", "t.prv.gz")])
def test_file_names(name, prv):
    assert file_names(name) == (prv, "t.pcf", "t.row", "t.gpt2trace.json")
