"""What a benchmark run is asked to do, and what it will cost, before torch is touched.

`BenchConfig` is a flat frozen dataclass whose field names are the HF config names where one
exists (`kv_lora_rank`, `qk_rope_head_dim`, ...). Everything here is pure Python: the page can
build, validate and cost a request without importing torch.

The decode kernels' bytes and flops come from the analytic core, never from this package:
`decode_bytes_flops` builds a one-layer synthetic `ModelSpec` of the same shape and asks
`mla_core.kv.kv_cache_bytes` (the cache the step reads) and
`mla_core.roofline.attention_flops_per_token_layer` (docs/model.md, "Decode step roofline").
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from ..kv import kv_cache_bytes
from ..roofline import attention_flops_per_token_layer
from ..config import synthetic_model
from ..spec import ModelSpec
from ..store.schema import DECODE_KERNELS, KERNELS
from .errors import BenchError

CEILING_KERNELS = KERNELS[:3]
SDPA_KERNELS = DECODE_KERNELS[:3]
MLA_KERNELS = DECODE_KERNELS[3:]
MLA_PATH = {"mla_absorbed_decode": "absorbed", "mla_recompute_decode": "recompute"}

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

MEMORY_HEADROOM = 0.8  # a run may plan to use at most this share of the device's free memory

# Limits on a request: far beyond any real decode step; past them the input is a typo.
MAX_BATCH = 4096
MAX_CONTEXT = 1 << 24
MAX_HEADS = 1024
MAX_DIM = 8192
MAX_SHAPES = 64  # batches x contexts points in one sweep
MAX_REPS = 10_000

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark request. Defaults are DeepSeek-V3 attention; `default_config(device)`
    (in `mla_core.bench.run`) sizes the rest to the device."""

    device: str = "auto"  # auto (cuda, else mps, else cpu) | cpu | cuda | mps
    dtype: str = "auto"  # auto: bf16 on CUDA/ROCm (fp16 without bf16), fp16 on MPS, fp32 on CPUs
    quick: bool = False  # smaller shapes and fewer repetitions (the defaults only)
    batches: tuple[int, ...] = (32,)  # B values; every decode kernel runs at each (B, T)
    contexts: tuple[int, ...] = (8192,)  # T values (tokens cached per sequence)
    heads: int = 128  # n_h, query heads of every decode kernel
    gqa_groups: int = 8  # n_kv of gqa_decode (must divide heads)
    head_dim: int = 128  # d_h of the MHA/GQA/MQA kernels
    kv_lora_rank: int = 512  # d_c, the latent
    qk_rope_head_dim: int = 64  # d_r, the decoupled RoPE key shared by all heads
    qk_nope_head_dim: int = 128  # d_nope, per-head content q/k width
    v_head_dim: int = 128  # d_v, per-head value width
    kernels: tuple[str, ...] = KERNELS  # which kernels to run, in KERNELS order
    stream_bytes: int = GiB  # bytes of one copy/read buffer (far larger than the LLC)
    matmul_n: int = 8192  # matmul is n x n x n
    flush_bytes: int = 0  # a buffer zeroed between repetitions to clear the GPU L2 (0: none)
    work_bytes: int = GiB  # scratch budget of one recompute chunk (rebuilt K and V)
    warmup: int = 2  # untimed-for-results calls before the timed ones
    reps: int = 20  # timed repetitions at most
    min_reps: int = 3  # timed repetitions at least, whatever the budget
    budget_s: float = 2.0  # seconds per kernel point after which no more reps start (min_reps met)
    skip_oversize: bool = False  # sweep: skip points that do not fit instead of refusing the run
    seed: int = 0  # torch.manual_seed for the random inputs
    threads: int | None = None  # CPU: torch.set_num_threads for the run (None: torch's default)
    model: str | None = None  # the model whose attention shape this is (default_config(model=...))
    target_batches: tuple[int, ...] = ()  # the model's batch and context asked for, before scaling
    target_contexts: tuple[int, ...] = ()
    scaling: str | None = None  # what was scaled down from the target, and why (None: not scaled)

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("batches", "contexts", "kernels", "target_batches", "target_contexts"):
            d[k] = list(d[k])
        return d


_INT_FIELDS = {
    "heads": (1, MAX_HEADS), "gqa_groups": (1, MAX_HEADS), "head_dim": (1, MAX_DIM),
    "kv_lora_rank": (1, MAX_DIM), "qk_rope_head_dim": (1, MAX_DIM), "qk_nope_head_dim": (1, MAX_DIM),
    "v_head_dim": (1, MAX_DIM), "stream_bytes": (4096, 1 << 40), "matmul_n": (1, 1 << 16),
    "flush_bytes": (0, 1 << 36), "work_bytes": (MiB, 1 << 40), "warmup": (0, 1000),
    "reps": (1, MAX_REPS), "min_reps": (1, MAX_REPS), "seed": (0, 2**63 - 1),
}


