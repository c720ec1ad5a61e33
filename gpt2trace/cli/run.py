"""`gpt2trace run`: train the instrumented GPT-2 and write its trace (a thin layer over gpt2trace.run.runner)."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpt2trace.cli.common import console, err_console, fail
from gpt2trace.run.runner import DEFAULT_TRACE
from trainer.config import DataLoading, DPSync, SPReduce, SPSplit

_MODEL_HELP = "GPT-2 config by name: d12 (124M), d24, d36, d48, small (demo), tiny (tests)."


def run(
    model: Annotated[str, typer.Option(help=_MODEL_HELP)] = "small",
    init_from: Annotated[Optional[Path], typer.Option(
        "--init-from", exists=True, dir_okay=False, help="llm.c checkpoint to start from (sets the model).")] = None,
    data: Annotated[Optional[Path], typer.Option(
        exists=True, dir_okay=False, help="llm.c token file (.bin); default: the built-in synthetic corpus.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-B", min=1,
                                            help="Sequences per micro-step, per rank.")] = 4,
    seq_len: Annotated[Optional[int], typer.Option(
        "--seq-len", "-T", min=1, help="Tokens per sequence (default: 64, or the model's context if shorter).")] = None,
    steps: Annotated[int, typer.Option(min=0, help="Optimizer steps.")] = 60,
    lr: Annotated[float, typer.Option(min=0.0, help="AdamW learning rate (constant).")] = 1e-3,
    weight_decay: Annotated[float, typer.Option("--weight-decay", min=0.0)] = 0.0,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1, help="Micro-steps per optimizer step.")] = 1,
    threads: Annotated[Optional[int], typer.Option(
        min=1, help="Numba threads per rank (default: the cores available, shared among the ranks).")] = None,
    ranks: Annotated[int, typer.Option(
        min=1, help="MPI ranks (data parallel); starts mpiexec itself unless already inside MPI.")] = 1,
    dp_sync: Annotated[DPSync, typer.Option("--dp-sync", help="How ranks combine gradients.")] = DPSync.allreduce,
    data_loading: Annotated[DataLoading, typer.Option(
        "--data-loading", help="local: each rank reads its shard; scatter: rank 0 reads and scatters.")
    ] = DataLoading.local,
    sp: Annotated[int, typer.Option(
        "--sp", min=1, help="Sequence parallelism: ranks per sequence group, each holding T/sp positions of every "
                            "sequence (--ranks/sp data-parallel groups).")] = 1,
    sp_split: Annotated[SPSplit, typer.Option(
        "--sp-split", help="Positions per rank: contiguous blocks, or interleaved (t mod sp).")] = SPSplit.contiguous,
    sp_reduce: Annotated[SPReduce, typer.Option(
        "--sp-reduce", help="How a sequence group sums key/value gradients after attention backward.")
    ] = SPReduce.allreduce,
    seed: Annotated[int, typer.Option(help="Seed for initialization and the synthetic corpus.")] = 1337,
    save: Annotated[Optional[Path], typer.Option(dir_okay=False, help="Write an llm.c checkpoint at the end.")] = None,
    metrics_json: Annotated[Optional[Path], typer.Option(
        "--metrics-json", dir_okay=False, help="Per-step JSON lines: step, loss, ms, tokens_per_s.")] = None,
    trace: Annotated[Path, typer.Option(dir_okay=False, help="Where the trace goes.")] = DEFAULT_TRACE,
    no_trace: Annotated[bool, typer.Option("--no-trace", help="Switch tracing off entirely.")] = False,
    n_layer: Annotated[Optional[int], typer.Option("--n-layer", min=1)] = None,
    n_head: Annotated[Optional[int], typer.Option("--n-head", min=1)] = None,
    n_embd: Annotated[Optional[int], typer.Option("--n-embd", min=1)] = None,
    vocab_size: Annotated[Optional[int], typer.Option("--vocab-size", min=1)] = None,
    max_seq_len: Annotated[Optional[int], typer.Option("--max-seq-len", min=1)] = None,
) -> None:
    """Train GPT-2 on the data (default: a built-in learnable corpus) and trace every thread to Parquet."""
    from gpt2trace.run.mpiexec import launched_by_mpi
    from trainer.cpu import cores_available

    cores = cores_available()
    inside = launched_by_mpi()
    if inside is not None and inside[1] > 1:
        rank, ranks = inside
    else:
        rank = 0
    _check_sequence_parallel(ranks, sp, seq_len, model, max_seq_len)
    threads = threads or max(1, cores // ranks)
    oversubscribed = ranks * threads > cores
    if inside is None and ranks > 1:
        _launch_ranks(ranks, threads, oversubscribed, None if no_trace else trace)
        return
    if rank != 0:
        console.quiet = True   # only rank 0 prints; errors still go to stderr with the rank named
    if oversubscribed:
        console.print(f"[yellow]warning:[/] {ranks} rank(s) x {threads} thread(s) > {cores} cores: "
                      "oversubscribed, timings will show it")
    from gpt2trace.run.runner import RunConfig, TraceConfig, prepare_process, run as run_training

    prepare_process(threads, oversubscribed=oversubscribed)
    from trainer.config import ParallelConfig, TrainConfig, model_config
    from trainer.errors import TrainerError

    try:
        mcfg = model_config(model, n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab_size,
                            max_seq_len=max_seq_len)
        T = _seq_len(seq_len, mcfg)
        tcfg = TrainConfig(batch_size=batch_size, seq_len=T, steps=steps, lr=lr, weight_decay=weight_decay,
                           grad_accum=grad_accum, seed=seed)
        if init_from is None and T > mcfg.max_seq_len:
            raise ValueError(f"--seq-len {T} exceeds the model's max_seq_len {mcfg.max_seq_len}; "
                             "lower -T or raise --max-seq-len")
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))
    par = ParallelConfig(threads=threads, ranks=ranks, rank=rank, dp_sync=dp_sync, data_loading=data_loading,
                         sp=sp, sp_split=sp_split, sp_reduce=sp_reduce)
    cfg = RunConfig(mcfg, tcfg, par, TraceConfig(None if no_trace else trace), data, init_from, save, metrics_json)

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=console, transient=False)
    task = progress.add_task("compiling kernels (cached after the first run)...", total=steps)

    def on_start(info: dict) -> None:
        m = info["model"]
        console.print(f"model L={m.n_layer} NH={m.n_head} C={m.n_embd} V={m.vocab_size} (padded "
                      f"{m.padded_vocab_size}) T={T}: {info['num_parameters']:,} parameters; B={batch_size} "
                      f"grad_accum={grad_accum} threads={threads}"
                      + (f" ranks={ranks} dp-sync={dp_sync.value} data-loading={data_loading.value}"
                         if ranks > 1 else "")
                      + (f" sp={sp} ({sp_split.value}, {sp_reduce.value}): {T // sp} positions per rank"
                         if sp > 1 else ""))

    def on_step(m) -> None:
        progress.update(task, advance=1, description=f"loss {m.loss:.4f} | {m.ms:8.1f} ms/step | "
                                                     f"{m.tokens_per_s:,.0f} tok/s")

    comm = None
    if ranks > 1:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    try:
        with progress:
            result = run_training(cfg, on_step=on_step, on_start=on_start, comm=comm)
    except TrainerError as e:
        _fail_rank(comm, rank, str(e))
    except Exception as e:  # a bug or an injected fault: on one rank of many it must stop the whole job
        if comm is None:
            raise
        import traceback
        traceback.print_exc()
        _fail_rank(comm, rank, f"{type(e).__name__}: {e}")
    if rank == 0:
        _summary(result, steps)


def _check_sequence_parallel(ranks: int, sp: int, seq_len: int | None, model: str,
                             max_seq_len: int | None) -> None:
    """--sp must divide --ranks and -T, checked before any rank starts (one line, exit code 2)."""
    from trainer.config import ParallelConfig, model_config
    from trainer.parallel.split import SequenceSplit

    try:
        ParallelConfig(ranks=ranks, sp=sp)
        SequenceSplit(_seq_len(seq_len, model_config(model, max_seq_len=max_seq_len)), sp)
    except KeyError:
        pass   # an unknown --model: reported with the other model options
    except ValueError as e:
        fail(str(e))


def _seq_len(seq_len: int | None, mcfg) -> int:
    """-T, by default 64 or the model's context if shorter."""
    return seq_len or min(64, mcfg.max_seq_len)


