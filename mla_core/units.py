"""Element sizes of cache and weight dtypes, and the one place numbers are formatted.

Units (MODEL.md, "Units"): bytes are Python ints; memory is shown in binary units
(KiB, MiB, GiB = 2**30 B); bandwidth and flops in decimal units (GB/s = 1e9 B/s,
TB/s = 1e12 B/s, TFLOP/s = 1e12 flop/s) as vendors print them; token counts read
"1.5M tokens", never "1.5G".
"""
from __future__ import annotations

import functools

from .errors import MLAError

GiB = 2**30

# KV-cache dtypes as (values per block, bytes per block). Plain dtypes are blocks of one value.
# Block formats round each cached row up to whole blocks (MODEL.md, "Cache bytes").
#   q8_0: 32 int8 values + one fp16 scale = 34 B      (llama.cpp / GGML block format)
#   q4_0: 32 int4 values + one fp16 scale = 18 B      (llama.cpp / GGML block format)
#   fp4:  16 fp4 values (8 B) + one fp8 scale = 9 B   (NVFP4 style: 0.5 B/value + 1 B per 16)
KV_BLOCK_FORMATS: dict[str, tuple[int, int]] = {
    "fp32": (1, 4),
    "bf16": (1, 2),
    "fp16": (1, 2),
    "fp8": (1, 1),
    "fp8_e4m3": (1, 1),
    "fp8_e5m2": (1, 1),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "fp4": (16, 9),
}
# `fp8_ds_mla` (FlashMLA's FP8 latent layout) and `auto` (the model's torch_dtype) are resolved
# by the KV code, not by a block size: see mla_core.kv.
KV_DTYPES: tuple[str, ...] = ("auto", *KV_BLOCK_FORMATS, "fp8_ds_mla")

# Weight dtypes as bytes per parameter (numerator, denominator): fp4 is NVFP4-style 9/16 B.
WEIGHT_DTYPES: dict[str, tuple[int, int]] = {
    "fp32": (4, 1),
    "bf16": (2, 1),
    "fp16": (2, 1),
    "fp8": (1, 1),
    "fp4": (9, 16),
}

# HF `torch_dtype` / `dtype` spellings -> our names.
TORCH_DTYPE_NAMES: dict[str, str] = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
}


