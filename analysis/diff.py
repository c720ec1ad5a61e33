"""The difference between two runs, from their `analyze` results (or `analysis.diff_summary.summarize`, the same
parts computed alone, as `gpt2trace diff` does): what changed per step, and why B is faster or slower than A.

Times are per step and rank: a table's seconds over the analyzed steps, divided by the steps and by the trace's
ranks (what one rank spends in it in a step, on average), so that runs of different rank counts compare; a
thread state's seconds are summed over the rank's threads. Kernels come from the occupancy's per-kernel wall time
(`kernel`: each kernel over all layers; `kernel_layer`: each kernel x layer, layer None outside the transformer
blocks), phases from the summary, MPI calls (per call and communicator name: `mpi` the time in the calls,
`mpi_wait` the part spent waiting) from the waits, thread states from the state profile. Rows are sorted by
impact, the absolute change of time per step. The step time compared is the median step of each run
(`summary.step_s_median`).
"""
from __future__ import annotations

import pandas as pd

from gpt2trace.format.communicators import describe

COLUMNS = ["category", "name", "layer", "group", "a_s", "b_s", "change_s", "imbalance_a", "imbalance_b"]
CATEGORIES = ("kernel", "kernel_layer", "phase", "mpi", "mpi_wait", "state")
# POP factors by level: (key in the result's pop dict, or in one of its levels; label)
POP_FACTORS = (("parallel_efficiency", "parallel efficiency"), ("load_balance", "load balance"),
               ("communication_efficiency", "communication efficiency"),
               ("serialization_efficiency", "serialization efficiency"),
               ("transfer_efficiency", "transfer efficiency"))
OPENMP_FACTORS = (("thread_efficiency", "thread efficiency"), ("serial_region_efficiency", "serial region efficiency"),
                  ("region_efficiency", "parallel region efficiency"),
                  ("region_load_balance", "load balance in regions"),
                  ("region_scheduling_efficiency", "scheduling efficiency in regions"))
NO_GROUP = ""           # rows other than MPI calls name no communicator
NOTABLE = 0.02          # a change worth a sentence: 2% of A's step time
SAME_SPEED = 0.005      # step times within 0.5%: the same speed
IMBALANCE_MOVE = 0.05   # an imbalance (max/mean) that moved by this much


class DiffError(ValueError):
    """Two results that cannot be compared (a run without analyzed steps)."""


def diff(a: dict, b: dict) -> dict:
    """A and B compared (both `analysis.analyze.analyze` or both `analysis.diff_summary.summarize` results): step
    times, `changes` (COLUMNS, by impact), `pop` (each factor in A and B and the change) and `sentences` (what made
    B faster or slower).
    Raises DiffError when either run has no analyzed step."""
    for label, res in (("A", a), ("B", b)):
        if not res["summary"]["steps"] or not res["summary"]["step_s_median"]:
            raise DiffError(f"{label} ({res['trace']}) has no analyzed step with a time: diff compares time per step;"
                            " give a trace of at least two steps, or --steps")
    changes = _changes(a, b)
    pop = _pop(a["pop"], b["pop"])
    step_a, step_b = a["summary"]["step_s_median"], b["summary"]["step_s_median"]
    out = {"a": a["trace"], "b": b["trace"],
           "step_s": {"a": step_a, "b": step_b, "speedup": step_a / step_b},
           "tokens_per_s": {"a": a["summary"]["tokens_per_s"], "b": b["summary"]["tokens_per_s"]},
           "layout": _layout(a, b), "models": _models(a, b),
           "changes": changes.to_dict("records"), "pop": pop,
           "warnings": [f"{label}: {w}" for label, res in (("A", a), ("B", b)) for w in res.get("warnings") or []
                        if ": not computed: " in w]}
    out["sentences"] = sentences(a, b, changes, pop)
    return out


def per_step(res: dict) -> float:
    """The divisor from a result's seconds to seconds per step and rank."""
    return res["summary"]["steps"] * max(res["summary"]["ranks"], 1)


def _layout(a: dict, b: dict) -> dict[str, list]:
    """What differs in the two runs' layouts (`parallel` when the trace records it, the ranks and the threads per
    rank): {key: [A's, B's]}. Recompute is on or off (True, False) in both, recorded or not (summary's)."""
    la, lb = ({**(r["parallel"] or {}), "ranks": r["summary"]["ranks"],
               "threads_per_rank": r["summary"]["threads_per_rank"],
               "recompute": bool(r["summary"].get("recompute", (r["parallel"] or {}).get("recompute")))}
              for r in (a, b))
    return {k: [la.get(k), lb.get(k)] for k in {**la, **lb} if la.get(k) != lb.get(k)}


