"""What every `analyze` result must satisfy, whatever wrote the trace: numbers that cannot be are bugs, never
findings (a call longer than all its rank's time, an ideal runtime below the longest useful time, a frequency
no CPU runs at). Each check raises AssertionError naming the trace and what broke."""
from __future__ import annotations

SLACK = 1e-9          # seconds: the rounding of ns sums into floats
MAX_GHZ = 10.0        # no CPU's clock: a higher useful frequency is a counter read wrong
MAX_IPC = 16.0        # wider than any core retires


def check_result(res: dict) -> None:
    name, p = res["trace"], res["pop"]
    lanes = p.get("cpus") or 1
    runtime = p.get("runtime_s") or 0.0
    for row in (res["waits"].get("calls") or []):
        assert row["total_s"] <= runtime * lanes + SLACK, (
            f"{name}: {row['name']} takes {row['total_s']} s in a window of {runtime} s x {lanes} threads")
        assert row["wait_s"] is None or row["wait_s"] <= row["total_s"] + SLACK, (name, row)
    if p.get("ideal_runtime_s") is not None and p.get("useful_max_s") is not None:
        assert p["ideal_runtime_s"] + SLACK >= p["useful_max_s"], (
            f"{name}: ideal runtime {p['ideal_runtime_s']} s below the longest useful time {p['useful_max_s']} s")
    assert p.get("useful_max_s") is None or p["useful_max_s"] <= runtime + SLACK, (name, p)
    for key in ("parallel_efficiency", "load_balance", "communication_efficiency", "serialization_efficiency",
                "transfer_efficiency"):
        assert p.get(key) is None or -SLACK <= p[key] <= 1 + 1e-6, f"{name}: {key} = {p[key]}"
    s = res.get("summary") or {}
    threads = s.get("threads_per_rank")
    for row in res["occupancy"].get("per_rank") or []:
        assert row["mean_occupancy"] is None or row["mean_occupancy"] <= row["threads"] + 1e-6, (
            f"{name}: rank {row['rank']} has a mean occupancy of {row['mean_occupancy']} on {row['threads']} "
            "threads")
    if threads and res["occupancy"].get("mean_occupancy") is not None:
        assert res["occupancy"]["mean_occupancy"] <= threads + 1e-6, name
    c = res.get("counters") or {}
    assert c.get("frequency_ghz") is None or 0 < c["frequency_ghz"] < MAX_GHZ, f"{name}: {c['frequency_ghz']} GHz"
    assert c.get("ipc") is None or 0 < c["ipc"] < MAX_IPC, f"{name}: IPC {c['ipc']}"
    shares = sum(r["share"] for r in res["states"]["totals"] if r.get("share") is not None)
    assert shares <= 1 + 1e-6, f"{name}: thread states add up to {shares:.3%} of the time"
    cp = res.get("critical_path")
    if cp:
        assert abs(cp["length_s"] - cp["window_s"]) <= 1e-6 * max(cp["window_s"], 1e-3), (
            f"{name}: the critical path is {cp['length_s']} s in a window of {cp['window_s']} s")
