"""Shared test fixtures: where the shared acceptance material lives, and preset loaders."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
CASE_CONFIGS = os.path.join(SHARED, "cases", "configs")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Plotly validates every figure the pages build (the app skips it for speed; ui/charts.py), so a
# misspelt property fails a test. Inherited by the servers and CLIs the tests start.
os.environ["MLA_VALIDATE_FIGURES"] = "1"
# The test machine is shared: its neighbours may hold nearly every CPU, which would make a real
# run refuse its result (mla_core.bench.disturbance). The refusal has its own test.
os.environ.setdefault("MLA_BENCH_REFUSE_FREE_CPUS", "0")


@pytest.fixture(scope="session")
def root():
    return ROOT


def case_config(name: str) -> str:
    """Path of one of shared/cases/configs/*.json (the acceptance cases' real config files)."""
    path = os.path.join(CASE_CONFIGS, name)
    if not os.path.exists(path):
        pytest.skip(f"shared acceptance configs not present: {path}")
    return path
