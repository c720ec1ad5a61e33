"""The network model: what a message and each collective cost, given latency L and bandwidth B; the one model the
what-if replay (analysis.whatif, analysis.replay) and the trainer's emulated cluster (gpt2trace.record.network,
`gpt2trace run --emulate-network`) share, so a replay of an emulated run predicts it with the same costs.

A message of n bytes costs L + n / B. A collective on p ranks costs what its usual algorithm costs (MPICH and
Open MPI pick these for large buffers; small ones get other algorithms, which a replay does not try to guess).
`n` is the call's `bytes` as the trace records it (docs/trace-format.md), the largest over the instance's ranks:

| family (`mpi_calls.Cost`) | collectives | `n` is | cost |
| --- | --- | --- | --- |
| RING_ALLREDUCE (reduce-scatter + allgather) | Allreduce | the vector | 2(p-1)/p n/B + 2(p-1) L |
| RING | Reduce_scatter(_block), Allgather(v) | the whole vector | (p-1)/p n/B + (p-1) L |
| TREE (binomial) | Bcast, Reduce | the vector | ceil(log2 p) (L + n/B) |
| RECURSIVE_DOUBLING | Scan, Exscan | the vector | ceil(log2 p) (L + n/B) |
| LINEAR from/to the root | Scatter(v), Gather(v) | one rank's part | (p-1) (L + n/B) |
| PAIRWISE exchange | Alltoall(v/w) | what one rank sends | (p-1) (L + n/p/B) |
| DISSEMINATION | Barrier | - | ceil(log2 p) L |

Each call's family is its record's `cost` (gpt2trace/format/mpi_calls.py); a name that is not a blocking collective
there is an error (`mpi_calls.UnknownCall`), never costed as some other collective.

The ideal network (B infinite, L = 0) costs nothing: the replay `analyze` uses for POP's serialization/transfer.

On a cluster of nodes (`on_nodes`) only traffic between nodes costs: p is then the number of distinct nodes among
the members, a message inside a node is free, and with `rooted="flat"` a Bcast/Reduce/Scatter/Gather moves every
off-node member's part through the root node's one link: (members off the root's node) x n/B + L, the update-phase
congestion the GPT-2 porting study measured (9 ranks on 5 nodes reducing onto one node behind a 10 Gb/s link).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from gpt2trace.format.limits import MAX_LATENCY_NS, MIN_BANDWIDTH_BPS
from gpt2trace.format.mpi_calls import ALL_TO_ONE, ONE_TO_ALL, Cost, collective

# Units accepted after a number; a bare number is GB/s for a bandwidth and microseconds for a latency.
BANDWIDTH_UNITS = {"B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "Kb/s": 1e3 / 8, "Mb/s": 1e6 / 8,
                   "Gb/s": 1e9 / 8}
LATENCY_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_QUANTITY = re.compile(r"^\s*([0-9.eE+-]+)\s*([A-Za-z/]*)\s*$")


class NetworkError(ValueError):
    """A bandwidth or latency that cannot be used; the message is one line naming the option."""


# Collectives with a root: with rooted="flat" their traffic goes through the root node's link.
_ROOTED_CLASSES = (ONE_TO_ALL, ALL_TO_ONE)


@dataclass(frozen=True)
class Network:
    """Bandwidth in bytes per second (inf: transfers take no time) and latency in nanoseconds; `rooted`: the
    algorithm of rooted collectives, "tree" (the table above) or "flat" (through the root node's link)."""
    bandwidth_bps: float = math.inf
    latency_ns: float = 0.0
    rooted: str = "tree"

    def __post_init__(self) -> None:
        if not self.bandwidth_bps > 0:
            raise NetworkError(f"--bandwidth {self.bandwidth_bps:g} B/s: a bandwidth must be positive")
        if not (self.latency_ns >= 0 and math.isfinite(self.latency_ns)):
            raise NetworkError(f"--latency {self.latency_ns:g} ns: a latency must be zero or positive and finite")

    @property
    def ideal(self) -> bool:
        return self.bandwidth_bps == math.inf and self.latency_ns == 0

    def message_ns(self, nbytes):
        """L + n / B, for a number or an array of them."""
        return self.latency_ns + _transfer_ns(nbytes, self.bandwidth_bps)

    def collective_ns(self, name: str, nbytes: float, p: int) -> float:
        """The algorithm's time for the blocking collective `name` on p ranks (table above); 0 on one rank;
        mpi_calls.UnknownCall for a name that is not a blocking collective of the vocabulary."""
        family = collective(name).cost
        if p <= 1 or self.ideal:
            return 0.0
        L, B = self.latency_ns, self.bandwidth_bps
        if family is Cost.RING_ALLREDUCE:
            return 2 * (p - 1) / p * _transfer_ns(nbytes, B) + 2 * (p - 1) * L
        if family is Cost.RING:
            return (p - 1) / p * _transfer_ns(nbytes, B) + (p - 1) * L
        if family in (Cost.TREE, Cost.RECURSIVE_DOUBLING):
            return math.ceil(math.log2(p)) * (L + _transfer_ns(nbytes, B))
        if family is Cost.LINEAR:
            return (p - 1) * (L + _transfer_ns(nbytes, B))
        if family is Cost.PAIRWISE:
            return (p - 1) * (L + _transfer_ns(nbytes / p, B))
        if family is Cost.DISSEMINATION:
            return math.ceil(math.log2(p)) * L
        raise ValueError(f"{name}: its cost family {family.name} has no formula in gpt2trace/format/network.py")

    def on_nodes(self, name: str, nbytes: float, member_nodes: list[int], root_node: int | None = None) -> float:
        """The blocking collective `name` on members placed on `member_nodes` (one node id per member): only the
        traffic between nodes costs; p = the distinct nodes."""
        rooted = collective(name).cls in _ROOTED_CLASSES
        nodes = set(member_nodes)
        if len(nodes) <= 1 or self.ideal:
            return 0.0
        if self.rooted == "flat" and rooted:     # the root node's link carries the most
            busiest = max(link_bytes(name, nbytes, member_nodes, root_node, "flat").values())
            return self.latency_ns + float(_transfer_ns(busiest, self.bandwidth_bps))
        return self.collective_ns(name, nbytes, len(nodes))


def link_bytes(name: str, nbytes: float, member_nodes: list[int], root_node: int | None = None,
               rooted: str = "flat") -> dict[int, float]:
    """Bytes each node's link carries (in + out) for the blocking collective `name` on members placed on
    `member_nodes`: the traffic `on_nodes` prices. Rooted collectives (flat): every off-node member's part through
    the root node's link, and one part through each off-node member's node link; ring collectives: 2(k-1)/k n for
    an allreduce, (k-1)/k n for the others, through every node's link; nothing inside one node."""
    record = collective(name)
    nodes = sorted(set(member_nodes))
    k = len(nodes)
    if k <= 1:
        return {}
    if record.cls in _ROOTED_CLASSES and rooted == "flat":
        home = root_node if root_node is not None else member_nodes[0]
        out: dict[int, float] = {}
        for n in member_nodes:
            if n != home:
                out[n] = out.get(n, 0.0) + nbytes
                out[home] = out.get(home, 0.0) + nbytes
        return out
    share = 2 * (k - 1) / k if record.cost is Cost.RING_ALLREDUCE else (k - 1) / k
    return dict.fromkeys(nodes, share * nbytes)


def placement(ranks: int, nodes: int) -> list[int]:
    """The node of each rank when `ranks` fill `nodes` in blocks of ceil(ranks / nodes), in rank order (as mpiexec
    fills nodes): 9 ranks on 5 nodes are {0,1} {2,3} {4,5} {6,7} {8}."""
    per = -(-ranks // nodes)
    return [r // per for r in range(ranks)]


IDEAL = Network()


def _transfer_ns(nbytes, bandwidth_bps: float):
    """n / B in ns, for a number or an array of them (n / inf = 0)."""
    return np.maximum(nbytes, 0) / bandwidth_bps * 1e9


def parse_bandwidth(text: str, option: str = "--bandwidth", infinite: bool = True) -> float:
    """'12.5' (GB/s), '12.5GB/s', '10Gb/s', '800MB/s', and with `infinite` 'inf' -> bytes per second;
    NetworkError otherwise (its example offers 'inf' only where it is accepted)."""
    if text.strip().lower() in ("inf", "infinite"):
        if infinite:
            return math.inf
        raise NetworkError(f"{option} {text}: give a finite bandwidth (for example 10Gb/s)")
    value = _quantity(text, BANDWIDTH_UNITS, "GB/s", option)
    if not (value > 0 and (infinite or math.isfinite(value))):
        example = "for example 10GB/s, or inf" if infinite else "for example 10Gb/s"
        raise NetworkError(f"{option} {text}: a bandwidth must be positive{'' if infinite else ' and finite'} "
                           f"({example})")
    if value < MIN_BANDWIDTH_BPS:
        raise NetworkError(f"{option} {text}: give at least {MIN_BANDWIDTH_BPS:.3g} B/s (a byte's transfer must fit "
                           "the int64 nanosecond clock, ~146 years)")
    return value


def parse_latency(text: str, option: str = "--latency") -> float:
    """'5' (us), '5us', '800ns', '1ms' -> nanoseconds; NetworkError otherwise."""
    value = _quantity(text, LATENCY_UNITS, "us", option)
    if not (value >= 0 and math.isfinite(value)):
        raise NetworkError(f"{option} {text}: a latency must be zero or positive and finite (for example 5us)")
    if value > MAX_LATENCY_NS:
        raise NetworkError(f"{option} {text}: give at most {MAX_LATENCY_NS / 1e9:.3g} s (a latency must fit the int64 "
                           "nanosecond clock, ~146 years)")
    return value


def _quantity(text: str, units: dict[str, float], default: str, option: str) -> float:
    m = _QUANTITY.match(text)
    unit = (m.group(2) if m else "") or default
    try:
        number = float(m.group(1)) if m else math.nan
    except ValueError:
        number = math.nan
    if not m or unit not in units or math.isnan(number):
        raise NetworkError(f"{option} {text!r}: expected a number with one of the units {', '.join(units)} "
                           f"(a bare number is {default})")
    return number * units[unit]
