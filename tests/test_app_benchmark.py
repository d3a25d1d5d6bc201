"""The benchmark page (pages/benchmark.py), its run registry (ui/bench_runs.py) and the core
functions it shows (mla_core/store/report.py).

One test runs a real, tiny CPU benchmark through the page (about half a second); the others use
the committed sample (data/samples), hand-made results, or a stand-in for `run_benchmark`.
Every test gets its own history file through MLA_EXPLORER_HISTORY.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from apptest_util import chart_specs, isolated_store, metrics, ROOT, no_exceptions, run_page
from mla_core.store import history, report
from mla_core.bench.config import MEMORY_HEADROOM, memory_check
from mla_core.store.errors import BenchBusy, BenchCancelled
from mla_core.store.schema import validate_result
from mla_core.errors import MLAError
from mla_core.hardware import custom_gpu
from mla_core.roofline import attainable_flops
from mla_core.units import format_bytes, format_intensity, format_rate, format_seconds
from ui import bench_runs, measured
from ui.text import escape_md

PAGE = "pages/benchmark.py"
SAMPLE = "cpu-2core-quick.json"
SAMPLE_PATH = os.path.join(ROOT, "data", "samples", SAMPLE)
# The smallest run the page can ask for: a fraction of a second on two CPU cores.
TINY = {"_bench_batch": 1, "_bench_context": 64, "_bench_heads": 2, "_bench_stream_mib": 1, "_bench_matmul_n": 64,
        "_bench_reps": 3, "_bench_budget_s": 0.05}


@pytest.fixture(autouse=True)
def store(isolated_store):
    return isolated_store


@pytest.fixture(scope="module")
def sample() -> dict:
    with open(SAMPLE_PATH, encoding="utf-8") as f:
        return json.load(f)


def _table(at):
    return at.dataframe[0].value


def _metric(at, label: str) -> str:
    for m in metrics(at):
        if m.label == label:
            return m.value
    raise AssertionError(f"no metric {label!r}: {[m.label for m in metrics(at)]}")


def _figures(at) -> list[dict]:
    return [json.loads(el) for el in chart_specs(at)]


def _texts(elements) -> str:
    """The elements' text as shown (Markdown escapes removed)."""
    return " | ".join(str(e.value) for e in elements).replace("\\", "")


def _shows(at, result: dict) -> None:
    """The page's table and metrics equal the result dict, formatted with mla_core.units."""
    df = _table(at)
    rows = result["results"]
    assert list(df["kernel"]) == [r["kernel"] for r in rows]
    assert list(df["median"]) == [format_seconds(r["median_s"]) for r in rows]
    assert list(df["best"]) == [format_seconds(r["min_s"]) for r in rows]
    assert list(df["bytes"]) == [format_bytes(r["bytes"]) for r in rows]
    assert list(df["achieved bandwidth"]) == [format_rate(r["achieved_GBps"] * 1e9, "B/s") for r in rows]
    assert list(df["achieved compute"]) == [format_rate(r["achieved_TFLOPs"] * 1e12, "FLOP/s") for r in rows]
    assert list(df["predicted"]) == [format_seconds(r["predicted_s"]) if r.get("predicted_s") else "" for r in rows]
    c = result["ceilings"]
    assert _metric(at, "Copy bandwidth (measured)") == format_rate(c["copy_GBps"] * 1e9, "B/s")
    assert _metric(at, "Read bandwidth (measured)") == format_rate(c["read_GBps"] * 1e9, "B/s")
    assert _metric(at, "Matmul (measured)") == format_rate(c["matmul_TFLOPs"] * 1e12, "FLOP/s")
    for i, r in enumerate(report.kernel_rows(result)):
        acc = df["model accuracy (predicted / measured)"].iloc[i]
        assert (math.isnan(acc) and r["model_accuracy"] is None) or acc == pytest.approx(r["model_accuracy"])


def _upload(at, name: str, data: bytes):
    at.file_uploader(key="_bench_upload").set_value((name, data, "application/json"))
    return at.run()


def _set_up(at, **values):
    at.button(key="_bench_setup_button").click().run()
    no_exceptions(at)
    for key, value in values.items():
        at.number_input(key=key).set_value(value)
    return at.run()


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --- the page without a run ---------------------------------------------------------------------------

