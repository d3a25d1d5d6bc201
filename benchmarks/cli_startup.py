"""1. Command-line answer: `python -m mla_core kv --model deepseek-v3 --context 131072 --json` and
`python -m mla_core presets` against a bare `python -c pass`, alternated, median ratio. Goal
(issue 20): at most 4x each.

Also measured, to show where the time goes: `python -m` of an empty package (the floor any
`python -m` command line pays here) and the modules the command imports (it must import none
of torch, streamlit, plotly, pandas, numpy). Bytecode is compiled first and may be cached, as in a
normal install (this workplace sets PYTHONDONTWRITEBYTECODE, which would recompile every run).
`--before DIR` times the same commands from another checkout (e.g. a `git worktree` of an older
commit) in the same alternation, so that a change is measured before and after in one run.
"""
from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import tempfile
import timeit

from common import ROOT, dump, median, result

COMMANDS = {"cli": ["-m", "mla_core", "kv", "--model", "deepseek-v3", "--context", "131072", "--json"],
            "presets": ["-m", "mla_core", "presets"]}
HEAVY = ("torch", "streamlit", "plotly", "pandas", "numpy")
GOAL = 4.0


def run(rounds: int = 40, before: str | None = None) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    roots = {"": ROOT, **({"before_": os.path.abspath(before)} if before else {})}
    for root in roots.values():
        compileall.compile_dir(os.path.join(root, "mla_core"), quiet=1)
    empty = tempfile.mkdtemp()
    os.makedirs(os.path.join(empty, "emptypkg"))
    for name in ("__init__.py", "__main__.py"):
        open(os.path.join(empty, "emptypkg", name), "w").close()
    compileall.compile_dir(empty, quiet=1)

    def timer(args, path, cwd=ROOT):
        e = dict(env, PYTHONPATH=path)
        cmd = [sys.executable, *args]
        return timeit.Timer(lambda: subprocess.run(cmd, env=e, cwd=cwd, stdout=subprocess.DEVNULL, check=True))

    timers = {"pass": timer(["-c", "pass"], ROOT), "empty_m": timer(["-m", "emptypkg"], empty)}
    for prefix, root in roots.items():
        for name, args in COMMANDS.items():
            timers[prefix + name] = timer(args, root, root)
    for t in timers.values():  # warm the page cache
        t.timeit(1)
    samples = {k: [] for k in timers}
    for _ in range(rounds):  # alternated, so drift hits all of them alike
        for k, t in timers.items():
            samples[k].append(t.timeit(1))

    def ratio(key):
        return median([c / p for c, p in zip(samples[key], samples["pass"])])

    probe = subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv=['mla_core', *%r];\n"
         "try: runpy.run_module('mla_core', run_name='__main__')\nexcept SystemExit: pass\n"
         "print(sorted(m for m in %r if m in sys.modules), file=sys.stderr)" % (COMMANDS["cli"][2:], HEAVY)],
        env=dict(env, PYTHONPATH=ROOT), cwd=ROOT, capture_output=True, text=True)
    heavy = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "?"
    out = []
    for prefix in roots:
        for name, args in COMMANDS.items():
            key = prefix + name
            r = ratio(key)
            label = f"{prefix}cli_vs_python_c_pass" if name == "cli" else f"{prefix}cli_{name}_vs_python_c_pass"
            out.append(result(label, r, "x", goal=f"<= {GOAL:g}", met=r <= GOAL,
                              command=" ".join(args[1:]), cli_ms=round(median(samples[key]) * 1e3, 2),
                              pass_ms=round(median(samples["pass"]) * 1e3, 2), rounds=rounds,
                              **({"root": roots[prefix]} if prefix else {})))
    out += [
        result("python_m_empty_package_vs_python_c_pass", ratio("empty_m"), "x",
               note="the floor of any `python -m` command line on this machine",
               empty_m_ms=round(median(samples["empty_m"]) * 1e3, 2)),
        result("cli_heavy_imports", heavy, "modules", goal="[]", met=heavy == "[]"),
    ]
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--before", metavar="DIR", help="another checkout whose commands are timed in the same run")
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.rounds, a.before), a.out)
