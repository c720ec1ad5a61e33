"""Findings: the biggest losses of an analysis, in plain words with numbers, each naming the metric behind it.

The losses are `pop.lost` (`analysis.lost`): shares of all thread time (P threads x runtime) that partition the
time lost, 1 - PE, so they can be ordered and never count a loss twice; their lost_fraction add up to at most
1 - PE. Each may be followed by details that explain it (the kernels behind an imbalance, the kernels that made
ranks wait): a detail names its loss in `part_of`, says so in its text, and has no lost_fraction of its own.
Warnings about the analysis itself come first; notes (lost_fraction None) last.
"""
from __future__ import annotations

from analysis import delay
from analysis.task_findings import task_findings
from gpt2trace.format.communicators import TAIL, WORLD_NAME, describe
from gpt2trace.format.grid import WORDS
from gpt2trace.format.mpi_calls import CALLS, COMPLETIONS
from gpt2trace.format.schema import LAYER, NAME, RANK, Phase

_TRAINING_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.GRAD_SYNC, Phase.OPTIMIZER)
_MPI_LOSSES = ("mpi_load_balance", "serialization", "transfer")
_SHOWN = 1e-4            # losses below 0.01 % of thread time are not findings
# The parallel dimension whose communication costs most is named when it takes at least this share of the step:
# below it, it is within what tracing itself costs (under 1% of a step: benchmarks/RESULTS.md) plus the spread of the
# step time, too little to choose a layout by.
DIMENSION_SHARE = 0.05


def _finding(metric: str, lost: float | None, text: str, part_of: str | None = None) -> dict:
    out = {"metric": metric, "lost_fraction": lost, "text": text}
    if part_of is not None:
        out["part_of"] = part_of
    return out


def findings(result: dict, top: int = 10) -> list[dict]:
    """An ordered list of {metric, lost_fraction, text[, part_of]}: warnings, the losses largest first (each with
    its details), then notes. A section that was not computed (None) gives no finding."""
    result = {**result, "summary": result.get("summary") or {}, "imbalance": result.get("imbalance") or [],
              "root_causes": result.get("root_causes") or [],
              "waits": {**result["waits"], "calls": result["waits"].get("calls") or []}}
    p = result["pop"]
    lost = p.get("lost") or {}
    warnings = [_finding("warnings", None, f"Warning: {w}") for w in result.get("warnings", [])
                if w.startswith(("the ideal-network replay", "no thread is Running"))]
    losses = sorted((k for k in lost if k != "total" and lost[k] is not None and lost[k] > _SHOWN),
                    key=lambda k: (-lost[k], k))
    details = _details(result, [k for k in losses if k in _MPI_LOSSES])
    # a task run's findings say what its thread-level loss is made of: right after it, so a short list keeps them
    tasks = task_findings(result.get("tasks"))
    for f in tasks:
        f["part_of"] = "pop.lost.region_scheduling"
    if "region_scheduling" in losses:
        details.setdefault("region_scheduling", []).extend(tasks)
    out: list[dict] = []
    for key in losses:
        out.append(_finding(f"pop.lost.{key}", lost[key], _loss_text(key, lost[key], result)))
        out += details.get(key, [])
    if "region_scheduling" not in losses:
        out = tasks + out
    return warnings + out[:top] + _dimension_note(result, details) + _notes(result)