def test_first_render_shows_the_committed_sample(sample, store):
    at = run_page(PAGE)
    no_exceptions(at)
    assert not at.error, _texts(at.error)
    assert at.session_state["_bench_show"] == f"sample:{SAMPLE}"
    _shows(at, sample)
    # The ridge metric and the model accuracy come from mla_core.store.report.
    cs = report.ceiling_summary(sample)
    assert _metric(at, "Ridge point (measured)") == format_intensity(cs["ridge_flop_per_byte"])
    # A roofline and a predicted-vs-measured chart before any run (the browser test needs one).
    figs = _figures(at)
    names = [t.get("name") for t in figs[0]["data"]]
    assert "measured roof (read bandwidth, matmul)" in names and "MLA absorbed measured" in names
    assert "MLA absorbed predicted" in names
    assert [t["name"] for t in figs[1]["data"]] == ["measured (median)", "predicted (measured ceilings)"]
    assert "gpu_h200.sh" in _texts(at.caption)
    assert not os.path.exists(store)  # looking creates no history file


def test_deep_link_and_a_bad_link_value():
    at = run_page(PAGE, model="kimi-k2-instruct", gpu="h100-sxm", present="1", context="65536")
    no_exceptions(at)
    assert not at.error
    at = run_page(PAGE, batch="lots")
    no_exceptions(at)
    assert "batch" in _texts(at.warning)
    assert _table(at) is not None  # the page still draws


def test_the_page_does_not_import_torch(tmp_path):
    """First render, an import and a comparison, in a fresh interpreter: torch stays unloaded."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'tests')!r}]
        from apptest_util import chart_specs, run_page
        at = run_page({PAGE!r})
        first = "torch" in sys.modules
        data = open({SAMPLE_PATH!r}, "rb").read()
        at.file_uploader(key="_bench_upload").set_value(("cpu.json", data, "application/json"))
        at.run()
        print(json.dumps({{"first": first, "after": "torch" in sys.modules, "exc": [str(e.value) for e in at.exception],
                          "errors": [e.value for e in at.error], "charts": len(chart_specs(at)),
                          "compare": list(at.session_state["_bench_compare"])}}))
    """)
    env = dict(os.environ, MLA_EXPLORER_HISTORY=str(tmp_path / "h.sqlite3"))
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"first": False, "after": False, "exc": [], "errors": [], "charts": 3,
                   "compare": [f"sample:{SAMPLE}", "run:1"]}


# --- import -----------------------------------------------------------------------------------------------

def test_uploading_the_sample_adds_it_to_the_history_and_the_comparison(sample):
    at = run_page(PAGE)
    at.text_input(key="_bench_import_label").set_value("laptop")
    _upload(at, "cpu-2core-quick.json", open(SAMPLE_PATH, "rb").read())
    no_exceptions(at)
    assert not at.error, _texts(at.error)
    runs = history.list_runs()
    assert [(r["id"], r["source"], r["label"], r["device_name"]) for r in runs] == [
        (1, "import", "laptop", sample["device"]["name"])]
    assert history.get_run(1)["result"] == validate_result(sample)
    assert "run #1" in _texts(at.success)
    # In the comparison beside what was shown (the sample): two columns of the same numbers.
    assert at.session_state["_bench_compare"] == [f"sample:{SAMPLE}", "run:1"]
    cmp = at.dataframe[1].value
    first = report.kernel_rows(sample)
    assert list(cmp["kernel"]) == [r["kernel"] for r in first]
    for name in (f"sample {SAMPLE}", "#1 laptop"):  # a labelled run is named by its label
        assert list(cmp[f"{name}: median"]) == [format_seconds(r["median_s"]) for r in first]
    bars = _figures(at)[-1]["data"]
    assert [b["name"] for b in bars] == [f"sample {SAMPLE}", "#1 laptop"]
    assert bars[0]["y"] == [r["achieved_GBps"] for r in first]
    # The history table lists it.
    hist = at.dataframe[-1].value
    assert list(hist["source"]) == ["import"] and list(hist["label"]) == ["laptop"]


def _mutated(sample, fn) -> bytes:
    data = copy.deepcopy(sample)
    fn(data)
    return json.dumps(data).encode()


