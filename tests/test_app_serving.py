"""The serving-plan page (AppTest): its figures are the core's `search` for the same input."""
import shlex

import pytest

from ui import params

from apptest_util import chart_specs, metric, metrics, no_exceptions, plain, run_page, shown
from mla_core.presets import load_gpu, load_model
from mla_core.serving import Workload, search
from mla_core.units import format_seconds
from mla_core.views import (NOT_SERVED, command_lines, disagg_view, serving_breakdown, serving_frontier,
                            serving_headline, serving_split_rows, traffic_view)

PAGE = "pages/serving.py"
MORE_LABEL = ("More settings: GPUs a node and the network, weights dtype, prefix cache, memory utilization, "
              "speculative decoding, kernel tables and profile, pipeline stages")
LINK = dict(model="deepseek-v3", gpu="h200", num_gpus="16", gpus_per_node="8", input_len="4096",
            output_len="1024", ttft_ms="2000", tpot_ms="50", usd_per_gpu_hour="3")


def _frontier_chart(at):
    import json

    return next(f for f in (json.loads(c) for c in chart_specs(at))
                if any(t.get("name", "").startswith("best: ") for t in f["data"]))


def _core(**kw):
    return search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 1024), ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0, **kw)


def test_page_shows_the_cores_best_point_and_commands():
    at = run_page(PAGE, **LINK)
    no_exceptions(at)
    assert not at.error, [e.value for e in at.error]
    plan = _core()
    best = plan.best
    e = best.estimate
    assert metric(at, "Best split") == best.split
    # the headline is the estimate; the bound sits beside it (the metric's delta)
    assert metric(at, "TTFT, estimate") == format_seconds(e.ttft_s)
    assert metric(at, "TPOT, estimate") == format_seconds(e.tpot_s)
    assert metric(at, "Tokens/s per user, estimate") == f"{e.tokens_per_s_per_user:,.1f}"
    assert metric(at, "Tokens/s per GPU, estimate") == f"{e.tokens_per_s_per_gpu:,.1f}"
    tpot = next(m for m in metrics(at) if m.label.startswith("TPOT, estimate"))
    assert tpot.delta == f"bound {format_seconds(best.tpot_s)}"
    assert metric(at, "$ per million output tokens") == f"${best.usd_per_million_output_tokens:,.3f}"
    h = serving_headline(plan)
    assert h.source == e.source and h.confidence == e.confidence
    assert plain(h.sentence) in plain(shown(at.caption))
    import json

    charts_ = [json.loads(c) for c in chart_specs(at)]
    fig = next(f for f in charts_ if any(t.get("name", "").startswith("Pareto front") for t in f["data"]))
    front = next(t for t in fig["data"] if t.get("name", "").startswith("Pareto front"))
    assert front["y"] == [p.rate_per_gpu for p in plan.pareto]  # the estimate's frontier
    faint = next(t for t in fig["data"] if t.get("name") == "bound's Pareto front")
    assert faint["y"] == [p.tokens_per_s_per_gpu for p in plan.bound_pareto] and faint["opacity"] < 1
    star = next(t for t in fig["data"] if t.get("name", "").startswith("best: "))
    assert star["x"] == [e.tokens_per_s_per_user] and star["y"] == [e.tokens_per_s_per_gpu]
    # one line per split (12 here, more than the 8 colours): no two look alike (colour, marker symbol)
    splits = [t for t in fig["data"] if t.get("mode") == "lines+markers"]
    assert len(splits) == len(serving_frontier(plan).lines) > 8
    assert len({(t["line"]["color"], t["marker"]["symbol"]) for t in splits}) == len(splits)
    # the breakdown: one bar per phase, each op class's share of the core's breakdown
    bars = next(f for f in charts_ if f["data"][0]["type"] == "bar")
    b = serving_breakdown(plan)
    gemm = next(t for t in bars["data"] if t["name"] == "gemm")
    assert gemm["x"] == [100 * next(x.share for x in ph.parts if x.name == "gemm") for ph in b.phases]
    assert gemm["customdata"][0] == format_seconds(plan.estimate["decode_step"]["by_class_s"]["gemm"])
    codes = [c.value for c in at.code]
    order = [plan.launch["vllm_command"], plan.launch["sglang_command"], plan.launch["trtllm_command"]]
    assert codes == [command_lines(c) for c in order]  # the chosen engine's (vLLM) first
    # one flag a line, and what pastes into a shell is the core's command word for word
    assert [shlex.split(c.replace("\\\n", "")) for c in codes] == [shlex.split(c) for c in order]
    assert all(line.lstrip().startswith(("--", "vllm", "python", "trtllm")) for c in codes for line in c.splitlines())
    table = at.dataframe[0].value
    assert list(table["split"]) == [s.split for s in plan.splits]
    # the link carries what differs from the defaults: input_len 4096 is there, or is the default
    assert at.query_params.get("input_len", str(params.PARAMS["input_len"].default)) in ("4096", ["4096"])


