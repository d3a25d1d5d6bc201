"""`bench --profile`: measure a model's own op shapes on the local device, as a kernel table.

    run_profile(model, tp=1, device="auto", quick=False, ...) -> ProfileRun (.table, .meta)

The table is what the step composer (mla_core.serving) reads first, before any published table
(docs/model.md, "Estimated step time"): its JSON shape, families and kinds are in
`mla_core.bench.profile_plan` and `profile.schema.json`. `meta` holds what the table does not:
when, how long, the dtype, the repetitions, and what was scaled down to fit the device (a CPU
gets the model's own widths at fewer tokens, batches and contexts) or skipped for memory.

Timing is the kernel benchmark's (`mla_core.bench.timing`: CUDA events between synchronises,
MPS synchronises, nothing to synchronise on a CPU); each latency is the median of the timed
repetitions (or the best, `statistic="min"`), after warm-up calls, with the GPU L2 flushed
between repetitions (outside the timed region) so that weights are read from memory, as each
layer's are once per step of a real model (`make_flush`: on a CPU the L3, then torch's own
dispatch path warmed again; elementwise ops, whose input is in cache in a real step, without). A latency faster than the
device's peak allows (datasheet or sanity bound, `mla_core.bench.device`) is dropped and counted
in `meta["timing_errors"]`. One run at a time on the machine (the kernel benchmark's locks).

Under torchrun the collectives are measured first over all ranks (`mla_core.bench.collectives`,
at the model's own message sizes: a token's hidden state to 8,192 tokens' worth), then rank 0
alone measures the local ops; the other ranks return None.
"""
from __future__ import annotations

import datetime as _dt
import gc
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import device as _dev
from . import kernels as _k
from . import timing as _timing
from .config import MEMORY_HEADROOM
from .errors import BenchCancelled, BenchError, OutOfMemory
from .profile_plan import (
    DTYPE_BYTES,
    FAMILIES,
    MAX_TOKENS,
    Point,
    attention_heads,
    plan_profile,
    recurrent_dims,
    validate_profile,
)

# Repetitions per point, by (device class, quick): few and short, a profile has hundreds of points.
TIMING = {
    ("cpu", True): dict(warmup=1, reps=7, min_reps=3, budget_s=0.05),
    ("cpu", False): dict(warmup=2, reps=15, min_reps=5, budget_s=0.25),
    ("gpu", True): dict(warmup=3, reps=20, min_reps=5, budget_s=0.02),
    ("gpu", False): dict(warmup=5, reps=50, min_reps=10, budget_s=0.1),
}


STATISTICS = ("median", "min")


@dataclass
class ProfileRun:
    """A measured profile: `table` (the kernel table, exactly the schema's shape) and `meta`
    (created, wall_s, device_kind, dtype, quick, timing, points, scaled, skipped, timing_errors,
    notes). `to_dict()` gives both."""

    table: dict
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"table": self.table, "meta": self.meta}


def save_profile_table(profile: ProfileRun, label: str | None = None) -> int:
    """Store a profile in the history as a run of kind "profile" (`mla_core.store.save_profile`);
    returns its run id. Raises the store's one-line errors (disk full, read-only, ...)."""
    from mla_core.store import save_profile

    # The store keeps scalars and `notes` in a run's meta: other lists become notes, one an item.
    meta, notes = {}, list(profile.meta.get("notes", []))
    for key, value in profile.meta.items():
        if key == "notes":
            continue
        if isinstance(value, (list, tuple)):
            notes += [f"{key}: {item}" for item in value]
        elif isinstance(value, dict):
            notes += [f"{key}.{k}: {v}" for k, v in value.items()]
        else:
            meta[key] = value
    if notes:
        meta["notes"] = notes
    return int(save_profile(profile.table, label=label, meta=meta))


# ---------------------------------------------------------------------------------------------


