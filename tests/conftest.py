"""Shared test fixtures: the project's own copies of real config files and acceptance cases
(tests/fixtures/, sources in tests/fixtures/SOURCES.md), and the project root on sys.path."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
CASE_CONFIGS = os.path.join(FIXTURES, "configs")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Plotly validates every figure the pages build (the app skips it for speed; ui/charts.py), so a
# misspelt property fails a test. Inherited by the servers and CLIs the tests start.
os.environ["MLA_VALIDATE_FIGURES"] = "1"
# The test machine is shared: its neighbours may hold nearly every CPU, which would make a real
# run refuse its result (mla_core.store.disturbance). The refusal has its own test.
os.environ.setdefault("MLA_BENCH_REFUSE_FREE_CPUS", "0")


@pytest.fixture(scope="session")
def root():
    return ROOT


def case_config(name: str) -> str:
    """Path of one of tests/fixtures/configs/*.json (real Hugging Face config files). A name
    that is not there is a test bug, so it fails rather than skips."""
    path = os.path.join(CASE_CONFIGS, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no fixture config {name!r} in {CASE_CONFIGS}")
    return path


# Property tests check values, never time: a loaded 2-core CI machine must not fail them on
# hypothesis' per-example deadline (benchmarks/ time things; unit tests do not).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("mla-explorer", deadline=None)
_hypothesis_settings.load_profile("mla-explorer")