def _loss_text(key: str, share: float, result: dict) -> str:
    p, s = result["pop"], result["summary"]
    T, m, omp = p["runtime_s"], p["mpi"], p.get("openmp") or {}
    tasks = result.get("tasks") is not None       # a task-based run: the regions are its task graphs' runs
    if key == "mpi_load_balance":
        where = "task graphs" if tasks else "parallel regions"
        return (f"Load imbalance across ranks costs {share:.1%} of thread time: on average a rank computes (in "
                f"{where} or serially) {m['load_balance']:.0%} as long as the longest one "
                f"(MPI load balance {_fmt(m['load_balance'])}).")
    if key == "outside_computation":
        where = "neither computing nor in MPI" if p.get("ideal_runtime_s") is not None else "not computing"
        return (f"The main thread is {where} for {share:.1%} of thread time (I/O, Others: see the state profile), "
                f"idling its rank's threads.")
    if key == "serialization":
        return (f"Serialization costs {share:.1%}: even with an ideal network the run would take "
                f"{p['ideal_runtime_s']:.4g} s, against {p['useful_ideal_max_s']:.4g} s that the busiest rank "
                f"computes (serialization efficiency {_fmt(m['serialization_efficiency'])}).")
    if key == "transfer":
        return (f"Data transfer costs {share:.1%}: {T - p['ideal_runtime_s']:.4g} s of the {T:.4g} s runtime "
                f"go to moving data (transfer efficiency {_fmt(m['transfer_efficiency'])}).")
    if key == "serial_regions":
        longest = (result["occupancy"].get("serial_sections") or [None])[0]
        where = (f"; the longest serial section lasts {longest['seconds']:.4g} s, at {longest['start_s']:.4g} s "
                 f"on rank {longest[RANK]}" if longest else "")
        between = "between the task graphs" if tasks else "between parallel regions"
        return (f"Serial code {between} costs {share:.1%} of thread time: the main thread computes "
                f"alone for {omp['serial_useful_s']:.4g} s while the other "
                f"{'threads of its rank wait' if s['threads_per_rank'] > 2 else 'thread waits'} (serial region "
                f"efficiency {_fmt(omp['serial_region_efficiency'])}{where}).")
    if key == "region_load_balance" and tasks:
        return (f"Unequal task work across threads inside the task graphs costs {share:.1%} of thread time: threads "
                f"run less task work than the busiest thread of the same graph run (region load balance "
                f"{_fmt(omp['region_load_balance'])}, over {omp['regions']} stretches of task graphs).")
    if key == "region_load_balance":
        return (f"Load imbalance inside parallel regions costs {share:.1%} of thread time: threads compute less "
                f"than the busiest thread of the same region (region load balance "
                f"{_fmt(omp['region_load_balance'])}, over {omp['regions']} region executions).")
    if tasks:
        t = result["tasks"]["totals"]
        return (f"Inside the task graphs, time beyond the busiest thread's task work costs {share:.1%} of thread "
                f"time (region scheduling efficiency {_fmt(omp['region_scheduling_efficiency'])}): the runtime's "
                f"Scheduling takes {t['scheduling_share']:.1%} of thread time and threads wait idle "
                f"{t['idle_share']:.1%} (the task findings say why).")
    return (f"Fork/join, scheduling and waiting inside parallel regions beyond the busiest thread's work cost "
            f"{share:.1%} of thread time (region scheduling efficiency {_fmt(omp['region_scheduling_efficiency'])}).")