def run_profile(model=None, *, tp: int = 1, device: str = "auto", dtype: str = "auto", quick: bool = False,
                grids: dict | None = None, progress=None, cancel=None, wait: bool | float = False,
                source: str = "api", collectives: list[dict] | None = None, timing: dict | None = None,
                families: tuple[str, ...] = FAMILIES, threads: int | None = None,
                statistic: str = "median", select=None) -> ProfileRun:
    """Measure `model` (a preset id or a ModelSpec; default DeepSeek-V3) on one GPU of a TP group
    of `tp`: every point of `profile_plan.plan_profile` for the device, in `families`.

    `grids` overrides the shape grids (m, batches, contexts, prefill_tokens, prefixes,
    recurrent_tokens); `timing` the repetitions (warmup, reps, min_reps, budget_s);
    `collectives` the rows measured under torchrun ({op, bytes, ranks, latency_s}); `threads`
    the CPU threads torch uses during the run (restored after; None: torch's own); `statistic`
    which figure of the repetitions a latency is: "median" (the default) or "min" (the best: the
    steadier one on a machine other work shares, used on both sides of a comparison); `select`
    a predicate `select(family, key) -> bool` keeping only some points of the plan (None: all).
    `progress(done, total, label)` before each point and at the end; `cancel` a threading.Event.
    Raises (BenchError, one line): DeviceUnavailable, a tp that does not split the model,
    OutOfMemory, BenchCancelled, BenchBusy (another benchmark runs: `wait` as run_benchmark's).
    """
    from ..kv import tp_split_error
    from .run import _LOCK, _model

    spec = _model(model)
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 1024:
        raise BenchError(f"tp must be a whole number from 1 to 1,024, got {tp!r}")
    err = tp_split_error(spec, tp)
    if err:
        raise BenchError(err)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise BenchError(f"unknown op family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    kind = _dev.resolve_kind(device)
    dev = _dev.make_device(kind)
    dt = _dev.resolve_dtype(kind, dtype)
    free = _dev.free_memory_bytes(dev)
    budget = None if free is None else int((0.5 if kind == "cpu" else MEMORY_HEADROOM) * free)
    plan = plan_profile(spec, tp=tp, device_kind=kind, dtype=dt, quick=quick, memory_budget=budget, grids=grids)
    plan.points = [p for p in plan.points if p.family in families and (select is None or select(p.family, p.key))]
    cls = "cpu" if kind == "cpu" else "gpu"
    settings = dict(TIMING[(cls, bool(quick))], **(timing or {}))
    if statistic not in STATISTICS:
        raise BenchError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 4096):
        raise BenchError(f"threads must be a whole number from 1 to 4,096, got {threads!r}")

    got = _LOCK.acquire(blocking=wait is True) if isinstance(wait, bool) else _LOCK.acquire(timeout=float(wait))
    if not got:
        from .errors import BenchBusy

        raise BenchBusy("another benchmark is running in this process; wait for it to finish or cancel it")
    try:
        from mla_core.store import runlock
        left = wait if isinstance(wait, bool) else float(wait)
        with runlock.machine_lock(source=source, wait=left, cancel=cancel), cpu_threads(threads):
            if threads is not None:
                dev = _dev.make_device(kind)  # its `threads` as the run has them
            return _run_locked(spec, tp, dev, dt, plan, settings, quick, free, progress, cancel, collectives,
                               statistic)
    finally:
        _LOCK.release()


class cpu_threads:
    """`with cpu_threads(n):` torch runs on n CPU threads inside, its own count again after
    (None: unchanged)."""

    def __init__(self, n: int | None):
        self.n, self.old = n, None

    def __enter__(self):
        if self.n is not None:
            self.old = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            torch.set_num_threads(self.old)
        return False


