"""`bench --profile` (the model's own op shapes as a kernel table), the kernels it times, and the
reduced model it is checked against (issue 18). Real torch runs on the CPU, at tiny widths built
from real config fields; no timing is asserted (benchmarks/reduced_model.py keeps the figures)."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from mla_core.bench import kernels as K  # noqa: E402
from mla_core.bench import profile as P  # noqa: E402
from mla_core.bench import profile_plan as PP  # noqa: E402
from mla_core.bench import reduced as R  # noqa: E402
from mla_core.bench import timing as btiming  # noqa: E402
from mla_core.bench.cli import main as bench_main  # noqa: E402
from mla_core.bench.errors import InvalidResult  # noqa: E402
from mla_core.config import parse_config  # noqa: E402
from mla_core.presets import load_model  # noqa: E402
from mla_core.spec import RECURRENT_KINDS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Kimi-Linear's config.json (MLA + KDA + MoE: every family but the collectives), shrunk to widths
# a CPU measures in seconds; the field names are the real file's.
TINY_KIMI = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "dtype": "bfloat16",
    "first_k_dense_replace": 1, "hidden_size": 256, "intermediate_size": 512, "kv_lora_rank": 64, "head_dim": 32,
    "linear_attn_config": {"full_attn_layers": [4], "head_dim": 32, "kda_layers": [1, 2, 3], "num_heads": 4,
                           "short_conv_kernel_size": 4},
    "moe_intermediate_size": 128, "num_attention_heads": 4, "num_experts": 8, "num_experts_per_token": 2,
    "num_hidden_layers": 4, "num_key_value_heads": 4, "num_shared_experts": 1, "q_lora_rank": None,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "vocab_size": 1000,
    "tie_word_embeddings": False, "moe_layer_freq": 1,
}
# Qwen3-Next's config.json (GQA + Gated DeltaNet + MoE with a shared expert), shrunk.
TINY_QWEN_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "full_attention_interval": 2,
    "head_dim": 32, "hidden_size": 128, "intermediate_size": 256, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_value_head_dim": 16,
    "moe_intermediate_size": 64, "norm_topk_prob": True, "num_attention_heads": 4, "num_experts": 8,
    "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 2, "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 500, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
# Gemma-2's (global and sliding layers), shrunk.
TINY_GEMMA2 = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
               "intermediate_size": 256, "sliding_window": 128, "vocab_size": 500, "torch_dtype": "bfloat16"}
FAST = {"warmup": 1, "reps": 3, "min_reps": 1, "budget_s": 0.005}
SMALL = {"m": (1, 8, 64), "batches": (1, 2), "contexts": (64, 256), "prefill_tokens": (32,), "prefixes": (0, 16),
         "recurrent_tokens": (1, 8)}


@pytest.fixture(autouse=True)
def _own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("MLA_EXPLORER_HISTORY", str(tmp_path / "history.sqlite3"))


def one_line(text: str) -> bool:
    return "\n" not in text.strip() and "Traceback" not in text


@pytest.fixture(scope="module")
def kimi_profile():
    spec = parse_config(TINY_KIMI)
    return spec, P.run_profile(spec, device="cpu", quick=True, threads=1, timing=FAST)


# ---------------------------------------------------------------------------------------------
# The table.

def test_profile_validates_and_has_every_local_op_family(kimi_profile):
    spec, run = kimi_profile
    t = run.table
    assert set(t) == {"kind", "device", "model", "tp", "engine", "ops"}
    assert (t["kind"], t["model"], t["tp"], t["engine"]) == ("profile", spec.name, 1, None)
    assert {"name", "kind", "torch_version"} <= set(t["device"]) and t["device"]["kind"] == "cpu"
    assert list(t["ops"]) == list(PP.FAMILIES)
    assert PP.validate_profile(json.loads(json.dumps(t))) is not None
    for family in ("gemm", "attention_decode", "attention_prefill", "moe", "elementwise", "recurrent"):
        assert t["ops"][family], family
        assert all(r["latency_s"] > 0 and math.isfinite(r["latency_s"]) for r in t["ops"][family])
    assert t["ops"]["collective"] == []  # only under torchrun (test below)
    assert {r["kind"] for r in t["ops"]["attention_decode"]} == {"mla_absorbed"}
    assert {r["kind"] for r in t["ops"]["attention_prefill"]} == {"mla_mha"}
    assert {r["kind"] for r in t["ops"]["recurrent"]} == {"kda"}
    assert run.meta["points"] == sum(len(v) for v in t["ops"].values()) and run.meta["statistic"] == "median"


def test_profile_rows_are_the_models_own_shapes(kimi_profile):
    spec, run = kimi_profile
    ops = run.table["ops"]
    # From TINY_KIMI: n_h 4, d_nope 32, d_r 16, d_c 64, d_v 32, hidden 256, MLP 512, 8 experts of 128,
    # top-2, 1 shared expert; KDA 4 heads of 32 (conv kernel 4).
    pairs = {(r["n"], r["k"]) for r in ops["gemm"]}
    assert {(4 * 48, 256), (64 + 16, 256), (4 * 64, 64), (256, 4 * 32), (2 * 512, 256), (256, 512), (8, 256),
            (2 * 128, 256), (256, 128), (1000, 256)} <= pairs
    assert pairs == {(g.n, g.k) for g in PP.model_gemms(spec)}
    assert {r["m"] for r in ops["gemm"]} == set(PP.GRIDS[("cpu", True)]["m"])
    d = ops["attention_decode"][0]
    assert (d["num_heads"], d["num_kv_heads"], d["k_dim"], d["v_dim"]) == (4, 1, 64 + 16, 64)
    p = ops["attention_prefill"][0]
    assert (p["num_heads"], p["num_kv_heads"], p["k_dim"], p["v_dim"], p["window"]) == (4, 4, 48, 32, None)
    m = ops["moe"][0]
    assert (m["hidden"], m["inter"], m["topk"], m["num_experts"], m["experts_local"]) == (256, 128, 2, 8, 8)
    # state per sequence: (K - 1) x conv (3 x 4 x 32) + 4 heads x 32 x 32 (mla_core.spec RecurrentSpec)
    assert {r["state_elements"] for r in ops["recurrent"]} == {3 * 3 * 4 * 32 + 4 * 32 * 32}
    assert {r["tokens"] for r in ops["recurrent"]} == {1, 32}
    sizes = [r["bytes"] for r in ops["elementwise"]]
    assert sizes == sorted(sizes) and sizes[0] == 1024 and all(s & (s - 1) == 0 for s in sizes)


def test_schema_kinds_are_the_cores_tuples():
    defs = PP.profile_schema()["$defs"]  # the store's schema, the one a profile has
    assert defs["recurrent"]["properties"]["kind"]["enum"] == list(RECURRENT_KINDS)
    assert defs["attention_decode"]["properties"]["kind"]["enum"] == list(PP.DECODE_KINDS)
    assert defs["attention_prefill"]["properties"]["kind"]["enum"] == list(PP.PREFILL_KINDS)
    assert defs["collective"]["properties"]["op"]["enum"] == list(PP.COLLECTIVE_OPS)


@pytest.mark.parametrize("mutate, expect", [
    (lambda t: t.pop("engine"), "engine"),
    (lambda t: t["ops"]["gemm"][0].__setitem__("latency_s", 0.0), "latency_s"),
    (lambda t: t["ops"]["gemm"][0].__setitem__("flops", 1), "flops"),
    (lambda t: t["ops"]["attention_decode"][0].__setitem__("kind", "flash"), "kind"),
    (lambda t: t.__setitem__("ops", {}), "ops"),  # a profile holds at least one op class
    (lambda t: t.__setitem__("tp", 0), "tp"),
])
def test_validate_profile_refuses_bad_tables(kimi_profile, mutate, expect):
    table = json.loads(json.dumps(kimi_profile[1].table))
    mutate(table)
    with pytest.raises(InvalidResult) as e:
        PP.validate_profile(table)
    assert one_line(str(e.value)) and expect in str(e.value)


def test_gemm_shapes_split_over_tp_as_vllm_does():
    # DeepSeek-V3 config.json: hidden 7168, 128 heads, q_lora_rank 1536, d_c 512, d_r 64, d_nope 128,
    # d_v 128, intermediate 18432, moe_intermediate 2048, 256 experts, 1 shared, vocab 129280.
    g = {(x.n, x.k): x.names for x in PP.model_gemms(load_model("deepseek-v3"), tp=8)}
    assert g[(1536, 7168)] == ("q_a_proj",)  # replicated
    assert g[(16 * 192, 1536)] == ("q_b_proj",)
    assert g[(576, 7168)] == ("kv_a_proj_with_mqa",)  # replicated
    assert g[(16 * 256, 512)] == ("kv_b_proj",)
    assert "o_proj" in g[(7168, 16 * 128)]
    assert g[(2 * 18432 // 8, 7168)] == ("gate_up_proj",)
    assert g[(256, 7168)] == ("gate",)
    assert g[(2 * 2048 // 8, 7168)] == ("shared_experts.gate_up_proj",)
    assert g[(129280 // 8, 7168)] == ("lm_head",)
    # Llama-3.1-70B: 64 heads, 8 KV heads of 128 -> TP8: 8 + 2 x 1 heads in the fused qkv_proj.
    g = {(x.n, x.k): x.names for x in PP.model_gemms(load_model("llama-3.1-70b"), tp=8)}
    assert g[((8 + 2) * 128, 8192)] == ("qkv_proj",)
    # TP16 replicates the 8 KV heads (one a GPU).
    assert ((4 + 2) * 128, 8192) in {(x.n, x.k) for x in PP.model_gemms(load_model("llama-3.1-70b"), tp=16)}
    # MoE rows at TP8: experts TP-sharded (inter / 8, all local) and as EP8 (inter whole, 32 local).
    assert PP.moe_layouts(load_model("deepseek-v3"), 8) == [(256, 256), (2048, 32)]


def test_sliding_layers_get_their_own_rows_over_the_window():
    spec = parse_config(TINY_GEMMA2)
    run = P.run_profile(spec, device="cpu", quick=True, threads=1, timing=FAST, grids=SMALL,
                        families=("attention_decode", "attention_prefill"))
    dec, pre = run.table["ops"]["attention_decode"], run.table["ops"]["attention_prefill"]
    assert {r["kind"] for r in dec} == {"gqa", "sliding"} == {r["kind"] for r in pre}
    assert max(r["context"] for r in dec if r["kind"] == "sliding") == 128  # min(T, window)
    assert {r["window"] for r in pre if r["kind"] == "sliding"} == {128}
    assert {(r["num_heads"], r["num_kv_heads"], r["k_dim"]) for r in dec} == {(4, 2, 32)}


def test_a_cpu_profile_says_what_it_cut_to_the_time_budget():
    # DeepSeek-V3's lm_head (129,280 x 7,168) at m = 8,192 is 15 TFLOP: far over a CPU's budget.
    plan = PP.plan_profile(load_model("deepseek-v3"), device_kind="cpu", dtype="fp32", quick=True)
    kept = {p.key["m"] for p in plan.points if p.family == "gemm" and p.key["n"] == 129280}
    assert kept and max(kept) < 1024
    assert any(s.startswith("gemm:") and "CPU time budget" in s for s in plan.scaled)
    assert all(p.flops <= PP.CPU_POINT_FLOPS[True] for p in plan.points)
    gpu = PP.plan_profile(load_model("deepseek-v3"), device_kind="cuda", dtype="bf16", quick=False)
    assert {p.key["m"] for p in gpu.points if p.family == "gemm"} == {2 ** i for i in range(14)}
    assert not gpu.scaled


# ---------------------------------------------------------------------------------------------
# Timing: every measured call between the synchronising clock's start and stop.

def test_every_profiled_call_is_timed_between_clock_start_and_stop(monkeypatch):
    log: list[str] = []
    class SpyClock(btiming.SyncClock):
        def start(self):
            log.append("S")
            super().start()

        def stop(self):
            t = super().stop()
            log.append("E")
            return t

    kinds = []
    monkeypatch.setattr(btiming, "make_clock", lambda kind: (kinds.append(kind), SpyClock(kind))[1])
    for name, mark in (("rms_norm", "N"), ("mla_absorbed_decode", "K"), ("sdpa_prefill", "K"), ("moe_routed", "K"),
                       ("recurrent_mix", "K")):
        real = getattr(K, name)
        monkeypatch.setattr(K, name, lambda *a, _real=real, _m=mark, **k: (log.append(_m), _real(*a, **k))[1])
    real_linear = F.linear
    monkeypatch.setattr(P.F, "linear", lambda *a, **k: (log.append("K"), real_linear(*a, **k))[1])
    real_flush = P.make_flush
    monkeypatch.setattr(P, "make_flush", lambda dev, _f=real_flush: (lambda _g=_f(dev): (log.append("F"), _g())))
    spec = parse_config(TINY_KIMI)
    run = P.run_profile(spec, device="cpu", threads=1, timing=FAST, grids=SMALL)
    assert kinds == ["cpu"]
    # What the flush itself runs (it warms torch's dispatch path) happens before the clock starts.
    text = re.sub(r"F[^S]*", "F", "".join(log))
    calls = re.findall(r"F?S[^E]*E", text)
    # Outside the timed calls: only the one untimed call per SDPA point that picks its backend.
    assert re.sub(r"F?S[^E]*E", "", text) == "K" * len(run.table["ops"]["attention_prefill"])
    assert all(re.fullmatch(r"F?S(K|N)E", c) for c in calls), [c for c in calls if not re.fullmatch(r"F?S(K|N)E", c)][:5]
    # Elementwise points (the RMSNorm: their input is the previous op's output) run hot; every other
    # op after a flush, outside the timed region.
    assert all(c.startswith("S") for c in calls if "N" in c)
    assert all(c.startswith("F") for c in calls if "K" in c)
    n_rows = sum(len(v) for v in run.table["ops"].values())
    assert len(calls) >= n_rows * (FAST["min_reps"] + 1)


def test_cuda_profile_clock_synchronises_around_events(monkeypatch):
    """The profile reads the same SyncClock as the kernel benchmark: on CUDA, synchronise, record
    start, work, record end, synchronise, elapsed_time (tests/test_bench.py checks the clock)."""
    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self, stream=None):
            log.append("R")

        def elapsed_time(self, end):
            log.append("E")
            return 1.0

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("S"))
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    clock = btiming.make_clock("cuda")
    t = btiming.measure(lambda: log.append("K"), clock, warmup=1, reps=2, min_reps=1, budget_s=1.0)
    assert "".join(log) == "SRKRSE" * 3 and t.median_s == pytest.approx(1e-3)


# ---------------------------------------------------------------------------------------------
# The kernels against their definitions (float64).

def test_moe_routed_equals_the_per_token_definition():
    g = torch.Generator().manual_seed(0)
    t, h, i, e, k = 6, 32, 16, 8, 3
    x, logits = torch.randn(t, h, generator=g, dtype=torch.float64), torch.randn(t, e, generator=g, dtype=torch.float64)
    wgu, wd = torch.randn(e, 2 * i, h, generator=g, dtype=torch.float64), torch.randn(e, h, i, generator=g, dtype=torch.float64)
    w, ids = logits.softmax(-1).topk(k, -1)
    w = w / w.sum(-1, keepdim=True)
    for local in (8, 4):  # all experts here, and expert parallelism: experts 0..3 on this GPU
        ref = torch.zeros_like(x)
        for a in range(t):
            for j in range(k):
                ex = int(ids[a, j])
                if ex < local:
                    hh = wgu[ex] @ x[a]
                    ref[a] += w[a, j] * (wd[ex] @ (F.silu(hh[:i]) * hh[i:]))
        got = K.moe_routed(x, logits, wgu[:local], wd[:local], k)
        assert K.max_rel_err(got, ref) < 1e-6  # routing weights in fp32, as engines do


def _ref_attention(q, k, v, window=None):
    t, s = q.shape[2], k.shape[2]
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    qp, kp = torch.arange(s - t, s)[:, None], torch.arange(s)[None]
    allowed = kp <= qp
    if window:
        allowed &= kp > qp - window
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("prefix, window, kv_heads", [(0, None, 4), (10, None, 2), (10, 5, 2), (0, 3, 1)])
def test_sdpa_prefill_is_causal_bottom_right_with_window_and_groups(prefix, window, kv_heads):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 7, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, kv_heads, prefix + 7, 16, generator=g, dtype=torch.float64)
    v = torch.randn(1, kv_heads, prefix + 7, 8, generator=g, dtype=torch.float64)
    assert K.max_rel_err(K.sdpa_prefill(q, k, v, window), _ref_attention(q, k, v, window)) < 1e-10


def _ref_scan(kind, dims, mix, gates, w):
    """The recurrences by their papers' equations, per head and token, float64 (no conv here)."""
    h, p, g, n = dims["heads"], dims["head_dim"], dims["groups"], dims["state"]
    b, t, _ = mix.shape
    s = torch.zeros(b, h, p, n, dtype=mix.dtype)
    ys = torch.zeros(b, t, h, p, dtype=mix.dtype)
    rep = h // g
    for bi in range(b):
        for ti in range(t):
            if kind == "mamba2":  # Mamba-2 (SSD): h = exp(dt A) h + dt x B^T; y = h C + D x
                x, bm, cm = mix[bi, ti].split((h * p, g * n, g * n))
                dt = F.softplus(gates[bi, ti] + w["dt_bias"])
                for hd in range(h):
                    gi = hd // rep
                    xh = x[hd * p:(hd + 1) * p]
                    s[bi, hd] = torch.exp(dt[hd] * w["A"][hd]) * s[bi, hd] + dt[hd] * torch.outer(xh, bm[gi * n:(gi + 1) * n])
                    ys[bi, ti, hd] = s[bi, hd] @ cm[gi * n:(gi + 1) * n] + w["D"][hd] * xh
            else:  # Gated DeltaNet: S = a S (I - beta k k^T) + beta v k^T; o = S q
                q, k, v = mix[bi, ti].split((g * n, g * n, h * p))
                a, bb = gates[bi, ti].split((h, h))
                for hd in range(h):
                    gi = hd // rep
                    kk = F.normalize(k[gi * n:(gi + 1) * n], dim=0)
                    qq = F.normalize(q[gi * n:(gi + 1) * n], dim=0)
                    decay = torch.exp(w["A"][hd] * F.softplus(a[hd] + w["dt_bias"][hd]))
                    beta = torch.sigmoid(bb[hd])
                    st = decay * s[bi, hd]
                    st = st - beta * torch.outer(st @ kk, kk) + beta * torch.outer(v[hd * p:(hd + 1) * p], kk)
                    s[bi, hd] = st
                    ys[bi, ti, hd] = st @ qq
    return ys.reshape(b, t, h * p)


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_recurrent_scan_equals_the_recurrence(kind):
    dims = {"kind": kind, "heads": 4, "head_dim": 3, "groups": 2, "state": 5, "conv_kernel": 1, "conv_channels": 0}
    dims["conv_channels"] = 0
    g = torch.Generator().manual_seed(2)
    w = K.recurrent_weights(dims, torch.float64, "cpu", g)
    mix_width = 4 * 3 + 2 * 2 * 5
    mix = torch.randn(2, 6, mix_width, generator=g, dtype=torch.float64)
    gates = torch.randn(2, 6, K.gate_channels(dims), generator=g, dtype=torch.float64)
    state, _ = K.recurrent_state(dims, 2, torch.float64, "cpu")
    got = K.recurrent_mix(dims, mix, gates, w, state)
    assert K.max_rel_err(got, _ref_scan(kind, dims, mix, gates, w)) < 1e-10