BAD_FILES = {
    "not JSON": lambda s: b"this is { not json",
    "negative timing": lambda s: _mutated(s, lambda d: d["results"][3].update(median_s=-1e-3, min_s=-2e-3)),
    "NaN timing": lambda s: _mutated(s, lambda d: d["results"][0].update(median_s=float("nan"))),
    "wrong schema": lambda s: _mutated(s, lambda d: d.pop("device")),
    "unknown kernel": lambda s: _mutated(s, lambda d: d["results"][0].update(kernel="rm -rf /")),
    "over 1 MiB": lambda s: b" " * (1 << 20) + json.dumps(s).encode(),
    "markup in the name": lambda s: b"<script>alert(1)</script>",
}
BAD_NEEDLES = {"not JSON": "not JSON", "negative timing": "minimum of 0", "NaN timing": "NaN",
               "wrong schema": "device", "unknown kernel": "kernel", "over 1 MiB": "1 MiB",
               "markup in the name": "not JSON"}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_upload_is_one_error_and_stores_nothing(sample, store, case):
    at = run_page(PAGE)
    _upload(at, "<b>evil</b>.json" if case == "markup in the name" else "bad.json", BAD_FILES[case](sample))
    no_exceptions(at)
    assert len(at.error) == 1, _texts(at.error)
    text = at.error[0].value.replace("\\", "")
    assert BAD_NEEDLES[case] in text and "\n" not in text
    assert "<b>" not in at.error[0].value and "<script>" not in at.error[0].value
    assert not os.path.exists(store) or history.list_runs() == []
    assert not at.session_state["_bench_compare"]


# --- history -------------------------------------------------------------------------------------------------

def test_select_show_compare_and_delete_with_confirmation(sample):
    other = copy.deepcopy(sample)
    other["device"]["name"] = "NVIDIA H200"
    other["device"].update(kind="cuda", backend="cuda", preset="h200", peak_bandwidth_GBps=4800.0,
                           peak_TFLOPs=989.4, peak_source="datasheet of preset h200 (NVIDIA H200): 4.8 TB/s")
    a = history.save_run(sample, source="import", label="cpu")
    b = history.save_run(other, source="import", label="not really an H200")
    at = run_page(PAGE)
    no_exceptions(at)
    assert at.session_state["_bench_show"] == f"run:{b}"  # the newest run first
    assert list(at.dataframe[-1].value["id"]) == [b, a]
    # A datasheet device shows its datasheet beside the measured ceilings.
    assert _metric(at, "Datasheet bandwidth (h200)") == format_rate(4800.0 * 1e9, "B/s")
    assert _metric(at, "Measured / datasheet bandwidth") == f"{sample['ceilings']['read_GBps'] / 4800.0:.0%}"
    at.multiselect(key="_bench_selected").set_value([a, b]).run()
    at.button(key="_bench_compare_selected").click().run()
    assert at.session_state["_bench_compare"] == [f"run:{a}", f"run:{b}"]
    at.button(key="_bench_show_selected").click().run()
    assert at.session_state["_bench_show"] == f"run:{a}"
    assert at.session_state["bench_result"]["device"]["name"] == sample["device"]["name"]
    assert not at.download_button(key="_bench_export_json").proto.disabled
    # Delete asks first; "Keep them" keeps them.
    at.multiselect(key="_bench_selected").set_value([a]).run()
    at.button(key="_bench_delete").click().run()
    assert "cannot be undone" in _texts(at.warning)
    at.button(key="_bench_delete_no").click().run()
    assert [r["id"] for r in history.list_runs()] == [b, a]
    at.button(key="_bench_delete").click().run()
    at.button(key="_bench_delete_yes").click().run()
    no_exceptions(at)
    assert [r["id"] for r in history.list_runs()] == [b]
    assert f"#{a}" in _texts(at.success)
    assert f"run:{a}" not in at.session_state["_bench_compare"]
    assert at.session_state["_bench_show"] != f"run:{a}" and "bench_result" not in at.session_state
    assert list(at.dataframe[-1].value["id"]) == [b]


def test_a_corrupt_history_is_moved_aside_and_reported(store):
    with open(store, "wb") as f:
        f.write(b"this is not an sqlite database" * 100)
    with pytest.warns(history.HistoryWarning):
        at = run_page(PAGE)
    no_exceptions(at)
    assert "moved it to" in _texts(at.warning)
    assert any(n.startswith("history.sqlite3.corrupt-") for n in os.listdir(os.path.dirname(store)))