def _run_locked(spec, tp, dev, dt, plan, settings, quick, free, progress, cancel, collectives,
                statistic) -> ProfileRun:
    from .run import _classify, _gib, _release_heap

    t0 = time.perf_counter()
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    load_before = _dev._load_avg()
    snap0 = _dev.cpu_snapshot()
    status = {"label": "start", "bytes": 0}
    rows: dict[str, list] = {f: [] for f in FAMILIES}
    errors: list[dict] = []
    failure = None
    try:
        try:
            _measure_all(spec, tp, dev, dt, plan, settings, progress, cancel, status, rows, errors, statistic)
        except BaseException as e:  # noqa: B902 - classified, then re-raised outside this block
            failure = _classify(e)
            if failure is None:
                if isinstance(e, Exception):
                    raise
                failure = ("control", e.with_traceback(None))
    finally:
        gc.collect()
        _dev.empty_cache(dev)
        _release_heap()
    if failure is not None:
        what, text = failure
        if what == "control":
            raise text
        if what == "cancel":
            raise BenchCancelled(f"profile cancelled during {status['label']}; its memory was freed")
        raise OutOfMemory(f"out of memory during {status['label']} on {dev.kind} (estimated {_gib(status['bytes'])}, "
                          f"free before the run {'unknown' if free is None else _gib(free)}): {text}")
    rows["collective"] = [dict(r) for r in (collectives or [])]
    info = _dev.info(dev, dt)
    if free is not None:
        info["free_memory_bytes"] = free
    table = {"kind": "profile", "device": info, "model": spec.name, "tp": tp, "engine": None, "ops": rows}
    validate_profile(table)
    others = _dev.other_cpus_busy(snap0, _dev.cpu_snapshot())
    notes = []
    if dev.kind == "cpu":
        if others is not None and others > 0.25:
            notes.append(f"other processes kept {others:.2f} CPUs busy during the run: multi-threaded kernels "
                         "waited for them, so these latencies overstate this machine's")
    if not collectives:
        notes.append("no collectives: they are measured under torchrun (`torchrun --nproc-per-node N -m mla_core "
                     "bench --profile ...`)")
    if any(p.family == "recurrent" for p in plan.points):
        notes.append("recurrent layers: a Python-stepped scan (conv, then the recurrence token by token), not the "
                     "chunked kernels engines run for prefill")
    meta = {
        "created": created,
        "wall_s": round(time.perf_counter() - t0, 3),
        "device_kind": dev.kind,
        "dtype": dt,
        "quick": bool(quick),
        "timing": settings,
        "statistic": statistic,
        "points": sum(len(v) for v in rows.values()),
        "scaled": list(plan.scaled),
        "skipped": plan.skipped,
        "timing_errors": errors,
        "notes": notes,
        "load_avg_1min": load_before,
        "other_cpus_busy": others,
    }
    return ProfileRun(table, meta)


# ---------------------------------------------------------------------------------------------


def _measure_all(spec, tp, dev, dt, plan, settings, progress, cancel, status, rows, errors, statistic) -> None:
    tdtype = _dev.TORCH_DTYPES[dt]
    clock = _timing.make_clock(dev.kind)
    gen = torch.Generator(device=dev.torch_device)
    gen.manual_seed(0)
    flush = make_flush(dev)
    timed = dict(clock=clock, flush=flush, cancel=cancel, **settings)
    timed_hot = dict(timed, flush=None)
    total = len(plan.points)
    done = [0]

    def step(p: Point) -> None:
        status["label"] = _label(p)
        status["bytes"] = p.bytes
        if cancel is not None and cancel.is_set():
            raise BenchCancelled("profile cancelled")
        if progress is not None:
            progress(done[0], total, status["label"])
        done[0] += 1

    def keep(p: Point, t: _timing.Timing) -> None:
        why = _too_fast(p, t, dev, dt)
        if why:
            errors.append({"family": p.family, **p.key, "reason": why})
        else:
            rows[p.family].append({**p.key, "latency_s": t.median_s if statistic == "median" else t.min_s})

    for family, fn in (("gemm", _gemms), ("attention_decode", _decode), ("attention_prefill", _prefill),
                       ("moe", _moe), ("elementwise", _elementwise), ("recurrent", _recurrent)):
        points = plan.by_family(family)
        if points:
            fn(points, spec=spec, tp=tp, dev=dev, tdtype=tdtype, gen=gen,
               timed=timed_hot if family == "elementwise" else timed, step=step, keep=keep)
            _dev.empty_cache(dev)
    if progress is not None:
        progress(total, total, "done")


def make_flush(dev):
    """A function, called before each repetition outside the timed region, that zeroes a buffer
    of 4x the last-level cache (GPU L2: at least 256 MiB; CPU L3: at least 64 MiB), so that an op
    reads its weights, cache or state from memory, as each layer does once per step of a real
    model. On a CPU it then runs a few tiny torch ops: evicting the L3 also evicts torch's own
    dispatch code and data, which a real step keeps hot (on a 2-core EPYC an 8 KiB RMSNorm took
    17 us hot, 253 us after the flush, 29 us after the flush and the warm-up; a 1 MiB-weight GEMM
    row 9 us hot, 35 us with its weights cold). Elementwise ops are timed without it: their input
    is the previous op's output, in cache."""
    floor = (64 << 20) if dev.kind == "cpu" else (256 << 20)
    nbytes = max(4 * (dev.llc_bytes or floor), floor)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=dev.torch_device)
    if dev.kind != "cpu":
        return buf.zero_
    a = torch.randn(4, 64)
    w, nw = torch.randn(64, 64), torch.ones(64)

    def flush() -> None:
        buf.zero_()
        for _ in range(3):  # warm torch's dispatch path again, on tensors of a few KiB
            F.linear(a, w)
            _k.rms_norm(a, nw)
            (a * a + a).sum()
            a.softmax(-1).topk(2, dim=-1)
            torch.bmm(a[None], w[None])
    return flush


