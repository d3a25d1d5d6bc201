"""Shared test fixtures: where the shared acceptance material lives, and preset loaders."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
CASE_CONFIGS = os.path.join(SHARED, "cases", "configs")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def root():
    return ROOT


def case_config(name: str) -> str:
    """Path of one of shared/cases/configs/*.json (the acceptance cases' real config files)."""
    path = os.path.join(CASE_CONFIGS, name)
    if not os.path.exists(path):
        pytest.skip(f"shared acceptance configs not present: {path}")
    return path
