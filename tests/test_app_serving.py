"""The serving-plan page (AppTest): its figures are the core's `search` for the same input."""
import shlex

import pytest

from ui import params

from apptest_util import metric, no_exceptions, plain, run_page, shown
from mla_core.presets import load_gpu, load_model
from mla_core.serving import Workload, search
from mla_core.units import format_seconds
from mla_core.views import NOT_SERVED, command_lines, serving_frontier, serving_split_rows

PAGE = "pages/serving.py"
LINK = dict(model="deepseek-v3", gpu="h200", num_gpus="16", gpus_per_node="8", input_len="4096",
            output_len="1024", ttft_ms="2000", tpot_ms="50", usd_per_gpu_hour="3")


def _core(**kw):
    return search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 1024), ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0, **kw)


def test_page_shows_the_cores_best_point_and_commands():
    at = run_page(PAGE, **LINK)
    no_exceptions(at)
    assert not at.error, [e.value for e in at.error]
    plan = _core()
    best = plan.best
    assert metric(at, "Best split") == best.split
    assert metric(at, "TTFT, lower bound") == format_seconds(best.ttft_s)
    assert metric(at, "TPOT, lower bound") == format_seconds(best.tpot_s)
    assert metric(at, "Tokens/s per GPU") == f"{best.tokens_per_s_per_gpu:,.1f}"
    assert metric(at, "$ per million output tokens") == f"${best.usd_per_million_output_tokens:,.3f}"
    import json

    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    front = next(t for t in fig["data"] if t.get("name", "").startswith("Pareto front"))
    assert front["y"] == [p.tokens_per_s_per_gpu for p in plan.pareto]
    star = next(t for t in fig["data"] if t.get("name", "").startswith("best: "))
    assert star["x"] == [best.tokens_per_s_per_user] and star["y"] == [best.tokens_per_s_per_gpu]
    codes = [c.value for c in at.code]
    assert command_lines(plan.vllm_command) in codes and command_lines(plan.sglang_command) in codes
    # one flag a line, and what pastes into a shell is the core's command word for word
    assert [shlex.split(c.replace("\\\n", "")) for c in codes] == [shlex.split(plan.vllm_command),
                                                                  shlex.split(plan.sglang_command)]
    assert all(line.lstrip().startswith(("--", "vllm", "python")) for c in codes for line in c.splitlines())
    table = at.dataframe[0].value
    assert list(table["split"]) == [s.split for s in plan.splits]
    # the link carries what differs from the defaults: input_len 4096 is there, or is the default
    assert at.query_params.get("input_len", str(params.PARAMS["input_len"].default)) in ("4096", ["4096"])


def test_workload_inputs_change_the_plan():
    at = run_page(PAGE, **LINK)
    at.number_input(key="output_len").set_value(128).run()
    at.number_input(key="spec_tokens").set_value(1).run()
    at.number_input(key="acceptance").set_value(0.8).run()
    no_exceptions(at)
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 128, spec_tokens=1, acceptance=0.8), ttft_ms=2000, tpot_ms=50,
                  usd_per_gpu_hour=3.0)
    assert metric(at, "TPOT, lower bound") == format_seconds(plan.best.tpot_s)
    assert "--speculative-config" in " ".join(c.value for c in at.code)


def test_a_model_that_cannot_be_served_says_so():
    at = run_page(PAGE, **dict(LINK, num_gpus="1", gpu="rtx-4090"))
    no_exceptions(at)
    assert "No split serves" in shown(at.error)


def test_bad_link_values_fall_back_with_a_warning():
    at = run_page(PAGE, **dict(LINK, input_len="-5", tpot_ms="abc"))
    no_exceptions(at)
    assert "input_len" in shown(at.warning) and "tpot_ms" in shown(at.warning)
    assert metric(at, "Best split")


def test_a_measured_link_from_the_benchmark_page_replaces_the_datasheet():
    # ui.collectives keeps the picked collectives run's bus bandwidth in the session; the page uses it.
    from apptest_util import app
    from ui.collectives import LINK_KEY

    at = app(model="llama-3.1-70b", gpu="h100-sxm", num_gpus="8", gpus_per_node="8", input_len="4096",
             output_len="1024", ttft_ms="0", tpot_ms="0").run()
    at.switch_page(PAGE)
    at.session_state[LINK_KEY] = {"link_bandwidth_Bps": 0.5e9, "source": "measured all_reduce busbw (test)"}
    at.run()
    no_exceptions(at)
    assert any(t.label.startswith("Use the measured link: 0.50 GB/s") for t in at.toggle)
    kw = dict(num_gpus=8, gpus_per_node=8, workload=Workload(4096, 1024))
    measured = search(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), link_bandwidth_Bps=0.5e9, **kw)
    datasheet = search(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), **kw)
    assert metric(at, "TPOT, lower bound") == format_seconds(measured.best.tpot_s)
    assert measured.best.split != datasheet.best.split or measured.best.tpot_s > datasheet.best.tpot_s


def test_the_splits_table_is_the_cores_and_coinciding_curves_say_so():
    import json

    at = run_page(PAGE, **dict(LINK, num_gpus="8"))
    no_exceptions(at)
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=8, gpus_per_node=8, workload=Workload(4096, 1024),
                  ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0)
    table = at.dataframe[0].value
    assert table.to_dict("records") == serving_split_rows(plan)
    assert not table.isna().any().any()  # no raw None: a split that serves nothing shows NOT_SERVED
    unserved = [s.split for s in plan.splits if s.best is None]
    assert unserved and all(table.set_index("split").loc[u, "tokens/s per GPU"] == NOT_SERVED for u in unserved)
    # On 8 H200, DeepSeek-V3's DP-attention with EP8 reaches exactly the points of DP-attention with the
    # MLP split by TP8 (the core's points, compared by views.same_as): its curve names the one it hides under.
    eight = {ln.label: ln for ln in serving_frontier(plan).lines}
    assert eight["DP-attention 8 + EP8"].x == eight["DP-attention 8 + MLP TP8"].x
    names = [t.get("name", "") for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert "DP-attention 8 + EP8 (same as DP-attention 8 + MLP TP8)" in names
