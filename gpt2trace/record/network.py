"""An emulated cluster (`gpt2trace run --emulate-network "nodes=5,link=10Gb/s,latency=5us"`).

The ranks of a run on one machine are placed on `nodes` emulated nodes in blocks, as `mpiexec` fills nodes
(gpt2trace.format.network.placement: 9 ranks on 5 nodes are {0,1} {2,3} {4,5} {6,7} {8}). After each real MPI call
the traced communicator (gpt2trace.record.traced_comm) holds every member for the extra time the described network
would add: gpt2trace.format.network's costs, counting only traffic between nodes, with rooted collectives flat
through the root node's link (the congestion the porting study measured). Every member computes the same extra
time from the same inputs (no communication), so a collective still ends together. A receive (Recv, Sendrecv)
from another node waits L + n/B more; sends and waits add nothing themselves; a nonblocking collective's cost runs
from its posting and is held at its Waitall, so computation that overlaps it hides it, as on a real network.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from gpt2trace.format import mpi_calls as calls
from gpt2trace.format.network import Network, NetworkError, parse_bandwidth, parse_latency, placement
from trainer.errors import ConfigError

_EXAMPLE = 'e.g. "nodes=5,link=10Gb/s,latency=5us"'


@dataclass(frozen=True)
class Cluster:
    nodes: int
    network: Network           # rooted="flat"

    def placement(self, ranks: int) -> list[int]:
        return placement(ranks, self.nodes)

    def as_json(self, ranks: int) -> dict:
        return {"nodes": self.nodes, "link_bytes_per_s": self.network.bandwidth_bps,
                "latency_s": self.network.latency_ns / 1e9, "rooted": self.network.rooted,
                "node_of_rank": self.placement(ranks)}

    def cost(self, name: str, nbytes: int, members: tuple[int, ...], root: int | None, node_of: list[int],
             peer: int | None = None, me: int | None = None) -> float:
        """Seconds the network adds to the call `name` of `nbytes` bytes per member on the world ranks `members`
        (root: a world rank; peer/me: a receive's two world ranks)."""
        op, _, base = calls.classify(name)
        if op in (calls.RECV, calls.SENDRECV):
            if peer is None or me is None or node_of[peer] == node_of[me]:
                return 0.0
            return float(self.network.message_ns(nbytes)) / 1e9
        if op not in (calls.COLL, calls.COLL_POST):
            return 0.0
        root_node = node_of[root] if root is not None else None
        return self.network.on_nodes(base, nbytes, [node_of[r] for r in members], root_node) / 1e9


def parse(text: str) -> Cluster:
    """'nodes=5,link=10Gb/s,latency=5us' -> Cluster; a ConfigError naming --emulate-network otherwise (a key given
    twice too)."""
    fields, twice = {}, set()
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key.strip() not in ("nodes", "link", "latency"):
            raise ConfigError("emulate_network", text, f"must be nodes=N,link=BANDWIDTH,latency=TIME, {_EXAMPLE}")
        if key.strip() in fields:
            twice.add(key.strip())
        fields[key.strip()] = value.strip()
    if twice:      # keeping the last value would drop the first one silently
        raise ConfigError("emulate_network", text, f"{', '.join(sorted(twice))} given more than once; give each "
                                                   "key once")
    missing = {"nodes", "link", "latency"} - set(fields)
    if missing:
        raise ConfigError("emulate_network", text, f"needs {', '.join(sorted(missing))} ({_EXAMPLE})")
    if not fields["nodes"].isdigit() or int(fields["nodes"]) < 1:
        raise ConfigError("emulate_network", text, "nodes must be a whole number >= 1")
    try:
        link = parse_bandwidth(fields["link"], "link", infinite=False)    # an emulated link holds the ranks
        latency = parse_latency(fields["latency"], "latency")
        return Cluster(int(fields["nodes"]), Network(link, latency, rooted="flat"))
    except NetworkError as exc:
        raise ConfigError("emulate_network", text, str(exc)) from None


def hold(seconds: float, since_ns: int) -> None:
    """Return no earlier than `seconds` after the monotonic time `since_ns` (sleep most of it, spin the rest)."""
    until = since_ns + int(seconds * 1e9)
    left = until - time.monotonic_ns()
    if left > 2_000_000:
        time.sleep((left - 1_000_000) / 1e9)
    while time.monotonic_ns() < until:
        pass