def test_workload_inputs_change_the_plan():
    at = run_page(PAGE, **LINK)
    assert at.expander[1].label == MORE_LABEL and at.session_state["_serving_more"] is False  # shut at first
    with pytest.raises(KeyError):
        at.number_input(key="spec_tokens")  # not drawn while its section is shut
    at.session_state["_serving_more"] = True  # the user opens "More settings"
    at.number_input(key="output_len").set_value(128).run()
    at.number_input(key="spec_tokens").set_value(1).run()
    at.number_input(key="acceptance").set_value(0.8).run()
    no_exceptions(at)
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 128, spec_tokens=1, acceptance=0.8), ttft_ms=2000, tpot_ms=50,
                  usd_per_gpu_hour=3.0)
    assert metric(at, "TPOT, estimate") == format_seconds(plan.best.estimate.tpot_s)
    assert "--speculative-config" in " ".join(c.value for c in at.code)
    at.session_state["_serving_more"] = False  # shut again: its values still hold, in the plan and the link
    at.run()
    no_exceptions(at)
    assert metric(at, "TPOT, estimate") == format_seconds(plan.best.estimate.tpot_s)
    assert at.query_params.get("spec_tokens") in ("1", ["1"])


def test_a_link_that_sets_a_more_setting_opens_its_section():
    at = run_page(PAGE, **dict(LINK, pp="2"))
    no_exceptions(at)
    assert at.session_state["_serving_more"] is True and at.number_input(key="pp").value == 2


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
    assert metric(at, "TPOT, estimate") == format_seconds(measured.best.estimate.tpot_s)
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
    assert unserved and all(table.set_index("split").loc[u, "tokens/s/GPU"] == NOT_SERVED for u in unserved)
    # On 8 H200, DeepSeek-V3's DP-attention with EP8 reaches exactly the points of DP-attention with the
    # MLP split by TP8 (the core's points, compared by views.same_as): its curve names the one it hides under.
    eight = {ln.label: ln for ln in serving_frontier(plan).bound_lines}
    assert eight["DP-attention 8 + EP8"].x == eight["DP-attention 8 + MLP TP8"].x  # the bounds coincide
    fig = _frontier_chart(at)
    names = [t.get("name", "") for t in fig["data"]]
    same = [ln for ln in serving_frontier(plan).lines if ln.same_as]
    assert all(f"{ln.label} ({ln.same_as})" in names for ln in same)
    assert all(t["line"]["dash"] == "dot" for t in fig["data"] if t.get("name", "").endswith(")") and "same as" in t["name"])
    # PP and the MoE split are columns of the table, as the core's splits hold them
    for row, sp in zip(table.to_dict("records"), plan.splits):
        assert (row["pp"], row["moe_tp"], row["ep"]) == (sp.pp, sp.moe_tp, sp.ep)


