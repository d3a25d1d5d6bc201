"""Tests of the live microbenchmark (mla_core.bench) on the CPU, with CUDA and MPS faked where a
test must show what happens on those paths. GPU-only checks are marked `gpu`."""
from __future__ import annotations

import gc
import json
import math
import re
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from mla_core.bench import config as bcfg  # noqa: E402
from mla_core.bench import device as bdev  # noqa: E402
from mla_core.bench import kernels as K  # noqa: E402
from mla_core.bench import run as brun  # noqa: E402
from mla_core.bench import timing as btiming  # noqa: E402
from mla_core.bench.cli import main as bench_main  # noqa: E402
from mla_core.bench.errors import (  # noqa: E402
    BenchBusy,
    BenchCancelled,
    BenchError,
    DeviceUnavailable,
    InvalidResult,
    OutOfMemory,
    OversizeRequest,
)
from mla_core.store.schema import validate_result  # noqa: E402
from mla_core.errors import MLAError  # noqa: E402
from mla_core.kv import kv_cache_bytes  # noqa: E402
from mla_core.roofline import attention_flops_per_token_layer  # noqa: E402
from mla_core.config import synthetic_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
GiB = 1 << 30

# A tiny run of every kernel: a second or two on two CPU cores. Two batches x two contexts,
# and B=2, T=300 makes the recompute path take two chunks (work_bytes 1 MiB -> 192 tokens).
TINY = bcfg.BenchConfig(
    device="cpu", dtype="fp32", batches=(1, 2), contexts=(64, 300), heads=8, gqa_groups=4, head_dim=32,
    kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, stream_bytes=MiB, matmul_n=64,
    warmup=1, reps=3, min_reps=1, budget_s=0.05, flush_bytes=0, work_bytes=MiB,
)
# Generous CPU peaks would hide nothing at these sizes; the fake devices below use huge ones.
FP32_TOL = K.REL_ERR_TOLERANCE["fp32"]


@pytest.fixture(scope="module")
def tiny_result():
    return brun.run_benchmark(TINY)


def one_line(text: str) -> bool:
    return "\n" not in text.strip() and "Traceback" not in text


# ---------------------------------------------------------------------------------------------
# Import hygiene: the analytic core and the torch-free parts of bench never import torch.

