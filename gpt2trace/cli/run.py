"""`gpt2trace run`: train the instrumented GPT-2 and write its trace (a thin layer over gpt2trace.runner)."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpt2trace.cli.common import console, fail
from gpt2trace.runner import DEFAULT_TRACE

_MODEL_HELP = "GPT-2 config by name: d12 (124M), d24, d36, d48, small (demo), tiny (tests)."


def run(
    model: Annotated[str, typer.Option(help=_MODEL_HELP)] = "small",
    init_from: Annotated[Optional[Path], typer.Option(
        "--init-from", exists=True, dir_okay=False, help="llm.c checkpoint to start from (sets the model).")] = None,
    data: Annotated[Optional[Path], typer.Option(
        exists=True, dir_okay=False, help="llm.c token file (.bin); default: the built-in synthetic corpus.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-B", min=1, help="Sequences per micro-step.")] = 4,
    seq_len: Annotated[int, typer.Option("--seq-len", "-T", min=1, help="Tokens per sequence.")] = 64,
    steps: Annotated[int, typer.Option(min=0, help="Optimizer steps.")] = 60,
    lr: Annotated[float, typer.Option(min=0.0, help="AdamW learning rate (constant).")] = 1e-3,
    weight_decay: Annotated[float, typer.Option("--weight-decay", min=0.0)] = 0.0,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1, help="Micro-steps per optimizer step.")] = 1,
    threads: Annotated[Optional[int], typer.Option(
        min=1, help="Numba threads per rank (default: the cores available).")] = None,
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
    from trainer.cpu import cores_available

    cores = cores_available()
    threads = threads or cores
    if threads > cores:
        console.print(f"[yellow]warning:[/] --threads {threads} > {cores} cores: oversubscribed, "
                      "timings will show it")
    from gpt2trace.runner import RunConfig, TraceConfig, prepare_process, run as run_training

    prepare_process(threads, oversubscribed=threads > cores)
    from trainer.config import ParallelConfig, TrainConfig, model_config
    from trainer.errors import TrainerError

    try:
        mcfg = model_config(model, n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab_size,
                            max_seq_len=max_seq_len)
        tcfg = TrainConfig(batch_size=batch_size, seq_len=seq_len, steps=steps, lr=lr, weight_decay=weight_decay,
                           grad_accum=grad_accum, seed=seed)
        if init_from is None and seq_len > mcfg.max_seq_len:
            raise ValueError(f"--seq-len {seq_len} exceeds the model's max_seq_len {mcfg.max_seq_len}; "
                             "lower -T or raise --max-seq-len")
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))
    cfg = RunConfig(mcfg, tcfg, ParallelConfig(threads=threads), TraceConfig(None if no_trace else trace),
                    data, init_from, save, metrics_json)

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=console, transient=False)
    task = progress.add_task("compiling kernels (cached after the first run)...", total=steps)

    def on_start(info: dict) -> None:
        m = info["model"]
        console.print(f"model L={m.n_layer} NH={m.n_head} C={m.n_embd} V={m.vocab_size} (padded "
                      f"{m.padded_vocab_size}) T={seq_len}: {info['num_parameters']:,} parameters; "
                      f"B={batch_size} grad_accum={grad_accum} threads={threads}")

    def on_step(m) -> None:
        progress.update(task, advance=1, description=f"loss {m.loss:.4f} | {m.ms:8.1f} ms/step | "
                                                     f"{m.tokens_per_s:,.0f} tok/s")

    try:
        with progress:
            result = run_training(cfg, on_step=on_step, on_start=on_start)
    except TrainerError as e:
        fail(str(e))
    _summary(result, steps)


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