def test_engine_and_kernel_tables_choose_the_estimate_and_go_into_the_link():
    at = run_page(PAGE, **dict(LINK, engine="sglang", kernel_tables="uncalibrated"))
    no_exceptions(at)
    plan = _core(engine="sglang", kernel_tables="uncalibrated")
    e = plan.best.estimate
    assert plan.kernel_tables == ("uncalibrated",) and e.source.startswith("uncalibrated")
    assert metric(at, "TPOT, estimate") == format_seconds(e.tpot_s)
    assert metric(at, "TTFT, estimate") == format_seconds(e.ttft_s)
    assert "Source: uncalibrated" in plain(shown(at.caption))
    assert plain(serving_headline(plan).sentence) in plain(shown(at.caption))
    # SGLang's command comes first; the choices are the core's tuple
    from mla_core.serving.engines import ENGINES

    assert tuple(at.selectbox(key="engine").options) == tuple(
        __import__("mla_core.serving.engines", fromlist=["engine_rules"]).engine_rules(x).label for x in ENGINES)
    assert at.code[0].value == command_lines(plan.launch["sglang_command"])
    at.selectbox(key="engine").set_value("trtllm").run()
    no_exceptions(at)
    assert at.query_params["engine"] in ("trtllm", ["trtllm"])
    assert at.query_params["kernel_tables"] in ("uncalibrated", ["uncalibrated"])
    assert metric(at, "TPOT, estimate") == format_seconds(
        _core(engine="trtllm", kernel_tables="uncalibrated").best.estimate.tpot_s)


def test_pp_pins_the_pipeline_stages_and_the_table_shows_them():
    at = run_page(PAGE, **dict(LINK, pp="2"))
    no_exceptions(at)
    plan = _core(pp=2)
    table = at.dataframe[0].value
    assert table.to_dict("records") == serving_split_rows(plan)
    assert set(table["pp"]) == {2} and [s.tp for s in plan.splits] == [8]
    assert metric(at, "Best split") == plan.best.split
    assert metric(at, "TPOT, estimate") == format_seconds(plan.best.estimate.tpot_s)


def test_a_profile_from_the_store_is_listed_and_a_missing_one_falls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("MLA_EXPLORER_HISTORY", str(tmp_path / "history.sqlite3"))
    at = run_page(PAGE, **LINK)
    at.session_state["_serving_more"] = True  # the section that holds it, opened
    at.run()
    assert at.selectbox(key="profile").options == ["none"]  # an empty store: none
    from test_store import META, make_profile
    from mla_core.store import profiles

    run_id = profiles.save_profile(make_profile(), label="h200 tp8", meta=META)
    at = run_page(PAGE, **dict(LINK, profile=str(run_id), num_gpus="8"))
    no_exceptions(at)
    assert at.selectbox(key="profile").value == run_id
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=8, gpus_per_node=8,
                  workload=Workload(4096, 1024), ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0, profile=run_id)
    assert plan.kernel_tables[0].startswith("own profile")
    assert metric(at, "TPOT, estimate") == format_seconds(plan.best.estimate.tpot_s)
    at = run_page(PAGE, **dict(LINK, profile="999"))
    no_exceptions(at)
    assert "999 is not in the store" in shown(at.warning)
    assert metric(at, "TPOT, estimate") == format_seconds(_core().best.estimate.tpot_s)


def _traffic_core(**kw):
    plan = _core()
    return traffic_view(load_model("deepseek-v3"), load_gpu("h200"), plan, weights_dtype=None, kv_dtype="auto",
                        gpu_memory_utilization=0.9, internode_gbps=400.0, link_bandwidth_Bps=None, **kw)


def test_the_traffic_section_shows_the_cores_run_and_sweep():
    import json

    at = run_page(PAGE, **dict(LINK, traffic="1", rate="2", num_prompts="100"))
    no_exceptions(at)
    t = _traffic_core(mode="rate", rate=2.0, num_prompts=100)
    assert t.available
    assert metric(at, "p99 TTFT") == format_seconds(t.result.ttft_s.p99)
    assert metric(at, "p99 TPOT") == format_seconds(t.result.tpot_s.p99)
    assert metric(at, "Goodput") == f"{t.goodput_rps:,.2f}"
    assert metric(at, "Max rate at SLO") == f"{t.max_rate_at_slo:,.3g}"
    figs = [json.loads(c) for c in chart_specs(at)]
    ttft = next(f for f in figs if f["layout"]["title"]["text"].startswith("TTFT against"))
    p99 = next(tr for tr in ttft["data"] if tr["name"] == "p99")
    assert p99["x"] == list(t.rates) and p99["y"] == [y * 1e3 for y in t.ttft_p99]
    assert any(tr["name"] == "objective 2000 ms" for tr in ttft["data"])
    # a closed loop instead: the mode and its concurrency go into the link
    at.radio(key="traffic_mode").set_value("concurrency").run()
    at.number_input(key="max_concurrency").set_value(16).run()
    no_exceptions(at)
    assert at.query_params["traffic_mode"] in ("concurrency", ["concurrency"])
    assert at.query_params["max_concurrency"] in ("16", ["16"])
    t = _traffic_core(mode="concurrency", max_concurrency=16, num_prompts=100)
    assert metric(at, "p99 TPOT") == format_seconds(t.result.tpot_s.p99)