def _models(a: dict, b: dict) -> dict[str, list]:
    """The model dimensions that differ between the runs (summary's `model`), {dim: [A's, B's]}; none when either
    trace records no model."""
    ma, mb = (r["summary"].get("model") for r in (a, b))
    if not ma or not mb:
        return {}
    return {k: [ma.get(k), mb.get(k)] for k in {**ma, **mb} if ma.get(k) != mb.get(k)}


def _changes(a: dict, b: dict) -> pd.DataFrame:
    tables = [_table(res) for res in (a, b)]
    m = tables[0].merge(tables[1], on=["category", "name", "layer", "group"], how="outer", suffixes=("_a", "_b"))
    for side in ("a", "b"):
        m[f"s_{side}"] = m[f"s_{side}"].fillna(0.0)
    m = m.rename(columns={"s_a": "a_s", "s_b": "b_s"})
    m["change_s"] = m["b_s"] - m["a_s"]
    imb = [_imbalances(res) for res in (a, b)]
    kernel_total = m["category"] == "kernel"
    for side, table in zip(("a", "b"), imb):
        m[f"imbalance_{side}"] = [table.get(n) if k else None for n, k in zip(m["name"], kernel_total)]
    m["impact"] = m["change_s"].abs()
    m = m.sort_values(["impact", "category", "name"], ascending=[False, True, True], kind="stable")
    m["group"] = m["group"].replace(NO_GROUP, None)
    m = m[COLUMNS].astype(object)
    return m.where(m.notna(), None).reset_index(drop=True)


def _table(res: dict) -> pd.DataFrame:
    """One run's rows (category, name, layer, group, s: seconds per step and rank)."""
    n = per_step(res)
    # In (kernel, layer) order, so that a kernel's sum over its layers does not depend on the order of the rows
    # (analyze's are by synchronization time, `analysis.diff_summary`'s by kernel).
    per_kernel = sorted(res["occupancy"]["per_kernel"], key=lambda r: (r["kernel"], r["layer"] is not None,
                                                                         r["layer"] or 0))
    rows = [("kernel_layer", r["kernel"], r["layer"], None, r["wall_s"] / n) for r in per_kernel]
    rows += [("kernel", r[1], None, None, r[4]) for r in rows]           # summed over layers by the groupby below
    rows += [("phase", r["phase"], None, None, r["total_s"] / n) for r in res["summary"]["phases"]]
    for r in res["waits"]["calls"]:
        rows.append(("mpi", r["name"], None, r["group"], r["total_s"] / n))
        rows.append(("mpi_wait", r["name"], None, r["group"], (r["wait_s"] or 0.0) / n))
    rows += [("state", r["name"], None, None, r["seconds"] / n) for r in res["states"]["totals"]]
    df = pd.DataFrame(rows, columns=["category", "name", "layer", "group", "s"])
    df["layer"] = df["layer"].astype("Int64")
    df["group"] = df["group"].fillna(NO_GROUP).astype(str)       # the merge's keys: strings on both sides
    return df.groupby(["category", "name", "layer", "group"], dropna=False, as_index=False)["s"].sum()


def _imbalances(res: dict) -> dict[str, float]:
    """Each kernel's max/mean across ranks (all layers); 1.0 for a kernel with no time lost; none with one rank."""
    if res["summary"]["ranks"] < 2:
        return {}
    out = {r["kernel"]: 1.0 for r in res["occupancy"]["per_kernel"]}
    out.update({r["kernel"]: r["imbalance"] for r in res["imbalance"]
                if r["scope"] == "ranks" and r["layer"] is None})
    return out


def _pop(a: dict, b: dict) -> list[dict]:
    levels = (("all", a, b, POP_FACTORS), ("mpi", a.get("mpi") or {}, b.get("mpi") or {}, POP_FACTORS),
              ("threads", a.get("threads") or {}, b.get("threads") or {}, POP_FACTORS),
              ("openmp", a.get("openmp") or {}, b.get("openmp") or {}, OPENMP_FACTORS))
    out = []
    for level, pa, pb, factors in levels:
        for key, label in factors:
            va, vb = pa.get(key), pb.get(key)
            if va is None and vb is None:
                continue
            out.append({"level": level, "factor": key, "label": label, "a": va, "b": vb,
                        "change": vb - va if va is not None and vb is not None else None})
    return out