def test_mla_core_and_torch_free_bench_modules_do_not_import_torch():
    code = (
        "import sys, mla_core, mla_core.kv, mla_core.roofline, mla_core.spec, mla_core.cli, mla_core.capacity, "
        "mla_core.params, mla_core.presets, mla_core.bench, mla_core.bench.config, mla_core.store.schema, "
        "mla_core.store.history, mla_core.bench.errors, mla_core.bench.comm, mla_core.store.engines, "
        "mla_core.bench.collectives\n"
        "from mla_core.bench import validate_result, BenchConfig, KERNELS\n"
        "from mla_core.store import history\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# The math: absorbed == recompute (fp32), SDPA without expansion == reference.

@pytest.mark.parametrize("chunk", [37, 64, 1000])
def test_mla_absorbed_equals_recompute_in_fp32(chunk):
    """Tolerance: max|a - r| / max|r| <= 1e-4 in fp32 (observed ~1e-6), and both within 1e-5
    of the float64 reference built from the definition."""
    g = torch.Generator().manual_seed(1)
    x = K.mla_inputs(2, 8, 300, 512, 64, 128, 128, torch.float32, "cpu", g)  # DeepSeek-V3 widths, 8 heads
    absorbed = K.mla_absorbed_decode(*x)
    recompute = K.mla_recompute_decode(*x, chunk=chunk)
    ref = K.reference_mla_decode(*x)
    assert absorbed.shape == recompute.shape == (2, 1, 8, 128)
    assert K.max_rel_err(absorbed, recompute) <= FP32_TOL
    assert K.max_rel_err(absorbed, ref) <= 1e-5
    assert K.max_rel_err(recompute, ref) <= 1e-5
    cos = torch.nn.functional.cosine_similarity(absorbed.flatten().double(), recompute.flatten().double(), dim=0)
    assert cos.item() > 1 - 1e-9
    assert torch.isfinite(absorbed).all() and torch.isfinite(recompute).all()


def test_mla_agreement_check_catches_a_wrong_value_projection():
    """The same comparison fails when recompute uses another W_UV: the check can fail."""
    g = torch.Generator().manual_seed(2)
    q_nope, q_pe, kv, pe, w_uk, w_uv, scale = K.mla_inputs(1, 4, 128, 64, 16, 32, 32, torch.float32, "cpu", g)
    absorbed = K.mla_absorbed_decode(q_nope, q_pe, kv, pe, w_uk, w_uv, scale)
    wrong = K.mla_recompute_decode(q_nope, q_pe, kv, pe, w_uk, w_uv * 1.01, scale, chunk=64)
    assert K.max_rel_err(absorbed, wrong) > FP32_TOL


@pytest.mark.parametrize("kv_heads", [8, 4, 1])  # MHA, GQA, MQA
def test_sdpa_decode_matches_reference_and_reads_kv_heads_once(kv_heads, monkeypatch):
    g = torch.Generator().manual_seed(3)
    q, k, v = K.sdpa_inputs(3, 8, kv_heads, 50, 32, torch.float32, "cpu", g)
    seen = []
    real = K.F.scaled_dot_product_attention

    def spy(qq, kk, vv, *args, **kwargs):
        seen.append((tuple(qq.shape), tuple(kk.shape), tuple(vv.shape), kwargs.get("enable_gqa", False)))
        return real(qq, kk, vv, *args, **kwargs)

    monkeypatch.setattr(K.F, "scaled_dot_product_attention", spy)
    out = K.sdpa_decode(q, k, v)
    assert K.max_rel_err(out, K.reference_sdpa_decode(q, k, v)) <= 1e-5
    # K and V reach SDPA with their own kv_heads (never expanded to 8), queries packed per group.
    assert seen == [((3, kv_heads, 8 // kv_heads, 32), (3, kv_heads, 50, 32), (3, kv_heads, 50, 32), False)]


# ---------------------------------------------------------------------------------------------
# Bytes and flops come from mla_core's formulas for the same shape.

def _model_for(result: dict):
    s = result["shape"]
    kind = {"mha_decode": "mha", "gqa_decode": "gqa", "mqa_decode": "mqa"}.get(result["kernel"], "mla")
    if kind == "mla":
        return synthetic_model("mla", layers=1, heads=s["heads"], kv_lora_rank=s["kv_lora_rank"],
                               rope_dim=s["qk_rope_head_dim"], nope_dim=s["qk_nope_head_dim"], v_dim=s["v_head_dim"],
                               torch_dtype=result["dtype"])
    return synthetic_model(kind, layers=1, heads=s["heads"], head_dim=s["head_dim"],
                           kv_heads=s["kv_heads"] if kind == "gqa" else None, torch_dtype=result["dtype"])


def test_decode_bytes_and_flops_equal_mla_core_formulas(tiny_result):
    decode = [r for r in tiny_result["results"] if r["kernel"].endswith("_decode")]
    assert sorted({r["kernel"] for r in decode}) == sorted(bcfg.DECODE_KERNELS)
    assert len(decode) == 5 * 4  # five kernels at 2 batches x 2 contexts
    for r in decode:
        s = r["shape"]
        model = _model_for(r)
        path = {"mla_absorbed_decode": "absorbed", "mla_recompute_decode": "recompute"}.get(r["kernel"], "absorbed")
        assert r["bytes"] == kv_cache_bytes(model, s["context"], s["batch"], r["dtype"], "latent")
        assert r["flops"] == s["batch"] * s["context"] * attention_flops_per_token_layer(model, path)
        # And the docs/model.md closed forms, written out, for fp32 (4 B per element):
        b, t, h = s["batch"], s["context"], s["heads"]
        if r["kernel"].startswith("mla"):
            assert r["bytes"] == b * t * (s["kv_lora_rank"] + s["qk_rope_head_dim"]) * 4
        else:
            assert r["bytes"] == b * t * s["kv_heads"] * 2 * s["head_dim"] * 4
            assert r["flops"] == b * t * h * 4 * s["head_dim"]
        assert r["achieved_GBps"] == pytest.approx(r["bytes"] / r["median_s"] / 1e9)
        assert r["achieved_TFLOPs"] == pytest.approx(r["flops"] / r["median_s"] / 1e12)


def test_predicted_time_is_the_roofline_of_the_measured_ceilings(tiny_result):
    c = tiny_result["ceilings"]
    read = next(r for r in tiny_result["results"] if r["kernel"] == "read")
    mm = next(r for r in tiny_result["results"] if r["kernel"] == "matmul")
    assert c["read_GBps"] == read["achieved_GBps"] and c["matmul_TFLOPs"] == mm["achieved_TFLOPs"]
    for r in tiny_result["results"]:
        if r["kernel"].endswith("_decode"):
            t_mem = r["bytes"] / (c["read_GBps"] * 1e9)
            t_comp = r["flops"] / (c["matmul_TFLOPs"] * 1e12)
            assert r["predicted_s"] == pytest.approx(max(t_mem, t_comp), rel=1e-12)
            assert r["predicted_bound"] == ("memory" if t_mem >= t_comp else "compute")


def test_absorbed_result_carries_its_agreement_with_recompute(tiny_result):
    absorbed = [r for r in tiny_result["results"] if r["kernel"] == "mla_absorbed_decode"]
    assert len(absorbed) == 4
    for r in absorbed:
        assert 0 <= r["max_rel_err"] <= FP32_TOL
        assert r["rel_err_tolerance"] == FP32_TOL
    chunks = {(r["shape"]["batch"], r["shape"]["context"]): r["shape"]["chunk_tokens"]
              for r in tiny_result["results"] if r["kernel"] == "mla_recompute_decode"}
    assert chunks[(2, 300)] == 192  # two chunks: the online softmax path is exercised


# ---------------------------------------------------------------------------------------------
# Result JSON and schema.

def test_run_result_matches_the_schema(tiny_result):
    data = validate_result(tiny_result)
    assert data["schema_version"] == 1
    assert data["device"]["kind"] == "cpu" and data["device"]["dtype"] == "fp32"
    assert data["config"]["batches"] == [1, 2]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["created"])
    assert [r["kernel"] for r in data["results"][:3]] == ["copy", "read", "matmul"]
    for r in data["results"]:
        assert r["median_s"] > 0 and r["min_s"] > 0 and r["min_s"] <= r["median_s"]
    validate_result(json.dumps(tiny_result).encode())  # as an imported file


def test_cli_writes_json_that_matches_the_schema(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "mla_core", "bench", "--device", "cpu", "--quick", "--batch", "1", "--context", "256",
           "--heads", "4", "--gqa-groups", "2", "--stream-bytes", "4M", "--matmul-n", "64", "--reps", "3",
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # No progress bar when stderr is not a terminal: at most the one-line note of a disturbed run.
    assert all(line.startswith("mla_core bench: note: this run was disturbed: ") for line in proc.stderr.splitlines())
    data = validate_result(out.read_bytes())
    assert (data["disturbed"]["disturbed"] is True) == bool(proc.stderr)
    assert {r["kernel"] for r in data["results"]} == set(bcfg.KERNELS)
    assert data["config"]["quick"] is True and data["config"]["contexts"] == [256] and data["config"]["heads"] == 4
    assert "mla_absorbed_decode" in proc.stdout and "predicted" in proc.stdout
    copy = next(r for r in data["results"] if r["kernel"] == "copy")
    assert copy["bytes"] == 2 * copy["shape"]["buffer_bytes"] == 2 * 4 * MiB  # a copy of N bytes moves 2N
    assert copy["reference_GBps"] > 0  # numpy.copyto cross-check on CPUs


def _valid() -> dict:
    return json.loads(json.dumps(brun.run_benchmark(bcfg.coerce_config(TINY, batches=(1,), contexts=(32,)))))


@pytest.fixture(scope="module")
def valid_result():
    return _valid()


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["results"][0].__setitem__("median_s", -1.0), "median_s"),
    (lambda d: d["results"][0].__setitem__("min_s", 0), "min_s"),
    (lambda d: d["results"][0].__setitem__("median_s", float("nan")), "finite"),
    (lambda d: d["results"][1].__setitem__("achieved_GBps", float("inf")), "finite"),
    (lambda d: d["results"][0].__setitem__("kernel", "flash_mla"), "kernel"),
    (lambda d: d["results"][0].__setitem__("bytes", "1024"), "bytes"),
    (lambda d: d["results"][0].__setitem__("bytes", 1.5), "bytes"),
    (lambda d: d["results"][0].pop("flops"), "flops"),
    (lambda d: d["results"][0].__setitem__("surprise", 1), "surprise"),
    (lambda d: d.__setitem__("schema_version", 2), "schema_version"),
    (lambda d: d["device"].__setitem__("kind", "tpu"), "kind"),
    (lambda d: d["results"][0].__setitem__("min_s", d["results"][0]["median_s"] * 2), "min_s"),
    (lambda d: next(r for r in d["results"] if r["kernel"] == "mla_absorbed_decode").pop("max_rel_err"),
     "max_rel_err"),
    (lambda d: d["results"][0]["shape"].__setitem__("batch", -3), "batch"),
])
def test_validate_result_refuses_bad_results(valid_result, mutate, expect):
    bad = json.loads(json.dumps(valid_result))
    mutate(bad)
    with pytest.raises(InvalidResult) as e:
        validate_result(bad)
    assert expect in str(e.value) and one_line(str(e.value))
    validate_result(valid_result)  # the unmutated one passes


@pytest.mark.parametrize("raw, expect", [
    (b'{"schema_version": 1, "results": [{"median_s": NaN}]}', "NaN"),
    (b'{"a": Infinity}', "Infinity"),
    (b"not json", "not JSON"),
    (b"[1, 2]", "object"),
    (b"\xff\xfe\x00", "UTF-8"),
    (b'{"schema_version": 1, "schema_version": 1}', "repeats"),
    (b" " * ((1 << 20) + 1), "1 MiB"),
])
def test_validate_result_refuses_bad_bytes(raw, expect):
    with pytest.raises(InvalidResult) as e:
        validate_result(raw)
    assert expect in str(e.value) and one_line(str(e.value))


def test_validate_result_refuses_an_oversize_dict(valid_result):
    big = json.loads(json.dumps(valid_result))
    big["notes"] = ["x" * 400] * 100
    big["results"] = big["results"] * 400  # ~1.4 MB
    with pytest.raises(InvalidResult, match="1 MiB"):
        validate_result(big)


# ---------------------------------------------------------------------------------------------
# The synchronising clock is used for every timed call, on every device path.

def _fake_device(kind: str, **peaks) -> bdev.Device:
    return bdev.Device(kind=kind, torch_device=torch.device("cpu"), name=f"fake {kind}", backend=kind,
                       total_memory_bytes=8 * GiB, llc_bytes=MiB, preset=None,
                       peak_bandwidth_Bps=peaks.get("bw", 1e18), peak_flops_lowp=peaks.get("flops", 1e21),
                       peak_flops_fp32=peaks.get("flops", 1e21), peak_source="test bound")


def _use_fake_device(monkeypatch, dev: bdev.Device, free: int = 8 * GiB):
    monkeypatch.setattr(bdev, "resolve_kind", lambda device="auto": dev.kind)
    monkeypatch.setattr(bdev, "make_device", lambda kind: dev)
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: free)
    monkeypatch.setattr(bdev, "empty_cache", lambda d: None)


