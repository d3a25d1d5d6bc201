"""Run a benchmark: plan, check memory, measure, and return the JSON-able result.

One run at a time per process (`_LOCK`): the app's sessions share a process and one GPU, and two
runs at once would measure each other. Every request is costed (`config.plan_points`) and
checked against `MEMORY_HEADROOM` (80%) of the device's free memory before any tensor exists.
Out-of-memory during a run, and cancellation, free the run's tensors (and torch's CUDA/MPS
cache) before the error is raised.
"""
from __future__ import annotations

import datetime as _dt
import gc
import math
import sys
import threading
import time
from collections.abc import Callable

import torch

from ..store import disturbance as _disturbance
from ..store import history as _history
from ..store import runlock as _runlock
from ..store.schema import SCHEMA_VERSION
from . import device as _dev
from . import kernels as _k
from . import timing as _timing
from .config import (
    CEILING_KERNELS,
    DTYPE_BYTES,
    GiB,
    MEMORY_HEADROOM,
    MiB,
    MLA_KERNELS,
    SDPA_KERNELS,
    BenchConfig,
    coerce_config,
    decode_bytes_flops,
    peak_bytes,
    plan_points,
    sdpa_kv_heads,
    stream_elements,
)
from .errors import BenchBusy, BenchCancelled, BenchError, OutOfMemory, OversizeRequest, UntrustedRun

_LOCK = threading.Lock()
UNSTEADY = 1.5  # median / best above this: the result carries a note
BUSY_CPUS = _disturbance.BUSY_CPUS  # CPUs other processes kept busy during a CPU run above which it is disturbed

Progress = Callable[[int, int, str], object]


def is_busy() -> bool:
    """True while a run holds this process's benchmark lock."""
    return _LOCK.locked()


# ---------------------------------------------------------------------------------------------
# Defaults and estimates.

DEFAULT_MODEL = "deepseek-v3"
# CPU runs are also sized by time: the heaviest decode point (the MLA recompute path, which
# rebuilds n_h (d_nope + d_v) values per cached token) may cost at most this many flops a call,
# about a second at the tens of GFLOP/s a few CPU cores reach. GPUs are sized by memory only.
CPU_POINT_FLOPS = {True: 2e10, False: 1e11}  # quick, full


def _defaults(dev: _dev.Device, quick: bool) -> dict:
    if dev.kind == "cpu":
        llc = dev.llc_bytes or 32 * MiB
        stream = min(max(4 * llc, 256 * MiB), 2 * GiB)
        return dict(batches=(1,) if quick else (4,), contexts=(4096,) if quick else (8192,),
                    stream_bytes=stream - stream % MiB, matmul_n=1024 if quick else 2048, flush_bytes=0,
                    work_bytes=16 * MiB, warmup=1 if quick else 2, reps=25 if quick else 50,
                    min_reps=7 if quick else 10, budget_s=1.0 if quick else 3.0)
    l2 = dev.llc_bytes or 64 * MiB
    flush = max(4 * l2, 256 * MiB)
    if dev.kind == "mps":
        return dict(batches=(2,) if quick else (8,), contexts=(2048,) if quick else (4096,),
                    stream_bytes=512 * MiB if quick else GiB, matmul_n=2048 if quick else 4096, flush_bytes=flush,
                    work_bytes=512 * MiB, warmup=2, reps=10 if quick else 20, min_reps=3,
                    budget_s=0.5 if quick else 2.0)
    return dict(batches=(8,) if quick else (32,), contexts=(4096,) if quick else (8192,),
                stream_bytes=max(GiB if quick else 2 * GiB, 16 * l2), matmul_n=4096 if quick else 8192,
                flush_bytes=flush, work_bytes=2 * GiB, warmup=2 if quick else 3, reps=10 if quick else 30,
                min_reps=3, budget_s=0.5 if quick else 2.0)


def _model(model):
    from ..spec import ModelSpec

    if model is None:
        model = DEFAULT_MODEL
    if isinstance(model, str):
        from ..presets import load_model

        return load_model(model)
    if not isinstance(model, ModelSpec):
        raise BenchError(f"model must be a preset id or a ModelSpec, got {type(model).__name__}")
    return model


def _targets(name: str, value) -> tuple[int, ...] | None:
    if value is None:
        return None
    vals = (value,) if isinstance(value, int) and not isinstance(value, bool) else tuple(value)
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BenchError(f"{name} must be positive whole numbers, got {v!r}")
    return vals


