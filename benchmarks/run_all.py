"""Run every benchmark of this folder once and write RESULTS.md (and results.json) beside it.

    .venv/bin/python benchmarks/run_all.py            # or: make bench
    .venv/bin/python benchmarks/run_all.py --tiny     # smoke-test sizes (what the test suite runs)

Each section is measured as ratios or medians within this one run. Goals are those of the
performance issue; a figure that misses its goal is reported as such, not hidden.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from common import machine

HERE = os.path.dirname(os.path.abspath(__file__))


def sections(tiny: bool):
    import cli_startup
    import microbench
    import page_reactivity
    import serving_search
    import sweeps_bench

    out = [
        ("1. Command-line answer", lambda: cli_startup.run(rounds=3 if tiny else 40)),
        ("2. Page reactivity (AppTest rerun after a widget change)", lambda: page_reactivity.run(rounds=2 if tiny else 15)),
        ("3. Sweeps behind the charts", lambda: sweeps_bench.run(points=16 if tiny else 256, max_batch=64 if tiny else 1024,
                                                                  repeat=1 if tiny else 5)),
    ]
    try:
        import memory
    except ImportError:
        memory = None
    if memory is not None:
        out.append(("4. Memory of the app server", lambda: memory.run(tiny=tiny)))
    out.append(("5. The microbenchmark against this machine's limits", lambda: microbench.run(tiny=tiny)))
    out.append(("6. Serving plan search", lambda: serving_search.run(max_gpus=8 if tiny else 64, repeat=1 if tiny else 5)))
    import served

    port = int(os.environ["MLA_SERVED_PORT"]) if os.environ.get("MLA_SERVED_PORT") else None
    out.append(("7. Served speed (the real server, driven over Streamlit's websocket protocol)",
                lambda: served.run(tiny=tiny, port=port)))
    import element_costs

    out.append(("8. What one Streamlit element costs a served rerun", lambda: element_costs.run(tiny=tiny)))
    import traffic_sim

    out.append(("9. Traffic simulation: requests simulated per second", lambda: traffic_sim.run(tiny=tiny)))
    import browser

    out.append(("10. What a user waits for in a real browser (chromium): each slider and number box against "
                "the trivial app", lambda: browser.run(rounds=1 if tiny else 12, tiny=tiny)))
    return out


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {fmt(x)}" for k, x in v.items())
    return str(v)


def to_markdown(info: dict, results: dict, wall_s: float) -> str:
    lines = ["# Benchmark results", "",
             f"Measured {info['when_utc']} UTC on {info['cpu']}, {info['cores']} cores, {info['memory_GiB']} GiB, "
             f"Python {info['python']}, torch {info['versions'].get('torch')}, streamlit {info['versions'].get('streamlit')}"
             f" (commit {info['git']}); the whole suite took {wall_s:.0f} s.",
             "Reproduce with `make bench` (= `.venv/bin/python benchmarks/run_all.py`). Figures are ratios or medians "
             "taken within this one run; absolute times on this shared machine drift.", ""]
    for title, rows in results.items():
        lines += [f"## {title}", ""]
        if isinstance(rows, str):
            lines += ["```", rows.strip()[-2000:], "```", ""]
            continue
        lines += ["| measure | value | goal | met | details |", "|---|---|---|---|---|"]
        for r in rows:
            details = {k: v for k, v in r.items() if k not in ("name", "value", "unit", "goal", "met")}
            met = {True: "yes", False: "**no**", None: ""}[r.get("met")]
            lines.append(f"| {r['name']} | {fmt(r['value'])} {r['unit']} | {r.get('goal') or ''} | {met} | "
                         f"{fmt(details) if details else ''} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="smoke-test sizes; writes nothing unless --out-dir is given")
    ap.add_argument("--out-dir", default=None, help="where RESULTS.md and results.json go (default: benchmarks/)")
    a = ap.parse_args(argv)
    out_dir = a.out_dir or (None if a.tiny else HERE)
    sys.path.insert(0, HERE)
    info = machine()
    results: dict = {}
    failed = False
    t0 = time.perf_counter()
    for title, fn in sections(a.tiny):
        print(f"== {title}", file=sys.stderr, flush=True)
        try:
            results[title] = fn()
        except Exception:  # a broken section is reported, the others still run
            failed = True
            results[title] = "FAILED\n" + traceback.format_exc()
    wall = time.perf_counter() - t0
    text = to_markdown(info, results, wall)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "RESULTS.md"), "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
            json.dump({"machine": info, "wall_s": wall, "results": results}, f, indent=2, default=str)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
