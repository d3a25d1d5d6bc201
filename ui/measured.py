"""Measured decode-attention points from a benchmark result (no streamlit here).

The benchmark page stores its latest result in `st.session_state["bench_result"]`; committed
samples live in `data/samples/*.json`. Both use the result format of
`mla_core/store/result.schema.json`: `{"device": {"name": ...}, "results": [{"kernel": ...,
"bytes": int, "flops": int, "median_s": float, "achieved_GBps": float, "achieved_TFLOPs": float,
"predicted_s": float, ...}], "ceilings": {...}}`.

`measured_points(result)` reads the decode kernels of such a dict into `MeasuredPoint`s and
returns the reasons for anything it skipped: a malformed dict or entry is skipped with a
message, never an exception. The roofline x of a point is flops / bytes (flop/B) and its y the
measured TFLOP/s, both as the benchmark reported them.
"""
from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass, field

from mla_core import presets as _presets

# Benchmark kernel name -> the variant label the charts use (same colour as the analytic point).
DECODE_KERNELS = {
    "mha_decode": "MHA",
    "gqa_decode": "GQA",
    "mqa_decode": "MQA",
    "mla_absorbed_decode": "MLA absorbed",
    "mla_recompute_decode": "MLA recompute",
}
MAX_RESULTS = 2000  # the schema's own limit; anything past it is ignored
MAX_SAMPLE_BYTES = 4 << 20
SAMPLES_DIR = os.path.join(_presets.DATA_DIR, "samples")  # the checkout's data/, or an installed copy's


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured decode kernel. Rates as the benchmark reported them (GB/s = 1e9 B/s,
    TFLOP/s = 1e12 flop/s); `intensity_flop_per_byte` = flops / bytes."""

    kernel: str
    label: str  # variant label (DECODE_KERNELS)
    bytes: int
    flops: int
    intensity_flop_per_byte: float
    median_s: float
    achieved_GBps: float
    achieved_TFLOPs: float
    predicted_s: float | None = None
    dtype: str = ""
    shape: dict = field(default_factory=dict)


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def clean_text(text, limit: int = 60) -> str:
    """A device name fit for a chart legend: printable characters only, no markup brackets
    (Plotly renders a few HTML tags in trace names), at most `limit` characters."""
    out = "".join(ch for ch in str(text) if ch.isprintable() and ch not in "<>&\"'`")
    out = " ".join(out.split())
    return (out[: limit - 1] + "…") if len(out) > limit else out


def device_name(result) -> str:
    """The device's name in a result dict, cleaned (see `clean_text`), or 'unknown device'."""
    dev = result.get("device") if isinstance(result, dict) else None
    name = dev.get("name") if isinstance(dev, dict) else None
    return clean_text(name) if isinstance(name, str) and clean_text(name) else "unknown device"


def _point(entry) -> tuple[MeasuredPoint | None, str | None]:
    """(point, None), (None, reason) for a malformed entry, or (None, None) for a kernel that
    is not a decode kernel (copy, read, matmul: not roofline points)."""
    if not isinstance(entry, dict):
        return None, "an entry is not an object"
    kernel = entry.get("kernel")
    if not isinstance(kernel, str) or kernel not in DECODE_KERNELS:
        if isinstance(kernel, str) and kernel in ("copy", "read", "matmul"):
            return None, None
        return None, f"unknown kernel {clean_text(kernel, 30)!r}"
    nbytes, flops = entry.get("bytes"), entry.get("flops")
    if not (_count(nbytes) and _count(flops)) or nbytes == 0 or flops == 0:
        return None, f"{kernel}: bytes and flops must be positive whole numbers"
    for key in ("median_s", "achieved_GBps", "achieved_TFLOPs"):
        if not _finite(entry.get(key)) or entry.get(key) <= 0:
            return None, f"{kernel}: {key} must be a positive number"
    predicted = entry.get("predicted_s")
    if predicted is not None and not (_finite(predicted) and predicted > 0):
        predicted = None
    shape = entry.get("shape")
    shape = {str(k)[:40]: v for k, v in shape.items() if _count(v)} if isinstance(shape, dict) else {}
    dtype = entry.get("dtype")
    return MeasuredPoint(
        kernel=kernel,
        label=DECODE_KERNELS[kernel],
        bytes=nbytes,
        flops=flops,
        intensity_flop_per_byte=flops / nbytes,
        median_s=float(entry["median_s"]),
        achieved_GBps=float(entry["achieved_GBps"]),
        achieved_TFLOPs=float(entry["achieved_TFLOPs"]),
        predicted_s=float(predicted) if predicted is not None else None,
        dtype=clean_text(dtype, 10) if isinstance(dtype, str) else "",
        shape=dict(list(shape.items())[:20]),
    ), None


def measured_points(result) -> tuple[list[MeasuredPoint], list[str]]:
    """The decode kernels of a benchmark result dict as roofline points, and the reasons for
    what was skipped. Never raises: a result that is not a dict, or whose `results` is not a
    list, gives no points and one reason; a malformed entry is skipped with its reason."""
    if result is None:
        return [], []
    if not isinstance(result, dict):
        return [], [f"the benchmark result is a {type(result).__name__}, not a result object"]
    results = result.get("results")
    if not isinstance(results, list):
        return [], ["the benchmark result has no list of results"]
    points, problems = [], []
    for entry in results[:MAX_RESULTS]:
        try:
            point, why = _point(entry)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError) as e:  # belt and braces
            point, why = None, f"an entry could not be read ({type(e).__name__})"
        if point is not None:
            points.append(point)
        elif why:
            problems.append(why)
    if len(results) > MAX_RESULTS:
        problems.append(f"only the first {MAX_RESULTS} of {len(results)} results were read")
    return points, problems


def ceilings(result) -> tuple[float | None, float | None]:
    """(measured bandwidth in GB/s, measured matmul peak in TFLOP/s) of a result, each None when
    absent or not a positive finite number. Bandwidth: `ceilings.read_GBps`, else `copy_GBps`."""
    c = result.get("ceilings") if isinstance(result, dict) else None
    if not isinstance(c, dict):
        return None, None

    def ok(x):
        return float(x) if _finite(x) and x > 0 else None

    return ok(c.get("read_GBps")) or ok(c.get("copy_GBps")), ok(c.get("matmul_TFLOPs"))


def sample_files(folder: str | None = None) -> list[str]:
    """Names of the committed sample results (`data/samples/*.json`), sorted; [] when none."""
    folder = folder or SAMPLES_DIR
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.json")))[:100]


def load_sample(name: str, folder: str | None = None) -> tuple[dict | None, str | None]:
    """(result dict, None) for one sample file, or (None, reason) when it cannot be read."""
    folder = folder or SAMPLES_DIR
    if os.path.basename(name) != name or not name.endswith(".json"):
        return None, f"{clean_text(name)}: not a sample file name"
    path = os.path.join(folder, name)
    try:
        if os.path.getsize(path) > MAX_SAMPLE_BYTES:
            return None, f"{name}: larger than {MAX_SAMPLE_BYTES >> 20} MiB"
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        return None, f"{name}: cannot be read ({type(e).__name__})"
    if not isinstance(data, dict):
        return None, f"{name}: not a result object"
    return data, None
