"""Communicators in OTF2: another tool's archive with a sub-communicator imports with world ranks and ids, and our
export defines one OTF2 communicator per communicator of the trace (roots as ranks in it, as MPI numbers them)."""
from __future__ import annotations

from pathlib import Path

from gpt2trace.format import communicators as comms
from gpt2trace.interop.otf2_import import import_otf2, load_otf2


def _scorep_like(path: Path) -> Path:
    """Hand-written, 3 ranks, ticks of 1 ns. Every rank allreduces on MPI_COMM_WORLD at [100, 200]; then ranks 1
    and 2 reduce on "Comm 1" = {1, 2} rooted at its rank 0 (world rank 1) at [300, 400], as Score-P writes a
    communicator from MPI_Comm_split."""
    import otf2
    with otf2.writer.open(str(path), timer_resolution=1_000_000_000) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        locs = [d.location("Master thread", group=d.location_group(f"MPI Rank {r}", system_tree_parent=node))
                for r in range(3)]
        d.group("MPI", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group("MPI_COMM_WORLD", group_type=otf2.GroupType.COMM_GROUP,
                                                       paradigm=otf2.Paradigm.MPI, members=[0, 1, 2]))
        sub = d.comm("Comm 1", group=d.group("Comm 1", group_type=otf2.GroupType.COMM_GROUP,
                                             paradigm=otf2.Paradigm.MPI, members=[1, 2]))
        allreduce = d.region("MPI_Allreduce", paradigm=otf2.Paradigm.MPI, region_role=otf2.RegionRole.COLL_ALL2ALL)
        reduce = d.region("MPI_Reduce", paradigm=otf2.Paradigm.MPI, region_role=otf2.RegionRole.COLL_ALL2ONE)
        for rank, loc in enumerate(locs):
            ev = w.event_writer_from_location(loc)
            ev.enter(100, allreduce)
            ev.mpi_collective_begin(100)
            ev.mpi_collective_end(200, otf2.CollectiveOp.ALLREDUCE, world, otf2.Undefined.UINT32, 8, 8)
            ev.leave(200, allreduce)
            if rank > 0:
                ev.enter(300, reduce)
                ev.mpi_collective_begin(300)
                ev.mpi_collective_end(400, otf2.CollectiveOp.REDUCE, sub, 0, 16, 16)
                ev.leave(400, reduce)
    return path / "traces.otf2"


def test_another_tools_sub_communicator_imports_with_world_ranks(tmp_path):
    anchor = _scorep_like(tmp_path / "scorep")
    t = import_otf2(anchor).table.to_pandas()
    calls = t[t.kind == "comm"].sort_values(["name", "rank"]).astype(object)
    calls = calls.where(calls.notna(), None)
    # the world is id 0; "Comm 1" gets id 1; the reduce's root, rank 0 of {1, 2}, is world rank 1; seq counts each
    # communicator's collectives
    assert calls[["name", "rank", "communicator", "peer", "seq"]].values.tolist() == [
        ["MPI_Allreduce", 0, 0, None, 0], ["MPI_Allreduce", 1, 0, None, 0], ["MPI_Allreduce", 2, 0, None, 0],
        ["MPI_Reduce", 1, 1, 1, 0], ["MPI_Reduce", 2, 1, 1, 0]]
    trace = load_otf2(anchor)
    assert trace.communicators == {0: comms.world([0, 1, 2]), 1: comms.Communicator(1, "Comm 1", (1, 2))}