def row_bytes(n_values: int, kv_dtype: str) -> int:
    """Bytes of one cached row of `n_values` elements in a plain or block KV dtype.

    Block formats round the row up to whole blocks: `ceil(n / block_values) * block_bytes`.
    Raises MLAError for a dtype that is not a plain or block format (`auto`, `fp8_ds_mla`).
    """
    try:
        block_values, block_bytes = KV_BLOCK_FORMATS[kv_dtype]
    except KeyError:
        raise MLAError(f"unknown KV dtype {kv_dtype!r}; choose one of {', '.join(KV_DTYPES)}") from None
    return -(-n_values // block_values) * block_bytes


def weight_bytes(params: int | float, weights_dtype: str) -> int:
    """Bytes of `params` weights stored as `weights_dtype`, rounded up to a whole byte."""
    try:
        num, den = WEIGHT_DTYPES[weights_dtype]
    except KeyError:
        raise MLAError(
            f"unknown weights dtype {weights_dtype!r}; choose one of {', '.join(WEIGHT_DTYPES)}"
        ) from None
    if isinstance(params, int):
        return -(-params * num // den)
    return int(-(-params * num // den))


# ---------------------------------------------------------------------------------------------
# Formatting: every page, table and the CLI go through these.

_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


def _three_sig(x: float) -> str:
    if x >= 100:
        text = f"{x:.0f}"
    elif x >= 10:
        text = f"{x:.1f}"
    else:
        text = f"{x:.2f}"
    return text


@functools.lru_cache(maxsize=8192, typed=True)  # charts format the same sweep points on every rerun
def format_bytes(n: int | float) -> str:
    """Bytes in IEC binary units with three significant figures: 70272 -> '68.6 KiB'.

    Values under 1 KiB print as whole bytes ('656 B'). Negative values keep their sign.
    """
    if n != n:  # NaN
        return "n/a"
    sign = "-" if n < 0 else ""
    if isinstance(n, int) and abs(n) >= 1024**9:  # past YiB, and maybe past a float's range
        return f"{sign}{_big(abs(n), 1024**8)} YiB"
    x = float(abs(n))
    if x < 1024:
        return f"{sign}{int(abs(n)) if float(n).is_integer() else round(x, 2):,} B"
    i = 0
    while i + 1 < len(_IEC) and x >= 1024:
        x /= 1024.0
        i += 1
    # 1023.9 KiB would round to "1024 KiB": show it as the next unit instead.
    if float(_three_sig(x)) >= 1000 and i + 1 < len(_IEC):
        x /= 1024.0
        i += 1
        text = f"{x:.3f}"
    else:
        text = _three_sig(x)
    return f"{sign}{text} {_IEC[i]}"


_DECIMAL = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))


def _big(n: int, unit: int) -> str:
    """n / unit with three significant figures, exact for ints of any size ('8.27e+375')."""
    q = n // unit
    if q < 10**15:
        return f"{n / unit:,.0f}"
    digits = str(q)
    return f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


@functools.lru_cache(maxsize=8192, typed=True)  # charts format the same sweep points on every rerun
def format_count(n: int | float) -> str:
    """A count in decimal units with up to three significant figures: 1_500_000 -> '1.5M'.

    Uses K, M, B (billion) and T (trillion); never the SI 'G'.
    """
    sign = "-" if n < 0 else ""
    x = abs(n)
    if isinstance(x, int) and x >= 10**15:
        return f"{sign}{_big(x, 10**12)}T"
    for scale, suffix in _DECIMAL:
        if x >= scale * 0.9995:
            v = x / scale
            text = _three_sig(v).rstrip("0").rstrip(".") if "." in _three_sig(v) else _three_sig(v)
            return f"{sign}{text}{suffix}"
    if float(x).is_integer():
        return f"{sign}{int(x)}"
    return f"{sign}{x:.3g}"


@functools.lru_cache(maxsize=8192, typed=True)  # charts format the same sweep points on every rerun
def format_tokens(n: int | float) -> str:
    """A token count: 1_500_000 -> '1.5M tokens', 131072 -> '131K tokens', 1 -> '1 token'."""
    return f"{format_count(n)} {'token' if n == 1 else 'tokens'}"


def format_rate(value: float, unit: str) -> str:
    """A decimal rate with its unit, three significant figures: (4.8e12, 'B/s') -> '4.80 TB/s'.

    `unit` is 'B/s' (bandwidth) or 'FLOP/s' (compute); prefixes are decimal (k, M, G, T, P).
    """
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
    for scale, p in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {p}{unit}".replace("e+", "e")
    return f"{value:.3g} {unit}"


def format_seconds(s: float) -> str:
    """A duration: 0.0048 -> '4.80 ms', 1.95e-5 -> '19.5 µs'."""
    if s != s or s == float("inf"):
        return "n/a"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if s >= scale:
            return f"{_three_sig(s / scale)} {unit}"
    return f"{s:.3g} s"


def format_intensity(flop_per_byte: float) -> str:
    """An arithmetic intensity: 241.7778 -> '241.8 flop/B', 1.0 -> '1.00 flop/B' (one decimal
    from 10 up, two below; thousands separated)."""
    x = flop_per_byte
    if x != x or x in (float("inf"), float("-inf")):
        return "n/a"
    return f"{x:,.1f} flop/B" if abs(x) >= 10 else f"{x:.2f} flop/B"


def floor_decimal_times(x: float | int, n: int, places: int = 9) -> int:
    """floor(x * n) with `x` taken as the decimal it prints as, to `places` decimals.

    A float such as 0.7 is 0.69999... in binary: multiplying it straight into a byte count can
    land one byte low. Reading it as 700000000 / 10**9 keeps `floor(0.7 * 10 GiB)` exact.
    """
    if isinstance(x, int):
        return x * n
    scale = 10**places
    return (round(x * scale) * n) // scale


def gib_to_bytes(gib: float | int) -> int:
    """floor(X * 2**30): what `--kv-budget-gib X` and a typed memory size mean (MODEL.md)."""
    return floor_decimal_times(gib, GiB)
