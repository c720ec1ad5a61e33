"""Traces bigger than memory (issue 17): a synthetic trainer-like trace of any length, written rank by rank.

The trace has the shape of analyze_speed.py's 10 M-record trace (gpt2trace.testing.synthetic: steps, phases,
per-thread kernel records with layers, states that partition each thread's time, a late rank and a slow thread),
plus what a real MPI run adds: an MPI_Sendrecv between pairs of ranks before each step's MPI_Allreduce (Send
Receive, then Group Communication states) and the tracer's rss_bytes counters at each phase end. It is made one
rank at a time (synthetic.generate_by_rank) and written with RankOrderedWriter, so memory is that of one rank's
records whatever the length: 100 M records (64 ranks x 4 threads) fit on a 24 GB machine.

    python benchmarks/big_trace.py generate --records 100000000 --ranks 64 --threads 4 -o big.parquet

prints what it wrote as JSON: records, steps, file size, seconds, and this process's peak RSS.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

from analyze_speed import config as analyze_config

from gpt2trace.format.rank_order import RankOrderedWriter
from gpt2trace.testing import synthetic

LAYERS = 12


def synthetic_config(ranks: int, threads: int, records: int, seed: int) -> synthetic.SyntheticConfig:
    """analyze_speed's trace shape with point-to-point calls and memory counters, with enough steps for
    `records` (the last step completes, so a few more)."""
    shape = analyze_config(argparse.Namespace(ranks=ranks, threads=threads, layers=LAYERS))
    cfg = replace(shape, seed=seed, p2p=ranks > 1, rss=True)
    return replace(cfg, steps=max(1, -(-records // synthetic.records_per_step(cfg))))


def write_synthetic(path: str | Path, ranks: int, threads: int, records: int, seed: int = 1,
                    advance=lambda n: None) -> dict:
    """Writes the trace to `path` rank by rank (about `records` records); `advance(n)` is called with each rank's
    record count. Returns what it wrote."""
    cfg = synthetic_config(ranks, threads, records, seed)
    pieces = synthetic.generate_by_rank(cfg)
    first = next(pieces)
    with RankOrderedWriter(path, first.schema) as writer:
        writer.write(first)
        advance(first.num_rows)
        for table in pieces:
            writer.write(table)
            advance(table.num_rows)
    return {"records": writer.records, "ranks": ranks, "threads": threads, "layers": LAYERS, "steps": cfg.steps,
            "seed": seed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="Write a synthetic trace rank by rank.")
    gen.add_argument("--records", type=int, default=100_000_000)
    gen.add_argument("--ranks", type=int, default=64)
    gen.add_argument("--threads", type=int, default=4)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("-o", "--output", type=Path, required=True)
    opts = parser.parse_args()
    if opts.ranks < 1 or opts.threads < 1 or opts.records < 1:
        print("error: --records, --ranks and --threads must be >= 1", file=sys.stderr)
        sys.exit(2)
    from gpt2trace.cli.progress import progress
    t = time.perf_counter()
    with progress(f"writing {opts.output}", total=opts.records) as advance:
        made = write_synthetic(opts.output, opts.ranks, opts.threads, opts.records, opts.seed, advance)
    made.update(write_s=time.perf_counter() - t, bytes=opts.output.stat().st_size,
                bytes_per_record=opts.output.stat().st_size / made["records"],
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, path=str(opts.output))
    print(json.dumps(made, indent=1))


if __name__ == "__main__":
    main()
