"""Published runs under traffic replayed through the simulation (issue 19, "Checked against real runs").

Every run of data/traffic_runs.json (25 runs, 134 points: concurrency sweeps, rate sweeps, bursts
from dstack, InferenceX, TensorRT-LLM, DataCrunch, GPUStack and vLLM's recipes) replayed by
`mla_core.traffic.replay_published()` with its own settings (arrivals, num_prompts, lengths, split)
and the estimate's step times for the run's engine. Prints, per run, the error of the mean TTFT,
mean TPOT, mean ITL, mean E2E and request throughput at each point and the run's medians; then the
median |error| of every metric over all points, the goal (median |error| of the mean TTFT and the
mean TPOT at most 20 %) and the simulation's speed (requests simulated per second of simulation
wall time, in this one run). Writes benchmarks/traffic_replay.json.

    .venv/bin/python benchmarks/traffic_replay.py [--out benchmarks/traffic_replay.json]
"""
from __future__ import annotations

import argparse
import json
import os
import time

from common import machine

HERE = os.path.dirname(os.path.abspath(__file__))
SHOWN = (("mean_ttft_s", "TTFT"), ("mean_tpot_s", "TPOT"), ("mean_itl_s", "ITL"), ("mean_e2e_s", "E2E"),
         ("request_throughput", "req/s"))


def _cell(e: dict | None) -> str:
    return "" if not e else f"{e['measured']:.3g} / {e['simulated']:.3g} ({e['error_pct']:+.0f}%)"


def tables(rep: dict) -> str:
    out = []
    for run in rep["runs"]:
        out += [f"### {run['id']} ({run['split']}, {run['estimate_engine']} rules; {run['step_times']})", "",
                "| arrival | lengths | " + " | ".join(f"{label} measured / simulated" for _, label in SHOWN) + " |",
                "|---|---|" + "---|" * len(SHOWN)]
        for p in run["points"]:
            s = p["settings"]
            arrival = (f"{s['max_concurrency']} clients" if s["max_concurrency"] else
                       "all at once" if s["rate"] is None else f"{s['rate']:g} req/s")
            e = {x["metric"]: x for x in p["errors"]}
            out.append(f"| {arrival} | {s['input_len']}/{s['output_len']} | "
                       + " | ".join(_cell(e.get(k)) for k, _ in SHOWN) + " |")
        med = run["median_abs_error_pct"]
        out += ["", "run medians |error|: " + ", ".join(f"{k} {v:.0f}%" for k, v in med.items()
                                                          if k.startswith("mean") or "throughput" in k), ""]
        if run["notes"]:
            out += [f"notes: {'; '.join(run['notes'])}", ""]
    return "\n".join(out)


def summary(rep: dict) -> str:
    g = rep["goal"]
    lines = ["| metric | points | median abs error | worst (run) |", "|---|---|---|---|"]
    for k, v in rep["by_metric"].items():
        lines.append(f"| {k} | {v['points']} | {v['median_abs_error_pct']:.1f}% | {v['worst']['error_pct']:+.0f}% "
                     f"({v['worst']['run']}) |")
    lines += ["", "goal: median |error| of " + " and ".join(g["metrics"]) + f" at most {g['max_median_abs_error_pct']:g}%: "
              + ", ".join(f"{k} {v:.1f}%" for k, v in g["median_abs_error_pct"].items())
              + (" (met)" if g["met"] else " (NOT met)"),
              f"speed: {rep['simulated_requests']:,} requests over {rep['points']} points simulated in "
              f"{rep['sim_wall_s']:.1f} s of simulation ({rep['requests_per_s']:,.0f} requests/s; "
              f"{rep['wall_s']:.1f} s in all, the step tables estimated on first use); again with the tables "
              f"filled: {rep['warm']['sim_wall_s']:.1f} s ({rep['warm']['requests_per_s']:,.0f} requests/s, "
              f"same figures: {rep['warm']['same_figures']})"]
    return "\n".join(lines)


def run(ids=None) -> dict:
    from mla_core.traffic import replay_published

    cache: dict = {}
    t0 = time.perf_counter()
    rep = replay_published(ids, step_times_cache=cache)
    rep["wall_s"] = time.perf_counter() - t0
    warm = replay_published(ids, step_times_cache=cache)  # the same runs, the step tables already filled
    rep["warm"] = {"sim_wall_s": warm["sim_wall_s"], "requests_per_s": warm["requests_per_s"],
                   "same_figures": [r["points"] for r in warm["runs"]] == [r["points"] for r in rep["runs"]]
                   or _same(warm, rep)}
    rep["machine"] = machine()
    return rep


def _same(a: dict, b: dict) -> bool:
    """The two replays' errors agree (the wall times differ)."""
    return all(ea == eb for ra, rb in zip(a["runs"], b["runs"]) for pa, pb in zip(ra["points"], rb["points"])
               for ea, eb in zip(pa["errors"], pb["errors"]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "traffic_replay.json"))
    ap.add_argument("--run", action="append", help="replay only this run id (repeatable)")
    a = ap.parse_args()
    rep = run(a.run)
    print(tables(rep))
    print(summary(rep))
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(rep, f, indent=1, default=str)
        f.write("\n")
