"""Whether a benchmark run was disturbed, with the evidence, and whether it can be trusted at all.

No torch here. A run measures a machine it shares with everything else; what else ran is part of
its result. `assess(evidence, cpus, kind)` returns the block stored in the result as
`disturbed` (result.schema.json):

    {"disturbed": bool, "reasons": [one line each], "evidence": {...}, "thresholds": {...},
     "refused": None | "why the run cannot be trusted at all"}

Evidence (each key optional; None = not known on this platform):
    other_cpus_busy          mean CPUs other processes kept busy during the run
                             (/proc/stat minus this process; mla_core.bench.device)
    load_avg_1min_before, load_avg_1min_after   os.getloadavg()[0] around the run
    ceiling_repeats          {"read_GBps": [...], "copy_GBps": [...], "matmul_TFLOPs": [...]}:
                             the same ceiling measured again at the end of the run
    ceiling_spread           {name: (max - min) / median of its repeats}
    logical_cpus             the CPUs the thresholds were applied to
    other_sessions_reruns    reruns of other app sessions in the same server process while
                             the run measured (ui.bench_runs counts them; they share its CPUs
                             and are invisible to other_cpus_busy, which counts other processes)

Thresholds (stated here, stored with each run):
    BUSY_CPUS 0.25 CPUs (CPU device only); SPREAD_LIMIT 10% between repeats of one ceiling;
    LOAD_PER_CPU 0.75 of the logical CPUs busy in the minute before the run (CPU device only);
    OTHER_RERUNS 0 (any rerun of another session during a CPU run).
A run is refused (not trusted at all) when other processes held nearly every CPU of a CPU run
(cpus - other_cpus_busy < REFUSE_FREE_CPUS, 0.25): its numbers would describe the neighbours,
not the machine. The environment variable MLA_BENCH_REFUSE_FREE_CPUS overrides that threshold
(0 never refuses: a shared CI machine whose neighbours are known). A ceiling whose repeats
differ marks the run disturbed but does not refuse it: on small buffers the spread is the
cache's, not a neighbour's.
"""
from __future__ import annotations

import os
import statistics

BUSY_CPUS = 0.25
SPREAD_LIMIT = 0.10
LOAD_PER_CPU = 0.75
OTHER_RERUNS = 0
REFUSE_FREE_CPUS = 0.25
REFUSE_ENV = "MLA_BENCH_REFUSE_FREE_CPUS"

THRESHOLDS = {"busy_cpus": BUSY_CPUS, "ceiling_spread": SPREAD_LIMIT, "load_per_cpu": LOAD_PER_CPU,
              "other_sessions_reruns": OTHER_RERUNS, "refuse_free_cpus": REFUSE_FREE_CPUS}


def refuse_free_cpus() -> float:
    """REFUSE_FREE_CPUS, or the value of MLA_BENCH_REFUSE_FREE_CPUS when that is a number."""
    try:
        return float(os.environ[REFUSE_ENV])
    except (KeyError, ValueError):
        return REFUSE_FREE_CPUS


def spread(values) -> float | None:
    """(max - min) / median of the finite positive `values`; None for fewer than two."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and v and v > 0]
    if len(xs) < 2:
        return None
    return round((max(xs) - min(xs)) / statistics.median(xs), 4)


def assess(evidence: dict, cpus: int, kind: str) -> dict:
    """The `disturbed` block of a result from `evidence` (see the module docstring) on a device of
    `kind` ('cpu', 'cuda', 'mps') with `cpus` logical CPUs."""
    ev = {k: v for k, v in evidence.items() if v is not None}
    ev["logical_cpus"] = int(cpus)
    repeats = ev.get("ceiling_repeats") or {}
    if repeats and "ceiling_spread" not in ev:
        ev["ceiling_spread"] = {k: s for k, s in ((k, spread(v)) for k, v in repeats.items()) if s is not None}
    reasons: list[str] = []
    refused = None
    on_cpu = kind == "cpu"
    busy = ev.get("other_cpus_busy")
    if on_cpu and busy is not None and busy > BUSY_CPUS:
        reasons.append(f"other processes kept {busy:.2f} of the {cpus} CPUs busy during the run "
                       f"(threshold {BUSY_CPUS:g})")
        if cpus - busy < refuse_free_cpus():
            refused = (f"other processes held {busy:.2f} of the {cpus} CPUs throughout the run: the timings describe "
                       "them, not this machine")
    load = ev.get("load_avg_1min_before")
    if on_cpu and load is not None and load > LOAD_PER_CPU * cpus:
        reasons.append(f"the 1-minute load average was {load:.2f} before the run, above {LOAD_PER_CPU:g} x "
                       f"{cpus} CPUs")
    for name, s in sorted((ev.get("ceiling_spread") or {}).items()):
        if s > SPREAD_LIMIT:
            reasons.append(f"{name} measured again at the end differs by {s:.0%} (threshold {SPREAD_LIMIT:.0%})")
    reruns = ev.get("other_sessions_reruns")
    if on_cpu and reruns is not None and reruns > OTHER_RERUNS:
        reasons.append(f"{reruns} page reruns of other sessions of this server ran on the same CPUs during the run")
    thresholds = {**THRESHOLDS, "refuse_free_cpus": refuse_free_cpus()}
    return {"disturbed": bool(reasons), "reasons": reasons, "evidence": ev, "thresholds": thresholds,
            "refused": refused}


def add_evidence(result: dict, **more) -> dict:
    """`result` with its `disturbed` block re-assessed after adding `more` evidence (in place;
    returned). A result without the block (an older or imported one) gets one."""
    block = result.get("disturbed") or {}
    evidence = {**(block.get("evidence") or {}), **{k: v for k, v in more.items() if v is not None}}
    dev = result.get("device") or {}
    cpus = int(evidence.get("logical_cpus") or dev.get("threads") or 1)
    result["disturbed"] = assess(evidence, cpus, str(dev.get("kind") or "cpu"))
    return result


def is_disturbed(result: dict) -> bool | None:
    """True / False from a result's `disturbed` block; None when it has none (unknown)."""
    block = result.get("disturbed")
    if not isinstance(block, dict):
        return None
    return bool(block.get("disturbed"))