def _label(p: Point) -> str:
    k = p.key
    if p.family == "gemm":
        return f"gemm m={k['m']} n={k['n']} k={k['k']}"
    if p.family == "attention_decode":
        return f"{k['kind']} decode B={k['batch']} T={k['context']}"
    if p.family == "attention_prefill":
        return f"{k['kind']} prefill {k['tokens']} after {k['prefix']}"
    if p.family == "moe":
        return f"moe {k['tokens']} tokens, {k['experts_local']} experts"
    if p.family == "recurrent":
        return f"{k['kind']} B={k['batch']} x {k['tokens']} tokens"
    return f"{p.family} {k.get('bytes', '')}"


def _too_fast(p: Point, t: _timing.Timing, dev, dt: str) -> str | None:
    if not (t.min_s > 0 and math.isfinite(t.median_s)):
        return f"non-positive or non-finite time (best {t.min_s!r} s): clock resolution"
    if p.moved / t.min_s > dev.peak_bandwidth_Bps:
        return f"timing error: {p.moved / t.min_s / 1e9:,.1f} GB/s is above the peak ({dev.peak_source})"
    if p.family in ("gemm", "attention_decode", "attention_prefill", "moe") and p.flops / t.min_s > dev.peak_flops(dt):
        return f"timing error: {p.flops / t.min_s / 1e12:,.2f} TFLOP/s is above the peak ({dev.peak_source})"
    return None


def _rn(gen, dev, tdtype, *shape, std: float = 1.0):
    x = torch.randn(*shape, dtype=tdtype, device=dev.torch_device, generator=gen)
    return x.mul_(std) if std != 1.0 else x


def _gemms(points, *, spec, tp, dev, tdtype, gen, timed, step, keep) -> None:
    by_shape: dict[tuple[int, int], list[Point]] = {}
    for p in points:
        by_shape.setdefault((p.key["n"], p.key["k"]), []).append(p)
    for (n, k), pts in by_shape.items():
        w = _rn(gen, dev, tdtype, n, k, std=k ** -0.5)
        x = _rn(gen, dev, tdtype, max(p.key["m"] for p in pts), k)
        for p in pts:
            step(p)
            xm = x[:p.key["m"]]
            keep(p, _timing.measure(lambda: F.linear(xm, w), **timed))
        del w, x


def _sdpa_backends(dev):
    """SDPA's fused backends on CUDA and CPU (the kernel benchmark's rule), else whatever runs."""
    import contextlib

    if dev.kind in ("cuda", "cpu"):
        from torch.nn.attention import sdpa_kernel

        return lambda: sdpa_kernel(_k.fused_sdpa_backends())
    return contextlib.nullcontext


