"""The phase and counter names the training loop writes into a trace.

The trainer imports nothing from the trace format, so the schema (gpt2trace/format/schema.py) lists the same
names, plus the tracer's own `trace_flush`; tests/gpt2trace/format/test_schema.py holds the two equal.
"""
DATALOAD, FORWARD, BACKWARD, GRAD_SYNC, OPTIMIZER, CHECKPOINT = (
    "dataload", "forward", "backward", "grad_sync", "optimizer", "checkpoint")
PHASES = (DATALOAD, FORWARD, BACKWARD, GRAD_SYNC, OPTIMIZER, CHECKPOINT)

LOSS, LR, GRAD_NORM, TOKENS = "loss", "lr", "grad_norm", "tokens"
COUNTERS = (LOSS, LR, GRAD_NORM, TOKENS)
