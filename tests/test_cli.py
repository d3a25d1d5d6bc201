"""The command line: JSON fields, the readable table, and one-line errors with exit status 2."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, case_config


def run(*args, timeout=20):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "mla_core", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def run_json(*args):
    p = run(*args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_kv_json_fields():
    r = run_json("kv", "--model", "deepseek-v3", "--context", "131072", "--kv-dtype", "bf16")
    assert r["kv_bytes_per_token"] == 70272 and r["kv_cache_bytes"] == 9210691584


def test_capacity_json_fields():
    r = run_json("capacity", "--config", case_config("kimi-k2.json"), "--num-gpus", "8", "--tp", "8",
                 "--kv-budget-gib", "46.80", "--block-size", "64", "--kv-dtype", "bf16", "--context", "131072")
    for key in ("kv_budget_bytes_per_gpu", "kv_bytes_per_token_per_gpu", "max_tokens_per_gpu", "max_tokens_total",
                "max_concurrent_requests", "weights_bytes_per_gpu"):
        assert key in r
    assert r["max_tokens_per_gpu"] == 715072
    # Expanded per-head K/V for 64 heads / TP8 = 8 heads per GPU: 8 * (192 + 128) * 2 B vs 1152 B.
    assert r["mha_formula_waste_factor"] == pytest.approx(8 * 320 * 2 / 1152)


def test_roofline_json_fields():
    r = run_json("roofline", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192")
    for key in ("params_total", "weights_bytes_per_step", "attention_flops", "attention_bytes",
                "attention_intensity_flop_per_byte", "step_time_s", "tokens_per_s", "bound"):
        assert key in r
    assert r["params_total"] == 8030261248 and r["bound"] == "memory"


def test_roofline_with_typed_figures():
    r = run_json("roofline", "--model", "llama-3.1-8b", "--bandwidth-tbps", "1", "--peak-tflops", "100",
                 "--context", "1024")
    assert r["bandwidth_Bps"] == 1e12 and r["peak_flops"] == 100e12


def test_capacity_with_typed_memory():
    r = run_json("capacity", "--model", "llama-3.1-8b", "--gpu-memory-gib", "24", "--context", "8192")
    assert r["memory_bytes_per_gpu"] == 24 * 2**30


def test_table_output_has_units():
    p = run("kv", "--model", "deepseek-v3", "--context", "131072", "--kv-dtype", "bf16")
    assert p.returncode == 0
    assert "70,272 B (68.6 KiB)" in p.stdout and "8.58 GiB" in p.stdout


def test_synthetic_model():
    r = run_json("kv", "--attention", "mla", "--layers", "60", "--heads", "128", "--kv-lora-rank", "512",
                 "--rope-dim", "64", "--context", "1", "--kv-dtype", "bf16")
    assert r["kv_bytes_per_token"] == 69120


def test_huge_numbers_stay_exact():
    r = run_json("kv", "--model", "deepseek-v3", "--context", str(10**15), "--batch", str(10**6), "--kv-dtype", "bf16")
    assert r["kv_cache_bytes"] == 70272 * 10**21


def test_presets_listing():
    r = run_json("presets")
    ids = [m["id"] for m in r["models"]]
    assert "deepseek-v3" in ids and "kimi-k2-instruct" in ids and "h200" in [g["id"] for g in r["gpus"]]


@pytest.mark.parametrize("args", [
    ["kv", "--model", "no-such-model", "--context", "10"],
    ["kv", "--model", "deepseek-v3", "--context", "-5"],
    ["kv", "--model", "deepseek-v3", "--context", "0"],
    ["kv", "--model", "deepseek-v3", "--context", "abc"],
    ["kv", "--model", "deepseek-v3", "--context", "1e5"],
    ["kv", "--model", "deepseek-v3", "--context", "²"],
    ["kv", "--model", "deepseek-v3", "--context", "٣"],
    ["kv", "--model", "deepseek-v3", "--context", "9" * 10000],
    ["kv", "--model", "deepseek-v3", "--context", str(10**19)],
    ["kv", "--model", "deepseek-v3", "--context", "10", "--batch", "0"],
    ["kv", "--model", "deepseek-v3", "--context", "10", "--kv-dtype", "int3"],
    ["kv", "--model", "<script>alert(1)</script>", "--context", "10"],
    ["kv", "--model", "x" * 10000, "--context", "10"],
    ["kv", "--config", "/nonexistent/config.json", "--context", "10"],
    ["kv", "--config", "/dev/zero", "--context", "10"],
    ["kv", "--config", "/", "--context", "10"],
    ["kv", "--model", "deepseek-v3", "--layers", "3", "--context", "10"],
    ["kv", "--context", "10"],
    ["kv", "--model", "llama-3.1-8b", "--config", "x", "--context", "10"],
    ["kv", "--attention", "gqa", "--layers", "2", "--heads", "8", "--context", "10"],
    ["kv", "--attention", "gqa", "--layers", "2", "--heads", "8", "--kv-heads", "3", "--context", "10"],
    ["kv", "--model", "llama-3.1-8b", "--context", "10", "--kv-dtype", "fp8_ds_mla"],
    ["capacity", "--model", "llama-3.1-8b", "--context", "10"],
    ["capacity", "--model", "llama-3.1-8b", "--context", "10", "--gpu", "h100-sxm", "--num-gpus", "3", "--tp", "2"],
    ["capacity", "--model", "llama-3.1-8b", "--context", "10", "--gpu", "h100-sxm", "--gpu-memory-utilization", "1.5"],
    ["capacity", "--model", "llama-3.1-8b", "--context", "10", "--gpu", "h100-sxm", "--gpu-memory-utilization", "nan"],
    ["capacity", "--model", "llama-3.1-8b", "--context", "10", "--kv-budget-gib", "-1"],
    ["capacity", "--model", "llama-3.1-8b", "--context", "10", "--gpu", "tpu-v9"],
    ["roofline", "--model", "llama-3.1-8b", "--context", "10"],
    ["roofline", "--model", "llama-3.1-8b", "--context", "10", "--gpu", "apple-m2-ultra"],
    ["roofline", "--model", "llama-3.1-8b", "--context", "10", "--gpu", "h200", "--tp", "0"],
    ["nonsense"],
    [],
])
def test_bad_input_exits_2_with_one_line(args):
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0], p.stderr
    assert len(lines[0]) <= 500


def test_hostile_config_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_bytes(b'{"num_hidden_layers": NaN}')
    p = run("kv", "--config", str(bad), "--context", "10")
    assert p.returncode == 2 and "NaN" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_cli_imports_no_heavy_modules():
    # The analytic commands must not import torch, streamlit, plotly, pandas or numpy.
    code = ("import sys, runpy; sys.argv=['mla_core','kv','--model','deepseek-v3','--context','131072','--json'];"
            "\ntry:\n    runpy.run_module('mla_core', run_name='__main__')\nexcept SystemExit: pass\n"
            "heavy=[m for m in ('torch','streamlit','plotly','pandas','numpy') if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert "HEAVY []" in p.stderr, p.stderr


def test_start_up_imports_only_what_the_answer_needs():
    # benchmarks/cli_startup.py times start-up; this holds the import structure it depends on:
    # `presets` builds no model (no dataclasses), `kv` loads neither typing nor inspect
    # (mla_core.cli._import_dataclasses), and a dataclass without a docstring still gets its
    # signature from the real inspect when one is made later.
    probe = ("import sys, runpy; sys.argv=['mla_core', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('mla_core', run_name='__main__')\nexcept SystemExit: pass\n"
             "print('LOADED', sorted(m for m in ('typing', 'inspect', 'dataclasses', 'mla_core.spec') "
             "if m in sys.modules), file=sys.stderr)\n"
             "import dataclasses\n"
             "@dataclasses.dataclass\nclass X:\n    a: int\n"
             "print('DOC', X.__doc__, file=sys.stderr)")
    for args, loaded in ((["presets"], []),
                         (["kv", "--model", "deepseek-v3", "--context", "131072", "--json"],
                          ["dataclasses", "mla_core.spec"])):
        p = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT, timeout=30)
        assert f"LOADED {loaded}" in p.stderr, p.stderr
        assert "DOC X(a: int)" in p.stderr, p.stderr


def test_app_help_says_what_the_app_is_before_streamlits_options():
    p = subprocess.run([sys.executable, "-m", "mla_core.entry", "app", "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "usage: mla-explorer app [streamlit run options]"
    assert lines[2].startswith("Serve the MLA explorer in a browser: how Multi-head Latent Attention")
    intro, _, options = p.stdout.partition("\nOptions:\n")
    assert "http://127.0.0.1:8501" in intro and "passed through unchanged" in intro
    assert "--server.port" in options and "--server.address" in options  # Streamlit's own options follow
    assert "Usage:" not in p.stdout and "mla_core.streamlit" not in p.stdout  # not Streamlit's usage line


def test_make_test_fast_names_core_and_cli_test_files_only():
    import re

    text = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    block = re.search(r"^FAST_TESTS := (.*?)(?:\n\n|\n[a-z])", text, re.S | re.M).group(1)
    files = re.findall(r"tests/\S+\.py", block)
    assert files and all(os.path.isfile(os.path.join(ROOT, f)) for f in files)
    assert "tests/test_cli.py" in files and "tests/test_kv.py" in files
    for f in files:  # no page, browser, torch benchmark or install test in the fast tier
        source = open(os.path.join(ROOT, f), encoding="utf-8").read()
        imports = set(re.findall(r"^\s*(?:from|import) ([\w.]+)", source, re.M))
        assert not {m for m in imports if m.split(".")[0] in ("streamlit", "playwright", "torch", "apptest_util",
                                                              "browser_util")}, f
    assert re.search(r"^test-fast: .*\n\t\$\(PY\) -m pytest -q \$\(FAST_TESTS\)$", text, re.M)
    assert "\nmake test\n" in open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()  # CI runs it all