# --- running ------------------------------------------------------------------------------------------------------

def test_a_tiny_cpu_run_end_to_end_is_saved_and_shown():
    """A real benchmark (about half a second): the page's numbers are the result's."""
    pytest.importorskip("torch")
    at = run_page(PAGE)
    _set_up(at, **TINY)
    assert at.session_state["_bench_device"] == "cpu" and at.session_state["_bench_gqa"] == 2
    assert not at.error, _texts(at.error)
    at.button(key="_bench_run").click().run()
    no_exceptions(at)
    owner = at.session_state["_bench_owner"]
    assert bench_runs.registry().join(owner, 60)
    at.run()
    no_exceptions(at)
    assert not at.error, _texts(at.error)
    runs = history.list_runs()
    assert len(runs) == 1 and runs[0]["source"] == "local" and runs[0]["device_kind"] == "cpu"
    stored = history.get_run(runs[0]["id"])["result"]
    assert stored == at.session_state["bench_result"]
    assert stored["config"]["batches"] == [1] and stored["config"]["contexts"] == [64]
    assert stored["config"]["heads"] == 2 and stored["config"]["stream_bytes"] == 1 << 20
    assert at.session_state["_bench_show"] == f"run:{runs[0]['id']}"
    assert f"run #{runs[0]['id']}" in _texts(at.success)
    _shows(at, stored)
    chk = report.mla_checks(stored)[0]
    assert chk["ok"] and f"{chk['max_rel_err']:.1e}" in _texts(at.success)
    # The Roofline page draws the run's decode kernels beside its predictions.
    at.switch_page("pages/roofline.py").run()
    no_exceptions(at)
    names = [t.get("name", "") for f in _figures(at) for t in f["data"]]
    from mla_core.store.disturbance import is_disturbed

    mark = " (disturbed)" if is_disturbed(stored) else ""  # a busy machine (CI) may disturb the run
    assert f"measured: {measured.device_name(stored)}{mark}" in names
    # Back on the page the same run is still shown (widget state kept across pages).
    at.switch_page(PAGE).run()
    assert at.session_state["_bench_show"] == f"run:{runs[0]['id']}"


def test_settings_are_bounded_and_an_oversize_run_is_refused_before_it_starts():
    pytest.importorskip("torch")
    at = run_page(PAGE)
    _set_up(at)
    assert at.number_input(key="_bench_batch").max == 4096
    assert at.number_input(key="_bench_context").max == 1 << 24
    assert at.number_input(key="_bench_heads").max == 1024
    _set_up_values = {"_bench_batch": 4096, "_bench_context": 1 << 24, "_bench_heads": 1024}
    for key, value in _set_up_values.items():
        at.number_input(key=key).set_value(value)
    at.run()
    no_exceptions(at)
    assert f"{MEMORY_HEADROOM:.0%}" in _texts(at.error) and "lower the batch" in _texts(at.error)
    assert at.button(key="_bench_run").disabled
    assert bench_runs.registry().job(at.session_state["_bench_owner"]) is None


@pytest.fixture
def fake_run(monkeypatch, sample):
    """run_benchmark replaced by one that holds the real lock, reports 3 of 8 kernels done and
    waits for `release` (or its cancel event)."""
    brun = pytest.importorskip("mla_core.bench.run")
    release = threading.Event()
    calls = []

    def fake(config, progress=None, cancel=None, *, wait=False, source="api"):
        if not brun._LOCK.acquire(timeout=float(wait) if wait else 0.0):
            raise BenchBusy("another benchmark is running in this process")
        try:
            calls.append(config)
            progress(0, 8, "copy 1.0 MiB")
            progress(3, 8, "mha_decode B=1 T=64")
            while not release.wait(0.01):
                if cancel is not None and cancel.is_set():
                    raise BenchCancelled("benchmark cancelled during mha_decode B=1 T=64; its memory was freed")
            progress(8, 8, "done")
            return copy.deepcopy(sample)
        finally:
            brun._LOCK.release()

    monkeypatch.setattr(brun, "run_benchmark", fake)
    return release, calls