def sentences(a: dict, b: dict, changes: pd.DataFrame, pop: list[dict]) -> list[str]:
    """A few lines on what made B faster or slower than A: the step time, the layout, then the largest changes
    (waits, imbalance, kernels, the pipeline's bubble, the POP factor that moved most), each only when notable."""
    step_a, step_b = a["summary"]["step_s_median"], b["summary"]["step_s_median"]
    ratio = step_a / step_b
    if abs(ratio - 1) < SAME_SPEED:
        head = f"B runs at A's speed per step ({_ms(step_a)} -> {_ms(step_b)} ms median step)"
    else:
        word, x = ("faster", ratio) if ratio > 1 else ("slower", 1 / ratio)
        head = f"B is {x:.2f}x {word} per step ({_ms(step_a)} -> {_ms(step_b)} ms median step)"
    tok_a, tok_b = a["summary"]["tokens_per_step"], b["summary"]["tokens_per_step"]
    if tok_a and tok_b and tok_a != tok_b and a["summary"]["tokens_per_s"] and b["summary"]["tokens_per_s"]:
        tps = b["summary"]["tokens_per_s"] / a["summary"]["tokens_per_s"]
        head += f"; B takes {tok_b:,.0f} tokens a step against {tok_a:,.0f}: {tps:.2f}x A's tokens/s"
    models = _models(a, b)
    # first: per-step times of two models are not the same work, whatever else changed
    out = [f"A and B ran different models ({', '.join(f'{k} {va} -> {vb}' for k, (va, vb) in models.items())}): "
           "their times per step are of different work"] if models else []
    out.append(head)
    layout = [f"{k} {_setting(va)} -> {_setting(vb)}" for k, (va, vb) in _layout(a, b).items()]
    if layout:
        out.append("Layout: " + ", ".join(layout))
    notable = NOTABLE * step_a
    rows = changes.to_dict("records")
    waits = [r for r in rows if r["category"] == "mpi_wait" and abs(r["change_s"]) >= notable][:2]
    if waits:
        out.append("Waits: " + "; ".join(
            f"{r['name']} in {describe(r['group'])} {_signed(r['change_s'])} ms/step ({_ms(r['a_s'])} -> "
            f"{_ms(r['b_s'])})" for r in waits))
    kernels = [r for r in rows if r["category"] == "kernel"]
    moved = sorted((r for r in kernels if r["imbalance_a"] is not None and r["imbalance_b"] is not None
                    and abs(r["imbalance_b"] - r["imbalance_a"]) >= IMBALANCE_MOVE),
                   key=lambda r: -abs(r["imbalance_b"] - r["imbalance_a"]) * max(r["a_s"], r["b_s"]))[:2]
    if moved:
        out.append("Imbalance across ranks (max/mean): " + "; ".join(
            f"{r['name']} {r['imbalance_a']:.2f} -> {r['imbalance_b']:.2f}" for r in moved))
    faster = [r for r in kernels if abs(r["change_s"]) >= notable][:3]
    if faster:
        out.append("Kernels: " + "; ".join(f"{r['name']} {_signed(r['change_s'])} ms/step ({_ms(r['a_s'])} -> "
                                           f"{_ms(r['b_s'])})" for r in faster))
    pa, pb = a.get("pipeline"), b.get("pipeline")
    if pa or pb:
        def bubble(pp):
            return "none" if not pp or pp["bubble"] is None else (
                f"{100 * pp['bubble']:.1f}% ({pp['schedule'] or 'schedule not recorded'}, M={pp['micro_batches']})")
        out.append(f"Pipeline bubble: {bubble(pa)} -> {bubble(pb)}")
    top = max((p for p in pop if p["change"] is not None and p["level"] == "all"), key=lambda p: abs(p["change"]),
              default=None)
    if top is not None and abs(top["change"]) >= 0.005:
        out.append(f"POP: {top['label']} {100 * top['a']:.1f}% -> {100 * top['b']:.1f}% (the factor that moved "
                   "most)")
    return out


def _setting(value) -> str:
    """A layout setting as the sentence says it: none, on / off for a flag, else its value."""
    if value is None:
        return "none"
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def _ms(seconds: float) -> str:
    """Milliseconds, 3 significant digits; whole ones from 1 s up (1,250 rather than 1.25e+03)."""
    ms = 1e3 * seconds
    return f"{ms:.3g}" if abs(ms) < 1e3 else f"{ms:,.0f}"


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + _ms(abs(seconds))
