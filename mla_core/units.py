"""Element sizes of cache and weight dtypes, and the one place numbers are formatted.

Units (docs/model.md, "Units"): bytes are Python ints; memory is shown in binary units
(KiB, MiB, GiB = 2**30 B); bandwidth and flops in decimal units (GB/s = 1e9 B/s,
TB/s = 1e12 B/s, TFLOP/s = 1e12 flop/s) as vendors print them.

Token counts (docs/model.md, "Units"; the one rule every label, table, chart axis and the CLI
follow): a count is written exactly, with thousands separators ("1,490,752 tokens",
"1,000,000 tokens", "128,000 tokens"), except the round binary sizes context lengths are quoted
in, which take their short form: K = 1,024 tokens and M = 1,048,576 tokens, for a power of two
from 1,024 up or such a power times an odd number below 32 ("4K" = 4,096, "32K" = 32,768,
"128K" = 131,072, "160K" = 163,840, "1M" = 1,048,576, "1,536K" = 1,572,864). M is used when the
count is a whole number of M, else K. A short form is always exact: "128K" never stands for
128,000 and 1,000,000 tokens is never "1M"; where the exact figure helps it stands beside the
short form ("131,072 tokens (128K)", `format_tokens_exact`). Token rates are written out too
("3,457 tokens/s"); parameter and flop counts use decimal K, M, B, T (`format_count`).
"""
from __future__ import annotations

import functools

from .errors import MLAError

GiB = 2**30

# KV-cache dtypes as (values per block, bytes per block). Plain dtypes are blocks of one value.
# Block formats round each cached row up to whole blocks (docs/model.md, "Cache bytes").
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
# Recurrent-state dtypes (`--state-dtype`; `auto` = the model's torch_dtype, docs/model.md).
STATE_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp16", "fp32")

# Weight dtypes as bytes per parameter (numerator, denominator): fp4 is NVFP4-style 9/16 B.
WEIGHT_DTYPES: dict[str, tuple[int, int]] = {
    "fp32": (4, 1),
    "bf16": (2, 1),
    "fp16": (2, 1),
    "fp8": (1, 1),
    "fp4": (9, 16),
    # NVFP4 by its ModelOpt name (`quant_algo` NVFP4): the same 9/16 B as `fp4`.
    "nvfp4": (9, 16),
    # MXFP4 (OCP microscaling): 4-bit values + one 8-bit scale per 32 = 4.25 bits. Applies to
    # MoE expert matrices only; the rest of the model stays at torch_dtype (params.weights_bytes).
    "mxfp4": (17, 32),
    # int4 in groups of 32 with a 16-bit scale each (compressed-tensors pack-quantized W4A16, group
    # 32: Kimi-K2.5's routed experts): 18 B per 32 weights = 4.5 bits. Matmuls run at the bf16 peak.
    "int4": (18, 32),
}
# The 4-bit weight formats: their matmuls are costed at a GPU's dense FP4 peak
# (hardware.GPU.peak_flops, docs/model.md "Peak flops").
FP4_WEIGHT_DTYPES: tuple[str, ...] = ("fp4", "nvfp4", "mxfp4")

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


