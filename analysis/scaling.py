"""Model factors across runs (BSC BasicAnalysis' modelfactors), the first run being the reference.

Work is normalized per token when every run knows its tokens, else per step, else per run, so runs of different
lengths compare:  speedup = (T_ref / work_ref) / (T / work);  computation scalability =
(sum of Useful of the reference / work_ref) / (sum of Useful / work);  global efficiency = PE x computation
scalability. With instruction and cycle counters in every run (`analysis.counters`), computation scalability
splits as BasicAnalysis does: IPC scalability = IPC / IPC_ref, frequency scalability = f / f_ref, instruction
scalability = (useful instructions of the reference / work_ref) / (useful instructions / work); their product is
the computation scalability. Each row also carries the run's average useful IPC and frequency (None without
counters), the OpenMP factors of `analysis.openmp` (None without threads), and as BasicAnalysis' statistics the
runtime of the ideal-network replay, the total useful time and the longest a rank computes in the replay
("useful duration (ideal, max)"). Serialization and transfer efficiency are the MPI level's on hybrid runs.
"""
from __future__ import annotations

import pandas as pd

COLUMNS = ["trace", "processes", "threads", "runtime_s", "speedup", "parallel_efficiency", "load_balance",
           "communication_efficiency", "serialization_efficiency", "transfer_efficiency",
           "computation_scalability", "global_efficiency"]
COUNTER_COLUMNS = ["ipc_scalability", "instruction_scalability", "frequency_scalability", "ipc", "frequency_ghz"]
OPENMP_COLUMNS = ["serial_region_efficiency", "region_efficiency"]
STATISTICS = ["ideal_runtime_s", "useful_total_s", "useful_ideal_max_s"]


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
                     "serialization_efficiency": _mpi_level(p, "serialization_efficiency"),
                     "transfer_efficiency": _mpi_level(p, "transfer_efficiency"), "computation_scalability": scal,
                     "global_efficiency": pe * scal if pe is not None and scal is not None else None,
                     **_counter_scalability(ref, r, unit),
                     **{k: (p.get("openmp") or {}).get(k) for k in OPENMP_COLUMNS},
                     **{k: p.get(k) for k in STATISTICS}})
    out = pd.DataFrame(rows, columns=COLUMNS + COUNTER_COLUMNS + OPENMP_COLUMNS + STATISTICS)
    out.attrs["work_unit"] = unit
    return out


def _mpi_level(p: dict, key: str) -> float | None:
    value = p.get(key)
    return value if value is not None else (p.get("mpi") or {}).get(key)


def _useful(result: dict) -> float:
    p = result["pop"]
    return (p.get("useful_avg_s") or 0.0) * (p.get("cpus") or 0)


def _counter_scalability(ref: dict, result: dict, unit: str) -> dict:
    """IPC, instruction and frequency scalability against the reference (None unless both have the counters)."""
    a, b = ref.get("counters") or {}, result.get("counters") or {}
    out = dict.fromkeys(COUNTER_COLUMNS)
    out["ipc"], out["frequency_ghz"] = b.get("ipc"), b.get("frequency_ghz")
    if a.get("ipc") and b.get("ipc"):
        out["ipc_scalability"] = b["ipc"] / a["ipc"]
    if a.get("frequency_ghz") and b.get("frequency_ghz"):
        out["frequency_scalability"] = b["frequency_ghz"] / a["frequency_ghz"]
    if a.get("useful_instructions") and b.get("useful_instructions"):
        out["instruction_scalability"] = ((a["useful_instructions"] / _work(ref, unit))
                                          / (b["useful_instructions"] / _work(result, unit)))
    return out
