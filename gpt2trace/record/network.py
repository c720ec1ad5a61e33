"""An emulated cluster network (`gpt2trace run --emulate-network "nodes=5,link=10Gb/s,latency=5us"`).

The ranks of a run on one machine are placed on `nodes` emulated nodes in blocks, as `mpiexec` fills nodes (ranks
per node = ceil(ranks / nodes): 9 ranks on 5 nodes are {0,1} {2,3} {4,5} {6,7} {8}). Messages between ranks of one
node are free (shared memory); traffic between nodes crosses each node's one link of `link` bandwidth, plus
`latency` per hop. After each real MPI call the traced communicator (gpt2trace.record.traced_comm) holds every
member for the extra time the described network would add, so the trace shows that network's cost. Every member of
a call computes the same extra time from the same inputs (no communication), so a collective still ends together.

What a call costs, k = the distinct nodes among its members, m = bytes per member, off = members not on the root's
node:

    point-to-point (Recv, Sendrecv; the receiver waits)  latency + m / link when the two ranks are on two nodes
    MPI_Allreduce, Iallreduce (ring over the nodes)      2 (k-1) latency + 2 (k-1)/k * m / link
    MPI_Allgather(v), Reduce_scatter(_block) (ring)      (k-1) latency + (k-1)/k * (all members' bytes) / link
    MPI_Reduce, Gather(v) (flat, into the root)          latency + off * m / link: every off-node member's data
                                                         through the root node's one link, the congestion the
                                                         porting study saw when 9 ranks reduced onto one node
    MPI_Bcast, Scatter (flat, out of the root)           latency + off * m / link
    MPI_Barrier                                          ceil(log2 k) latency

A nonblocking collective's cost is counted from its posting: its MPI_Wait/Waitall holds until the posting time
plus the cost, so computation that overlaps it hides it, as on a real network.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from gpt2trace.format import mpi_calls as calls
from trainer.errors import ConfigError

_BANDWIDTH = {"gb/s": 1e9 / 8, "mb/s": 1e6 / 8, "kb/s": 1e3 / 8, "gbit/s": 1e9 / 8, "mbit/s": 1e6 / 8,
              "gib/s": 2 ** 30, "mib/s": 2 ** 20}     # bytes per second per unit ("Gb/s" is gigabits)
_BYTES_PER_S_UPPER = {"GB/s": 1e9, "MB/s": 1e6, "KB/s": 1e3}
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}    # units in a second
OPTION = "--emulate-network"
_EXAMPLE = 'e.g. "nodes=5,link=10Gb/s,latency=5us"'


@dataclass(frozen=True)
class Network:
    nodes: int
    link_bytes_per_s: float
    latency_s: float

    def placement(self, ranks: int) -> list[int]:
        """The node of each rank: blocks of ceil(ranks / nodes), filled in rank order."""
        per = -(-ranks // self.nodes)
        return [r // per for r in range(ranks)]

    def as_json(self, ranks: int) -> dict:
        return {"nodes": self.nodes, "link_bytes_per_s": self.link_bytes_per_s, "latency_s": self.latency_s,
                "node_of_rank": self.placement(ranks)}

    def cost(self, name: str, nbytes: int, members: tuple[int, ...], root: int | None, node_of: list[int],
             peer: int | None = None, me: int | None = None) -> float:
        """Seconds the network adds to the call `name` of `nbytes` bytes per member on the world ranks `members`
        (root: a world rank; peer/me: a point-to-point call's two world ranks)."""
        op, cls, base = calls.classify(name)
        lat, bw = self.latency_s, self.link_bytes_per_s
        if op in (calls.RECV, calls.SENDRECV):
            if peer is None or me is None or node_of[peer] == node_of[me]:
                return 0.0
            return lat + nbytes / bw
        if op not in (calls.COLL, calls.COLL_POST):
            return 0.0
        nodes = {node_of[r] for r in members}
        k = len(nodes)
        if k < 2:
            return 0.0
        if base == "MPI_Barrier":
            return math.ceil(math.log2(k)) * lat
        if base == "MPI_Allreduce":
            return 2 * (k - 1) * lat + 2 * (k - 1) / k * nbytes / bw
        if base in ("MPI_Allgather", "MPI_Allgatherv", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block"):
            # the traced bytes are the whole buffer (the gathered result, or the input to scatter): each node's
            # link carries all of it but its own share
            return (k - 1) * lat + (k - 1) / k * nbytes / bw
        if cls in (calls.ALL_TO_ONE, calls.ONE_TO_ALL):
            home = node_of[root] if root is not None else node_of[members[0]]
            off = sum(1 for r in members if node_of[r] != home)
            return lat + off * nbytes / bw
        return (k - 1) * lat + (k - 1) / k * nbytes / bw


def parse(text: str) -> Network:
    """'nodes=5,link=10Gb/s,latency=5us' -> Network; a ConfigError naming --emulate-network otherwise."""
    fields = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key.strip() not in ("nodes", "link", "latency"):
            raise ConfigError("emulate_network", text, f"must be nodes=N,link=BANDWIDTH,latency=TIME, {_EXAMPLE}")
        fields[key.strip()] = value.strip()
    missing = {"nodes", "link", "latency"} - set(fields)
    if missing:
        raise ConfigError("emulate_network", text, f"needs {', '.join(sorted(missing))} ({_EXAMPLE})")
    if not fields["nodes"].isdigit() or int(fields["nodes"]) < 1:
        raise ConfigError("emulate_network", text, "nodes must be a whole number >= 1")
    return Network(int(fields["nodes"]), _bandwidth(text, fields["link"]), _duration(text, fields["latency"]))


def _number_unit(text: str, value: str) -> tuple[float, str]:
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]+)", value)
    if not m:
        raise ConfigError("emulate_network", text, f"{value!r} is not a number with a unit ({_EXAMPLE})")
    return float(m.group(1)), m.group(2)


def _bandwidth(text: str, value: str) -> float:
    number, unit = _number_unit(text, value)
    scale = _BYTES_PER_S_UPPER[unit] if unit in _BYTES_PER_S_UPPER else _BANDWIDTH.get(unit.lower())
    if scale is None or not number > 0:
        raise ConfigError("emulate_network", text, f"link {value!r}: give a positive bandwidth in Gb/s, Mb/s "
                                                   "(bits) or GB/s, MB/s (bytes)")
    return number * scale


def _duration(text: str, value: str) -> float:
    number, unit = _number_unit(text, value)
    if unit not in _PER_SECOND or not math.isfinite(number):
        raise ConfigError("emulate_network", text, f"latency {value!r}: give a time in s, ms, us or ns")
    return number / _PER_SECOND[unit]


def hold(seconds: float, since_ns: int) -> None:
    """Return no earlier than `seconds` after the monotonic time `since_ns` (sleep most of it, spin the rest)."""
    until = since_ns + int(seconds * 1e9)
    left = until - time.monotonic_ns()
    if left > 2_000_000:
        time.sleep((left - 1_000_000) / 1e9)
    while time.monotonic_ns() < until:
        pass
