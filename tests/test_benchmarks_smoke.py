"""The benchmark scripts run (smoke test on tiny sizes). No timing is asserted here: the goals
are checked by `make bench`, which writes benchmarks/RESULTS.md."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_benchmark_suite_runs_on_tiny_sizes(tmp_path):
    env = dict(os.environ, MLA_BENCH_TINY="1", MLA_EXPLORER_HISTORY=str(tmp_path / "history.sqlite3"))
    p = subprocess.run([sys.executable, "benchmarks/run_all.py", "--tiny", "--out-dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    text = (tmp_path / "RESULTS.md").read_text()
    for section in ("1. Command-line answer", "2. Page reactivity", "3. Sweeps", "5. The microbenchmark",
                    "6. Serving plan search", "7. Served speed", "8. What one Streamlit element costs",
                    "9. Traffic simulation", "10. What a user waits for in a real browser"):
        assert section in text
    assert "FAILED" not in text
    for name in ("cli_vs_python_c_pass", "rerun_kv_cache_ms", "capacity_sweep_ms", "copy_vs_numpy_copyto",
                 "absorbed_vs_recompute_speedup", "served_rerun_trivial_app_ms", "served_rerun_kv_cache_vs_trivial",
                 "served_app_rss_after_1_benchmark_runs_MiB", "served_rerun_shell_vs_trivial",
                 "served_cost_of_one_dataframe_pyarrow_8_rows_ms", "ui_charts_gain_over_plain_plotly_ms"):
        assert name in text
