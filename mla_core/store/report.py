"""What the benchmark page shows of a result, computed here once (stdlib only; no torch).

A result is the dict of `mla_core.bench` (schema: result.schema.json). Units as there: seconds,
GB/s = 1e9 B/s, TFLOP/s = 1e12 flop/s, bytes as integers.

Definitions (the page and its tests use these, nothing else):

- Bandwidth ceiling = the run's measured `read` bandwidth (median), else its `copy` bandwidth:
  the figure `predicted_s` was computed from (`mla_core.bench.run`). Compute ceiling = the
  measured `matmul` throughput (median).
- `bandwidth_share = achieved_GBps / bandwidth ceiling`, `compute_share = achieved_TFLOPs /
  compute ceiling`: the share of each measured ceiling a kernel reached.
- `model_accuracy = predicted_s / median_s`: 1.0 when the roofline of the measured ceilings
  predicts the kernel's time exactly, below 1 when the kernel runs slower than its roofline
  (the usual case), above 1 when it beats it (e.g. a working set that stays in a cache, where
  the DRAM bandwidth does not bind). Because `predicted_s = max(bytes / bandwidth, flops /
  compute)`, it equals `max(bandwidth_share, compute_share)`: the share of the binding ceiling.
- `predicted_TFLOPs = flops / predicted_s / 1e12`: where the prediction sits on the roofline.
- Datasheet figures: the device block's `peak_bandwidth_GBps` / `peak_TFLOPs` when its
  `peak_source` is a GPU preset's datasheet; otherwise those are sanity bounds, not a datasheet.
"""
from __future__ import annotations

import math

from ..errors import MLAError
from ..kv import divisors, largest_divisor_up_to
from ..units import format_bytes
from .schema import DECODE_KERNELS, KERNELS

TFLOP = 1e12  # flop/s per TFLOP/s
GB = 1e9  # B/s per GB/s


def _pos(x) -> float | None:
    """`x` as a float when it is a positive finite number, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def _ratio(a, b) -> float | None:
    a, b = _pos(a), _pos(b)
    return a / b if a is not None and b is not None else None


def _ceilings(result: dict) -> dict:
    c = result.get("ceilings") if isinstance(result, dict) else None
    return c if isinstance(c, dict) else {}


def bandwidth_ceiling_GBps(result: dict) -> float | None:
    """The measured bandwidth the run's predictions use (GB/s): read, else copy; None if absent."""
    c = _ceilings(result)
    return _pos(c.get("read_GBps")) or _pos(c.get("copy_GBps"))


def compute_ceiling_TFLOPs(result: dict) -> float | None:
    """The measured matmul throughput (TFLOP/s), or None."""
    return _pos(_ceilings(result).get("matmul_TFLOPs"))


def shape_summary(shape: dict) -> str:
    """A short text of a result's `shape`: 'B=1 T=4,096 h=16 kv=8' (SDPA), 'B=1 T=4,096 h=16
    d_c=512 d_r=64' (MLA), 'n=1,024' (matmul), '1.88 GiB buffer' (copy/read)."""
    if not isinstance(shape, dict):
        return ""
    if "batch" in shape:
        text = f"B={shape.get('batch', 0):,} T={shape.get('context', 0):,} h={shape.get('heads', 0):,}"
        if "kv_heads" in shape:
            text += f" kv={shape['kv_heads']:,}"
        if "kv_lora_rank" in shape:
            text += f" d_c={shape['kv_lora_rank']:,} d_r={shape.get('qk_rope_head_dim', 0):,}"
        return text
    if "m" in shape:
        return f"n={shape['m']:,}"
    if "buffer_bytes" in shape:
        return f"{format_bytes(shape['buffer_bytes'])} buffer"
    return ", ".join(f"{k}={v:,}" for k, v in list(shape.items())[:6] if isinstance(v, int))