def test_decode_conv_step_equals_the_causal_conv():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    w, b = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    full = K.causal_conv(x, w, b)
    state = torch.zeros(2, 6, 3, dtype=torch.float64)
    steps = torch.stack([K.conv_step(state, x[:, i], w, b) for i in range(5)], dim=1)
    assert K.max_rel_err(steps, full) < 1e-12


# ---------------------------------------------------------------------------------------------
# The command line.

@pytest.mark.parametrize("argv, expect", [
    (["--tp", "0"], "--tp must be between 1"),
    (["--model", "deepseek-v3", "--tp", "3"], "tp 3 does not divide the 128 query heads"),
    (["--kernels", "copy"], "unrecognized arguments: --kernels"),
    (["--label", "x"], "--label needs --save"),
    (["--model", "no-such-model"], "unknown model preset"),
    (["--model", "deepseek-v3", "--config", "x.json"], "not allowed with argument"),
    (["--device", "tpu"], "invalid choice"),
    (["--out", "/nonexistent-folder/sub/p.json"], "cannot create folder"),
    (["--threads", "zero"], "--threads must be a whole number"),
])
def test_bad_profile_flags_exit_2_with_one_line(argv, expect, capsys):
    assert bench_main(["--profile", "--device", "cpu", *argv] if "--device" not in argv else ["--profile", *argv]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and expect in err, err


def test_profile_on_an_unavailable_device_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert bench_main(["--profile", "--model", "gemma-3-1b", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "device cuda is not available" in err


def test_cli_profile_writes_the_table_and_says_what_it_measured(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_QWEN_NEXT))
    out = tmp_path / "out" / "profile.json"
    assert bench_main(["--profile", "--config", str(cfg), "--device", "cpu", "--quick", "--threads", "1",
                       "--out", str(out)]) == 0
    text = capsys.readouterr().out
    table = json.loads(out.read_text())
    PP.validate_profile(table)
    from mla_core.config import load_config

    assert table["model"] == load_config(str(cfg)).name and table["device"]["threads"] == 1
    assert {r["kind"] for r in table["ops"]["recurrent"]} == {"gdn"}
    assert {r["kind"] for r in table["ops"]["attention_decode"]} == {"gqa"}
    for family in PP.FAMILIES:
        assert re.search(rf"^{family}\s+{len(table['ops'][family])}\b", text, re.M), family
    assert "wall time" in text and f"wrote {out}" in text


def test_cli_save_stores_the_profile_or_says_why_not(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GEMMA2))
    out = tmp_path / "p.json"
    code = bench_main(["--profile", "--config", str(cfg), "--device", "cpu", "--quick", "--threads", "1",
                       "--out", str(out), "--save", "--label", "ci"])
    captured = capsys.readouterr()
    PP.validate_profile(json.loads(out.read_text()))  # written before the save is tried
    try:
        from mla_core.store import load_profile  # noqa: F401
    except ImportError:
        assert code == 2
        err = captured.err.strip().splitlines()[-1]
        assert "not saved" in err and "mla_core.store.save_profile is missing" in err and str(out) in err
        return
    assert code == 0
    run_id = int(re.search(r"saved as run (\d+)", captured.err).group(1))
    stored = load_profile(run_id)
    stored = stored.get("table", stored)
    assert stored["ops"] == json.loads(out.read_text())["ops"]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.slow
def test_under_torchrun_the_profile_holds_the_collectives_at_the_models_sizes(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GEMMA2))
    out = tmp_path / "p.json"
    env = dict(os.environ, MLA_EXPLORER_HISTORY=str(tmp_path / "h.sqlite3"), OMP_NUM_THREADS="1")
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [*_torchrun(), "--standalone", "--nproc-per-node", "2", "-m", "mla_core", "bench", "--profile",
           "--config", str(cfg), "--device", "cpu", "--quick", "--threads", "1", "--out", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    table = json.loads(out.read_text())
    PP.validate_profile(table)
    rows = table["ops"]["collective"]
    assert {r["op"] for r in rows} == set(PP.COLLECTIVE_OPS) and {r["ranks"] for r in rows} == {2}
    # a TP all-reduce of m tokens' hidden states: hidden 128 x 4 bytes (fp32) x m, m = 1, 8, ..., 8192
    assert {r["bytes"] for r in rows if r["op"] == "all_reduce"} == set(P.collective_sizes(parse_config(TINY_GEMMA2),
                                                                                           "fp32", quick=True))
    assert min(r["bytes"] for r in rows if r["op"] == "all_reduce") == 128 * 4
    assert table["ops"]["gemm"] and p.stdout.count("profile of") == 1  # rank 0 alone reports


# ---------------------------------------------------------------------------------------------
# The reduced model.

def test_reduced_spec_keeps_one_layer_of_each_kind_at_the_models_widths():
    # DeepSeek-V2-Lite config.json: first_k_dense_replace 1 (layer 0 dense MLP, then MoE), 64 experts
    # of 1408, top-6; 2 x 1408 shared.
    spec, notes = R.reduced_spec(load_model("deepseek-v2-lite"), expert_bytes=1 << 30)
    assert R.layer_kinds(spec) == ["mla_absorbed+dense", "mla_absorbed+moe"]
    assert spec.moe.n_routed_experts == 16 and spec.moe.num_experts_per_tok == 6 and spec.vocab_size is None
    assert spec.hidden_size == 2048 and spec.attention.kv_lora_rank == 512
    assert any("cut from 64 to 16" in n for n in notes)
    # Qwen3-Next: full_attention_interval 4 (layers 0-2 Gated DeltaNet, layer 3 attention), all MoE.
    spec, _ = R.reduced_spec(load_model("qwen3-next-80b-a3b"), expert_bytes=None)
    assert R.layer_kinds(spec) == ["gdn+moe", "gqa+moe"] and spec.moe.n_routed_experts == 512
    # Nemotron-H's pattern "M-M-M-MM-...*-...": Mamba-2 mixers, MLP-only layers, attention layers.
    spec, _ = R.reduced_spec(load_model("nemotron-nano-9b-v2"))
    assert sorted(R.layer_kinds(spec)) == ["gqa+none", "mamba2+none", "none+dense"]
    with pytest.raises(Exception, match="Mamba-1"):
        R.reduced_spec(load_model("jamba-1.5-mini"))


def test_reduced_model_runs_the_profiled_ops_and_trace_lookups_compose():
    spec, _ = R.reduced_spec(parse_config(TINY_QWEN_NEXT), expert_bytes=None)
    points = {"decode": ((2, 64),), "prefill": ((2, 32),)}
    trace = R.trace_ops(spec, "decode", 2, 64)
    fams = [f for f, _ in trace]
    assert fams.count("attention_decode") == 1 and fams.count("recurrent") == 1 and fams.count("moe") == 2
    assert {k["m"] for f, k in trace if f == "gemm"} == {2}
    pre = R.trace_ops(spec, "prefill", 2, 32)
    assert sum(f == "attention_prefill" for f, _ in pre) == 2  # per sequence
    assert {k["m"] for f, k in pre if f == "gemm"} == {64}
    check = R.reduced_check(spec, points=points, threads=1, rounds=1, expert_bytes=None,
                            profile_timing=FAST)
    rows = check["rows"]
    assert [(r["phase"], r["batch"], r["context"]) for r in rows] == [("decode", 2, 64), ("prefill", 2, 32)]
    assert all(r["measured_s"] > 0 and r["layers"] == ["gdn+moe", "gqa+moe"] for r in rows)
    table = check["profile"].table
    PP.validate_profile(table)
    for r in check["trace"]["rows"]:  # the trace estimate is the table summed over the op list
        want = sum(R.lookup(table, f, k) for f, k in R.trace_ops(spec, r["phase"], r["batch"], r["context"]))
        assert r["estimate_s"] == pytest.approx(want)
    assert check["composer"] is None and check["statistic"] == "min"


def test_reduced_decode_matches_the_mla_definition_on_its_cache():
    """The reduced MLA layer's attention is the absorbed kernel on the cache it wrote: its output
    equals MLA by definition (DeepSeek-V2 eq. 9-19) on the same latent, in float64."""
    spec, _ = R.reduced_spec(parse_config(TINY_KIMI), expert_bytes=None)
    model = R.ReducedModel(spec, dtype="fp32")
    layer = next(la for la in model.layers if la["mixer"] == "mla_absorbed")
    a = spec.attention
    g = torch.Generator().manual_seed(4)
    q_nope = torch.randn(2, 1, 4, a.qk_nope_head_dim, generator=g)
    q_pe = torch.randn(2, 1, 4, a.qk_rope_head_dim, generator=g)
    kv, pe = torch.randn(2, 9, a.kv_lora_rank, generator=g), torch.randn(2, 9, a.qk_rope_head_dim, generator=g)
    scale = (a.qk_nope_head_dim + a.qk_rope_head_dim) ** -0.5
    got = K.mla_absorbed_decode(q_nope, q_pe, kv, pe, layer["w_uk"], layer["w_uv"], scale)
    kv_b = layer["kv_b"].view(4, a.qk_nope_head_dim + a.v_head_dim, a.kv_lora_rank)
    ref = K.reference_mla_decode(q_nope, q_pe, kv, pe, kv_b[:, :a.qk_nope_head_dim], kv_b[:, a.qk_nope_head_dim:], scale)
    assert K.max_rel_err(got, ref) < 1e-4


def test_compare_reports_median_and_worst_error():
    rows = [{"phase": "decode", "batch": b, "context": 512, "measured_s": 1.0} for b in (1, 2, 4, 8)]
    factors = {1: 1.05, 2: 0.92, 4: 1.08, 8: 1.30}
    out = R.compare(rows, lambda m, t, phase, batch, context: factors[batch], None, {})
    assert [round(r["error"], 6) for r in out["rows"]] == [0.05, -0.08, 0.08, 0.30]
    assert out["median_abs_error"] == pytest.approx(0.08) and out["worst"]["batch"] == 8
    assert out["within_10pct_median"] and not out["all_within_25pct"]


def test_lookup_interpolates_in_log_space_and_never_below_the_smallest():
    table = {"ops": {"elementwise": [{"bytes": 1024, "latency_s": 1e-5}, {"bytes": 4096, "latency_s": 4e-5}],
                     "gemm": [{"m": 1, "n": 8, "k": 8, "dtype": "fp32", "latency_s": 2e-6}]}}
    assert R.lookup(table, "elementwise", {"bytes": 2048}) == pytest.approx(2e-5)
    assert R.lookup(table, "elementwise", {"bytes": 10}) == 1e-5
    assert R.lookup(table, "elementwise", {"bytes": 8192}) == pytest.approx(8e-5)
    with pytest.raises(KeyError):
        R.lookup(table, "gemm", {"m": 1, "n": 9, "k": 8, "dtype": "fp32"})


# ---------------------------------------------------------------------------------------------
# Once the step composer exists: the issue's goal on this CPU.

@pytest.mark.slow
def test_composed_estimate_is_within_the_issues_goal_on_this_cpu():
    pytest.importorskip("mla_core.serving.step", reason="the step composer (mla_core.serving.step) is not merged yet")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import reduced_model  # noqa: PLC0415

    points = reduced_model.QUICK_POINTS
    check = R.reduced_check("deepseek-v2-lite", points=points, estimate=reduced_model.composed_estimate, threads=1,
                            rounds=2)
    comp, trace = check["composer"], check["trace"]
    # The composition itself, without timing noise: the serving estimate's ops and sum over the
    # profile give what the profile gives summed over the ops the torch model ran (same table).
    # Decode: the same ops, so within 2 % (the W_UK / W_UV / router GEMMs at bf16 in an fp32 table
    # once put the composer 6.5 % above the trace); prefill within 10 % (the composer counts the
    # elementwise ops by their bytes, not the torch model's own passes).
    for c, t in zip(comp["rows"], trace["rows"]):
        rel = 0.02 if c["phase"] == "decode" else 0.10
        assert c["estimate_s"] == pytest.approx(t["estimate_s"], rel=rel), (c, t)
    # Against the clock (the issue's figures: median |error| <= 10 %, every point within 25 %; the
    # median is reported in benchmarks/reduced_model.md, since another process's load moves it by a
    # few percent on this 2-core machine): every point within 25 %.
    assert comp["all_within_25pct"], comp["worst"]


def test_a_kimi_linear_reduced_model_traces_mla_kda_and_moe():
    # Kimi-Linear: KDA layers 1-3 (0-based 0-2; layer 0 dense, first_k_dense_replace 1), MLA layer 4.
    spec, _ = R.reduced_spec(parse_config(TINY_KIMI), expert_bytes=None)
    assert R.layer_kinds(spec) == ["kda+dense", "kda+moe", "mla_absorbed+moe"]
    fams = [f for f, _ in R.trace_ops(spec, "decode", 2, 40)]
    assert fams.count("recurrent") == 2 and fams.count("attention_decode") == 1 and fams.count("moe") == 2
    pre = R.trace_ops(spec, "prefill", 1, 16)
    assert {k["kind"] for f, k in pre if f == "attention_prefill"} == {"mla_mha"}
    assert {k["tokens"] for f, k in pre if f == "recurrent"} == {16}


def test_the_profile_plan_schema_and_cli_parser_do_not_import_torch():
    code = ("import sys, mla_core.bench.profile_plan as p, mla_core.bench.profile_cli as c\n"
            "p.plan_profile(p.__dict__['ModelSpec'] and __import__('mla_core.presets').presets.load_model('deepseek-v3'))\n"
            "c.build_parser()\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