def _fail_rank(comm, rank: int, message: str) -> None:
    """One line naming the rank; with MPI, abort the whole job so the other ranks cannot hang in a collective."""
    if comm is None:
        fail(message)
    err_console.print(f"[bold red]error:[/] rank {rank}: {message}", markup=True, soft_wrap=True)
    sys.stderr.flush()
    comm.Abort(2)


def _launch_ranks(ranks: int, threads: int, oversubscribed: bool, trace: Path | None) -> None:
    """`--ranks N` outside MPI: rerun this command under mpiexec; merge what the ranks traced if the job failed."""
    from gpt2trace.run.mpiexec import relaunch
    from gpt2trace.format.writer import parts_dir, recover

    argv = _without_option(sys.argv[1:], "--ranks")
    if "--threads" not in argv:
        argv += ["--threads", str(threads)]
    env = {"OMP_WAIT_POLICY": "PASSIVE"} if oversubscribed else {}
    console.print(f"starting {ranks} ranks x {threads} threads under mpiexec"
                  + (" (oversubscribed: passive OpenMP waiting)" if oversubscribed else ""))
    try:
        code = relaunch(ranks, argv, env)
    except FileNotFoundError as e:
        fail(str(e))
    if code != 0:
        if trace is not None and parts_dir(trace).is_dir():
            path, records = recover(trace)
            err_console.print(f"the job failed (mpiexec exit code {code}); the completed steps are kept in "
                              f"{path} ({records:,} records)")
        raise typer.Exit(code=code)


def _without_option(argv: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def _summary(result, steps: int) -> None:
    h = result.history
    if h:
        timed = [m.ms for m in h[1:]] or [h[0].ms]  # step 0 includes JIT warm-up
        console.print(f"loss {h[0].loss:.4f} -> {h[-1].loss:.4f} in {steps} steps; median "
                      f"{statistics.median(timed):.1f} ms/step, "
                      f"{h[-1].tokens / statistics.median(timed) * 1e3:,.0f} tokens/s (step 0 left out: warm-up)")
    if result.trace_path is not None:
        size = result.trace_path.stat().st_size
        console.print(f"trace: {result.trace_path} ({result.trace_records:,} records, {size / 1e6:.2f} MB); "
                      f"next: gpt2trace analyze {result.trace_path}")