def kernel_rows(result: dict) -> list[dict]:
    """One dict per entry of `result['results']`, in run order:

    kernel, dtype, shape (the dict), shape_text, median_s, min_s, reps, bytes, flops,
    intensity_flop_per_byte (flops / bytes; None without both), achieved_GBps,
    achieved_TFLOPs, predicted_s, predicted_bound, predicted_TFLOPs, model_accuracy,
    bandwidth_share, compute_share (None where undefined: no ceiling, no bytes or no flops),
    max_rel_err, rel_err_tolerance, is_decode.
    """
    bw, mm = bandwidth_ceiling_GBps(result), compute_ceiling_TFLOPs(result)
    rows = []
    entries = result.get("results") if isinstance(result, dict) else None
    for r in entries if isinstance(entries, list) else []:
        if not isinstance(r, dict):
            continue
        nbytes, flops = r.get("bytes") or 0, r.get("flops") or 0
        predicted = _pos(r.get("predicted_s"))
        rows.append({
            "kernel": r.get("kernel", ""),
            "dtype": r.get("dtype", ""),
            "shape": r.get("shape") if isinstance(r.get("shape"), dict) else {},
            "shape_text": shape_summary(r.get("shape")),
            "median_s": r.get("median_s"),
            "min_s": r.get("min_s"),
            "reps": r.get("reps"),
            "bytes": nbytes,
            "flops": flops,
            "intensity_flop_per_byte": _ratio(flops, nbytes),
            "achieved_GBps": r.get("achieved_GBps"),
            "achieved_TFLOPs": r.get("achieved_TFLOPs"),
            "predicted_s": predicted,
            "predicted_bound": r.get("predicted_bound"),
            "predicted_TFLOPs": _ratio(flops, predicted) / TFLOP if predicted and _pos(flops) else None,
            "model_accuracy": _ratio(predicted, r.get("median_s")),
            "bandwidth_share": _ratio(r.get("achieved_GBps"), bw) if _pos(nbytes) else None,
            "compute_share": _ratio(r.get("achieved_TFLOPs"), mm) if _pos(flops) else None,
            "max_rel_err": r.get("max_rel_err"),
            "rel_err_tolerance": r.get("rel_err_tolerance"),
            "is_decode": r.get("kernel") in DECODE_KERNELS,
        })
    return rows


def ceiling_summary(result: dict) -> dict:
    """The measured ceilings beside the device's datasheet:

    copy_GBps, read_GBps, matmul_TFLOPs (None when not measured); bandwidth_GBps (the one the
    predictions use); ridge_flop_per_byte (measured matmul / measured bandwidth, flop/B);
    datasheet (True when the device block's peaks are a GPU preset's datasheet), preset,
    peak_bandwidth_GBps, peak_TFLOPs, peak_source; bandwidth_share_of_peak and
    compute_share_of_peak (measured / peak; None without both).
    """
    c = _ceilings(result)
    dev = result.get("device") if isinstance(result, dict) and isinstance(result.get("device"), dict) else {}
    bw, mm = bandwidth_ceiling_GBps(result), compute_ceiling_TFLOPs(result)
    source = dev.get("peak_source") if isinstance(dev.get("peak_source"), str) else ""
    peak_bw, peak_mm = _pos(dev.get("peak_bandwidth_GBps")), _pos(dev.get("peak_TFLOPs"))
    return {
        "copy_GBps": _pos(c.get("copy_GBps")),
        "read_GBps": _pos(c.get("read_GBps")),
        "matmul_TFLOPs": mm,
        "bandwidth_GBps": bw,
        "ridge_flop_per_byte": (mm * TFLOP) / (bw * GB) if bw and mm else None,
        "datasheet": bool(dev.get("preset")) and source.startswith("datasheet"),
        "preset": dev.get("preset") if isinstance(dev.get("preset"), str) else None,
        "peak_bandwidth_GBps": peak_bw,
        "peak_TFLOPs": peak_mm,
        "peak_source": source,
        "bandwidth_share_of_peak": _ratio(bw, peak_bw),
        "compute_share_of_peak": _ratio(mm, peak_mm),
    }


def mla_checks(result: dict) -> list[dict]:
    """The absorbed-vs-recompute agreement of each MLA shape: shape_text, max_rel_err (None
    when it was not finite), rel_err_tolerance, ok (max_rel_err <= tolerance)."""
    out = []
    for row in kernel_rows(result):
        if row["kernel"] != "mla_absorbed_decode":
            continue
        err, tol = row["max_rel_err"], row["rel_err_tolerance"]
        ok = isinstance(err, (int, float)) and isinstance(tol, (int, float)) and err <= tol
        out.append({"shape_text": row["shape_text"], "max_rel_err": err, "rel_err_tolerance": tol, "ok": ok})
    return out