def default_config(device: str = "auto", quick: bool = False, model=None, target_batch=None, target_context=None,
                   **overrides) -> BenchConfig:
    """The attention shape of `model` (a preset id or a ModelSpec; default DeepSeek-V3), sized to
    `device`: `config.model_shapes(model)` (n_h, KV heads, d_h, d_c, d_r, d_nope, d_v) kept exactly,
    so that every kernel's bytes and flops per token, and hence its arithmetic intensity, are the
    model's; batch and context start at `target_batch` / `target_context` (the page passes the
    sidebar's) or the device's defaults (GPUs B 32 x T 8192, quick 8 x 4096; CPUs 4 x 8192,
    quick 1 x 4096) and are halved, batch first (down to 1), then context (down to 512), until each decode
    point fits half the free memory and, on a CPU, its heaviest point costs at most
    CPU_POINT_FLOPS a call. What was scaled, from what, and why, is `config.scaling` (None when
    nothing was), which the result and the page state. Fields given in `overrides` are used as
    given (the caller's own shapes are never shrunk: the run refuses or skips what does not fit).
    Copy/read buffers 4x the CPU cache within [256 MiB, 2 GiB] (GPUs 2 GiB or 16x the L2), the
    matmul and the L2 flush buffer (max(4x L2, 256 MiB)) shrink by halves to fit too.
    Raises DeviceUnavailable / BenchError / MLAError (an unknown preset).
    """
    from .config import DECODE_KERNELS, decode_bytes_flops, model_shapes

    kind = _dev.resolve_kind(device)
    dev = _dev.make_device(kind)
    spec = _model(model)
    base = _defaults(dev, bool(quick))
    base.update(model_shapes(spec), model=spec.name)
    tb, tc = _targets("target_batch", target_batch), _targets("target_context", target_context)
    if tb:
        base["batches"] = tuple(sorted(set(tb)))
    if tc:
        base["contexts"] = tuple(sorted(set(tc)))
    base.update(target_batches=base["batches"], target_contexts=base["contexts"])
    for k in overrides:
        base.pop(k, None)
    if "reps" in overrides and "min_reps" not in overrides and isinstance(overrides["reps"], int):
        base["min_reps"] = max(1, min(base["min_reps"], overrides["reps"]))
    cfg = coerce_config(BenchConfig(**base), device=device, quick=bool(quick), **overrides)
    if ("batches" in overrides or "contexts" in overrides) and not (
            "target_batches" in overrides or "target_contexts" in overrides):
        cfg = coerce_config(cfg, target_batches=cfg.batches, target_contexts=cfg.contexts)
    dtype = _dev.resolve_dtype(kind, cfg.dtype)
    free = _dev.free_memory_bytes(dev)
    budget = None if free is None else free // 2
    flop_cap = CPU_POINT_FLOPS[bool(quick)] if kind == "cpu" else None

    def biggest(kernels) -> int:
        sizes = [p["estimated_bytes"] for p in plan_points(cfg, dtype) if p["kernel"] in kernels]
        return max(sizes, default=0) + cfg.flush_bytes

    def heaviest() -> tuple[float, str]:
        pts = [(decode_bytes_flops(p["kernel"], p["shape"], dtype)[1], p["kernel"]) for p in plan_points(cfg, dtype)
               if p["kernel"] in DECODE_KERNELS]
        return max(pts, default=(0.0, ""))

    why: set[str] = set()
    for _ in range(64):
        over_mem = budget is not None and biggest(SDPA_KERNELS + MLA_KERNELS) > budget
        flops, kernel = heaviest()
        over_time = flop_cap is not None and flops > flop_cap
        if not (over_mem or over_time):
            break
        # Batch first: a decode step's cost is per cached token, and a long context is what the
        # model is for (and what the cache hierarchy sees); then the context, down to 512.
        if "batches" not in overrides and max(cfg.batches) > 1:
            cfg = coerce_config(cfg, batches=tuple(sorted({max(1, b // 2) for b in cfg.batches})))
        elif "contexts" not in overrides and max(cfg.contexts) > 512:
            cfg = coerce_config(cfg, contexts=tuple(sorted({max(512, t // 2) for t in cfg.contexts})))
        else:
            break  # the caller's own shapes: the run refuses or skips them (skip_oversize)
        why.add(f"half of the {_gib(free)} free memory" if over_mem else
                f"the CPU time budget of {flop_cap / 1e9:g} GFLOP a call for its heaviest point ({kernel})")
    if budget is not None:
        for field, kernels, floor in (("stream_bytes", ("copy",), 64 * MiB), ("matmul_n", ("matmul",), 512),
                                      ("flush_bytes", ("copy",), 64 * MiB)):
            while field not in overrides and getattr(cfg, field) > floor and biggest(kernels) > budget:
                cfg = coerce_config(cfg, **{field: getattr(cfg, field) // 2})
    if "scaling" in overrides:
        return cfg
    return coerce_config(cfg, scaling=scaling_text(cfg, cfg.model or spec.name, sorted(why)))


def scaling_text(cfg: BenchConfig, model_name: str, reasons: list[str]) -> str | None:
    """'<model>'s attention shape (n_h ..., ...) at B=.. T=.. instead of B=.. T=..: context
    scaled by 1/16 to fit ...' or None when batch and context are the target's."""
    if cfg.batches == cfg.target_batches and cfg.contexts == cfg.target_contexts:
        return None
    parts = []
    for name, got, want in (("context", cfg.contexts, cfg.target_contexts), ("batch", cfg.batches, cfg.target_batches)):
        if got != want:
            parts.append(f"{name} scaled by 1/{max(want) / max(got):g}" if max(got) else name)
    shape = (f"n_h {cfg.heads}, d_c {cfg.kv_lora_rank}, d_r {cfg.qk_rope_head_dim}, d_nope {cfg.qk_nope_head_dim}, "
             f"d_v {cfg.v_head_dim}; GQA {cfg.gqa_groups} KV heads, d_h {cfg.head_dim}")
    text = (f"{model_name}'s attention shape ({shape}) measured at B={_list(cfg.batches)} T={_list(cfg.contexts)} "
            f"instead of B={_list(cfg.target_batches)} T={_list(cfg.target_contexts)}: {' and '.join(parts)} to fit "
            f"{' and '.join(reasons) or 'the run settings'}; per-token bytes and flops are the model's, so the roofline "
            "points keep its arithmetic intensity")
    return text[:500]


def _list(vals) -> str:
    return ",".join(f"{v:,}" for v in vals)


def resolve_config(config=None) -> BenchConfig:
    """A BenchConfig is used as given; a dict (or None) is laid over `default_config` of its
    `device` and `quick`, so that a page or the CLI only states what it changes."""
    if isinstance(config, BenchConfig):
        return coerce_config(config)
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise BenchError(f"benchmark config must be a BenchConfig or a dict, got {type(config).__name__}")
    data = dict(config)
    device = data.pop("device", "auto")
    quick = data.pop("quick", False)
    if not isinstance(quick, bool):
        raise BenchError(f"quick must be true or false, got {quick!r}")
    if not isinstance(device, str):
        raise BenchError(f"device must be one of auto, cpu, cuda, mps; got {device!r}")
    name = data.pop("model", None)  # BenchConfig's `model` names the shape: kept as given, not loaded
    if name is not None and not isinstance(name, str):
        raise BenchError(f"model must be text, got {name!r}")
    cfg = default_config(device, quick, **data)
    if name is not None and name != cfg.model:
        cfg = coerce_config(cfg, model=name)
        if "scaling" not in data:
            cfg = coerce_config(cfg, scaling=scaling_text(cfg, name, []))
    return cfg


def estimate_bytes(config=None) -> int:
    """Peak device memory of the run `config` asks for (bytes; the largest point plus the L2
    flush buffer). Allocates nothing."""
    cfg = resolve_config(config)
    kind = _dev.resolve_kind(cfg.device)
    return peak_bytes(cfg, _dev.resolve_dtype(kind, cfg.dtype))


# ---------------------------------------------------------------------------------------------
# The run.

def run_benchmark(config=None, progress: Progress | None = None, cancel: threading.Event | None = None, *,
                  wait: bool | float = False, source: str = "api") -> dict:
    """Measure this device; return the result dict (`mla_core.bench` docstring: JSON format).

    `config`: a BenchConfig, or a dict of BenchConfig fields laid over `default_config`.
    `progress(done, total, label)` is called before each point and once at the end.
    `cancel`: a threading.Event; when set, the run stops at the next repetition.
    `wait`: False (default) raises BenchBusy at once if another run holds the lock (this
    process's, or the machine's lock file beside the history: CLI and app runs exclude each
    other, mla_core.store.runlock); True waits; a number waits that many seconds.
    `source`: 'cli', 'app' or 'api', recorded in the lock file and the history's start rows (a
    run whose process dies is reported at the next start: history.interrupted_runs()).
    The result carries `disturbed` (mla_core.store.disturbance): the evidence of other work
    during the run, the bandwidth and matmul ceilings measured again at its end among it.
    Raises (all BenchError, one line): DeviceUnavailable, OversizeRequest (before allocating
    anything), OutOfMemory, BenchCancelled, BenchBusy, UntrustedRun (disturbed beyond trust).
    """
    cfg = resolve_config(config)
    if not (wait is None or isinstance(wait, (bool, int, float))):
        raise BenchError(f"wait must be True, False or a number of seconds, got {wait!r}")
    t0 = time.monotonic()
    if wait is True:
        got = _LOCK.acquire()
    elif wait is False or wait is None:
        got = _LOCK.acquire(blocking=False)
    else:
        got = _LOCK.acquire(timeout=max(0.0, float(wait)))
    if not got:
        raise BenchBusy("another benchmark is running in this process; wait for it to finish or cancel it")
    try:
        left = bool(wait) if isinstance(wait, bool) or wait is None else max(0.0, float(wait) - (time.monotonic() - t0))
        # One run on the whole machine: the command line and every app server share this lock.
        with _runlock.machine_lock(source=source, wait=left, cancel=cancel):
            start = _history.begin_run(source, f"{cfg.device} {'quick ' if cfg.quick else ''}benchmark, "
                                               f"{len(cfg.kernels)} kernels")
            outcome = "failed"
            try:
                result = _run_locked(cfg, progress, cancel)
                refused = (result.get("disturbed") or {}).get("refused")
                if refused:
                    outcome = f"refused: {refused}"
                    raise UntrustedRun(f"run refused, its numbers cannot be trusted: {refused}")
                outcome = "measured"
                return result
            except UntrustedRun:
                raise
            except BenchCancelled:
                outcome = "cancelled"
                raise
            except BaseException as e:
                outcome = f"failed: {_one_line(e)}"
                raise
            finally:
                _history.end_run(start, outcome)
    finally:
        _LOCK.release()


def _gib(n: float) -> str:
    return f"{n / GiB:,.1f} GiB" if n >= GiB / 10 else f"{n / MiB:,.1f} MiB"


def _label(point: dict) -> str:
    s = point["shape"]
    if "batch" in s:
        return f"{point['kernel']} B={s['batch']} T={s['context']}"
    if "m" in s:
        return f"{point['kernel']} n={s['m']}"
    return f"{point['kernel']} {_gib(s['buffer_bytes'])}"


def _run_locked(cfg: BenchConfig, progress: Progress | None, cancel) -> dict:
    t_start = time.perf_counter()
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    kind = _dev.resolve_kind(cfg.device)
    dev = _dev.make_device(kind)
    dtype = _dev.resolve_dtype(kind, cfg.dtype)
    plan = plan_points(cfg, dtype)

    load_before = _dev._load_avg()  # other work on the machine, before ours starts
    # Memory check, before any allocation.
    free = _dev.free_memory_bytes(dev)
    skipped = []
    if free is not None:
        limit = int(MEMORY_HEADROOM * free)
        over = [p for p in plan if p["estimated_bytes"] + cfg.flush_bytes > limit]
        if over and not cfg.skip_oversize:
            p = max(over, key=lambda q: q["estimated_bytes"])
            raise OversizeRequest(
                f"{_label(p)} needs about {_gib(p['estimated_bytes'] + cfg.flush_bytes)} on {kind}, more than "
                f"{int(MEMORY_HEADROOM * 100)}% of its free memory ({_gib(limit)} of {_gib(free)}); lower the batch, "
                "context or heads" + (", or skip such points (--skip-oversize)" if len(plan) > 1 else ""))
        for p in over:
            skipped.append({"kernel": p["kernel"], "shape": p["shape"], "estimated_bytes": p["estimated_bytes"],
                            "reason": f"needs about {_gib(p['estimated_bytes'] + cfg.flush_bytes)}, over "
                                      f"{int(MEMORY_HEADROOM * 100)}% of free memory ({_gib(limit)})"})
        plan = [p for p in plan if p not in over]
        if not plan:
            raise OversizeRequest(f"no point of this run fits in {int(MEMORY_HEADROOM * 100)}% of the free memory "
                                  f"of {kind} ({_gib(limit)})")

    old_threads = None
    if kind == "cpu" and cfg.threads is not None:
        old_threads = torch.get_num_threads()
        torch.set_num_threads(cfg.threads)
        dev = _dev.make_device(kind)
    status = {"label": "start", "estimated_bytes": 0}
    failure = None
    snap0 = _dev.cpu_snapshot()
    try:
        try:
            out = _execute(cfg, dev, dtype, plan, progress, cancel, status)
        except BaseException as e:  # noqa: B902 - classified, then re-raised outside this block
            failure = _classify(e)
            if failure is None:
                if isinstance(e, Exception):
                    raise  # a bug: keep its traceback
                # KeyboardInterrupt, or a page's rerun/stop signal: drop the frames that hold the
                # run's tensors, free them below, then let it continue on its way.
                failure = ("control", e.with_traceback(None))
        # Here the failed run's frames (and the tensors they held) are gone.
    finally:
        gc.collect()
        _dev.empty_cache(dev)
        _release_heap()
        if old_threads is not None:
            torch.set_num_threads(old_threads)
    if failure is not None:
        what, text = failure
        if what == "control":
            raise text
        if what == "cancel":
            raise BenchCancelled(f"benchmark cancelled during {status['label']}; its memory was freed")
        raise OutOfMemory(f"out of memory during {status['label']} on {kind} (estimated "
                          f"{_gib(status['estimated_bytes'])}, free before the run "
                          f"{'unknown' if free is None else _gib(free)}): {text}; lower the batch, context or heads")

    info = _dev.info(dev, dtype)
    if free is not None:
        info["free_memory_bytes"] = free  # as checked before the run
    info["load_avg_1min"] = load_before
    others = _dev.other_cpus_busy(snap0, _dev.cpu_snapshot())
    info["other_cpus_busy"] = others
    notes = list(out["notes"])
    if cfg.scaling:
        notes.insert(0, f"scaled: {cfg.scaling}")
    elif cfg.model:
        notes.insert(0, f"{cfg.model}'s attention shape at the batch and context asked for, not scaled")
    cpus = _dev._logical_cpus()
    if kind == "cpu" and others is not None and others > BUSY_CPUS:
        notes.append(f"other processes kept {others:.2f} of the {cpus} CPUs busy during the run: multi-threaded "
                     "kernels waited for them, so these timings understate the machine")
    disturbed = _disturbance.assess({"other_cpus_busy": others, "load_avg_1min_before": load_before,
                                     "load_avg_1min_after": _dev._load_avg(),
                                     "ceiling_repeats": out.get("ceiling_repeats") or None}, cpus, kind)
    if kind == "cpu":
        notes.append("CPU: no cache flush between repetitions; a decode working set smaller than the last-level "
                     "cache may run from cache")
    notes.append("decode bytes are the cache each step reads (mla_core.kv.kv_cache_bytes) and flops "
                 "mla_core.roofline.attention_flops_per_token_layer, for the same shape")
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "mla_core.bench",
        "created": created,
        "wall_s": time.perf_counter() - t_start,
        "config": cfg.to_dict(),
        "device": info,
        "ceilings": out["ceilings"],
        "results": out["results"],
        "skipped": skipped,
        "timing_errors": out["timing_errors"],
        "notes": notes,
        "disturbed": disturbed,
    }


def _release_heap() -> None:
    """Hand the run's freed heap back to the operating system. glibc keeps freed blocks in the
    arena of the thread that used them (each app run has its own thread) until malloc_trim: an
    app server otherwise grew by 25-80 MiB over 10 runs (benchmarks/served.py). No-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        pass


def _classify(e: BaseException):
    """('oom', message) | ('cancel', message) | None (not ours to handle)."""
    if isinstance(e, BenchCancelled):
        return "cancel", str(e)
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return "oom", _one_line(e)
    if isinstance(e, RuntimeError):
        msg = str(e).lower()
        if "out of memory" in msg or "can't allocate memory" in msg or "failed to allocate" in msg:
            return "oom", _one_line(e)
    return None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:200] + ("..." if len(text) > 200 else "")


# ---------------------------------------------------------------------------------------------

def _execute(cfg: BenchConfig, dev: _dev.Device, dtype: str, plan: list[dict], progress, cancel, status) -> dict:
    """Run `plan` on `dev`. All tensors live in this frame and the ones it calls."""
    tdtype = _dev.TORCH_DTYPES[dtype]
    clock = _timing.make_clock(dev.kind)
    gen = torch.Generator(device=dev.torch_device)
    gen.manual_seed(cfg.seed)
    flush = _make_flush(cfg.flush_bytes, dev) if cfg.flush_bytes else None
    timed = dict(clock=clock, warmup=cfg.warmup, reps=cfg.reps, min_reps=cfg.min_reps, budget_s=cfg.budget_s,
                 flush=flush, cancel=cancel)
    results, timing_errors, notes = [], [], []
    ceilings: dict = {}
    total = len(plan)

    def emit(result: dict) -> None:
        if result["min_s"] > 0 and result["median_s"] > UNSTEADY * result["min_s"]:
            result.setdefault("notes", []).append(
                f"unsteady: the median is {result['median_s'] / result['min_s']:.1f}x the best time "
                "(other load on the machine?)")
        error = _timing_error(result, dev, dtype)
        if error:
            timing_errors.append({**result, "reason": error})
        else:
            results.append(result)

    def step(i: int, point: dict) -> None:
        status["label"] = _label(point)
        status["estimated_bytes"] = point["estimated_bytes"]
        if cancel is not None and cancel.is_set():
            raise BenchCancelled("benchmark cancelled")
        if progress is not None:
            progress(i, total, status["label"])

    i = 0
    # Ceilings: copy and read share one source buffer (first touch is slow on some machines).
    ceiling_points = [p for p in plan if p["kernel"] in CEILING_KERNELS]
    stream = [p for p in ceiling_points if p["kernel"] in ("copy", "read")]
    if stream:
        for r in _run_stream(stream, cfg, dev, dtype, tdtype, timed, notes, lambda j: step(j, stream[j])):
            emit(r)
    i = len(stream)
    _dev.empty_cache(dev)
    if i < total and plan[i]["kernel"] == "matmul":
        step(i, plan[i])
        emit(_run_matmul(cfg, dev, dtype, tdtype, gen, timed))
        _dev.empty_cache(dev)
        i += 1
    read = next((r for r in results if r["kernel"] == "read"), None)
    copy = next((r for r in results if r["kernel"] == "copy"), None)
    mm = next((r for r in results if r["kernel"] == "matmul"), None)
    bw_src = read or copy
    ceilings = {
        "copy_GBps": copy["achieved_GBps"] if copy else None,
        "read_GBps": read["achieved_GBps"] if read else None,
        "matmul_TFLOPs": mm["achieved_TFLOPs"] if mm else None,
        "predicted_from": (f"{bw_src['kernel']} bandwidth (median) and matmul throughput (median), measured in "
                           "this run" if bw_src and mm else None),
    }
    bw = bw_src["achieved_GBps"] * 1e9 if bw_src else None
    peak = mm["achieved_TFLOPs"] * 1e12 if mm else None
    if (bw is None or peak is None) and any(p["kernel"] not in CEILING_KERNELS for p in plan):
        notes.append("predicted_s is null: it needs the read (or copy) and matmul ceilings of the same run")

    # Decode points, grouped so that both MLA kernels share one set of inputs.
    while i < total:
        point = plan[i]
        k = point["kernel"]
        if k in SDPA_KERNELS:
            step(i, point)
            emit(_run_sdpa(k, point["shape"], cfg, dev, dtype, tdtype, gen, timed, bw, peak))
            _dev.empty_cache(dev)  # the point's tensors are gone: hand their blocks back (no fragmentation)
            i += 1
            continue
        group = [point]
        while (i + len(group) < total and plan[i + len(group)]["kernel"] in MLA_KERNELS
               and plan[i + len(group)]["shape"]["batch"] == point["shape"]["batch"]
               and plan[i + len(group)]["shape"]["context"] == point["shape"]["context"]):
            group.append(plan[i + len(group)])
        for r in _run_mla(group, cfg, dev, dtype, tdtype, gen, timed, bw, peak, lambda j: step(i + j, group[j])):
            emit(r)
        _dev.empty_cache(dev)
        i += len(group)
    repeats = _repeat_ceilings(stream, plan, results, cfg, dev, dtype, tdtype, gen, timed, cancel,
                               (lambda label: progress(total, total, label)) if progress is not None else None)
    if progress is not None:
        progress(total, total, "done")
    return {"results": results, "timing_errors": timing_errors, "ceilings": ceilings, "notes": notes,
            "ceiling_repeats": repeats}


def _repeat_ceilings(stream, plan, results, cfg, dev, dtype, tdtype, gen, timed, cancel, say) -> dict:
    """The bandwidth and matmul ceilings measured again after the decode points: their spread
    is the run's noise check (mla_core.store.disturbance). {name: [first, again]}."""
    def check(_j=None):
        if cancel is not None and cancel.is_set():
            raise BenchCancelled("benchmark cancelled")

    first = {r["kernel"]: r for r in results if r["kernel"] in CEILING_KERNELS}
    out: dict = {}
    if stream:
        if say is not None:
            say("bandwidth again (noise check)")
        for r in _run_stream(stream, cfg, dev, dtype, tdtype, timed, [], check):
            if r["kernel"] in first and _timing_error(r, dev, dtype) is None:
                out[f"{r['kernel']}_GBps"] = [first[r["kernel"]]["achieved_GBps"], r["achieved_GBps"]]
        _dev.empty_cache(dev)
    if "matmul" in first and any(p["kernel"] == "matmul" for p in plan):
        if say is not None:
            say("matmul again (noise check)")
        check()
        r = _run_matmul(cfg, dev, dtype, tdtype, gen, timed)
        if _timing_error(r, dev, dtype) is None:
            out["matmul_TFLOPs"] = [first["matmul"]["achieved_TFLOPs"], r["achieved_TFLOPs"]]
        _dev.empty_cache(dev)
    return out


def _make_flush(nbytes: int, dev: _dev.Device):
    """A function that zeroes a buffer of `nbytes` (larger than the GPU L2), evicting what the
    previous repetition left in the cache. Called between repetitions, outside the timed region."""
    buf = torch.empty(nbytes, dtype=torch.uint8, device=dev.torch_device)
    return buf.zero_


def _result(kernel: str, dtype: str, shape: dict, timing: _timing.Timing, nbytes: int, flops: int, **extra) -> dict:
    med, best = timing.median_s, timing.min_s
    ok = med > 0 and best > 0
    return {
        "kernel": kernel,
        "dtype": dtype,
        "shape": dict(shape),
        "median_s": med,
        "min_s": best,
        "reps": len(timing.times_s),
        "warmup": timing.warmup,
        "bytes": int(nbytes),
        "flops": int(flops),
        "achieved_GBps": nbytes / med / 1e9 if ok else None,
        "achieved_TFLOPs": flops / med / 1e12 if ok else None,
        **extra,
    }


def _timing_error(r: dict, dev: _dev.Device, dtype: str) -> str | None:
    """Why a result cannot be real (faster than the datasheet or the sanity bound), or None."""
    if not (r["min_s"] > 0 and r["median_s"] > 0 and math.isfinite(r["median_s"])):
        return f"non-positive or non-finite time (median {r['median_s']!r} s, best {r['min_s']!r} s): clock resolution"
    bw = r["bytes"] / r["min_s"]
    fl = r["flops"] / r["min_s"]
    if bw > dev.peak_bandwidth_Bps:
        return (f"timing error: best time gives {bw / 1e9:,.1f} GB/s, above the peak "
                f"{dev.peak_bandwidth_Bps / 1e9:,.1f} GB/s ({dev.peak_source})")
    if fl > dev.peak_flops(dtype):
        return (f"timing error: best time gives {fl / 1e12:,.2f} TFLOP/s, above the peak "
                f"{dev.peak_flops(dtype) / 1e12:,.1f} TFLOP/s ({dev.peak_source})")
    return None


def _prediction(nbytes: int, flops: int, bw: float | None, peak: float | None) -> dict:
    if bw is None or peak is None:
        return {"predicted_s": None, "predicted_bound": None}
    t_mem, t_comp = nbytes / bw, flops / peak
    return {"predicted_s": max(t_mem, t_comp), "predicted_bound": "memory" if t_mem >= t_comp else "compute"}


def _run_matmul(cfg: BenchConfig, dev, dtype: str, tdtype, gen, timed: dict) -> dict:
    n = cfg.matmul_n
    a = torch.randn(n, n, dtype=tdtype, device=dev.torch_device, generator=gen)
    bm = torch.randn(n, n, dtype=tdtype, device=dev.torch_device, generator=gen)
    c = torch.empty(n, n, dtype=tdtype, device=dev.torch_device)
    timing = _timing.measure(lambda: torch.mm(a, bm, out=c), **timed)
    # Bytes: A and B read once, C written once (the least a matmul can move).
    return _result("matmul", dtype, {"m": n, "n": n, "k": n}, timing, 3 * n * n * DTYPE_BYTES[dtype], 2 * n ** 3)


def _run_stream(points: list[dict], cfg: BenchConfig, dev, dtype: str, tdtype, timed: dict, notes: list,
                step) -> list[dict]:
    """copy (dst.copy_(src), 2N bytes) and read (src.sum(), N bytes) on buffers of
    `stream_bytes`. Buffers are written before timing, so first-touch page faults are paid
    here, not in a timed repetition. On CPUs, numpy.copyto on the same buffers is timed in
    alternation with the torch copy as a cross-check (`reference_GBps`)."""
    b = DTYPE_BYTES[dtype]
    n = stream_elements(cfg, dtype)
    shape = {"elements": n, "buffer_bytes": n * b}
    src = torch.full((n,), 1.0, dtype=tdtype, device=dev.torch_device)
    out = []
    for j, point in enumerate(points):
        step(j)
        if point["kernel"] == "read":
            timing = _timing.measure(lambda: src.sum(), **timed)
            out.append(_result("read", dtype, shape, timing, n * b, 0))
            continue
        dst = torch.zeros(n, dtype=tdtype, device=dev.torch_device)
        ref = _numpy_views(src, dst) if dev.kind == "cpu" else None
        extra = {}
        if ref is None:
            timing = _timing.measure(lambda: dst.copy_(src), **timed)
        else:
            import numpy as np

            a, d = ref
            timing, t_np = _timing.measure_interleaved([lambda: dst.copy_(src), lambda: np.copyto(d, a)], **timed)
            extra = {"reference_GBps": 2 * n * b / t_np.median_s / 1e9,
                     "reference": "numpy.copyto on the same buffers, timed in alternation"}
        del dst, ref
        out.append(_result("copy", dtype, shape, timing, 2 * n * b, 0, **extra))
    if dev.llc_bytes:
        ratio = n * b / dev.llc_bytes
        level = "last-level cache" if dev.kind == "cpu" else "L2"
        notes.append(f"bandwidth buffers: {_gib(n * b)} each, {ratio:.2g}x the {_gib(dev.llc_bytes)} {level}"
                     + (" (under 4x: may measure the cache)" if ratio < 4 else ""))
    return out


def _numpy_views(src, dst):
    """numpy views of two CPU tensors (bf16 seen as int16: a copy moves bytes), or None."""
    try:
        import numpy  # noqa: F401

        if src.dtype == torch.bfloat16:
            return src.view(torch.int16).numpy(), dst.view(torch.int16).numpy()
        return src.numpy(), dst.numpy()
    except (ImportError, RuntimeError, TypeError):
        return None


def _run_sdpa(kernel: str, shape: dict, cfg: BenchConfig, dev, dtype: str, tdtype, gen, timed: dict, bw, peak) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _k.sdpa_inputs(shape["batch"], shape["heads"], sdpa_kv_heads(kernel, cfg), shape["context"],
                             shape["head_dim"], tdtype, dev.torch_device, gen)
    notes = []
    fn = lambda: _k.sdpa_decode(q, k, v)  # noqa: E731
    if dev.kind in ("cuda", "cpu"):
        # Fused backends only, so that a silent fall back to the math kernel cannot happen;
        # if none takes the shape, run the math backend and say so.
        try:
            with sdpa_kernel(_k.fused_sdpa_backends()):
                timing = _timing.measure(fn, **timed)
        except RuntimeError as e:
            if _classify(e) is not None or "no available kernel" not in str(e).lower():
                raise
            notes.append("no fused SDPA backend takes this shape/dtype: the math backend ran (slow)")
            with sdpa_kernel([SDPBackend.MATH]):
                timing = _timing.measure(fn, **timed)
    else:
        timing = _timing.measure(fn, **timed)
    nbytes, flops = decode_bytes_flops(kernel, shape, dtype)
    extra = {**_prediction(nbytes, flops, bw, peak)}
    if notes:
        extra["notes"] = notes
    return _result(kernel, dtype, shape, timing, nbytes, flops, **extra)


def _run_mla(group: list[dict], cfg: BenchConfig, dev, dtype: str, tdtype, gen, timed: dict, bw, peak, step) -> list:
    shape0 = group[0]["shape"]
    x = _k.mla_inputs(shape0["batch"], shape0["heads"], shape0["context"], shape0["kv_lora_rank"],
                      shape0["qk_rope_head_dim"], shape0["qk_nope_head_dim"], shape0["v_head_dim"], tdtype,
                      dev.torch_device, gen)
    chunk = None
    outputs: dict = {}
    timings: dict = {}
    for j, point in enumerate(group):
        step(j)
        kernel = point["kernel"]
        if kernel == "mla_absorbed_decode":
            fn = lambda: outputs.__setitem__(kernel, _k.mla_absorbed_decode(*x))  # noqa: E731
        else:
            chunk = point["shape"]["chunk_tokens"]
            fn = lambda: outputs.__setitem__(kernel, _k.mla_recompute_decode(*x, chunk=chunk))  # noqa: E731
        timings[kernel] = _timing.measure(fn, **timed)
    # Agreement of the two paths on the same weights and cache (run untimed where not measured).
    absorbed = outputs.get("mla_absorbed_decode")
    if absorbed is None:
        absorbed = _k.mla_absorbed_decode(*x)
    recompute = outputs.get("mla_recompute_decode")
    if recompute is None:
        from .config import recompute_chunk_tokens

        chunk = recompute_chunk_tokens(cfg, shape0["batch"], shape0["context"], dtype)
        recompute = _k.mla_recompute_decode(*x, chunk=chunk)
    err = _k.max_rel_err(absorbed, recompute)
    tol = _k.REL_ERR_TOLERANCE[dtype]
    results = []
    for point in group:
        kernel = point["kernel"]
        nbytes, flops = decode_bytes_flops(kernel, point["shape"], dtype)
        extra = {**_prediction(nbytes, flops, bw, peak)}
        if kernel == "mla_absorbed_decode":
            extra.update(max_rel_err=err if math.isfinite(err) else None, rel_err_tolerance=tol)
            if not (err <= tol):
                extra["notes"] = [f"absorbed and recompute outputs differ by {err:.3g} (tolerance {tol:g} at {dtype})"]
        results.append(_result(kernel, dtype, point["shape"], timings[kernel], nbytes, flops, **extra))
    return results
