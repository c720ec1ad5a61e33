"""A trace is plain Parquet: pandas reads it in a process that never imports gpt2trace."""
from __future__ import annotations

import json
import subprocess
import sys

READER = """
import json, sys
import pandas as pd
df = pd.read_parquet(sys.argv[1])
assert "gpt2trace" not in sys.modules, "reading a trace must not need gpt2trace"
states = df[df["kind"] == "state"]
running = states[states["state"] == 1]
print(json.dumps({
    "columns": list(df.columns),
    "kinds": sorted(df["kind"].astype(str).unique()),
    "threads": sorted(int(t) for t in df["thread"].unique()),
    "loss_steps": sorted(int(s) for s in df[(df["kind"] == "counter") & (df["name"] == "loss")]["step"]),
    "running_s": float((running["end_ns"] - running["start_ns"]).sum() / 1e9),
    "in_gpt2trace": "gpt2trace" in sys.modules,
}))
"""


def test_pandas_reads_the_trace_without_gpt2trace(real_trace, tmp_path):
    rt = real_trace(2, 3, 1)
    out = subprocess.run([sys.executable, "-c", READER, str(rt.path)], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    got = json.loads(out.stdout)
    assert got["columns"] == ["kind", "rank", "thread", "start_ns", "end_ns", "state", "name", "step", "layer",
                              "microstep", "bytes", "peer", "seq", "value", "communicator", "tag", "task", "block",
                              "preds"]
    assert got["kinds"] == ["counter", "kernel", "phase", "state"] and got["threads"] == [0, 1]
    assert got["loss_steps"] == [0, 1, 2] and got["running_s"] > 0 and not got["in_gpt2trace"]
