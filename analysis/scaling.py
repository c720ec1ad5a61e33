"""Model factors across runs (BSC BasicAnalysis' modelfactors), the first run being the reference.

Work is normalized per token when every run knows its tokens, else per step, else per run, so runs of different
lengths compare:  speedup = (T_ref / work_ref) / (T / work);  computation scalability =
(sum of Useful of the reference / work_ref) / (sum of Useful / work);  global efficiency = PE x computation
scalability. (IPC, instruction and frequency scalability need hardware counters, which traces do not carry yet.)
"""
from __future__ import annotations

import pandas as pd

COLUMNS = ["trace", "processes", "threads", "runtime_s", "speedup", "parallel_efficiency", "load_balance",
           "communication_efficiency", "serialization_efficiency", "transfer_efficiency",
           "computation_scalability", "global_efficiency"]


def _work(result: dict, unit: str) -> float:
    s = result["summary"]
    if unit == "token":
        return s["tokens_per_step"] * max(s["steps"], 1)
    return float(s["steps"]) if unit == "step" else 1.0


def modelfactors(results: list[dict]) -> pd.DataFrame:
    """One row per analysis result (as `analysis.analyze.analyze` returns), the first one the reference."""
    if not results:
        return pd.DataFrame(columns=COLUMNS)
    if all(r["summary"].get("tokens_per_step") for r in results):
        unit = "token"
    elif all(r["summary"].get("steps") for r in results):
        unit = "step"
    else:
        unit = "run"
    rows = []
    ref = results[0]
    ref_t = ref["pop"]["runtime_s"] / _work(ref, unit)
    ref_u = _useful(ref) / _work(ref, unit)
    for r in results:
        p, work = r["pop"], _work(r, unit)
        t, u = p["runtime_s"] / work, _useful(r) / work
        scal = ref_u / u if u and ref_u else None
        pe = p.get("parallel_efficiency")
        rows.append({"trace": r.get("trace"), "processes": r["summary"]["ranks"],
                     "threads": r["summary"]["threads_per_rank"], "runtime_s": p["runtime_s"],
                     "speedup": ref_t / t if t else None, "parallel_efficiency": pe,
                     "load_balance": p.get("load_balance"),
                     "communication_efficiency": p.get("communication_efficiency"),
                     "serialization_efficiency": p.get("serialization_efficiency"),
                     "transfer_efficiency": p.get("transfer_efficiency"), "computation_scalability": scal,
                     "global_efficiency": pe * scal if pe is not None and scal is not None else None})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out.attrs["work_unit"] = unit
    return out


def _useful(result: dict) -> float:
    p = result["pop"]
    return (p.get("useful_avg_s") or 0.0) * (p.get("cpus") or 0)