def _details(result: dict, mpi_losses: list[str]) -> dict[str, list[dict]]:
    """Details per loss key: imbalanced kernels, the kernels that made ranks wait, kernels ending in waits."""
    out: dict[str, list[dict]] = {}
    threads = (result["summary"].get("threads_per_rank") or 1) > 1
    tasks = result.get("tasks") is not None
    # A task run has no barrier after a kernel: how its tasks fall on the threads is not a loss by itself
    rows = [r for r in result["imbalance"] if not (tasks and r["scope"] != "ranks")]
    for row in rows[:3]:
        key = "mpi_load_balance" if row["scope"] == "ranks" else "region_load_balance"
        where = f"layer {row[LAYER]}" if row[LAYER] is not None else "all layers"
        across = "ranks" if row["scope"] == "ranks" else f"the threads of rank {row[RANK]}"
        slowest = (f"rank {row['slowest']}" if row["scope"] == "ranks"
                   else "rank {} thread {}".format(*str(row["slowest"]).split(".")))
        out.setdefault(key, []).append(_finding(
            f"imbalance[{result['imbalance'].index(row)}]", None,
            f"Part of the loss above: {row['kernel']} ({where}) is imbalanced across "
            f"{across}{_ratio(row)}: max/mean {row['imbalance']:.2f}, {row['lost_s']:.4g} s lost, slowest {slowest}.",
            f"pop.lost.{key}"))
    if mpi_losses:
        key = mpi_losses[0]                              # waits feed every MPI-level loss: the largest holds them
        total = result["waits"]["total_wait_s"]
        dimension = _costliest_dimension(result)
        if dimension is not None:
            out.setdefault(key, []).append(_finding(
                _dimension_metric(result, dimension), None,
                f"Behind the MPI-level losses: {_dimension_text(dimension)}", f"pop.lost.{key}"))
        links = result.get("network_links")
        if links and links[0]["bytes_per_step"] > 0:
            out.setdefault(key, []).append(_finding("network_links[0]", None,
                                                    f"Behind the MPI-level losses: {_link_text(links)}",
                                                    f"pop.lost.{key}"))
        if result.get("pipeline") and result["pipeline"].get("bubble") is not None:
            out.setdefault(key, []).append(_finding("pipeline.bubble", None,
                                                    f"Behind the MPI-level losses: {_bubble_text(result['pipeline'])}",
                                                    f"pop.lost.{key}"))
        group_calls = [c for c in result["waits"]["calls"]
                       if c.get("group") not in (None, WORLD_NAME) and c["wait_s"] and c["wait_s"] > 0]
        for row in group_calls[:2]:
            split = f" ({row['split']} sequence split)" if row.get("split") else ""
            out.setdefault(key, []).append(_finding(
                f"waits.calls[{result['waits']['calls'].index(row)}]", None,
                f"Behind the MPI-level losses: ranks wait {row['wait_s']:.4g} s in {describe(row['group'])}'s "
                f"{row[NAME]}{split}, {row['wait_s'] / total:.0%} of all MPI wait time ({row['wait_state']}).",
                f"pop.lost.{key}"))
        out.setdefault(key, []).extend(delay.findings(result, f"pop.lost.{key}"))   # the top cause of all waits
        for i, row in enumerate(result["root_causes"][:3]):
            out.setdefault(key, []).append(_finding(
                f"root_causes[{i}]", None, f"Behind the MPI-level losses: {row['text']} "
                f"({row['share']:.0%} of all MPI wait time).", f"pop.lost.{key}"))
    per_kernel = result["occupancy"]["per_kernel"]
    if threads and not tasks and per_kernel and per_kernel[0]["sync_s"] > 0:
        k = per_kernel[0]
        where = f" (layer {k[LAYER]})" if k[LAYER] is not None else ""
        out.setdefault("region_load_balance", []).append(_finding(
            "occupancy.per_kernel[0].sync_s", None, f"Part of the losses inside regions: threads wait "
            f"{k['sync_s']:.4g} s in Synchronization at the end of {k['kernel']}{where}, the most of any kernel "
            f"(mean occupancy {k['mean_occupancy']:.2f} threads).", "pop.lost.region_load_balance"))
    return out


def _dimension_note(result: dict, details: dict[str, list[dict]]) -> list[dict]:
    """The costliest dimension as a note, when no MPI-level loss holds it as a detail."""
    placed = any(f["metric"].startswith("comm_dimensions[") for found in details.values() for f in found)
    dimension = None if placed else _costliest_dimension(result)
    if dimension is None:
        return []
    text = _dimension_text(dimension)
    return [_finding(_dimension_metric(result, dimension), None, text[0].upper() + text[1:])]


def _dimension_metric(result: dict, row: dict) -> str:
    return f"comm_dimensions[{result['comm_dimensions'].index(row)}]"


def _costliest_dimension(result: dict) -> dict | None:
    """The parallel dimension whose MPI time is the largest share of the step, when that share is material."""
    rows = [r for r in result.get("comm_dimensions") or []
            if r["share"] is not None and r["top_calls_per_step"] is not None]
    top = max(rows, key=lambda r: r["share"], default=None)
    return top if top is not None and top["share"] >= DIMENSION_SHARE else None


def _dimension_text(row: dict) -> str:
    """'tensor-parallel all-reduces take 18% of the step: 48 per step of 786 kB each', then the dimension's whole
    communication and its waiting part."""
    dims, name = row["dims"], row["top_call"]
    # MPI calls in words, plural ("tensor-parallel all-reduces"); a foreign trace's name without a record: as is
    calls = CALLS[name].plural if name in CALLS else f"{name} calls"
    if len(dims) == 1 and dims[0] in WORDS:
        who, subject = WORDS[dims[0]], f"{WORDS[dims[0]]} {calls}"
    elif dims:
        who, subject = f"{row['dimension']}", f"{calls} over {row['dimension']}"
    else:
        who, subject = describe(row["dimension"]), f"{calls} on {describe(row['dimension'])}"
    # the communicator only when the dimension gathers several names and it is not the dimension's own
    mine = row["top_group"].partition(TAIL)[0] == row["dimension"]
    where = f" on {describe(row['top_group'])}" if len(row["communicators"]) > 1 and not mine else ""
    size = f" of {_bytes(row['top_bytes_per_call'])} each" if row["top_bytes_per_call"] else ""
    whole = (f"; all {who} communication takes {row['share']:.0%}" if row["share"] - row["top_share"] >= 0.005
             else "; that is all its communication")
    waiting = f", {row['wait_share'] / row['share']:.0%} of it waiting" if row["wait_share"] else ""
    return (f"{subject}{where} take {row['top_share']:.0%} of the step: {row['top_calls_per_step']:.3g} per step"
            f"{size}{whole}{waiting}.")


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} bytes"