def _scorep_groups(path: Path) -> Path:
    """Hand-written as Score-P defines its groups, 3 ranks, ticks of 1 ns. First the measurement system's
    "Process x Threads CPU Locations" over every location (paradigm MEASUREMENT_SYSTEM), then MPI's: an unnamed
    COMM_SELF group for MPI_COMM_SELF, MPI_COMM_WORLD, and an unnamed split {1, 2}.
      every rank: MPI_Init [10, 20] and MPI_Finalize [100, 110] (no MPI record, as Score-P writes them); a message
                  to itself on MPI_COMM_SELF (MPI_Send [30, 40] to rank 0 of it, MPI_Recv [40, 50] from rank 0);
                  MPI_Comm_rank [90, 91] (no record)
      rank 2:     MPI_Send [60, 65] to rank 0 of the split (world rank 1), tag 3, 64 bytes
      rank 1:     MPI_Irecv [60, 61] (request 7), completed in MPI_Wait [70, 80] by the split's rank 1 (world 2)"""
    import otf2
    with otf2.writer.open(str(path), timer_resolution=1_000_000_000) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        locs = [d.location("Master thread", group=d.location_group(f"MPI Rank {r}", system_tree_parent=node))
                for r in range(3)]
        d.group("", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        d.group("PROCESSXTHREADS_GROUP_LOCATIONS", group_type=otf2.GroupType.COMM_LOCATIONS,
                paradigm=otf2.Paradigm.MEASUREMENT_SYSTEM, members=locs)
        d.comm("Process x Threads CPU Locations", group=d.group(
            "PROCESSXTHREADS_GROUP", group_type=otf2.GroupType.COMM_GROUP,
            paradigm=otf2.Paradigm.MEASUREMENT_SYSTEM, members=[0, 1, 2]))
        me = d.comm("MPI_COMM_SELF", group=d.group("", group_type=otf2.GroupType.COMM_SELF,
                                                   paradigm=otf2.Paradigm.MPI, members=[]))
        d.comm("MPI_COMM_WORLD", group=d.group("", group_type=otf2.GroupType.COMM_GROUP,
                                               paradigm=otf2.Paradigm.MPI, members=[0, 1, 2]))
        split = d.comm("", group=d.group("", group_type=otf2.GroupType.COMM_GROUP, paradigm=otf2.Paradigm.MPI,
                                         members=[1, 2]))
        region = {n: d.region(n, paradigm=otf2.Paradigm.MPI) for n in
                  ("MPI_Init", "MPI_Finalize", "MPI_Send", "MPI_Recv", "MPI_Irecv", "MPI_Wait", "MPI_Comm_rank")}
        for rank, loc in enumerate(locs):
            ev = w.event_writer_from_location(loc)
            ev.enter(10, region["MPI_Init"])
            ev.leave(20, region["MPI_Init"])
            ev.enter(30, region["MPI_Send"])
            ev.mpi_send(31, 0, me, 5, 8)
            ev.leave(40, region["MPI_Send"])
            ev.enter(40, region["MPI_Recv"])
            ev.mpi_recv(49, 0, me, 5, 8)
            ev.leave(50, region["MPI_Recv"])
            if rank == 2:
                ev.enter(60, region["MPI_Send"])
                ev.mpi_send(61, 0, split, 3, 64)
                ev.leave(65, region["MPI_Send"])
            if rank == 1:
                ev.enter(60, region["MPI_Irecv"])
                ev.mpi_irecv_request(60, 7)
                ev.leave(61, region["MPI_Irecv"])
                ev.enter(70, region["MPI_Wait"])
                ev.mpi_irecv(79, 1, split, 3, 64, 7)
                ev.leave(80, region["MPI_Wait"])
            ev.enter(90, region["MPI_Comm_rank"])
            ev.leave(91, region["MPI_Comm_rank"])
            ev.enter(100, region["MPI_Finalize"])
            ev.leave(110, region["MPI_Finalize"])
    return path / "traces.otf2"


def test_groups_resolve_by_paradigm_and_type(tmp_path):
    anchor = _scorep_groups(tmp_path / "scorep")
    t = import_otf2(anchor).table.to_pandas()
    calls = t[t.kind == "comm"].sort_values(["rank", "start_ns"]).astype(object)
    calls = calls.where(calls.notna(), None)
    got = {(r.rank, r.name): (r.communicator, r.peer, r.tag, r.bytes) for r in calls.itertuples()}   # last wins
    # ids: the world 0 (not the measurement system's communicator defined before it), the split 1, then
    # MPI_COMM_SELF of ranks 0, 1, 2: 2, 3, 4
    for rank in range(3):
        assert got[(rank, "MPI_Init")] == (0, None, None, None)          # on the world, as Scalasca has it
        assert got[(rank, "MPI_Finalize")] == (0, None, None, None)
        assert got[(rank, "MPI_Comm_rank")] == (None, None, None, None)  # no communicator: none
    for rank in range(3):
        mine = calls[(calls["rank"] == rank) & (calls["bytes"] == 8)]
        self_calls = [tuple(x) for x in mine[["communicator", "peer"]].values.tolist()]
        assert self_calls == [(2 + rank, rank), (2 + rank, rank)]        # a message to itself, not to rank 0
    assert got[(2, "MPI_Send")] == (1, 1, 3, 64)                          # split rank 0 = world rank 1
    assert got[(1, "MPI_Irecv")] == (1, 2, 3, 64)                         # its communicator, from the completion
    assert got[(1, "MPI_Wait")][0] is None
    trace = load_otf2(anchor)
    assert trace.communicators == {0: comms.world([0, 1, 2]), 1: comms.Communicator(1, "Comm 1", (1, 2)),
                                   **{2 + r: comms.Communicator(2 + r, "MPI_COMM_SELF", (r,)) for r in range(3)}}