@pytest.mark.parametrize("kind", ["cuda", "mps", "cpu"])
def test_every_timed_call_is_bracketed_by_the_device_sync(kind, monkeypatch):
    """CUDA: sync, start event, work, end event, sync, elapsed_time. MPS: sync, clock, work,
    sync, clock. CPU: clock, work, clock. Flushes (GPU L2) only outside the timed region."""
    log: list[str] = []
    monkeypatch.setattr(btiming, "_now", lambda real=time.perf_counter: (log.append("T"), real())[1])
    if kind == "cuda":
        class FakeEvent:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.t = None

            def record(self, stream=None):
                log.append("R")
                self.t = time.monotonic()

            def elapsed_time(self, end):
                log.append("E")
                return (end.t - self.t) * 1e3

        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("S"))
        monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    elif kind == "mps":
        monkeypatch.setattr(torch.mps, "synchronize", lambda: log.append("S"))
    _use_fake_device(monkeypatch, _fake_device(kind))

    real_flush = brun._make_flush

    def spy_flush(nbytes, dev):
        fn = real_flush(nbytes, dev)
        return lambda: (log.append("F"), fn())

    monkeypatch.setattr(brun, "_make_flush", spy_flush)
    for name in ("sdpa_decode", "mla_absorbed_decode", "mla_recompute_decode"):
        real = getattr(K, name)
        monkeypatch.setattr(K, name, lambda *a, _real=real, **kw: (log.append("K"), _real(*a, **kw))[1])

    cfg = bcfg.coerce_config(TINY, batches=(1,), contexts=(64,), flush_bytes=4096 if kind != "cpu" else 0)
    # The noise check's second copy/read/matmul go through the same timed calls; counted here
    # without it, so that every call maps to one stored repetition.
    monkeypatch.setattr(brun, "_repeat_ceilings", lambda *a, **k: {})
    result = brun.run_benchmark(cfg)
    text = "".join(log)
    unit = {"cuda": r"F?SRK?RSE", "mps": r"F?STK?ST", "cpu": r"TK?T"}[kind]
    assert re.fullmatch(f"(?:{unit})+", text), text[:200]
    calls = re.findall(unit, text)
    expected = sum(r["reps"] + r["warmup"] for r in result["results"])
    if kind == "cpu":  # the copy is timed in alternation with numpy.copyto
        copy = next(r for r in result["results"] if r["kernel"] == "copy")
        expected += copy["reps"] + copy["warmup"]
    assert len(calls) == expected
    decode_calls = sum(r["reps"] + r["warmup"] for r in result["results"] if r["kernel"].endswith("_decode"))
    assert sum(1 for c in calls if "K" in c) == decode_calls
    if kind != "cpu":
        assert all(c.startswith("F") for c in calls)  # every repetition starts from a flushed L2
    assert "S" not in text or kind != "cpu"
    assert len(result["results"]) == 8 and not result["timing_errors"]