def test_a_second_session_is_told_to_wait_then_runs_after_a_cancel(fake_run):
    release, calls = fake_run
    reg = bench_runs.registry()
    a = run_page(PAGE)
    _set_up(a)
    a.button(key="_bench_run").click().run()
    owner_a = a.session_state["_bench_owner"]
    assert _wait(lambda: (j := reg.job(owner_a)) is not None and j.done == 3)
    a.run()
    assert [p.proto.text for p in a.get("progress")] == ["Your benchmark: 3 of 8 kernels done; now mha_decode B=1 T=64"]
    # Another session opening the page is told, and may queue its own run.
    b = run_page(PAGE)
    no_exceptions(b)
    assert ("A benchmark is running (started by another session), 3 of 8 kernels done; yours will wait"
            in _texts(b.info))
    _set_up(b)
    assert b.button(key="_bench_run").label.startswith("Queue the benchmark")
    b.button(key="_bench_run").click().run()
    owner_b = b.session_state["_bench_owner"]
    assert reg.job(owner_b).state == "waiting"
    assert "yours will wait and starts when it finishes" in _texts(b.info)
    # The first session cancels: its run stops, the waiting one starts, finishes, is saved.
    a.button(key="_bench_cancel").click().run()
    shown = _texts(a.info)  # the run may have stopped before this script run ended
    assert reg.join(owner_a, 10)
    a.run()
    shown += _texts(a.info)
    assert "cancelled during mha_decode" in shown and "memory was freed" in shown
    assert not os.path.exists(history.default_path())  # nothing saved for a cancelled run
    assert _wait(lambda: reg.job(owner_b).state == "running")
    release.set()
    assert reg.join(owner_b, 10)
    b.run()
    no_exceptions(b)
    assert [r["source"] for r in history.list_runs()] == ["local"]
    assert b.session_state["_bench_show"] == "run:1" and "run #1" in _texts(b.success)
    assert len(calls) == 2 and not reg.active()


def test_a_held_benchmark_lock_shows_the_waiting_message():
    brun = pytest.importorskip("mla_core.bench.run")
    assert brun._LOCK.acquire(timeout=5)
    try:
        at = run_page(PAGE)
        no_exceptions(at)
        assert "A benchmark is running (started by another session); yours will wait" in _texts(at.info)
    finally:
        brun._LOCK.release()
    at.run()
    assert "A benchmark is running" not in _texts(at.info)


def test_a_failed_run_is_one_error_line(monkeypatch):
    brun = pytest.importorskip("mla_core.bench.run")
    from mla_core.bench.errors import OversizeRequest

    def refuse(config, progress=None, cancel=None, *, wait=False, source="api"):
        raise OversizeRequest("mha_decode B=4096 T=16777216 needs about 9.0 TiB on cpu, more than 80% of its free "
                              "memory")

    monkeypatch.setattr(brun, "run_benchmark", refuse)
    at = run_page(PAGE)
    _set_up(at)
    at.button(key="_bench_run").click().run()
    errors = [e.value for e in at.error]  # the run may have failed before this script run ended
    assert bench_runs.registry().join(at.session_state["_bench_owner"], 10)
    at.run()
    no_exceptions(at)
    errors += [e.value for e in at.error]
    assert len(errors) == 1 and "more than 80%" in errors[0]
    assert not os.path.exists(history.default_path())


# --- ui.bench_runs ------------------------------------------------------------------------------------------------

def test_registry_allows_one_job_per_session_and_bounds_the_queue(fake_run, monkeypatch):
    release, _ = fake_run
    reg = bench_runs.Registry()
    monkeypatch.setattr(bench_runs, "MAX_ACTIVE", 2)
    reg.start("a", None)
    with pytest.raises(MLAError, match="already has a benchmark"):
        reg.start("a", None)
    reg.start("b", None)
    with pytest.raises(MLAError, match="2 benchmarks are already"):
        reg.start("c", None)
    assert reg.take("a") is None  # still going
    release.set()
    assert reg.join("a", 10) and reg.join("b", 10)
    done = reg.take("a")
    assert done.state == "done" and done.run_id is not None and reg.take("a") is None


# --- mla_core.store.report ------------------------------------------------------------------------------------------