def _timed_sdpa(fn, dev, timed):
    """Time an SDPA call on the fused backends; where none takes the shape, on the math one."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with warnings.catch_warnings():  # each refusing backend warns why; the fallback is the answer
        warnings.simplefilter("ignore", UserWarning)
        try:  # one untimed call decides the backend
            with _sdpa_backends(dev)():
                fn()
        except RuntimeError as e:
            if "no available kernel" not in str(e).lower():
                raise
            with sdpa_kernel([SDPBackend.MATH]):
                return _timing.measure(fn, **timed)
        with _sdpa_backends(dev)():
            return _timing.measure(fn, **timed)


def _decode(points, *, spec, tp, dev, tdtype, gen, timed, step, keep) -> None:
    a = spec.attention
    for p in points:
        step(p)
        k = p.key
        b, t, h = k["batch"], k["context"], k["num_heads"]
        if k["kind"] == "mla_absorbed":
            x = _k.mla_inputs(b, h, t, a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim,
                              tdtype, dev.torch_device, gen)
            keep(p, _timing.measure(lambda: _k.mla_absorbed_decode(*x), **timed))
        else:
            x = _k.sdpa_inputs(b, h, k["num_kv_heads"], t, k["k_dim"], tdtype, dev.torch_device, gen)
            keep(p, _timed_sdpa(lambda: _k.sdpa_decode(*x), dev, timed))
        del x
        _dev.empty_cache(dev)


def _prefill(points, *, spec, tp, dev, tdtype, gen, timed, step, keep) -> None:
    for p in points:
        step(p)
        k = p.key
        s = k["prefix"] + k["tokens"]
        q = _rn(gen, dev, tdtype, 1, k["num_heads"], k["tokens"], k["k_dim"])
        kk = _rn(gen, dev, tdtype, 1, k["num_kv_heads"], s, k["k_dim"])
        v = _rn(gen, dev, tdtype, 1, k["num_kv_heads"], s, k["v_dim"])
        window = k["window"]
        keep(p, _timed_sdpa(lambda: _k.sdpa_prefill(q, kk, v, window), dev, timed))
        del q, kk, v
        _dev.empty_cache(dev)


def _moe(points, *, spec, tp, dev, tdtype, gen, timed, step, keep) -> None:
    h = spec.hidden_size
    layouts: dict[tuple[int, int], list[Point]] = {}
    for p in points:
        layouts.setdefault((p.key["inter"], p.key["experts_local"]), []).append(p)
    for (inter, local), pts in layouts.items():
        e, topk = pts[0].key["num_experts"], pts[0].key["topk"]
        w_gu = _rn(gen, dev, tdtype, local, 2 * inter, h, std=h ** -0.5)
        w_d = _rn(gen, dev, tdtype, local, h, inter, std=inter ** -0.5)
        m = max(p.key["tokens"] for p in pts)
        x = _rn(gen, dev, tdtype, m, h)
        logits = _rn(gen, dev, tdtype, m, e)  # N(0, 1) logits: near-uniform routing
        for p in pts:
            step(p)
            n = p.key["tokens"]
            xm, lm = x[:n], logits[:n]
            keep(p, _timing.measure(lambda: _k.moe_routed(xm, lm, w_gu, w_d, topk), **timed))
        del w_gu, w_d, x, logits
        _dev.empty_cache(dev)


def _elementwise(points, *, spec, tp, dev, tdtype, gen, timed, step, keep) -> None:
    h = spec.hidden_size
    b = DTYPE_BYTES[{torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[tdtype]]
    for p in points:
        step(p)
        elements = max(1, p.key["bytes"] // b)
        width = h if elements >= h else elements
        x = _rn(gen, dev, tdtype, elements // width, width)
        w = torch.ones(width, dtype=tdtype, device=dev.torch_device)
        keep(p, _timing.measure(lambda: _k.rms_norm(x, w), **timed))
        del x, w


def _recurrent(points, *, spec, tp, dev, tdtype, gen, timed, step, keep) -> None:
    dims = recurrent_dims(spec, tp)
    w = _k.recurrent_weights(dims, tdtype, dev.torch_device, gen)
    for p in points:
        step(p)
        b, t = p.key["batch"], p.key["tokens"]
        state, conv = _k.recurrent_state(dims, b, tdtype, dev.torch_device)
        mix, gates = _k.recurrent_inputs(dims, b, t, tdtype, dev.torch_device, gen)
        conv_arg = conv if t == 1 else None
        keep(p, _timing.measure(lambda: _k.recurrent_mix(dims, mix, gates, w, state, conv_arg), **timed))
        del state, conv, mix, gates


# ---------------------------------------------------------------------------------------------
# Under torchrun: the collectives at the model's message sizes.


def collective_sizes(spec, dtype: str, quick: bool = False) -> tuple[int, ...]:
    """Message sizes (bytes) of the model's collectives: a TP all-reduce of m tokens' hidden
    states, m = 1..8,192 in powers of two (every fourth power with quick), each a multiple of the
    ranks' element count."""
    b = DTYPE_BYTES[dtype]
    ms = [2 ** i for i in range(0, 14, 3 if quick else 1)]
    if MAX_TOKENS not in ms:
        ms.append(MAX_TOKENS)
    return tuple(sorted({m * spec.hidden_size * b for m in ms}))


def measure_collectives(spec, *, device: str = "auto", dtype: str = "auto", quick: bool = False) -> list[dict] | None:
    """Every rank: the collectives over all ranks at `collective_sizes`, through
    `mla_core.bench.collectives.run_collectives` (it initialises and destroys the process group).
    Rank 0 gets the rows {op, bytes, ranks, latency_s} (latency: the median of the slowest rank's
    times), the others None."""
    from .collectives import run_collectives

    kind = _dev.resolve_kind(device) if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    dt = _dev.resolve_dtype(kind, dtype)
    result = run_collectives(sizes=collective_sizes(spec, dt, quick), device=kind, dtype=dt, quick=quick)
    if result is None:
        return None
    n = result["device"]["world_size"]
    return [{"op": r["op"], "bytes": r["bytes"], "ranks": n, "latency_s": r["median_s"]} for r in result["results"]]
