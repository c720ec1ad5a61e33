"""`gpt2trace info TRACE [--json]`: what a trace holds (a thin layer over gpt2trace.format.info)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from gpt2trace.cli import json_text
from gpt2trace.cli.common import console, fail, plain
from gpt2trace.cli.progress import progress
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.limits import GROUP_RECORDS


def info(
    trace: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file: Parquet, or Paraver .prv/.prv.gz (with "
                                          "its .pcf and .row beside it).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the information as one JSON object. An error "
                                          "prints nothing on stdout: one line on stderr, exit code 2.")] = False,
    group_records: Annotated[int, typer.Option(
        "--group-records", min=1, metavar="N", help="Read at most N records at once (whole ranks); a Paraver trace "
        "of more is imported rank by rank into a temporary Parquet trace first.")] = GROUP_RECORDS,
) -> None:
    """Schema version, ranks, threads, steps, time span, records per kind, run configuration and machine."""
    try:
        data = _info(trace, group_records)
    except (TraceError, OutputError) as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json_text.dumps(data) + "\n")
        return
    for table in (_trace_table(data), _run_table(data.get("run")), _machine_table(data)):
        if table is not None:
            console.print(table)


def _info(trace: Path, group_records: int) -> dict:
    """Our Parquet traces rank group by rank group (memory of one group, whatever the trace's length), and so a
    Paraver trace too big to import whole, through a temporary rank-ordered import; the other formats through their
    importers."""
    from gpt2trace.cli.grouped import Processes, readable
    from gpt2trace.format.info import trace_info
    from gpt2trace.interop.loader import is_otf2, is_parquet, load
    with readable(trace, Processes(), group_records) as (source, shown):
        if is_otf2(source):             # the archive's every file, not its anchor's few hundred bytes
            from gpt2trace.interop.otf2_format import archive_bytes
            return {**trace_info(load(source)), "bytes": archive_bytes(source)}
        if not is_parquet(source):
            return trace_info(load(source))
        return _file_info(source, group_records, shown)


def _file_info(path: Path, group_records: int, shown: Path | None = None) -> dict:
    from gpt2trace.format.info import file_info
    from gpt2trace.format.reader import rank_records
    total = sum(rank_records(path).values())
    with progress(f"reading {shown or path}", total=total) as advance:
        return file_info(path, group_records, advance, shown)


def _kv(title: str, rows: list[tuple[str, object]]) -> Table:
    """Key and value; values (paths, CPU names, package lists) wrap at spaces, and fold only a word wider than the
    terminal."""
    table = Table(title=Text(title, style="bold"), show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, "-" if value is None else plain(value))
    return table


def _trace_table(d: dict) -> Table:
    steps = f"{d['steps']} ({d['first_step']}..{d['last_step']})" if d["steps"] else "0"
    per_kind = ", ".join(f"{k} {n:,}" for k, n in d["records_per_kind"].items() if n)
    threads = ", ".join(f"rank {r}: {n}" for r, n in d["threads_per_rank"].items())
    rows = [("file", d["path"]), ("size", f"{d['bytes'] / 1e6:.2f} MB" if d["bytes"] is not None else None),
            ("schema version", d["schema_version"]), ("records", f"{d['records']:,} ({per_kind})"),
            ("ranks", d["ranks"]), ("threads", threads), ("steps", steps),
            ("time span", f"{d['duration_s']:.6f} s ({d['start_ns']:,} .. {d['end_ns']:,} ns)")]
    if d["extra_columns"]:
        rows.append(("extra columns", ", ".join(d["extra_columns"])))
    if d["communicators"]:
        rows.append(("communicators", "; ".join(f"{c['name']} (id {c['id']}): ranks {' '.join(map(str, c['ranks']))}"
                                                for c in d["communicators"])))
    return _kv("Trace", rows)


def _run_table(run: dict | None) -> Table | None:
    if not run:
        return None
    m, t, p = run.get("model", {}), run.get("train", {}), run.get("parallel", {})
    rows = [("model", (f"L={m.get('n_layer')} NH={m.get('n_head')} C={m.get('n_embd')} V={m.get('vocab_size')} "
                       f"max T={m.get('max_seq_len')}, {m.get('num_parameters', 0):,} parameters")),
            ("training", (f"B={t.get('batch_size')} T={t.get('seq_len')} steps={t.get('steps')} "
                          f"grad_accum={t.get('grad_accum')} lr={t.get('lr')} seed={t.get('seed')}")),
            ("parallel", f"{p.get('ranks')} rank(s) x {p.get('threads')} thread(s)"
                         + (f", sequence groups of {p['sp']} ({p.get('sp_split')} split, {p.get('sp_reduce')})"
                            if p.get("sp", 1) > 1 else "")),
            ("data", run.get("data")), ("init from", run.get("init_from"))]
    return _kv("Run", rows)


def _machine_table(d: dict) -> Table | None:
    mach, peak, clock = d.get("machine"), d.get("sgemm_peak"), d.get("clock")
    if not (mach or peak or clock):
        return None
    rows = []
    if mach:
        blas = mach.get("blas") or {}
        pk = mach.get("packages") or {}
        rows += [("host", mach.get("hostname")), ("cpu", f"{mach.get('cpu')}, {mach.get('cores')} cores"),
                 ("threading layer", mach.get("threading_layer")),
                 ("BLAS", f"{blas.get('library')} {blas.get('version')} ({blas.get('kernel')})" if blas else None),
                 ("MPI", mach.get("mpi")), ("Python", mach.get("python")),
                 ("packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v))]
    if peak:
        rows.append(("sgemm peak", ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                             for k, v in peak.items() if k.startswith("gflops"))))
    if clock:
        rows.append(("clock", f"{clock.get('source')}, {clock.get('ranks')} rank(s)"))
    return _kv("Machine", rows)
