"""Run summary of a window: runtime, steps, layout (ranks x threads, and the degrees of the parallel dimensions),
step-time spread, tokens/s, model FLOPs and MFU, and TFLOPS per core both as the BigScience study counts them
(2N x 3 passes, 4 with activation recomputation) and as executed."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.order import by_value
from analysis.records import NS, records, threads
from analysis.steps import outliers, steps_table
from analysis.window import Window
from gpt2trace.format import grid as rank_grid
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, STEP, VALUE, Counter, Kind


def layout(trace: Trace, pairs: pd.DataFrame | None = None) -> tuple[int, int]:
    """(ranks, threads per rank) seen in the trace: the largest thread count of any rank; `pairs`: `threads(trace)`
    when the caller has it."""
    pairs = threads(trace) if pairs is None else pairs
    return pairs[RANK].nunique(), int(pairs.groupby(RANK).size().max())


def flops_per_token(run: dict | None) -> float | None:
    """Model FLOPs per token: 6*N + 6*L*T*C.

    6*N is the forward and backward matmuls over every parameter (PaLM, appendix B); attention adds
    12*L*T*C for QK^T and AV, halved for the causal mask as llm.c (the seeds' TFLOPS/MFU estimate) does.
    """
    try:
        model, train = run["model"], run["train"]
        n, layers, channels, seq = (float(model["num_parameters"]), model["n_layer"], model["n_embd"],
                                    train["seq_len"])
    except (KeyError, TypeError):
        return None
    return 6 * n + 6 * layers * seq * channels


MODEL_DIMS = ("n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len")      # what makes two models the same


def model(run: dict | None) -> dict | None:
    """The run's model dimensions (MODEL_DIMS, those it records); None for a trace that records no model."""
    recorded = (run or {}).get("model")
    if not isinstance(recorded, dict):
        return None
    dims = {k: recorded[k] for k in MODEL_DIMS if recorded.get(k) is not None}
    return dims or None


def recompute(run: dict | None) -> bool:
    """Whether the run recomputed activations in backward (`recompute` in its parallel or training settings)."""
    for section in ("parallel", "train"):
        value = ((run or {}).get(section) or {}).get("recompute")
        if value is not None:
            return bool(value)
    return False


def recompute_flops_per_token(run: dict | None) -> float | None:
    """FLOPs per token that activation recomputation adds: the transformer blocks' forward once more, 24LC^2 in
    their matmuls and 2LTC in attention (the forward third of `flops_per_token`'s 6LTC)."""
    try:
        layers, channels, seq = run["model"]["n_layer"], run["model"]["n_embd"], run["train"]["seq_len"]
    except (KeyError, TypeError):
        return None
    return 24.0 * layers * channels * channels + 2.0 * layers * seq * channels


def study_passes(run: dict | None) -> int:
    """The passes the BigScience study's TFLOPS formula counts, 2N FLOPs per token each: forward and backward (3),
    and the forward again with activation recomputation (4)."""
    return 4 if recompute(run) else 3


def tokens_per_step(trace: Trace, window: Window, ranks: int,
                    token_ranks: tuple[int, ...] | None = None) -> np.ndarray | None:
    """Tokens of each step in the window from the `tokens` counter, else B*T*grad_accum*ranks from the metadata.

    Counters from every rank are summed (each rank counts its own tokens); a counter written by fewer ranks is
    taken as the global count. `token_ranks` limits the count to ranks that each see different tokens (one stage
    of every pipeline: all stages of a pipeline train on the same tokens), and replaces `ranks` in the fallback.
    """
    rec = records(trace, Kind.COUNTER, (RANK, NAME, STEP, VALUE), window)
    if token_ranks is not None:
        rec, ranks = rec.take(np.isin(rec[RANK], token_ranks)), len(token_ranks)
    if Counter.TOKENS in rec.names and len(rec):
        sel = (rec[NAME] == rec.names.index(Counter.TOKENS)) & (rec[STEP] >= 0)
        if sel.any():
            step, rank, value = rec[STEP][sel], rec[RANK][sel], rec[VALUE][sel]
            steps = np.unique(step)
            idx = np.searchsorted(steps, step)
            total = np.bincount(idx, weights=value)
            most = np.full(len(steps), -np.inf)
            np.maximum.at(most, idx, value)
            width = int(rank.max()) + 1
            pairs = np.unique(idx.astype(np.int64) * width + rank)       # distinct (step, rank)
            reporting = np.bincount(pairs // width, minlength=len(steps))
            return np.where(reporting >= ranks, total, most)
    if not len(window.steps):
        return None          # no whole step in the window (a --steps 0 run): no tokens to count, none to make up
    try:
        train, par = trace.run["train"], trace.run.get("parallel", {})
        copies = ranks if token_ranks is not None else par.get("ranks", ranks)
        per = train["batch_size"] * train["seq_len"] * train.get("grad_accum", 1) * copies
    except (KeyError, TypeError, AttributeError):
        return None
    return np.full(len(window.steps), float(per))


def phases(trace: Trace, window: Window) -> pd.DataFrame:
    """Per phase name: count, total seconds (summed over ranks), mean per record, share = total / (ranks x T)."""
    cols = ["phase", "count", "total_s", "mean_s", "share"]
    rec = records(trace, Kind.PHASE, (RANK, NAME), window)
    if not len(rec):
        return pd.DataFrame(columns=cols)
    dur = (rec[END_NS] - rec[START_NS]) / NS
    count = np.bincount(rec[NAME], minlength=len(rec.names))
    total = np.bincount(rec[NAME], weights=dur, minlength=len(rec.names))
    ranks = len(np.unique(rec[RANK]))
    keep = count > 0
    out = pd.DataFrame({"phase": np.array(rec.names, dtype=object)[keep], "count": count[keep],
                        "total_s": total[keep], "mean_s": total[keep] / count[keep],
                        "share": total[keep] / (ranks * window.seconds) if window.seconds > 0 else np.nan})
    return by_value(out, "total_s", ["phase"])


def token_ranks(pipe: dict | None, grid: rank_grid.Grid, ranks: np.ndarray) -> tuple[int, ...] | None:
    """The ranks whose tokens count (`summary`'s `token_ranks`): each token once, so one stage of every pipeline
    (`pipe`: `analysis.pipeline.pipeline`'s result) and one rank of every tensor-parallel group; None: all."""
    first_stage = tuple(r for p in pipe["ranks"] for r in p[:1]) if pipe else None
    if grid.degree("tp") > 1 and grid.size == len(ranks):
        first_stage = tuple(int(r) for r in (first_stage or ranks) if grid.coords(int(r))["tp"] == 0)
    return first_stage


def summary(trace: Trace, window: Window, peak_gflops: float | None = None,
            token_ranks: tuple[int, ...] | None = None, grid: rank_grid.Grid | None = None,
            pairs: pd.DataFrame | None = None, steps: pd.DataFrame | None = None) -> dict:
    """Scalars of the run (seconds, FLOP/s; FLOPs and MFU None when the metadata does not allow them) and
    the `phases` table. `token_ranks`: see `tokens_per_step`; `grid`: the trace's rank grid (read from it when
    not given); `pairs` and `steps`: `threads(trace)` and `steps_table(trace)` when the caller has them."""
    ranks, threads = layout(trace, pairs)
    grid = grid if grid is not None else rank_grid.of_trace(trace)
    steps = steps_table(trace) if steps is None else steps
    chosen = steps[steps[STEP].isin(window.steps)] if window.steps else steps.iloc[:0]
    secs = chosen["seconds"].to_numpy()
    flagged = outliers(steps["seconds"].to_numpy()) if len(steps) else np.zeros(0, dtype=bool)
    tokens = tokens_per_step(trace, window, ranks, token_ranks)
    total_tokens = float(tokens.sum()) if tokens is not None else None
    runtime = window.seconds
    fpt = flops_per_token(trace.run)
    flops = fpt * total_tokens if fpt is not None and total_tokens is not None else None
    cores = ranks * threads
    gflops = flops / runtime / 1e9 if flops is not None and runtime > 0 else None
    per_core = gflops / cores if gflops is not None else None
    peak = peak_gflops if peak_gflops is not None else (trace.peak or {}).get("gflops_per_core")
    n_steps = len(window.steps)
    tokens_per_s = total_tokens / runtime if total_tokens is not None and runtime > 0 else None
    core_tokens = tokens_per_s / cores if tokens_per_s is not None else None          # tokens/s per core
    n_params = ((trace.run or {}).get("model") or {}).get("num_parameters")
    passes = study_passes(trace.run)
    study = 2 * float(n_params) * passes * core_tokens / 1e12 if n_params and core_tokens is not None else None
    extra = recompute_flops_per_token(trace.run) if recompute(trace.run) else 0.0
    hw_fpt = fpt + extra if fpt is not None and extra is not None else None
    hardware = hw_fpt * core_tokens / 1e12 if hw_fpt is not None and core_tokens is not None else None
    return {
        "model": model(trace.run), "runtime_s": runtime, "steps": n_steps,
        "first_step": window.steps[0] if n_steps else None, "last_step": window.steps[-1] if n_steps else None,
        "ranks": ranks, "threads_per_rank": threads,
        "degrees": grid.text(), "grid": {"dims": [[n, d] for n, d in grid.dims], "source": grid.source},
        "step_s_median": float(np.median(secs)) if n_steps else None,
        "step_s_min": float(secs.min()) if n_steps else None, "step_s_max": float(secs.max()) if n_steps else None,
        "step_s_mad": float(np.median(np.abs(secs - np.median(secs)))) if n_steps else None,
        "outlier_steps": [int(s) for s in steps[STEP][flagged]],
        "warmup_excluded": window.warmup_excluded, "warmup_outlier": window.warmup_outlier,
        "tokens_per_step": total_tokens / max(n_steps, 1) if total_tokens is not None else None,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": fpt, "flops_per_step": flops / max(n_steps, 1) if flops is not None else None,
        "achieved_gflops": gflops, "achieved_gflops_per_core": per_core,
        "peak_gflops_per_core": peak,
        "mfu": per_core / peak if per_core is not None and peak else None,
        "recompute": recompute(trace.run), "study_passes": passes, "study_tflops_per_core": study,
        "hardware_flops_per_token": hw_fpt, "hardware_tflops_per_core": hardware,
        "phases": phases(trace, window),
    }
