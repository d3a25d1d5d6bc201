"""The reduced-model check (issue 18, section 3, "On this CPU, for real"): a step composed from the
kernel table `bench --profile` measures here, against the same step run for real, in one run.

    .venv/bin/python benchmarks/reduced_model.py                     # this CPU, the default models
    .venv/bin/python benchmarks/reduced_model.py --device cuda       # a GPU (benchmarks/gpu_h200.sh)
    .venv/bin/python benchmarks/reduced_model.py --models deepseek-v2-lite --quick --out /tmp/x

For each model, `mla_core.bench.reduced.reduced_check`: two or three of the model's own layers
(MLA absorbed decode and a dense MLP and a MoE block for DeepSeek-V2-Lite; a Gated DeltaNet layer
and a GQA layer, each with its MoE block, for Qwen3-Next), profiled on this device in this run,
then timed at several batches and contexts (decode steps) and chunk lengths (prefill). Two
estimates per point:
  trace     the table's latencies summed over the reduced model's own op list (what the table
            implies; checks the table and the timing, not a composer)
  composer  the serving estimate's step composer (`composed_estimate` below, the one place it is
            wired), reading the same table; "not wired" until mla_core.serving.step exists
Goal (issue 18): median |error| <= 10%, every point within 25%, for the composer.

Writes <out>.json (every row, both estimates, the profile's meta) and <out>.md (the table);
default out: benchmarks/reduced_model (the kept table). On a CPU both sides run on one thread
and take the best of their repetitions over three rounds (`reduced_check`): the machine is
shared, and a busy spell should hit both sides alike.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from common import ROOT, machine

DEFAULT_MODELS = ("deepseek-v2-lite", "qwen3-next-80b-a3b")
QUICK_POINTS = {"decode": ((1, 512), (8, 2048)), "prefill": ((1, 128),)}
# On a GPU: batches and contexts where kernels, not launches, take the time.
GPU_POINTS = {"decode": ((1, 2048), (8, 2048), (64, 2048), (8, 8192), (64, 8192)),
              "prefill": ((1, 512), (1, 2048), (4, 512))}
GOAL_MEDIAN, GOAL_WORST = 0.10, 0.25


def composed_estimate(model, table: dict, phase: str, batch: int, context: int) -> float:
    """Seconds of one decode step (`phase` "decode": `batch` sequences at `context`) or one prefill
    chunk ("prefill": `batch` sequences of `context` new tokens, no prefix) of `model` (the reduced
    ModelSpec, TP 1), composed by the serving estimate from the profile `table`.

    THE ONE PLACE THE COMPOSER IS WIRED: it calls mla_core.serving.step; ImportError while that
    module does not exist. Adjust the call to the composer's own signature when it lands."""
    from mla_core.serving import step  # noqa: PLC0415 - the composer, once merged

    fn = getattr(step, "estimate_from_profile", None)
    if fn is None:
        raise ImportError("mla_core.serving.step has no estimate_from_profile(model, table, phase, batch, context)")
    return float(fn(model, table, phase=phase, batch=batch, context=context))


def composer_available() -> bool:
    try:
        from mla_core.serving import step  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def run(models=DEFAULT_MODELS, *, device: str = "cpu", threads: int | None = 1, quick: bool = False,
        rounds: int | None = None) -> dict:
    from mla_core.bench.reduced import DEFAULT_POINTS, reduced_check

    points = QUICK_POINTS if quick else (DEFAULT_POINTS if device == "cpu" else GPU_POINTS)
    estimate = composed_estimate if composer_available() else None
    out = {"machine": machine(), "device": device, "threads": threads, "points": points,
           "composer": "mla_core.serving.step" if estimate else "not wired", "models": []}
    for name in models:
        t0 = time.perf_counter()
        r = reduced_check(name, points=points, estimate=estimate, device=device, threads=threads, rounds=rounds)
        out["models"].append({
            "model": r["model"], "spec_notes": r["spec_notes"], "statistic": r["statistic"], "rounds": r["rounds"],
            "wall_s": round(time.perf_counter() - t0, 1), "profile_meta": r["profile"].meta,
            "profile_rows": {f: len(v) for f, v in r["profile"].table["ops"].items()},
            "device_name": r["profile"].table["device"]["name"],
            "trace": _summary(r["trace"]), "composer": _summary(r["composer"]) if r["composer"] else None,
        })
    return out


def _summary(cmp: dict) -> dict:
    return {"median_abs_error": cmp["median_abs_error"], "worst": cmp["worst"], "rows": cmp["rows"],
            "goal_met": bool(cmp["within_10pct_median"] and cmp["all_within_25pct"])}


def render(result: dict) -> str:
    m = result["machine"]
    lines = ["# Reduced-model check (issue 18, section 3)", "",
             f"Measured {m['when_utc']} UTC on {result['models'][0]['device_name'] if result['models'] else m['cpu']}"
             f" ({result['device']}, {result['threads'] or 'all'} thread(s)), torch {m['versions'].get('torch')}, "
             f"commit {m['git']}. Reproduce: `.venv/bin/python benchmarks/reduced_model.py`.",
             f"Composer: {result['composer']}. Goal: median |error| <= {GOAL_MEDIAN:.0%}, every point within "
             f"{GOAL_WORST:.0%}.", ""]
    for mod in result["models"]:
        lines += [f"## {mod['model']}", ""]
        lines += [f"- {n}" for n in mod["spec_notes"]]
        pm = mod["profile_meta"]
        lines += [f"- profile: {sum(mod['profile_rows'].values())} rows ({', '.join(f'{k} {v}' for k, v in mod['profile_rows'].items() if v)}), "
                  f"{mod['rounds']} round(s), latency = the {mod['statistic']} of the repetitions, {pm['wall_s']:.1f} s; "
                  f"other processes kept {pm.get('other_cpus_busy')} CPUs busy", ""]
        head = "| layers | phase | batch | context | measured | trace estimate | error |"
        comp = mod["composer"]
        if comp:
            head += " composer | error |"
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
        comp_rows = comp["rows"] if comp else [None] * len(mod["trace"]["rows"])
        for r, c in zip(mod["trace"]["rows"], comp_rows):
            line = (f"| {', '.join(r['layers'])} | {r['phase']} | {r['batch']} | {r['context']:,} | "
                    f"{r['measured_s'] * 1e3:,.2f} ms | {r['estimate_s'] * 1e3:,.2f} ms | {r['error']:+.1%} |")
            if c:
                line += f" {c['estimate_s'] * 1e3:,.2f} ms | {c['error']:+.1%} |"
            lines.append(line)
        for what in ("trace", "composer"):
            s = mod[what]
            if s:
                w = s["worst"]
                lines.append(f"\n{what}: median |error| {s['median_abs_error']:.1%}, worst {w['error']:+.1%} "
                             f"({w['phase']} B={w['batch']} T={w['context']}); goal {'met' if s['goal_met'] else 'NOT met'}")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated presets")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"))
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default 1 on a CPU)")
    p.add_argument("--rounds", type=int, default=None, help="profile + model rounds (default 3 on a CPU, 1 on a GPU)")
    p.add_argument("--quick", action="store_true", help="three points a model")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "reduced_model"),
                   help="path without extension: writes .json and .md")
    args = p.parse_args(argv)
    threads = args.threads if args.threads is not None else (1 if args.device == "cpu" else None)
    result = run(tuple(m.strip() for m in args.models.split(",") if m.strip()), device=args.device, threads=threads,
                 quick=args.quick, rounds=args.rounds)
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, default=str)
    text = render(result)
    with open(args.out + ".md", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