def test_sync_clock_reads_cuda_events_after_synchronising(monkeypatch):
    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            self.name = "start" if not any(e == "new" for e in log) else "end"
            log.append("new")

        def record(self, stream=None):
            log.append(f"record {self.name}")

        def elapsed_time(self, end):
            log.append("elapsed")
            return 2.5

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    clock = btiming.make_clock("cuda")
    clock.start()
    log.append("work")
    assert clock.stop() == pytest.approx(2.5e-3)
    assert log == ["sync", "new", "new", "record start", "work", "record end", "sync", "elapsed"]


# ---------------------------------------------------------------------------------------------
# Memory: oversize refused before allocating; OOM mid-run is clean; cancel; one run at a time.

ALLOCATORS = ("empty", "zeros", "ones", "full", "randn", "rand", "empty_like", "zeros_like", "tensor")


def _forbid_allocation(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a tensor was allocated")

    for name in ALLOCATORS:
        monkeypatch.setattr(torch, name, boom)


def test_oversize_request_is_refused_before_any_allocation(monkeypatch):
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: GiB)
    big = bcfg.coerce_config(TINY, batches=(64,), contexts=(1 << 20,))
    assert brun.estimate_bytes(big) > 0.8 * GiB
    _forbid_allocation(monkeypatch)
    with pytest.raises(OversizeRequest) as e:
        brun.run_benchmark(big)
    msg = str(e.value)
    assert one_line(msg) and "80%" in msg and "B=64" in msg and "T=1048576" in msg
    assert not brun.is_busy()


