"""The estimate against published serving figures (issue 18, "Checked against the field's records").

Every serving row of data/serving_measurements.json (throughput per GPU, input throughput, TPOT,
TTFT; kernel rows are skipped) set against `mla_core.serving.published.estimate_accuracy()`:
our estimate for the same model, GPUs, split, lengths and batch, with the engine the row names
(vLLM where the estimate has no rules for it), its source and confidence, and aiconfigurator-core's
own estimate (its EngineHandle) where it supports the model and split. Prints the table and the
summary (median and worst |error|, by table, engine and metric, aiconfigurator-core on the cases it
covers), and writes benchmarks/accuracy.json.

Goals: median |error| at most 15 %, every case within 2x. No constant is fitted to these figures.

    .venv/bin/python benchmarks/accuracy.py [--no-aic] [--out benchmarks/accuracy.json]
"""
from __future__ import annotations

import argparse
import json
import os
import time

from common import machine

HERE = os.path.dirname(os.path.abspath(__file__))
METRIC_SHORT = {"output_tokens_per_s_per_gpu": "out tok/s/GPU", "input_tokens_per_s_per_gpu": "in tok/s/GPU",
                "tpot_s": "TPOT s", "ttft_s": "TTFT s"}


def _fig(v: float) -> str:
    return f"{v:.4g}"


def table(acc: dict) -> str:
    lines = ["| case | metric | engine | batch | measured | estimate | error | table | conf. | aiconfigurator-core |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in acc["cases"]:
        a = c["aic"]
        aic = (f"{_fig(a['estimate'])} ({a['error_pct']:+.0f}%)" if a and a["available"]
               else ("n/a: " + a["reason"][:60] if a else ""))
        lines.append(f"| {c['id']} | {METRIC_SHORT[c['metric']]} | {c['estimate_engine']} | "
                     f"{c['batch'] if c['batch'] is not None else ''} | {_fig(c['measured'])} | {_fig(c['estimate'])} | "
                     f"{c['error_pct']:+.1f}% | {c['table']} | {c['confidence']} | {aic} |")
    return "\n".join(lines)


def summary(acc: dict) -> str:
    s = acc["summary"]
    out = [f"cases {s['cases']}: median |error| {s['median_abs_error_pct']:.1f}% (goal <= "
           f"{acc['goals']['median_abs_error_pct']:.0f}%: {'met' if acc['meets']['median_abs_error_pct'] else 'NOT met'}), "
           f"worst {s['worst']['id']} {s['worst']['error_pct']:+.1f}%, within {acc['goals']['within_factor']:g}x: "
           f"{s['within_factor']} of {s['cases']} ({'met' if acc['meets']['within_factor'] else 'NOT met'})"]
    for name in ("by_table", "by_engine", "by_metric"):
        out.append(f"{name.replace('_', ' ')}: " + "; ".join(
            f"{k} {g['median_abs_error_pct']:.1f}% (n {g['cases']}, worst {g['worst']['error_pct']:+.0f}%)"
            for k, g in acc[name].items()))
    a = acc["aic"]
    if a["cases"]:
        out.append(f"aiconfigurator-core's own estimate on the {a['cases']} cases it covers: median |error| "
                   f"{a['aic']['median_abs_error_pct']:.1f}%, within 2x {a['aic']['within_factor']}; ours on the same "
                   f"cases {a['ours']['median_abs_error_pct']:.1f}%, within 2x {a['ours']['within_factor']}")
    out.append(f"skipped: {', '.join(s['id'] for s in acc['skipped'])} (kernel figures)")
    out += acc["notes"]
    return "\n".join(out)


def run(cross_check: bool = True) -> dict:
    from mla_core.serving.published import estimate_accuracy

    t0 = time.perf_counter()
    acc = estimate_accuracy(cross_check=cross_check)
    acc["wall_s"] = time.perf_counter() - t0
    acc["machine"] = machine()
    return acc


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-aic", action="store_true", help="skip aiconfigurator-core's own estimate")
    ap.add_argument("--out", default=os.path.join(HERE, "accuracy.json"))
    a = ap.parse_args()
    acc = run(cross_check=not a.no_aic)
    print(table(acc))
    print()
    print(summary(acc))
    print(f"({acc['wall_s']:.1f} s, aiconfigurator-core's tables and engines loaded cold)")
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(acc, f, indent=1, default=str)
        f.write("\n")
