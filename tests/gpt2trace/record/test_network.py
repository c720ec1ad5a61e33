"""The emulated network (--emulate-network): parsing, placement, the cost of each call, and a real 2-rank run whose
traced collectives last at least what the described network adds."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.network import Network
from gpt2trace.format.reader import load
from gpt2trace.record.network import Cluster, parse
from trainer.errors import ConfigError

GBIT = 1e9 / 8


def test_parse_reads_bits_and_bytes_and_times():
    net = parse("nodes=5,link=10Gb/s,latency=5us")
    assert net == Cluster(5, Network(10 * GBIT, 5_000, rooted="flat"))
    assert parse("nodes=2, link=1.5GB/s, latency=0.2ms").network.bandwidth_bps == 1.5e9
    assert parse("latency=1ms,nodes=3,link=100Mb/s").network.latency_ns == pytest.approx(1e6)


@pytest.mark.parametrize("text,says", [
    ("nodes=5,link=10Gb/s", "needs latency"),
    ("nodes=0,link=10Gb/s,latency=5us", "nodes must be"),
    ("nodes=5,link=10furlongs/s,latency=5us", "link '10furlongs/s': expected a number with one of the units"),
    ("nodes=5,link=0Gb/s,latency=5us", "a bandwidth must be positive"),
    ("nodes=5,link=inf,latency=5us", "finite bandwidth"),
    ("nodes=5,link=10Gb/s,latency=5parsecs", "latency '5parsecs': expected a number"),
    ("speed=fast", "must be nodes=N"),
    # a key given twice: the first value would be dropped silently
    ("nodes=2,link=10Gb/s,link=1Gb/s,latency=5us", "link given more than once; give each key once"),
    ("nodes=2,link=10Gb/s,latency=5us,nodes=1, latency=1us", "latency, nodes given more than once"),
])
def test_bad_descriptions_are_one_line_naming_the_option(text, says):
    with pytest.raises(ConfigError, match=says) as e:
        parse(text)
    assert e.value.field == "emulate_network" and "\n" not in str(e.value)


def test_ranks_fill_the_nodes_in_blocks():
    # 9 ranks on 5 nodes: ceil(9/5) = 2 per node, {0,1} {2,3} {4,5} {6,7} {8}: the porting study's layout
    assert Cluster(5, Network(GBIT)).placement(9) == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    assert Cluster(2, Network(GBIT)).placement(2) == [0, 1]


def test_costs_by_hand():
    net = Cluster(5, Network(10 * GBIT, 5_000, rooted="flat"))          # 1.25 GB/s per link, 5 us
    node_of = net.placement(9)
    world, mb = tuple(range(9)), 1_250_000      # 1 ms of one link per member's megabytes
    # reduce onto rank 0: the 7 members off node 0 send through node 0's link: 5 us + 7 x 1 ms
    assert net.cost("MPI_Reduce", mb, world, 0, node_of) == pytest.approx(5e-6 + 7e-3)
    assert net.cost("MPI_Bcast", mb, world, 0, node_of) == pytest.approx(5e-6 + 7e-3)
    # the same network with tree-rooted collectives (what-if's default): ceil(log2 5) x (5 us + 1 ms)
    tree = Cluster(5, Network(10 * GBIT, 5_000))
    assert tree.cost("MPI_Reduce", mb, world, 0, node_of) == pytest.approx(3 * (5e-6 + 1e-3))
    # ring allreduce over the 5 nodes: 2 x 4 latencies + 2 x 4/5 x 1 ms
    assert net.cost("MPI_Allreduce", mb, world, None, node_of) == pytest.approx(8 * 5e-6 + 1.6e-3)
    assert net.cost("MPI_Iallreduce", mb, world, None, node_of) == pytest.approx(8 * 5e-6 + 1.6e-3)
    # a communicator inside one node costs nothing; two ranks on two nodes: ring of 2
    assert net.cost("MPI_Allreduce", mb, (0, 1), None, node_of) == 0.0
    assert net.cost("MPI_Allreduce", mb, (1, 2), None, node_of) == pytest.approx(2 * 5e-6 + 1e-3)
    # a message between nodes: latency + bytes / link; inside a node: free; a send or a wait adds nothing itself
    assert net.cost("MPI_Recv", mb, (), None, node_of, peer=8, me=0) == pytest.approx(5e-6 + 1e-3)
    assert net.cost("MPI_Recv", mb, (), None, node_of, peer=1, me=0) == 0.0
    assert net.cost("MPI_Isend", mb, (), None, node_of, peer=8, me=0) == 0.0
    assert net.cost("MPI_Barrier", 0, world, None, node_of) == pytest.approx(3 * 5e-6)    # ceil(log2 5) hops


@pytest.mark.mpi
def test_a_traced_run_pays_the_emulated_network(tmp_path):
    # tiny: 34,688 float32 gradients = 138,752 bytes; 2 ranks on 2 nodes behind 100 Mb/s (12.5 MB/s) links: a ring
    # allreduce adds 2 x 50 us + 138,752 / 12.5e6 s = 11.2 ms, so every gradient MPI_Allreduce lasts at least that on
    # both ranks (the network is held after the real call: a lower bound whatever the load)
    trace = tmp_path / "t.parquet"
    out = subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--model", "tiny", "--ranks", "2", "--threads",
                          "1", "--steps", "3", "--trace", str(trace), "--emulate-network",
                          "nodes=2,link=100Mb/s,latency=50us"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    t = load(trace)
    assert t.run["network"]["node_of_rank"] == [0, 1] and t.run["network"]["link_bytes_per_s"] == 12.5e6
    c = t.records(S.Kind.COMM).to_pandas()
    grads = c[(c[S.NAME] == "MPI_Allreduce") & (c[S.BYTES] == 138_752)]
    assert len(grads) == 2 * 3
    assert ((grads[S.END_NS] - grads[S.START_NS]) >= 11.2e6 - 1e3).all()


def test_emulation_needs_ranks_and_tracing():
    from typer.testing import CliRunner

    from gpt2trace.cli.main import app
    r = CliRunner().invoke(app, ["run", "--model", "tiny", "--steps", "1", "--emulate-network",
                                 "nodes=2,link=1Gb/s,latency=5us"])
    assert r.exit_code == 2 and "--emulate-network needs --ranks 2 or more" in r.output
    r = CliRunner().invoke(app, ["run", "--model", "tiny", "--steps", "1", "--ranks", "2", "--no-trace",
                                 "--emulate-network", "nodes=2,link=1Gb/s,latency=5us"])
    assert r.exit_code == 2 and "drop --no-trace" in r.output
    r = CliRunner().invoke(app, ["run", "--model", "tiny", "--ranks", "2", "--emulate-network", "nodes=2"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--emulate-network" in r.output