def test_the_same_free_memory_admits_a_small_request(monkeypatch):
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: GiB)
    small = bcfg.coerce_config(TINY, batches=(1,), contexts=(32,))
    assert brun.estimate_bytes(small) < 0.8 * GiB
    result = brun.run_benchmark(small)
    assert len(result["results"]) == 8


def test_cli_oversize_exits_2_with_one_line_and_allocates_nothing(monkeypatch, capsys):
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: 2 * GiB)
    _forbid_allocation(monkeypatch)
    code = bench_main(["--device", "cpu", "--batch", "64", "--context", "1M", "--stream-bytes", "1M",
                       "--matmul-n", "64"])
    err = capsys.readouterr().err
    assert code == 2
    assert one_line(err) and err.startswith("mla_core bench: error: ") and "free memory" in err


def test_skip_oversize_keeps_the_points_that_fit(monkeypatch):
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: 256 * MiB)
    cfg = bcfg.coerce_config(TINY, batches=(1,), contexts=(64, 1 << 20), skip_oversize=True)
    result = brun.run_benchmark(cfg)
    skipped = {(s["kernel"], s["shape"]["context"]) for s in result["skipped"]}
    assert ("mha_decode", 1 << 20) in skipped and all(t == 1 << 20 for _, t in skipped)
    assert all(r["shape"].get("context", 64) == 64 for r in result["results"])
    validate_result(result)


def test_out_of_memory_mid_run_frees_tensors_and_raises_one_line(monkeypatch):
    refs = []
    real_inputs = K.mla_inputs

    def tracked(*a, **k):
        out = real_inputs(*a, **k)
        refs.extend(weakref.ref(t) for t in out if isinstance(t, torch.Tensor))
        return out

    events = []

    def oom(*a, **k):
        events.append("oom")
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB.\nGPU 0 has 1 GiB free.")

    monkeypatch.setattr(bdev, "empty_cache", lambda d: events.append(f"empty {d.kind}"))
    monkeypatch.setattr(K, "mla_inputs", tracked)
    monkeypatch.setattr(K, "mla_absorbed_decode", oom)
    with pytest.raises(OutOfMemory) as e:
        brun.run_benchmark(bcfg.coerce_config(TINY, batches=(1,), contexts=(64,)))
    msg = str(e.value)
    assert one_line(msg) and "out of memory during mla_absorbed_decode B=1 T=64" in msg
    assert e.value.__context__ is None and e.value.__cause__ is None  # no traceback holding frames
    gc.collect()
    assert refs and all(r() is None for r in refs), "the run's tensors are still alive"
    assert events[-2:] == ["oom", "empty cpu"]  # the cache is emptied after the failure
    assert not brun.is_busy()


def _terminal_lines(text: str) -> list[str]:
    """Render text as a terminal would: '\r' returns to the start of the line and overwrites."""
    out = []
    for physical in text.split("\n"):
        buf: list[str] = []
        pos = 0
        for ch in physical:
            if ch == "\r":
                pos = 0
                continue
            if pos < len(buf):
                buf[pos] = ch
            else:
                buf.append(ch)
            pos += 1
        out.append("".join(buf).rstrip())
    return out


def test_cli_out_of_memory_exits_2_with_one_stderr_line(monkeypatch, capsys):
    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory.\nTried to allocate 2.00 GiB")

    monkeypatch.setattr(K, "mla_recompute_decode", oom)
    code = bench_main(["--device", "cpu", "--batch", "1", "--context", "64", "--heads", "4", "--gqa-groups", "2",
                       "--stream-bytes", "1M", "--matmul-n", "64", "--reps", "1", "--progress"])
    captured = capsys.readouterr()
    assert code == 2
    lines = [ln for ln in _terminal_lines(captured.err) if ln]  # what a terminal shows after the bar is cleared
    assert len(lines) == 1 and lines[0].startswith("mla_core bench: error: out of memory during mla_recompute_decode")
    assert captured.out == ""


def test_cancel_stops_the_run_and_frees_its_tensors(monkeypatch):
    refs = []
    real_inputs = K.sdpa_inputs
    monkeypatch.setattr(K, "sdpa_inputs",
                        lambda *a, **k: [refs.append(weakref.ref(t)) or t for t in real_inputs(*a, **k)])
    cancel = threading.Event()
    labels = []

    def progress(done, total, label):
        labels.append(label)
        if label.startswith("gqa_decode"):
            cancel.set()

    with pytest.raises(BenchCancelled) as e:
        brun.run_benchmark(TINY, progress=progress, cancel=cancel)
    assert "gqa_decode" in str(e.value) and one_line(str(e.value))
    assert labels[-1].startswith("gqa_decode") and not any(lb.startswith("mqa") for lb in labels)
    gc.collect()
    assert refs and all(r() is None for r in refs)
    assert not brun.is_busy()


