"""Shared pieces of the benchmark scripts: the machine they ran on and the result records.

Every figure is a ratio or a median taken within one run (these machines are shared and noisy),
timed with the standard library's `timeit` timers (perf_counter).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def machine() -> dict:
    """What the figures were measured on."""
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    versions = {}
    for mod in ("streamlit", "numpy", "pandas", "plotly", "torch"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    return {
        "when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_GiB": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git": _git_head(),
    }


def _git_head() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def median(xs) -> float:
    return statistics.median(xs)


def result(name: str, value: float, unit: str, goal: str | None = None, met: bool | None = None, **extra) -> dict:
    return {"name": name, "value": value, "unit": unit, "goal": goal, "met": met, **extra}


def dump(obj, path: str | None) -> None:
    text = json.dumps(obj, indent=2, default=str)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
