"""The acceptance cases (tests/fixtures/cases/*.json, each with its published source) against the
command line, through the project's own checker (tests/cases_check.py, also `make cases`)."""
import copy
import os

import pytest

import cases_check

CASES = [(os.path.basename(path), case) for path in cases_check.case_files() for case in cases_check.load_cases(path)]


def test_the_cases_are_there():
    assert len(CASES) >= 21
    ids = [c["id"] for _, c in CASES]
    assert len(set(ids)) == len(ids)
    assert all(c.get("source") for _, c in CASES)


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[f"{f}:{c['id']}" for f, c in CASES])
def test_case(case):
    assert cases_check.run_case(case) == []


def test_the_checker_reports_a_wrong_figure():
    case = copy.deepcopy(next(c for _, c in CASES if c["id"] == "dsv3-latent-bf16"))
    case["expect"]["kv_bytes_per_token"] = 70273
    assert cases_check.run_case(case) == ["kv_bytes_per_token = 70272, want 70273 (rel_tol 0.0)"]
    case = copy.deepcopy(next(c for _, c in CASES if c["id"] == "err-unknown-model"))
    case["argv"] = ["kv", "--model", "deepseek-v3", "--context", "10"]  # a valid command
    assert "exit status 0, want 2" in cases_check.run_case(case)