def test_one_run_at_a_time_per_process():
    entered, release = threading.Event(), threading.Event()
    box = {}

    def hold(done, total, label):
        entered.set()
        release.wait(10)

    def worker():
        box["result"] = brun.run_benchmark(bcfg.coerce_config(TINY, batches=(1,), contexts=(32,)), progress=hold)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert entered.wait(10)
        assert brun.is_busy()
        with pytest.raises(BenchBusy):
            brun.run_benchmark(TINY)  # non-blocking by default
        t0 = time.monotonic()
        with pytest.raises(BenchBusy):
            brun.run_benchmark(TINY, wait=0.2)
        assert time.monotonic() - t0 >= 0.19
    finally:
        release.set()
        t.join(30)
    assert len(box["result"]["results"]) == 8
    assert not brun.is_busy()


# ---------------------------------------------------------------------------------------------
# Datasheet peaks: a result above them is a timing error, not a result.

def test_a_result_faster_than_the_peak_is_reported_as_a_timing_error(monkeypatch):
    _use_fake_device(monkeypatch, _fake_device("cpu", bw=1e6, flops=1e21))  # 1 MB/s: everything beats it
    result = brun.run_benchmark(bcfg.coerce_config(TINY, batches=(1,), contexts=(32,)))
    shown = {r["kernel"] for r in result["results"]}
    errors = {e["kernel"]: e["reason"] for e in result["timing_errors"]}
    assert "copy" in errors and "read" in errors and "copy" not in shown and "read" not in shown
    assert all("above the peak" in reason for reason in errors.values())
    assert result["ceilings"]["read_GBps"] is None
    # No measured bandwidth left: decode kernels carry no prediction rather than a wrong one.
    assert all(r["predicted_s"] is None for r in result["results"] if r["kernel"].endswith("_decode"))
    validate_result(result)


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", None), ("NVIDIA GH200 480GB", None),
    ("NVIDIA H20", "h20"), ("NVIDIA H800", "h800"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA B200", "b200"), ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA L40S", "l40s"), ("Tesla T4", None),
])
def test_cuda_names_match_gpu_presets(name, preset):
    assert bdev.match_gpu_preset(name) == preset


def test_datasheet_peaks_come_from_the_gpu_presets():
    from mla_core.presets import load_gpu

    bw, flops, source = bdev._gpu_peaks("NVIDIA H200", "h200")
    gpu = load_gpu("h200")
    assert bw == gpu.bandwidth_TBps * 1e12 == 4.8e12 and flops == gpu.bf16_TFLOPS * 1e12
    assert "h200" in source
    bw, flops, source = bdev._gpu_peaks("Tesla T4", None)
    assert bw == bdev.UNKNOWN_GPU_BANDWIDTH_Bps and "sanity" in source


# ---------------------------------------------------------------------------------------------
# Devices, defaults, configs, command line.

def test_device_info_and_defaults_on_cpu():
    assert bdev.available_devices()[-1] == "cpu"
    info = bdev.device_info("cpu")
    assert info["kind"] == "cpu" and info["dtype"] == "fp32" and info["torch_version"] == torch.__version__
    assert info["free_memory_bytes"] > 0 and info["peak_bandwidth_GBps"] > 0 and "sanity" in info["peak_source"]
    cfg = brun.default_config("cpu", quick=True)
    # DeepSeek-V3's attention shape (its config.json: 128 heads, d_c 512, d_r 64, d_nope 128, d_v 128), sized
    # down in context only: B 1 x T 4096 asked, T 512 kept under the CPU time budget of the recompute point.
    assert (cfg.model, cfg.heads, cfg.target_batches, cfg.target_contexts) == ("deepseek-v3", 128, (1,), (4096,))
    assert (cfg.batches, cfg.contexts) == ((1,), (512,))
    assert (cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim) == (512, 64, 128, 128)
    assert "deepseek-v3's attention shape" in cfg.scaling and "context scaled by 1/8" in cfg.scaling
    llc = bdev.cpu_llc_bytes() or 32 * MiB
    assert cfg.stream_bytes >= min(4 * llc, 2 * GiB) - MiB or cfg.stream_bytes >= 256 * MiB
    assert cfg.flush_bytes == 0
    full = brun.default_config("cpu")
    assert (full.target_batches, full.target_contexts) == ((4,), (8192,))
    assert (full.batches, full.contexts) == ((1,), (2048,))  # batch first, then context
    flops = max(bcfg.decode_bytes_flops(p["kernel"], p["shape"], "fp32")[1]
                for p in bcfg.plan_points(full, "fp32") if "decode" in p["kernel"])
    assert flops <= brun.CPU_POINT_FLOPS[False]


