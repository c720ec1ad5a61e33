"""Paraver's vocabulary as Extrae writes it, and the event types gpt2trace adds: shared by export and import.

Extrae's ids come from its merger (src/merger/paraver/MPI_EventEncoding.h, mpi_prv_events.c, events.h), so
Paraver's standard configurations (MPI call timelines, collective sizes, useful IPC) work on our traces. A type
that opens something (an MPI call, a function, a phase) is written with a non-zero value at its start and 0 at
its end; the others are attributes of the record that starts in the same line, or instant counters.
"""
from __future__ import annotations

from gpt2trace.format import schema
from gpt2trace.format.schema import (
    BLOCK,
    BYTES,
    COMMUNICATOR,
    CYCLES,
    INSTRUCTIONS,
    LAYER,
    MICROSTEP,
    PEER,
    SEQ,
    STEP,
    TAG,
    TASK,
)

# --- Extrae's MPI types: value = the call's id below, 0 when the call returns.
MPI_P2P, MPI_COLLECTIVE, MPI_OTHER, MPI_RMA, MPI_IO = 50000001, 50000002, 50000003, 50000004, 50000005
MPI_TYPE_LABELS = {MPI_P2P: "MPI Point-to-point", MPI_COLLECTIVE: "MPI Collective Comm", MPI_OTHER: "MPI Other",
                   MPI_RMA: "MPI One-sided", MPI_IO: "MPI I/O"}
# Written with a collective's entry: sizes in bytes, 1 on the root only, the communicator's id (header `c:` lines).
MPI_SEND_SIZE, MPI_RECV_SIZE, MPI_ROOT, MPI_COMM = 50100001, 50100002, 50100003, 50100004
MPI_ATTR_LABELS = {MPI_SEND_SIZE: "Send Size in MPI Global OP", MPI_RECV_SIZE: "Recv Size in MPI Global OP",
                   MPI_ROOT: "Root in MPI Global OP", MPI_COMM: "Communicator in MPI Global OP"}
# Our exports give a communicator of id i the Paraver id i + 1 (Paraver's ids start at 1): MPI_COMM_WORLD is 1.
PARAVER_COMM_OFFSET = 1
WORLD = PARAVER_COMM_OFFSET

_CALLS = {
    MPI_P2P: "Send 1 Recv 2 Isend 3 Irecv 4 Wait 5 Waitall 6 Bsend 33 Ssend 34 Rsend 35 Ibsend 36 Issend 37 "
             "Irsend 38 Cancel 40 Sendrecv 41 Sendrecv_replace 42 Waitany 59 Waitsome 60 Probe 61 Iprobe 62 "
             "Bsend_init 112 Recv_init 116 Send_init 117 Rsend_init 121 Ssend_init 122",
    MPI_COLLECTIVE: "Bcast 7 Barrier 8 Reduce 9 Allreduce 10 Alltoall 11 Alltoallv 12 Gather 13 Gatherv 14 "
                    "Scatter 15 Scatterv 16 Allgather 17 Allgatherv 18 Scan 30 Reduce_scatter 80 Ireduce 154 "
                    "Iallreduce 155 Ibarrier 156 Ibcast 157 Ialltoall 158 Ialltoallv 159 Iallgather 160 "
                    "Iallgatherv 161 Igather 162 Igatherv 163 Iscatter 164 Iscatterv 165 Ireduce_scatter 166 "
                    "Iscan 167 Reduce_scatter_block 168 Ireduce_scatter_block 169 Alltoallw 170 Ialltoallw 171",
    MPI_OTHER: "Comm_rank 19 Comm_size 20 Comm_create 21 Comm_dup 22 Comm_split 23 Comm_group 24 Comm_free 25 "
               "Comm_remote_group 26 Comm_remote_size 27 Comm_test_inter 28 Comm_compare 29 Init 31 Finalize 32 "
               "Test 39 Cart_create 43 Cart_shift 44 Cart_coords 45 Cart_get 46 Cart_map 47 Cart_rank 48 "
               "Cart_sub 49 Cartdim_get 50 Dims_create 51 Graph_get 52 Graph_map 53 Graph_create 54 "
               "Graph_neighbors 55 Graphdims_get 56 Graph_neighbors_count 57 Topo_test 58 Pack 76 Unpack 77 "
               "Op_create 78 Op_free 79 Attr_delete 81 Attr_get 82 Attr_put 83 Group_difference 84 Group_excl 85 "
               "Group_free 86 Group_incl 87 Group_intersection 88 Group_rank 89 Group_range_excl 90 "
               "Group_range_incl 91 Group_size 92 Group_translate_ranks 93 Group_union 94 Group_compare 95 "
               "Intercomm_create 96 Intercomm_merge 97 Keyval_free 98 Keyval_create 99 Abort 100 Error_class 101 "
               "Errhandler_create 102 Errhandler_free 103 Errhandler_get 104 Error_string 105 Errhandler_set 106 "
               "Get_processor_name 107 Initialized 108 Wtick 109 Wtime 110 Address 111 Buffer_attach 113 "
               "Buffer_detach 114 Request_free 115 Get_count 118 Get_elements 119 Pack_size 120 Start 123 "
               "Startall 124 Testall 125 Testany 126 Test_cancelled 127 Testsome 128 Type_commit 129 "
               "Type_contiguous 130 Type_extent 131 Type_free 132 Type_hindexed 133 Type_hvector 134 "
               "Type_indexed 135 Type_lb 136 Type_size 137 Type_struct 138 Type_ub 139 Type_vector 140 "
               "Comm_spawn 151 Comm_spawn_multiple 152 Request_get_status 153",
    MPI_RMA: "Win_create 63 Win_free 64 Put 65 Get 66 Accumulate 67 Win_fence 68 Win_start 69 Win_complete 70 "
             "Win_post 71 Win_wait 72 Win_test 73 Win_lock 74 Win_unlock 75 Get_accumulate 172",
    MPI_IO: "File_open 141 File_close 142 File_read 143 File_read_all 144 File_write 145 File_write_all 146 "
            "File_read_at 147 File_read_at_all 148 File_write_at 149 File_write_at_all 150",
}


