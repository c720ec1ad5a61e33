"""Colors: Paraver's palette for states, and the same color for a name in every report and process."""
import subprocess
import sys

import pytest

from gpt2trace.format.schema import State
from gpt2trace.report import colors


@pytest.mark.parametrize("state,color", [(State.IDLE, "#75c3ff"), (State.RUNNING, "#0000ff"),
                                         (State.SYNCHRONIZATION, "#b30000"), (State.SCHEDULING_FORK_JOIN, "#ffff00"),
                                         (State.IO, "#acae29"), (State.GROUP_COMMUNICATION, "#ff901a"),
                                         (State.WAIT_WAITALL, "#eb0000")])
def test_states_use_paravers_colors(state, color):
    # Extrae's STATES_COLOR: Idle {117,195,255}, Running {0,0,255}, Synchronization {179,0,0}, ...
    assert colors.state_color(state) == color


def test_state_names_and_unknown_ids():
    assert colors.state_name(State.SCHEDULING_FORK_JOIN) == "Scheduling and Fork/Join"
    assert colors.state_name(40) == "State 40"
    assert colors.state_color(40) == colors.state_color(40).lower() and len(colors.state_color(40)) == 7


def test_kernel_families_share_a_hue():
    # Tableau 20: matmul is the blue pair, forward dark, backward light
    assert colors.kernel_color("matmul_forward") == "#1f77b4"
    assert colors.kernel_color("matmul_backward") == "#aec7e8"
    assert colors.kernel_color("gelu_forward") != colors.kernel_color("matmul_forward")


def test_unknown_names_are_stable_across_processes():
    # crc32, not Python's per-process salted hash()
    code = ("from gpt2trace.report import colors; print(colors.kernel_color('my_new_kernel_forward'), "
            "colors.mpi_color('MPI_Neighbor_alltoall'), colors.phase_color('warmup'))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(runs) == 1
    assert runs.pop().split() == [colors.kernel_color("my_new_kernel_forward"),
                                  colors.mpi_color("MPI_Neighbor_alltoall"), colors.phase_color("warmup")]


@pytest.mark.parametrize("background,text", [("#0000ff", "#ffffff"), ("#ffff00", "#000000"),
                                             ("#75c3ff", "#000000"), ("#b30000", "#ffffff")])
def test_label_color_reads_on_its_background(background, text):
    assert colors.text_color(background) == text
