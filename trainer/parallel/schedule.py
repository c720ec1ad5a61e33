"""Pipeline schedules: the order in which one stage runs the forward and backward passes of a step's micro-batches.

    gpipe   F0 F1 ... F(M-1), then B0 B1 ... B(M-1) (GPipe; backward in Megatron's order, oldest first): every
            micro-batch's activations are held at the turn, M of them
    1f1b    stage k of P: min(P-k-1, M) warm-up forwards, then one forward and one backward alternately, then the
            remaining backwards (PipeDream-Flush, Megatron's default): at most P-k micro-batches held at once

Both have the same bubble, (P-1)/(M+P-1) of the step when every stage takes the same time per micro-batch; 1F1B
bounds the activation memory by P instead of M. A micro-batch's activations live in slot m mod `slots` (slots as in
trainer.memory.micro_batch_slots): under either schedule, the micro-batch that used a slot before has finished its
backward by the time the slot is reused.
"""
from __future__ import annotations

from typing import NamedTuple

FORWARD, BACKWARD = "F", "B"


class Pass(NamedTuple):
    kind: str        # FORWARD or BACKWARD
    micro: int       # the micro-batch


def gpipe(stage: int, stages: int, micro_batches: int) -> list[Pass]:
    M = micro_batches
    return [Pass(FORWARD, m) for m in range(M)] + [Pass(BACKWARD, m) for m in range(M)]


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[Pass]:
    M = micro_batches
    warmup = min(stages - stage - 1, M)
    out = [Pass(FORWARD, m) for m in range(warmup)]
    for i in range(M - warmup):
        out += [Pass(FORWARD, warmup + i), Pass(BACKWARD, i)]
    out += [Pass(BACKWARD, m) for m in range(M - warmup, M)]
    return out


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b}


def schedule(name: str, stage: int, stages: int, micro_batches: int) -> list[Pass]:
    return SCHEDULES[name](stage, stages, micro_batches)


def peak_in_flight(passes: list[Pass]) -> int:
    """The most micro-batches between their forward and their backward at once."""
    held = peak = 0
    for p in passes:
        held += 1 if p.kind == FORWARD else -1
        peak = max(peak, held)
    return peak