def _table() -> dict[str, tuple[int, int]]:
    out = {}
    for typ, text in _CALLS.items():
        words = text.split()
        for name, value in zip(words[0::2], words[1::2]):
            out["MPI_" + name] = (typ, int(value))
    return out


MPI_CALLS: dict[str, tuple[int, int]] = _table()           # "MPI_Allreduce" -> (50000002, 10)
MPI_NAMES: dict[int, str] = {v: n for n, (_, v) in MPI_CALLS.items()}   # Extrae's values are unique across types
OTHER_MPI_FIRST = 1000          # our value for an MPI call Extrae has no id for (type MPI Other, named in the .pcf)

# --- Extrae's function types: value = a function id named in the .pcf, 0 when it returns.
OMP_FUNCTION, USER_FUNCTION, PTHREAD_FUNCTION, TASK_FUNCTION = 60000018, 60000019, 60000020, 60000023
FUNCTION_LABELS = {OMP_FUNCTION: "Executed OpenMP parallel function", USER_FUNCTION: "User function",
                   PTHREAD_FUNCTION: "pthread function", TASK_FUNCTION: "Executed OpenMP task function"}

# --- Hardware counters: Extrae writes 42000000 + the PAPI preset's index (42001000 + n for native counters); the
# value is the count since the thread's previous read, so it belongs to the burst that ends where it is written.
# Not counts: the active counter set's id (41999999; 42009999 in older Extrae), and absolute readings (43xxxxxx).
HWC_FIRST, HWC_LAST = 42000000, 42999999
HWC_SET_IDS = (41999999, 42009999)
PAPI_TOT_INS, PAPI_TOT_CYC = 42000050, 42000059
HWC_NAMES = {PAPI_TOT_INS: INSTRUCTIONS, PAPI_TOT_CYC: CYCLES}
HWC_LABELS = {PAPI_TOT_INS: "PAPI_TOT_INS [Instr completed]", PAPI_TOT_CYC: "PAPI_TOT_CYC [Total cycles]"}

# --- gpt2trace's own types. Kernels are Extrae user functions; the rest are ours (within int32, as Paraver wants).
KERNEL = USER_FUNCTION
PHASE = 71000010                # value = phase id named in the .pcf, 0 at its end
# Attributes, written in the line that starts the record they describe; the value is the column's, as is.
ATTRIBUTES = {71000001: LAYER, 71000002: STEP, 71000003: MICROSTEP, 71000004: SEQ, 71000005: PEER,
              71000006: BYTES, 71000007: COMMUNICATOR, 71000008: TAG, 71000009: BLOCK}
ATTRIBUTE_TYPES = {col: typ for typ, col in ATTRIBUTES.items()}
ATTRIBUTE_LABELS = {LAYER: "gpt2trace layer", STEP: "gpt2trace step", MICROSTEP: "gpt2trace microstep",
                    SEQ: "gpt2trace collective sequence number", PEER: "gpt2trace MPI peer or root rank",
                    BYTES: "gpt2trace MPI bytes", COMMUNICATOR: "gpt2trace communicator id",
                    TAG: "gpt2trace MPI message tag", BLOCK: "gpt2trace task block"}
# Tasks, as ovni's Nanos6 model writes them (its thread channels, same type numbers, so its task views apply): the
# task's type (our kernel, a value named in the .pcf) and its id + 1 (0 is no task) at its start, both 0 at its
# end; its block as an attribute. Its predecessors have no event: a .prv import has tasks without `preds`.
TASK_ID, TASK_TYPE = 35, 36
TASK_ID_LABEL, TASK_TYPE_LABEL = "Task ID (ovni's Nanos6 task ID; value = gpt2trace task id + 1)", "Task type"
TASK_COLUMN = TASK
# Counters other than hardware ones: one type each, value = round(value x 1e9); the label says so.
COUNTER_FIRST, COUNTER_LAST = 71001001, 71001999
COUNTER_SCALE = 1e9
COUNTER_LABEL = "gpt2trace counter {name} [value x 1e-9]"
COUNTER_LABEL_PREFIX, COUNTER_LABEL_SUFFIX = "gpt2trace counter ", " [value x 1e-9]"
PHASE_LABEL = "gpt2trace phase"

# --- States and their colors (Extrae's palette).
STATE_NAMES = {int(s): name for s, name in schema.STATE_NAMES.items()}
STATE_COLORS = schema.STATE_COLORS



SUFFIXES = (".prv.gz", ".prv")     # the endings a NAME may have (file_names appends .prv to any other)


def file_names(name: str) -> tuple[str, str, str, str]:
    """(prv, pcf, row, metadata) paths of a trace named NAME, NAME.prv or NAME.prv.gz (a .prv.gz stays gzipped).

    The metadata file (NAME.gpt2trace.json) carries our trace's schema metadata (run configuration, machine,
    sgemm peak, clock) so that an import restores it; Paraver ignores it.
    """
    if name.endswith(".prv.gz"):
        base, prv = name[:-7], name
    elif name.endswith(".prv"):
        base, prv = name[:-4], name
    else:
        base, prv = name, name + ".prv"
    return prv, base + ".pcf", base + ".row", base + ".gpt2trace.json"