def roof_range(intensities: list[float], ridge: float) -> tuple[float, float]:
    """The x range (flop/B) of a roofline chart holding `intensities` and the ridge point: from
    min(0.1, smallest / 3) to max(10 x ridge, 3 x largest), as the Roofline page draws it."""
    xs = [x for x in intensities if _pos(x)]
    lo = min([0.1] + [x / 3 for x in xs])
    hi = max([10 * ridge] + [3 * x for x in xs])
    return lo, hi


def roof(bandwidth_GBps: float, compute_TFLOPs: float, intensities: list[float]) -> dict:
    """A roofline from two ceilings: x (flop/B: low end, ridge, high end) and y (TFLOP/s,
    `mla_core.roofline.attainable_flops` of a device with those figures) and the ridge.
    Raises MLAError for a non-positive or non-finite ceiling."""
    from ..hardware import custom_gpu
    from ..roofline import attainable_flops

    gpu = custom_gpu(1.0, bandwidth_TBps=bandwidth_GBps * GB / 1e12, bf16_TFLOPS=compute_TFLOPs)
    ridge = gpu.ridge_flop_per_byte
    lo, hi = roof_range(intensities, ridge)
    xs = [lo, ridge, hi]
    return {"x": xs, "y_TFLOPs": [attainable_flops(x, gpu, "bf16") / TFLOP for x in xs], "ridge": ridge}


def compare_rows(named: list[tuple[str, dict]], by_shape: bool = False) -> list[dict]:
    """Runs side by side. `named`: [(name, result)] with distinct names.

    by_shape False: one row per kernel; each run contributes its first entry of that kernel
    (a sweep's first (batch, context)); by_shape True: one row per (kernel, shape), so only
    equal shapes share a row. Rows are in KERNELS order; each is {"kernel", "shape_text" (""
    when by_shape is False), "runs": {name: cell or None}} with cell = {shape_text, dtype,
    median_s, achieved_GBps, achieved_TFLOPs, model_accuracy}.
    """
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise MLAError("compared runs need distinct names")
    order = {k: i for i, k in enumerate(KERNELS)}
    rows: dict[tuple, dict] = {}
    for name, result in named:
        for r in kernel_rows(result):
            key = (r["kernel"], r["shape_text"] if by_shape else "")
            row = rows.setdefault(key, {"kernel": r["kernel"], "shape_text": key[1], "runs": dict.fromkeys(names)})
            if row["runs"][name] is None:
                row["runs"][name] = {k: r[k] for k in ("shape_text", "dtype", "median_s", "achieved_GBps",
                                                       "achieved_TFLOPs", "model_accuracy")}
    first_seen = {key: i for i, key in enumerate(rows)}
    return [rows[k] for k in sorted(rows, key=lambda k: (order.get(k[0], len(order)), first_seen[k]))]


def progress_fraction(done: int, total: int) -> float:
    """done / total clamped to [0, 1] (0 when total is not positive): a progress bar's value."""
    if not total or total <= 0:
        return 0.0
    return min(1.0, max(0.0, done / total))


def gqa_group_choices(heads: int) -> list[int]:
    """KV-head counts a GQA kernel with `heads` query heads can take: the divisors of heads."""
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        return [1]
    return divisors(heads)


def default_gqa_groups(heads: int, wanted: int = 8) -> int:
    """The largest divisor of `heads` not above `wanted` (8: DeepSeek-style GQA-8)."""
    return largest_divisor_up_to(heads if isinstance(heads, int) and heads >= 1 else 1, wanted)


__all__ = [
    "bandwidth_ceiling_GBps", "compute_ceiling_TFLOPs", "shape_summary", "kernel_rows",
    "ceiling_summary", "mla_checks", "roof_range", "roof", "compare_rows", "progress_fraction",
    "gqa_group_choices", "default_gqa_groups",
]
