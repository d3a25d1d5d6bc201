"""Run acceptance cases against the command line and report what differs (`make cases`).

A cases file is `{"cases": [{"id", "source", "argv", "expect" | "expect_error"}]}`: `argv` is the
argument list of `python -m mla_core`, with `{configs}` standing for `tests/fixtures/configs`;
`expect` maps a JSON field of the answer to a value, or to `{"value": v, "rel_tol": r}`
(numbers match when |got - want| <= r * |want|; r defaults to 0, i.e. exactly). A case with
`"expect_error": true` must exit with status 2, print one line on stderr and no traceback.

    python tests/cases_check.py [CASES.json ...]      (default: tests/fixtures/cases/*.json)

Prints one line per failed case and "N passed, M failed" last; exits 1 when any failed.
"""
from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
CONFIGS = os.path.join(FIXTURES, "configs")


def case_files() -> list[str]:
    return sorted(glob.glob(os.path.join(FIXTURES, "cases", "*.json")))


def load_cases(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def run_case(case: dict, configs_dir: str = CONFIGS, timeout_s: float = 120) -> list[str]:
    """The problems with one case's answer; [] when it passes."""
    argv = [a.replace("{configs}", configs_dir) for a in case["argv"]]
    cmd = [sys.executable, "-m", "mla_core", *argv]
    if not case.get("expect_error"):
        cmd.append("--json")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return [f"no answer in {timeout_s:g} s"]
    if case.get("expect_error"):
        problems = []
        if proc.returncode != 2:
            problems.append(f"exit status {proc.returncode}, want 2")
        if "Traceback" in proc.stderr + proc.stdout:
            problems.append("printed a Python traceback")
        if len(proc.stderr.strip().splitlines()) != 1:
            problems.append(f"stderr has {len(proc.stderr.strip().splitlines())} lines, want 1")
        return problems
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [""])[-1][:160]
        return [f"exit status {proc.returncode}: {tail}"]
    try:
        answer = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return [f"stdout is not JSON: {proc.stdout[:120]!r}"]
    problems = []
    for key, spec in case["expect"].items():
        if key not in answer:
            problems.append(f"no field {key!r}")
            continue
        got = answer[key]
        want, tol = (spec["value"], spec.get("rel_tol", 0.0)) if isinstance(spec, dict) else (spec, 0.0)
        if isinstance(want, (str, bool)) or want is None:
            if got != want:
                problems.append(f"{key} = {got!r}, want {want!r}")
        elif (isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got)
              or abs(got - want) > tol * abs(want)):
            problems.append(f"{key} = {got!r}, want {want!r} (rel_tol {tol})")
    return problems


def main(paths: list[str]) -> int:
    passed = failed = 0
    for path in paths or case_files():
        for case in load_cases(path):
            problems = run_case(case)
            if problems:
                failed += 1
                print(f"FAIL {case['id']}: " + "; ".join(problems))
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