def test_model_accuracy_is_the_share_of_the_binding_ceiling(sample):
    rows = report.kernel_rows(sample)
    bw = sample["ceilings"]["read_GBps"]
    mm = sample["ceilings"]["matmul_TFLOPs"]
    for r, raw in zip(rows, sample["results"]):
        assert r["bandwidth_share"] == pytest.approx(raw["achieved_GBps"] / bw)
        if raw["flops"]:
            assert r["compute_share"] == pytest.approx(raw["achieved_TFLOPs"] / mm)
        if raw.get("predicted_s"):
            assert r["model_accuracy"] == pytest.approx(raw["predicted_s"] / raw["median_s"])
            assert r["model_accuracy"] == pytest.approx(max(r["bandwidth_share"], r["compute_share"]), rel=1e-9)
            assert r["predicted_TFLOPs"] == pytest.approx(raw["flops"] / raw["predicted_s"] / 1e12)
        else:
            assert r["model_accuracy"] is None
    assert [r["is_decode"] for r in rows] == [False] * 3 + [True] * 5
    assert rows[3]["shape_text"] == "B=1 T=4,096 h=16 kv=16"
    assert rows[6]["shape_text"] == "B=1 T=4,096 h=16 d_c=512 d_r=64"
    assert rows[2]["shape_text"] == "n=1,024"


def test_ceiling_summary_and_the_measured_roof(sample):
    cs = report.ceiling_summary(sample)
    assert cs["bandwidth_GBps"] == sample["ceilings"]["read_GBps"] and not cs["datasheet"]
    assert cs["ridge_flop_per_byte"] == pytest.approx(cs["matmul_TFLOPs"] * 1e3 / cs["bandwidth_GBps"])
    no_read = copy.deepcopy(sample)
    no_read["ceilings"]["read_GBps"] = None
    assert report.bandwidth_ceiling_GBps(no_read) == sample["ceilings"]["copy_GBps"]
    roof = report.roof(cs["bandwidth_GBps"], cs["matmul_TFLOPs"], [1.0, 100.0])
    gpu = custom_gpu(1.0, bandwidth_TBps=cs["bandwidth_GBps"] / 1000, bf16_TFLOPS=cs["matmul_TFLOPs"])
    assert roof["ridge"] == pytest.approx(gpu.ridge_flop_per_byte)
    assert roof["y_TFLOPs"] == pytest.approx([attainable_flops(x, gpu) / 1e12 for x in roof["x"]])
    assert roof["x"][0] == pytest.approx(0.1) and roof["x"][2] == pytest.approx(max(10 * roof["ridge"], 300.0))
    with pytest.raises(MLAError):
        report.roof(0.0, 1.0, [1.0])


def test_compare_rows_by_kernel_and_by_shape(sample):
    other = copy.deepcopy(sample)
    other["results"][3]["shape"]["batch"] = 8
    rows = report.compare_rows([("a", sample), ("b", other)])
    assert [r["kernel"] for r in rows] == [r["kernel"] for r in sample["results"]]
    assert rows[3]["runs"]["b"]["shape_text"].startswith("B=8")
    by_shape = report.compare_rows([("a", sample), ("b", other)], by_shape=True)
    mha = [r for r in by_shape if r["kernel"] == "mha_decode"]
    assert len(mha) == 2 and mha[0]["runs"]["b"] is None and mha[1]["runs"]["a"] is None
    with pytest.raises(MLAError):
        report.compare_rows([("a", sample), ("a", other)])


def test_memory_check_progress_and_gqa_choices():
    assert memory_check(80, 100) == {"limit_bytes": 80, "fits": True, "share": 0.8, "headroom": 0.8}
    assert not memory_check(81, 100)["fits"]
    assert memory_check(10**15, None)["fits"]
    assert report.progress_fraction(3, 8) == 3 / 8 and report.progress_fraction(9, 8) == 1.0
    assert report.progress_fraction(0, 0) == 0.0
    assert report.gqa_group_choices(16) == [1, 2, 4, 8, 16] and report.gqa_group_choices(1) == [1]
    assert report.default_gqa_groups(128) == 8 and report.default_gqa_groups(12) == 6
    assert report.default_gqa_groups(2) == 2


def test_report_survives_odd_results():
    assert report.kernel_rows({}) == [] and report.kernel_rows({"results": "x"}) == []
    assert report.ceiling_summary({})["bandwidth_GBps"] is None
    assert report.shape_summary({"weird": 3}) == "weird=3" and report.shape_summary(None) == ""
    assert escape_md(report.shape_summary({"batch": 1, "context": 2, "heads": 3})) == "B=1 T=2 h=3"


# --- what a new user tripped on (issue 20, section 3) ---------------------------------------------------------

