"""1. Command-line answer: `python -m mla_core kv --model deepseek-v3 --context 131072 --json`
against a bare `python -c pass`, alternated, median ratio. Goal: at most 1.5x.

Also measured, to show where the time goes: `python -m` of an empty package (the floor any
`python -m` command line pays here) and the modules the command imports (it must import none
of torch, streamlit, plotly, pandas, numpy). Bytecode is compiled first and may be cached, as in a
normal install (this workplace sets PYTHONDONTWRITEBYTECODE, which would recompile every run).
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

CLI = ["-m", "mla_core", "kv", "--model", "deepseek-v3", "--context", "131072", "--json"]
HEAVY = ("torch", "streamlit", "plotly", "pandas", "numpy")


def run(rounds: int = 40) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT
    compileall.compile_dir(os.path.join(ROOT, "mla_core"), quiet=1)
    empty = tempfile.mkdtemp()
    os.makedirs(os.path.join(empty, "emptypkg"))
    for name in ("__init__.py", "__main__.py"):
        open(os.path.join(empty, "emptypkg", name), "w").close()
    compileall.compile_dir(empty, quiet=1)

    def timer(args, extra_path=None):
        e = dict(env, PYTHONPATH=os.pathsep.join(p for p in (ROOT, extra_path) if p))
        cmd = [sys.executable, *args]
        return timeit.Timer(lambda: subprocess.run(cmd, env=e, cwd=ROOT, stdout=subprocess.DEVNULL, check=True))

    timers = {"pass": timer(["-c", "pass"]), "cli": timer(CLI), "empty_m": timer(["-m", "emptypkg"], empty)}
    for t in timers.values():  # warm the page cache
        t.timeit(1)
    samples = {k: [] for k in timers}
    for _ in range(rounds):  # alternated, so drift hits all three alike
        for k, t in timers.items():
            samples[k].append(t.timeit(1))
    ratios = [c / p for c, p in zip(samples["cli"], samples["pass"])]
    floor = [e / p for e, p in zip(samples["empty_m"], samples["pass"])]
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv=['mla_core', *%r];\n"
         "try: runpy.run_module('mla_core', run_name='__main__')\nexcept SystemExit: pass\n"
         "print(sorted(m for m in %r if m in sys.modules), file=sys.stderr)" % (CLI[2:], HEAVY)],
        env=env, cwd=ROOT, capture_output=True, text=True)
    heavy = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "?"
    r = median(ratios)
    return [
        result("cli_vs_python_c_pass", r, "x", goal="<= 1.5", met=r <= 1.5,
               cli_ms=round(median(samples["cli"]) * 1e3, 2), pass_ms=round(median(samples["pass"]) * 1e3, 2),
               rounds=rounds),
        result("python_m_empty_package_vs_python_c_pass", median(floor), "x",
               note="the floor of any `python -m` command line on this machine",
               empty_m_ms=round(median(samples["empty_m"]) * 1e3, 2)),
        result("cli_heavy_imports", heavy, "modules", goal="[]", met=heavy == "[]"),
    ]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.rounds), a.out)