def coerce_config(config=None, **overrides) -> BenchConfig:
    """A checked `BenchConfig` from a BenchConfig, a dict (e.g. the `config` of a result JSON,
    or the page's widgets) or None (the defaults), with `overrides` applied.

    Lists become tuples; kernels are put in KERNELS order. Raises BenchError (one line) on an
    unknown field, a wrong type or a value out of range.
    """
    if config is None:
        base = BenchConfig()
        data: dict = {}
    elif isinstance(config, BenchConfig):
        base, data = config, {}
    elif isinstance(config, dict):
        base, data = BenchConfig(), dict(config)
    else:
        raise BenchError(f"benchmark config must be a BenchConfig or a dict, got {type(config).__name__}")
    data.update(overrides)
    known = {f.name for f in fields(BenchConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise BenchError(f"unknown benchmark setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
    for k in ("batches", "contexts", "kernels", "target_batches", "target_contexts"):
        if k in data and isinstance(data[k], (list, tuple)):
            data[k] = tuple(data[k])
        elif k in data and isinstance(data[k], (int, str)) and not isinstance(data[k], bool):
            data[k] = (data[k],)
    cfg = replace(base, **data)
    _check(cfg)
    order = {k: i for i, k in enumerate(KERNELS)}
    return replace(cfg, kernels=tuple(sorted(set(cfg.kernels), key=order.__getitem__)))


def _check_int(name: str, v, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise BenchError(f"{name} must be a whole number, got {_short(v)}")
    if not lo <= v <= hi:
        raise BenchError(f"{name} must be between {lo:,} and {hi:,}, got {v:,}")


def _check(c: BenchConfig) -> None:
    if c.device not in DEVICE_CHOICES:
        raise BenchError(f"device must be one of {', '.join(DEVICE_CHOICES)}; got {_short(c.device)}")
    if c.dtype not in DTYPE_CHOICES:
        raise BenchError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}; got {_short(c.dtype)}")
    for name in ("quick", "skip_oversize"):
        if not isinstance(getattr(c, name), bool):
            raise BenchError(f"{name} must be true or false, got {_short(getattr(c, name))}")
    for name, lo, hi in (("batches", 1, MAX_BATCH), ("contexts", 1, MAX_CONTEXT)):
        vals = getattr(c, name)
        if not isinstance(vals, tuple) or not vals:
            raise BenchError(f"{name} must be a non-empty list of whole numbers")
        for v in vals:
            _check_int(name[:-1] if name == "contexts" else "batch", v, lo, hi)
        if len(set(vals)) != len(vals):
            raise BenchError(f"{name} lists a value twice")
    if len(c.batches) * len(c.contexts) > MAX_SHAPES:
        raise BenchError(f"a sweep may hold at most {MAX_SHAPES} (batch, context) points, "
                         f"got {len(c.batches)} x {len(c.contexts)}")
    for name, (lo, hi) in _INT_FIELDS.items():
        _check_int(name, getattr(c, name), lo, hi)
    if c.heads % c.gqa_groups:
        raise BenchError(f"gqa_groups must divide heads={c.heads}, got {c.gqa_groups}")
    if c.min_reps > c.reps:
        raise BenchError(f"min_reps ({c.min_reps}) must not exceed reps ({c.reps})")
    if isinstance(c.budget_s, bool) or not isinstance(c.budget_s, (int, float)) or not (
            math.isfinite(c.budget_s) and 0 < c.budget_s <= 3600):
        raise BenchError(f"budget_s must be a number of seconds in (0, 3600], got {_short(c.budget_s)}")
    if c.threads is not None:
        _check_int("threads", c.threads, 1, 4096)
    for name in ("model", "scaling"):
        v = getattr(c, name)
        if v is not None and (not isinstance(v, str) or len(v) > (100 if name == "model" else 500)):
            raise BenchError(f"{name} must be text of at most {100 if name == 'model' else 500} characters")
    for name, hi in (("target_batches", MAX_BATCH), ("target_contexts", MAX_CONTEXT)):
        vals = getattr(c, name)
        if not isinstance(vals, tuple) or len(vals) > MAX_SHAPES:
            raise BenchError(f"{name} must be a list of at most {MAX_SHAPES} whole numbers")
        for v in vals:
            _check_int(name, v, 1, hi)
    if not isinstance(c.kernels, tuple) or not c.kernels:
        raise BenchError("kernels must list at least one of " + ", ".join(KERNELS))
    for k in c.kernels:
        if k not in KERNELS:
            raise BenchError(f"unknown kernel {_short(k)}; choose from {', '.join(KERNELS)}")


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def model_shapes(model: ModelSpec) -> dict:
    """The BenchConfig fields of `model`'s attention shape (HF config names): heads = n_h,
    gqa_groups = the model's KV heads when it is GQA, else the largest divisor of n_h up to 8
    (`kv.default_gqa_groups`), head_dim = d_h (an MLA model's d_nope, the width its MHA/GQA/MQA
    counterfactuals are costed at), and the MLA widths d_c, d_r, d_nope, d_v: the model's own
    when it is MLA, else its MLA counterfactual (`spec.as_variant(model, "mla")`: DeepSeek-V2
    Table 1's d_c = 4 d_h, d_r = d_h / 2). Per-token bytes and flops, hence every kernel's
    arithmetic intensity, are those of the model; only batch and context are left to size."""
    from ..kv import default_gqa_groups
    from ..spec import as_variant

    a = model.attention
    mla = as_variant(model, "mla").attention
    return {"heads": a.num_attention_heads, "gqa_groups": default_gqa_groups(model), "head_dim": a.head_dim,
            "kv_lora_rank": mla.kv_lora_rank, "qk_rope_head_dim": mla.qk_rope_head_dim,
            "qk_nope_head_dim": mla.qk_nope_head_dim, "v_head_dim": mla.v_head_dim}


# ---------------------------------------------------------------------------------------------
# Shapes, bytes and flops of each point (pure; the same numbers the analytic pages show).

def sdpa_kv_heads(kernel: str, config: BenchConfig) -> int:
    """n_kv of an SDPA kernel: n_h (MHA), gqa_groups (GQA) or 1 (MQA)."""
    return {"mha_decode": config.heads, "gqa_decode": config.gqa_groups, "mqa_decode": 1}[kernel]


def decode_shape(kernel: str, config: BenchConfig, batch: int, context: int, dtype: str) -> dict:
    """The `shape` dict a decode result carries (one query token per sequence)."""
    shape = {"batch": batch, "context": context, "query_len": 1, "heads": config.heads}
    if kernel in SDPA_KERNELS:
        shape.update(kv_heads=sdpa_kv_heads(kernel, config), head_dim=config.head_dim)
    else:
        shape.update(kv_lora_rank=config.kv_lora_rank, qk_rope_head_dim=config.qk_rope_head_dim,
                     qk_nope_head_dim=config.qk_nope_head_dim, v_head_dim=config.v_head_dim)
        if kernel == "mla_recompute_decode":
            shape["chunk_tokens"] = recompute_chunk_tokens(config, batch, context, dtype)
    return shape


def decode_model(kernel: str, shape: dict, dtype: str = "bf16") -> ModelSpec:
    """A one-layer synthetic model of `shape` (through `mla_core.spec.synthetic_model`)."""
    if kernel in SDPA_KERNELS:
        kind = {"mha_decode": "mha", "gqa_decode": "gqa", "mqa_decode": "mqa"}[kernel]
        return synthetic_model(kind, layers=1, heads=shape["heads"], head_dim=shape["head_dim"],
                               kv_heads=shape["kv_heads"] if kind == "gqa" else None, torch_dtype=dtype)
    if kernel in MLA_KERNELS:
        return synthetic_model("mla", layers=1, heads=shape["heads"], kv_lora_rank=shape["kv_lora_rank"],
                               rope_dim=shape["qk_rope_head_dim"], nope_dim=shape["qk_nope_head_dim"],
                               v_dim=shape["v_head_dim"], torch_dtype=dtype)
    raise BenchError(f"{kernel} is not a decode kernel")


def decode_bytes_flops(kernel: str, shape: dict, dtype: str) -> tuple[int, int]:
    """(bytes, flops) of one decode step of `kernel` at `shape`, from mla_core's formulas.

    bytes = `kv.kv_cache_bytes(model, T, B, dtype, "latent")`: the cache the step reads (MHA/GQA/
    MQA: K and V of n_kv heads; MLA: the latent d_c plus the shared RoPE key d_r). Queries,
    outputs, the absorbed weights and intermediates are not counted (docs/model.md convention).
    flops = B * T * `roofline.attention_flops_per_token_layer(model, path)`, path "absorbed" or
    "recompute" for MLA (the recompute adds the K/V up-projection of every cached token).
    """
    model = decode_model(kernel, shape, dtype)
    batch, context = shape["batch"], shape["context"]
    nbytes = kv_cache_bytes(model, context, batch, dtype, "latent")
    flops = batch * context * attention_flops_per_token_layer(model, MLA_PATH.get(kernel, "absorbed"))
    return nbytes, flops


def recompute_chunk_tokens(config: BenchConfig, batch: int, context: int, dtype: str) -> int:
    """Cached tokens the recompute path rebuilds at once, so that the rebuilt K and V (plus
    scores) fit `work_bytes`; a multiple of 64 when over 64, never more than T."""
    b = DTYPE_BYTES[dtype]
    per_token = batch * config.heads * ((config.qk_nope_head_dim + config.v_head_dim) * b + 3 * b + 12)
    chunk = max(1, config.work_bytes // per_token)
    if chunk > 64:
        chunk -= chunk % 64
    return int(min(chunk, context))


def stream_elements(config: BenchConfig, dtype: str) -> int:
    return max(1, config.stream_bytes // DTYPE_BYTES[dtype])


def point_bytes(kernel: str, config: BenchConfig, dtype: str, batch: int = 1, context: int = 1) -> int:
    """Device memory one kernel point holds at its peak (bytes; an estimate on the high side).

    copy: two buffers; read: one; matmul: A, B and C; SDPA: q, K, V, out plus B*n_h*T fp32
    scores (what the math fallback would materialise); MLA: the latent cache, RoPE keys,
    queries, W_UK and W_UV, then the larger of the absorbed path's scores (B*n_h*T: two einsum
    outputs, their sum, the scaled sum, fp32 softmax, probabilities) and one recompute chunk
    (rebuilt K and V, scores, fp32 running max/sum/accumulator).
    """
    b = DTYPE_BYTES[dtype]
    if kernel == "copy":
        return 2 * stream_elements(config, dtype) * b
    if kernel == "read":
        return stream_elements(config, dtype) * b
    if kernel == "matmul":
        return 3 * config.matmul_n ** 2 * b
    h, bt = config.heads, batch * context
    if kernel in SDPA_KERNELS:
        g, d = sdpa_kv_heads(kernel, config), config.head_dim
        return b * (2 * batch * h * d + 2 * g * bt * d) + 4 * batch * h * context
    c, r, dn, dv = config.kv_lora_rank, config.qk_rope_head_dim, config.qk_nope_head_dim, config.v_head_dim
    inputs = b * (bt * (c + r) + batch * h * (dn + r) + h * (dn + dv) * c + 2 * batch * h * dv)
    absorbed = b * batch * h * c * 2 + batch * h * context * (5 * b + 4)
    tc = recompute_chunk_tokens(config, batch, context, dtype)
    recompute = batch * tc * h * ((dn + dv) * b + 3 * b + 12) + 3 * 4 * batch * h * dv
    return inputs + max(absorbed, recompute)


def plan_points(config: BenchConfig, dtype: str) -> list[dict]:
    """Every (kernel, shape) point of the run, in run order, with its `estimated_bytes`.

    Ceilings first (their results feed the decode kernels' `predicted_s`), then for each
    (B, T) of the sweep the decode kernels. Both MLA kernels share one set of inputs.
    """
    points = []
    for k in config.kernels:
        if k in CEILING_KERNELS:
            if k == "matmul":
                shape = {"m": config.matmul_n, "n": config.matmul_n, "k": config.matmul_n}
            else:
                n = stream_elements(config, dtype)
                shape = {"elements": n, "buffer_bytes": n * DTYPE_BYTES[dtype]}
            points.append({"kernel": k, "shape": shape, "estimated_bytes": point_bytes(k, config, dtype)})
    for batch in config.batches:
        for context in config.contexts:
            for k in config.kernels:
                if k in DECODE_KERNELS:
                    points.append({"kernel": k, "shape": decode_shape(k, config, batch, context, dtype),
                                   "estimated_bytes": point_bytes(k, config, dtype, batch, context)})
    return points


def peak_bytes(config: BenchConfig, dtype: str) -> int:
    """The run's peak device memory: the largest point plus the L2 flush buffer (bytes).
    Points run one after another and free their tensors in between."""
    points = plan_points(config, dtype)
    return max(p["estimated_bytes"] for p in points) + config.flush_bytes


def memory_check(estimated_bytes: int, free_bytes: int | None) -> dict:
    """Whether a run planned at `estimated_bytes` (peak device memory) fits: limit_bytes =
    floor(MEMORY_HEADROOM x free), fits, share (estimate / free). With free unknown (None), the
    run may go (the benchmark cannot check either) and limit_bytes and share are None."""
    if free_bytes is None:
        return {"limit_bytes": None, "fits": True, "share": None, "headroom": MEMORY_HEADROOM}
    limit = int(MEMORY_HEADROOM * free_bytes)
    return {"limit_bytes": limit, "fits": estimated_bytes <= limit,
            "share": estimated_bytes / free_bytes if free_bytes > 0 else None, "headroom": MEMORY_HEADROOM}
