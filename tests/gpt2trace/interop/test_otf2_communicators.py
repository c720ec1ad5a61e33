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
