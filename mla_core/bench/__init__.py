"""mla_core.bench: the live torch microbenchmark (the only part of mla_core that imports torch).

It measures this machine's ceilings (copy and read bandwidth, matmul throughput) and one decode
step of MHA, GQA, MQA and MLA (absorbed and recompute) at the same batch B and context T, and
sets each measurement beside the roofline time that mla_core's own formulas predict from the
measured ceilings (docs/model.md, "Measuring on the local device").

Python API (what the app's benchmark page uses; names are imported lazily, and only `run`,
`device`, `timing`, `kernels` and `collectives`' measurement import torch):

    available_devices() -> list[str]                 e.g. ['cuda', 'cpu']; always ends in 'cpu'
    device_info(device='auto', dtype='auto') -> dict the `device` block below; allocates nothing
    default_config(device='auto', quick=False, **overrides) -> BenchConfig
                                                     DeepSeek-V3 shapes sized to the device
    estimate_bytes(config) -> int                    peak device memory of that run
    run_benchmark(config=None, progress=None, cancel=None, *, wait=False) -> dict
        config    BenchConfig, or a dict of its fields laid over default_config(device, quick)
        progress  progress(done: int, total: int, label: str), before each point and at the end
        cancel    threading.Event: the run stops at the next repetition, frees its tensors
        wait      False: raise BenchBusy at once if another run holds the process lock or
                  the machine's lock file (runlock: CLI and app share it);
                  True: wait for it; a number: wait that many seconds
        source    'cli' | 'app' | 'api' (who runs it: lock file and history start rows)
    is_busy() -> bool                                a run holds the lock now
    validate_result(obj_or_bytes) -> dict            check an imported result (schema, 1 MiB cap)
    plan_points(config, dtype) -> list[dict]         every point with its estimated bytes
    memory_check(estimated_bytes, free_bytes) -> dict whether a planned run fits (80% of free)
    BenchConfig, coerce_config, KERNELS

The torch-free half (the SQLite history, the result schemas, the report the page draws,
engine-result import, the machine's run lock, the disturbance assessment, kernel profiles)
is `mla_core.store`, which never imports this package; this package imports it.

Errors (all `mla_core.errors.MLAError`, one line): BenchError and its subclasses BenchBusy,
BenchCancelled, InvalidResult (these four from mla_core.store.errors), DeviceUnavailable,
OversizeRequest (refused before any allocation: the planned peak exceeds 80% of free memory),
OutOfMemory (raised mid-run; tensors freed, CUDA/MPS cache emptied), UntrustedRun (a run
disturbed beyond trust: refused).

Command line: `python -m mla_core bench [--device auto|cpu|cuda|mps] [--quick] [--dtype D]
[--batch B[,B...]] [--context N[,N...]] [--heads H] [--kernels K,...] [--skip-oversize]
[--out FILE.json] [--json] [--save [--label TEXT]]`, and `--validate FILE.json` to check a
file (see `mla_core.bench.cli`; `cli.render_table(result)` prints a result as the CLI does).

Result JSON (schema: result.schema.json; schema_version 1). Units: seconds, GB/s = 1e9 B/s,
TFLOP/s = 1e12 flop/s, bytes as integers.

    {"schema_version": 1, "tool": "mla_core.bench", "created": "2026-01-01T12:00:00Z",
     "wall_s": 41.2,
     "config": {...BenchConfig fields...},
     "device": {"kind": "cuda", "backend": "cuda", "name": "NVIDIA H200", "torch_version": "2.13.0",
                "runtime_version": "12.8", "dtype": "bf16", "total_memory_bytes": ..., "free_memory_bytes": ...,
                "llc_bytes": ..., "threads": null, "load_avg_1min": 0.1, "other_cpus_busy": 0.02,
                "preset": "h200", "peak_bandwidth_GBps": 4800.0, "peak_TFLOPs": 989.4,
                "peak_source": "datasheet of preset h200 ..."},
        (load_avg_1min: before the run; other_cpus_busy: CPUs that other processes or the
        hypervisor kept busy during it, from /proc/stat; above 0.25 on a CPU run a note says the
        multi-threaded timings understate the machine)
     "ceilings": {"copy_GBps": ..., "read_GBps": ..., "matmul_TFLOPs": ..., "predicted_from": "..."},
     "results": [
        {"kernel": "copy", "dtype": "bf16", "shape": {"elements": N, "buffer_bytes": B},
         "median_s": ..., "min_s": ..., "reps": 30, "warmup": 3, "bytes": 2*B, "flops": 0,
         "achieved_GBps": ..., "achieved_TFLOPs": 0.0},
        {"kernel": "mla_absorbed_decode", "dtype": "bf16",
         "shape": {"batch": 32, "context": 8192, "query_len": 1, "heads": 128, "kv_lora_rank": 512,
                   "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
         "median_s": ..., "min_s": ..., "bytes": ..., "flops": ..., "achieved_GBps": ...,
         "achieved_TFLOPs": ..., "predicted_s": ..., "predicted_bound": "memory",
         "max_rel_err": ..., "rel_err_tolerance": 0.05}, ...],
     "skipped": [{"kernel", "shape", "estimated_bytes", "reason"}],     (--skip-oversize)
     "timing_errors": [{...result..., "reason": "timing error: ... above the peak ..."}],
     "notes": ["..."]}

Kernels: copy (bytes 2N: read + write), read (sum; N), matmul (n^3 at the run dtype; bytes
3 n^2 b), mha_decode / gqa_decode / mqa_decode (SDPA, K/V read once), mla_absorbed_decode,
mla_recompute_decode. Decode `bytes` = mla_core.kv.kv_cache_bytes and `flops` =
B * T * mla_core.roofline.attention_flops_per_token_layer of a one-layer synthetic model of the
same shape. `predicted_s = max(bytes / read bandwidth, flops / matmul throughput)`, both the
medians measured in the same run (copy bandwidth if read was not run). `max_rel_err` =
max|absorbed - recompute| / max|recompute| on the same weights and cache, with the tolerance
for the dtype (fp32 1e-4). A measurement faster than the device's peak (datasheet, or a
stated sanity bound) goes to `timing_errors`, never to `results`.
"""
from __future__ import annotations

_PUBLIC = {
    "available_devices": "device",
    "device_info": "device",
    "default_config": "run",
    "estimate_bytes": "run",
    "run_benchmark": "run",
    "is_busy": "run",
    "validate_result": "..store.schema",
    "result_schema": "..store.schema",
    "SCHEMA_VERSION": "..store.schema",
    "BenchConfig": "config",
    "coerce_config": "config",
    "plan_points": "config",
    "KERNELS": "config",
    "memory_check": "config",
    "BenchError": "errors",
    "UntrustedRun": "errors",
    "DeviceUnavailable": "errors",
    "OversizeRequest": "errors",
    "OutOfMemory": "errors",
    "BenchBusy": "errors",
    "BenchCancelled": "errors",
    "InvalidResult": "errors",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    import importlib

    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'mla_core.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module if module.startswith(".") else f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