def test_default_config_shrinks_to_free_memory(monkeypatch):
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: 600 * MiB)
    cfg = brun.default_config("cpu")
    assert brun.estimate_bytes(cfg) <= 300 * MiB
    assert cfg.heads == 128  # shapes shrink by batch, context and buffers, never by the model's heads


def test_unavailable_device_is_one_line_error(capsys):
    if "cuda" in bdev.available_devices():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DeviceUnavailable, match="not available"):
        brun.run_benchmark({"device": "cuda"})
    assert bench_main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "device cuda is not available" in err


@pytest.mark.parametrize("argv, expect", [
    (["--batch", "0"], "--batch"),
    (["--context", "4Q"], "--context"),
    (["--kernels", "flash"], "unknown kernel"),
    (["--heads", "12", "--gqa-groups", "5"], "gqa_groups must divide"),
    (["--label", "x"], "--label needs --save"),
    (["--stream-bytes", "1"], "--stream-bytes"),
    (["--out", "/nonexistent-folder/sub/r.json"], "cannot create folder"),
    (["--bogus"], "unrecognized"),
])
def test_cli_bad_requests_exit_2_with_one_line(argv, expect, capsys, monkeypatch):
    _forbid_allocation(monkeypatch)
    assert bench_main(["--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and expect in err


@pytest.mark.parametrize("bad", [
    {"heads": 0}, {"batches": []}, {"batches": (1, 1)}, {"contexts": (True,)}, {"dtype": "int8"},
    {"kernels": ("copy", "nope")}, {"budget_s": float("nan")}, {"reps": 2, "min_reps": 3}, {"unknown": 1},
])
def test_coerce_config_refuses_bad_settings(bad):
    with pytest.raises(BenchError) as e:
        bcfg.coerce_config(TINY, **bad)
    assert isinstance(e.value, MLAError) and one_line(str(e.value))


def test_cli_validate_accepts_a_result_and_refuses_a_bad_one(tmp_path, valid_result, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(valid_result))
    assert bench_main(["--validate", str(good)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**valid_result, "schema_version": 7}))
    assert bench_main(["--validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "schema_version" in err


# ---------------------------------------------------------------------------------------------
# On a real GPU (skipped without CUDA).

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_tiny_run_is_valid_and_below_the_datasheet():
    cfg = bcfg.coerce_config(TINY, device="cuda", dtype="bf16", stream_bytes=256 * MiB, matmul_n=2048,
                             flush_bytes=64 * MiB, reps=10, min_reps=5, budget_s=0.5)
    result = brun.run_benchmark(cfg)
    validate_result(result)
    assert result["device"]["kind"] == "cuda" and not result["timing_errors"]
    peak = result["device"]["peak_bandwidth_GBps"]
    for r in result["results"]:
        assert r["achieved_GBps"] <= peak
    absorbed = [r for r in result["results"] if r["kernel"] == "mla_absorbed_decode"]
    assert absorbed and all(r["max_rel_err"] <= K.REL_ERR_TOLERANCE["bf16"] for r in absorbed)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_absorbed_equals_recompute_in_fp32():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = K.mla_inputs(4, 16, 1000, 512, 64, 128, 128, torch.float32, "cuda", g)
    torch.backends.cuda.matmul.allow_tf32 = False
    a = K.mla_absorbed_decode(*x)
    r = K.mla_recompute_decode(*x, chunk=256)
    assert K.max_rel_err(a, r) <= FP32_TOL
    assert math.isfinite(K.max_rel_err(a, K.reference_mla_decode(*x)))


def test_cli_save_stores_the_run_in_the_history(tmp_path, monkeypatch, capsys):
    from mla_core.store import history

    store = tmp_path / "history.sqlite3"
    monkeypatch.setenv(history.ENV_VAR, str(store))
    code = bench_main(["--device", "cpu", "--batch", "1", "--context", "32", "--heads", "4", "--gqa-groups", "2",
                       "--stream-bytes", "1M", "--matmul-n", "64", "--reps", "2", "--save", "--label", "tiny"])
    assert code == 0
    assert f"saved as run 1 in {store}" in capsys.readouterr().err
    runs = history.list_runs()
    assert len(runs) == 1 and runs[0]["label"] == "tiny" and runs[0]["source"] == "local"
    assert runs[0]["n_results"] == 8
    assert history.get_run(1)["result"]["config"]["heads"] == 4


def test_cli_help_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        bench_main(["--help"])
    assert e.value.code == 0
    assert "--skip-oversize" in capsys.readouterr().out


def test_keyboard_interrupt_frees_the_run_and_propagates(monkeypatch):
    refs = []
    real_inputs = K.mla_inputs

    def tracked(*a, **k):
        out = real_inputs(*a, **k)
        refs.extend(weakref.ref(t) for t in out if isinstance(t, torch.Tensor))
        return out

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(K, "mla_inputs", tracked)
    monkeypatch.setattr(K, "mla_recompute_decode", interrupt)
    with pytest.raises(KeyboardInterrupt) as info:
        brun.run_benchmark(bcfg.coerce_config(TINY, batches=(1,), contexts=(64,)))
    gc.collect()
    # Even while the caller still holds the exception, its traceback no longer pins the tensors.
    assert info.value is not None
    assert refs and all(r() is None for r in refs)
    assert not brun.is_busy()


def test_cli_without_torch_is_a_one_line_error_and_validate_still_works(monkeypatch, capsys, tmp_path, valid_result):
    monkeypatch.setitem(sys.modules, "mla_core.bench.run", None)  # importing it now raises ImportError
    assert bench_main(["--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "needs torch" in err
    path = tmp_path / "r.json"
    path.write_text(json.dumps(valid_result))
    assert bench_main(["--validate", str(path)]) == 0


def test_cli_sigterm_cancels_cleanly_with_one_line(tmp_path):
    import signal

    cmd = [sys.executable, "-m", "mla_core", "bench", "--device", "cpu", "--kernels", "copy", "--stream-bytes", "64M",
           "--reps", "10000", "--budget-s", "600", "--progress", "--out", str(tmp_path / "never.json")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr.read(1) == b"\r"  # the progress bar: the run has started
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2
    lines = [ln for ln in _terminal_lines(err.decode()) if ln]
    assert len(lines) == 1 and lines[0].startswith("mla_core bench: error: benchmark cancelled during copy")
    assert out == b"" and not (tmp_path / "never.json").exists()


# ---------------------------------------------------------------------------------------------
# The kernel benchmark follows the model (issue 11, part 2).

def test_model_shapes_are_the_models_attention():
    from mla_core.presets import load_model

    # Llama-3.1-8B config.json: 32 heads, 8 KV heads, head_dim 128; its MLA counterfactual is DeepSeek-V2
    # Table 1's d_c = 4 d_h = 512, d_r = d_h / 2 = 64.
    assert bcfg.model_shapes(load_model("llama-3.1-8b")) == {
        "heads": 32, "gqa_groups": 8, "head_dim": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128}
    # Kimi-K2 config.json: 64 heads, kv_lora_rank 512, qk_rope_head_dim 64.
    kimi = bcfg.model_shapes(load_model("kimi-k2-instruct"))
    assert (kimi["heads"], kimi["kv_lora_rank"], kimi["qk_rope_head_dim"]) == (64, 512, 64)


def test_a_default_deepseek_v3_run_has_the_models_arithmetic_intensity():
    from mla_core.kv import kv_cache_bytes
    from mla_core.presets import load_model
    from mla_core.roofline import attention_flops_per_token_layer

    cfg = brun.default_config("cpu", quick=True)
    model = load_model("deepseek-v3")
    per_token = kv_cache_bytes(model, 1, 1, "fp32", "latent") / model.num_hidden_layers
    want = attention_flops_per_token_layer(model, "absorbed") / per_token  # 120.9 flop/B at fp32 (241.8 at bf16)
    (point,) = [p for p in bcfg.plan_points(cfg, "fp32") if p["kernel"] == "mla_absorbed_decode"]
    nbytes, flops = bcfg.decode_bytes_flops("mla_absorbed_decode", point["shape"], "fp32")
    assert flops / nbytes == pytest.approx(want) == pytest.approx(241.78 / 2, rel=1e-4)


def test_page_targets_are_scaled_and_the_scaling_is_stated(monkeypatch):
    monkeypatch.setattr(bdev, "free_memory_bytes", lambda d: 64 * GiB)
    cfg = brun.default_config("cpu", quick=True, model="deepseek-v3", target_batch=1, target_context=131072)
    assert cfg.target_contexts == (131072,) and cfg.contexts == (512,)
    assert "T=512 instead of B=1 T=131,072" in cfg.scaling and "context scaled by 1/256" in cfg.scaling
    # The caller's own shapes are used as given, and nothing is called scaled.
    own = brun.default_config("cpu", quick=True, batches=(2,), contexts=(1024,))
    assert (own.batches, own.contexts, own.scaling) == ((2,), (1024,), None)


def test_cli_model_and_config_choose_the_shape(tmp_path, capsys):
    import json as _json

    from mla_core.presets import model_entries

    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(_json.dumps(model_entries()["llama-3.1-8b"]["config"]))
    for argv in (["--model", "llama-3.1-8b"], ["--config", str(cfg_file)]):
        out = tmp_path / "r.json"
        assert bench_main(["--device", "cpu", "--quick", *argv, "--kernels", "gqa_decode", "--reps", "1",
                           "--budget-s", "0.01", "--out", str(out)]) == 0
        r = validate_result(out.read_bytes())
        (g,) = r["results"]
        assert (g["shape"]["heads"], g["shape"]["kv_heads"], g["shape"]["head_dim"]) == (32, 8, 128)
    capsys.readouterr()
    assert bench_main(["--model", "nope"]) == 2