def weight_bytes(params, weights_dtype: str):
    """Bytes of `params` weights stored as `weights_dtype`, rounded up to a whole byte: an int
    for int or float `params`; element-wise for a numpy array (the sweeps)."""
    try:
        num, den = WEIGHT_DTYPES[weights_dtype]
    except KeyError:
        raise MLAError(
            f"unknown weights dtype {weights_dtype!r}; choose one of {', '.join(WEIGHT_DTYPES)}"
        ) from None
    value = -(-params * num // den)
    return int(value) if isinstance(params, float) else value


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


# The rule in one sentence, for the app and the CLI help to state (README and docs/model.md state it too).
TOKEN_RULE = ("Token counts are exact (1,490,752 tokens); round binary sizes are written short, with "
              "K = 1,024 and M = 1,048,576 tokens (128K = 131,072; 1M = 1,048,576), so 1,000,000 and "
              "128,000 stay written out.")
TOKENS_K = 1 << 10  # "K" after a token count: 1,024 tokens
TOKENS_M = 1 << 20  # "M" after a token count: 1,048,576 tokens


def short_tokens(n: int | float) -> str | None:
    """The exact binary short form of a round token count, or None when it has none.

    Round: m * 2**k with k >= 10 and m odd below 32 (module docstring). 131072 -> '128K',
    4096 -> '4K', 163840 -> '160K', 1048576 -> '1M', 3145728 -> '3M', 1572864 -> '1,536K';
    128000 (125 * 1,024), 1000000 and 1490752 -> None.
    """
    if isinstance(n, float):
        if not n.is_integer():
            return None
        n = int(n)
    if not isinstance(n, int) or n < TOKENS_K:
        return None
    odd = n >> ((n & -n).bit_length() - 1)  # n = odd * 2**k
    if odd >= 32 or n // odd < TOKENS_K:
        return None
    if n % TOKENS_M == 0:
        return f"{n // TOKENS_M:,}M"
    if n % TOKENS_K == 0:
        return f"{n // TOKENS_K:,}K"
    return None


def token_label(n: int | float) -> str:
    """A token count without its unit, for buttons, ticks and column heads: the short form when
    there is one, else the exact count: 131072 -> '128K', 1490752 -> '1,490,752'.
    A fractional count (an average) is rounded to a whole token."""
    short = short_tokens(n)
    if short is not None:
        return short
    if n != n:  # NaN
        return "n/a"
    if isinstance(n, float) and n in (float("inf"), float("-inf")):
        return "∞" if n > 0 else "-∞"
    return f"{round(n):,}"


@functools.lru_cache(maxsize=8192, typed=True)  # charts format the same sweep points on every rerun
def format_tokens(n: int | float) -> str:
    """A token count with its unit: 131072 -> '128K tokens', 1490752 -> '1,490,752 tokens',
    1000000 -> '1,000,000 tokens', 1 -> '1 token' (rule: module docstring)."""
    label = token_label(n)
    return label if label == "n/a" else f"{label} {'token' if n == 1 else 'tokens'}"


def format_tokens_exact(n: int | float) -> str:
    """A token count written out, with the short form beside it when there is one:
    131072 -> '131,072 tokens (128K)', 1490752 -> '1,490,752 tokens', 1 -> '1 token'."""
    short = short_tokens(n)
    exact = f"{round(n):,} {'token' if n == 1 else 'tokens'}" if n == n and abs(n) != float("inf") else token_label(n)
    return f"{exact} ({short})" if short and short != f"{round(n):,}" else exact


def format_token_rate(tokens_per_s: float) -> str:
    """Tokens per second, whole tokens with separators from 100 up: 3456.7 -> '3,457 tokens/s',
    42.42 -> '42.4 tokens/s', 0.5 -> '0.500 tokens/s'; below 0.001 in powers of ten, never a bare
    zero: 6.83e-12 -> '6.83e-12 tokens/s'. Never decimal 'K' or 'M'."""
    x = tokens_per_s
    if x != x or x in (float("inf"), float("-inf")):
        return "n/a"
    if 0 < abs(x) < 1e-3:
        return f"{x:.3g} tokens/s"
    return f"{x:,.0f} tokens/s" if abs(x) >= 100 else f"{x:.3g} tokens/s" if abs(x) >= 10 else f"{x:.3f} tokens/s"


def token_ticks(lo: int | float, hi: int | float, max_ticks: int = 11) -> tuple[list[int], list[str]]:
    """Tick values and labels for a log axis of token counts between `lo` and `hi`: powers of
    two labelled in the short form ('1K', '2K', ... '1M'), every second or fourth power when
    more than `max_ticks` would fit, so an axis never reads Plotly's decimal '100k'.
    Returns ([], []) when no power of two lies in the range."""
    if not (lo > 0 and hi >= lo):
        return [], []
    first = max(0, (int(lo) - 1).bit_length() if lo > 1 else 0)
    last = int(hi).bit_length() - 1
    if last < first:
        return [], []
    powers = list(range(first, last + 1))
    step = 1
    while len(powers[::step]) > max(1, max_ticks):
        step *= 2
    # Keep the ticks on powers of 2**step from 1K so that 1K, 1M and 1G stay labelled.
    chosen = [p for p in powers if (p - 10) % step == 0] or powers[::step]
    values = [1 << p for p in chosen]
    return values, [token_label(v) for v in values]


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
    """A duration: 0.0048 -> '4.80 ms', 1.95e-5 -> '19.5 µs'; from 100,000 s (a day and more, an
    absurd step) in powers of ten: 1.464e13 -> '1.46e13 s'."""
    if s != s or s == float("inf"):
        return "n/a"
    if s >= 1e5:
        return f"{s:.3g} s".replace("e+", "e")
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
    """floor(X * 2**30): what `--kv-budget-gib X` and a typed memory size mean (docs/model.md)."""
    return floor_decimal_times(gib, GiB)