def test_the_traffic_section_is_off_until_asked_for():
    at = run_page(PAGE, **LINK)
    assert at.toggle(key="traffic").value is False
    assert metrics(at) and not [m for m in metrics(at) if m.label.startswith("p99 TTFT")]


def test_prefill_decode_pools_show_both_splits_transfer_and_commands():
    at = run_page(PAGE, **dict(LINK, disagg="1", prefill_gpus="8", decode_gpus="8"))
    no_exceptions(at)
    plan = _core()
    d = disagg_view(load_model("deepseek-v3"), load_gpu("h200"), plan, prefill_gpus=8, decode_gpus=8,
                    weights_dtype=None, kv_dtype="auto", gpu_memory_utilization=0.9, internode_gbps=400.0,
                    link_bandwidth_Bps=None)
    assert d.available
    r = d.result
    assert metric(at, "KV transfer") == format_seconds(r.kv_transfer_s)
    assert metric(at, "TTFT with the KV transfer") == format_seconds(r.ttft_s)
    assert metric(at, "TPOT") == format_seconds(plan.best.estimate.tpot_s)  # the headline's comes first
    pools = at.dataframe[1].value
    assert list(pools["split"]) == [r.prefill.split, r.decode.split]
    codes = [c.value for c in at.code]
    assert command_lines(r.commands["prefill"]["vllm_command"]) in codes
    assert command_lines(r.commands["decode"]["vllm_command"]) in codes
    assert at.query_params["disagg"] in ("1", ["1"])


def test_presentation_mode_keeps_the_headline_and_the_best_few_splits():
    import json

    at = run_page(PAGE, **dict(LINK, present="1"))
    no_exceptions(at)
    plan = _core()
    assert metric(at, "TPOT, est.") == format_seconds(plan.best.estimate.tpot_s)
    h = serving_headline(plan)
    assert h.kind in _frontier_chart(at)["layout"]["title"]["text"] and h.confidence in _frontier_chart(at)["layout"]["title"]["text"]
    fig = _frontier_chart(at)
    fr = serving_frontier(plan, max_lines=3)
    drawn = [t["name"] for t in fig["data"] if t.get("mode") == "lines+markers"]
    assert drawn == [ln.label + (f" ({ln.same_as})" if ln.same_as else "") for ln in fr.lines] and len(drawn) <= 3
    assert fig["layout"]["legend"]["orientation"] == "v"  # inside the plot: no scrollbar on a slide
    assert not at.dataframe  # no table on a slide


def test_a_rerun_with_the_same_inputs_keeps_the_plan_and_the_traffic_run(monkeypatch):
    """The sidebar's context (which the workload overrides here) reruns the page without a new
    search or traffic run (ui.memo); a changed input searches again and the page shows that plan."""
    from ui import memo

    calls = {"search": 0, "traffic": 0}

    def counted(name, fn):
        def wrapped(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(memo, "search", counted("search", memo.search))
    monkeypatch.setattr(memo, "traffic_view", counted("traffic", memo.traffic_view))
    memo.clear()
    at = run_page(PAGE, **dict(LINK, traffic="1", rate="2", num_prompts="100"))
    no_exceptions(at)
    assert calls == {"search": 1, "traffic": 1}
    shown_before = metric(at, "p99 TTFT")
    for context in (65536, 32768):  # the sidebar's number box
        at.number_input(key="context").set_value(context).run()
        no_exceptions(at)
        assert at.session_state["context"] == context
    assert calls == {"search": 1, "traffic": 1}
    assert metric(at, "p99 TTFT") == shown_before == format_seconds(_traffic_core(mode="rate", rate=2.0,
                                                                                   num_prompts=100).result.ttft_s.p99)
    at.number_input(key="num_gpus").set_value(8).run()
    no_exceptions(at)
    assert calls == {"search": 2, "traffic": 2}
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=8, gpus_per_node=8,
                  workload=Workload(4096, 1024), ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0)
    assert metric(at, "Best split") == plan.best.split