def _link_text(links: list[dict]) -> str:
    """The busiest link of an emulated cluster, against the next one."""
    top = links[0]
    ranks = top["ranks"]
    who = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
    share = f", {top['share_of_step']:.0%} of the median step" if top.get("share_of_step") is not None else ""
    other = (f"; the next busiest carries {links[1]['bytes_per_step'] / top['bytes_per_step']:.0%} of that"
             if len(links) > 1 and top["bytes_per_step"] > 0 else "")
    return (f"the emulated network's link of node {top['node']} ({who}) is the busiest: "
            f"{top['bytes_per_step'] / 1e6:.3g} MB per step through it, {top['link_s_per_step']:.4g} s at its "
            f"bandwidth{share}, mostly {top['top_call']}{other}.")


def _bubble_text(p: dict) -> str:
    """The pipeline bubble against theory, and what would shrink it."""
    why = (f"; the stages are unequal (busiest/mean {p['stage_imbalance']:.2f}), so the others wait for the slowest"
           if p.get("stage_imbalance") and p["stage_imbalance"] > 1.05 else "")
    return (f"the pipeline bubble: its {p['stages']} stages do not compute {p['bubble']:.1%} of the pipeline's "
            f"window (ideal (P-1)/(M+P-1) = {p['ideal_bubble']:.1%} with {p['micro_batches']} micro-batches), "
            f"{p['of_step']:.1%} of each step{why}; more micro-batches per step shrink the ideal.")


def _ratio(row: dict) -> str:
    """', 2.9x slower on rank 1 than on rank 0 (why)' for an imbalance across ranks; '' when it says nothing."""
    if row["scope"] != "ranks" or not row.get("min_s") or row["min_s"] <= 0:
        return ""
    why = f" ({row['cause']})" if row.get("cause") else ""
    return (f", {row['max_s'] / row['min_s']:.1f}x slower on rank {row['slowest']} than on rank "
            f"{row['fastest']}{why}")


def _notes(result: dict) -> list[dict]:
    s = result["summary"]
    out = []
    for row in s.get("phases", []):
        if row["phase"] not in _TRAINING_PHASES and row["share"] and row["share"] > 0.02:
            out.append(_finding("summary.phases", None,
                                f"Phase {row['phase']} takes {row['share']:.1%} of the runtime "
                                f"({row['mean_s']:.4g} s each time, {row['count']} times)."))
    for row in result["waits"]["calls"]:
        if row.get("hidden_fraction") is not None:
            waited = sum(c["total_s"] for c in result["waits"]["calls"] if c[NAME] in COMPLETIONS)
            out.append(_finding("waits.calls.hidden_fraction", None,
                                f"{row[NAME]} was in flight {row['inflight_s']:.4g} s, {row['hidden_fraction']:.0%} "
                                f"of it while the rank computed; the waits that complete it still took "
                                f"{waited:.4g} s (data moves behind computation only if the MPI progresses "
                                f"in the background: MPICH does not by default)."))
    if s.get("warmup_excluded"):
        note = " and it was an outlier" if s.get("warmup_outlier") else ""
        out.append(_finding("summary.warmup_excluded", None,
                            f"The first step was left out as warm-up{note}; use --steps to choose the window."))
    if s.get("outlier_steps"):
        out.append(_finding("summary.outlier_steps", None,
                            f"Outlier step(s) by time: {', '.join(map(str, s['outlier_steps'][:10]))}."))
    if s.get("mfu") is not None:
        out.append(_finding("summary.mfu", None,
                            f"Model FLOPs utilization {s['mfu']:.1%} ({s['achieved_gflops_per_core']:.3g} GFLOP/s "
                            f"per core against a {s['peak_gflops_per_core']:.3g} GFLOP/s sgemm peak)."))
    return out


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