def _after_button(at, key: str, within: int = 3) -> list:
    """The elements drawn right after the button `key` (containers skipped): where a message
    about that button's click belongs."""
    els = list(at.main)
    i = next(n for n, e in enumerate(els) if getattr(e, "key", None) == key)
    after = [e for e in els[i + 1:] if e.type not in ("flex_container", "block", "vertical", "column")]
    return after[:within]


def test_progress_and_the_finished_message_are_drawn_beside_the_run_button(fake_run):
    release, _ = fake_run
    reg = bench_runs.registry()
    at = run_page(PAGE)
    _set_up(at)
    at.button(key="_bench_run").click().run()
    owner = at.session_state["_bench_owner"]
    assert _wait(lambda: (j := reg.job(owner)) is not None and j.done == 3)
    at.run()
    right_after = _after_button(at, "_bench_run")
    assert right_after[0].type == "progress"
    assert right_after[0].proto.text == "Your benchmark: 3 of 8 kernels done; now mha_decode B=1 T=64"
    release.set()
    assert reg.join(owner, 10)
    at.run()
    no_exceptions(at)
    finished = _after_button(at, "_bench_run")[0]
    assert finished.type == "success" and _texts([finished]).startswith("Benchmark finished in")
    assert "saved in the history as run #1" in _texts([finished])


def test_the_checkout_says_its_own_advice_and_torch_is_found():
    at = run_page(PAGE)
    no_exceptions(at)
    assert "torch is not installed" not in _texts(at.warning)
    assert not at.button(key="_bench_setup_button").proto.disabled
    text = " ".join(str(e.proto) for e in at.main)
    assert "bash benchmarks/gpu_h200.sh" in text and "tests/fixtures/engines" in text


def test_an_installed_copy_without_torch_says_so_before_the_click(monkeypatch):
    from mla_core import install

    monkeypatch.setattr(install, "_checkout_root", lambda: None)  # as in site-packages
    # the copy is read once a process: a fresh cache for this one (the real one is put back after)
    monkeypatch.setattr(install, "_this_copy", functools.lru_cache(maxsize=1)(install._this_copy.__wrapped__))
    monkeypatch.setattr(install, "torch_installed", lambda: False)
    at = run_page(PAGE)
    no_exceptions(at)
    warning = _texts(at.warning)
    assert ("torch is not installed in this copy, so this machine cannot be measured from here: "
            "`pip install 'mla-explorer[bench]'` adds it") in warning
    assert at.button(key="_bench_setup_button").proto.disabled  # nothing to click into an error
    # The warning sits right above the button it is about.
    els = [e for e in at.main if e.type not in ("flex_container", "block", "vertical", "column")]
    i = next(n for n, e in enumerate(els) if getattr(e, "key", None) == "_bench_setup_button")
    assert els[i - 1].type == "warning" and "torch is not installed" in _texts([els[i - 1]])
    text = " ".join(str(e.proto) for e in at.main)
    for absent in ("requirements.txt", "benchmarks/gpu_h200.sh", "tests/fixtures/engines", "python -m mla_core bench"):
        assert absent not in text, absent
    assert "mla-explorer bench --device cuda --out result.json" in text
    assert "mla-explorer bench --device cpu --quick --out result.json" in text


def test_the_engine_import_is_drawn_while_open_and_keeps_its_settings_closed():
    """Its ten widgets cost the page's reruns nothing while the expander is shut (ui.engine_runs);
    what was set there is still set when it is opened again (persist_state)."""
    from ui import engine_runs

    at = run_page(PAGE)
    no_exceptions(at)
    assert "_eng_tp" not in [w.key for w in at.number_input]
    at.session_state[engine_runs.IMPORT_KEY] = True
    at.run()
    at.number_input(key="_eng_tp").set_value(4).run()
    at.selectbox(key="_eng_kv").set_value("fp8").run()
    at.session_state[engine_runs.IMPORT_KEY] = False
    at.run()
    assert "_eng_tp" not in [w.key for w in at.number_input]
    at.switch_page("pages/kv_cache.py").run()
    at.switch_page(PAGE).run()
    at.session_state[engine_runs.IMPORT_KEY] = True
    at.run()
    no_exceptions(at)
    assert at.number_input(key="_eng_tp").value == 4 and at.selectbox(key="_eng_kv").value == "fp8"
