"""Checks on the numbers a user passes in (CLI flags, URL parameters, function arguments).

Each raises `MLAError` with one line naming the input. Counts must be Python ints (a bool
is refused although Python counts it as one); limits keep results exact and answers quick.
"""
from __future__ import annotations

import math

from .errors import MLAError

MAX_CONTEXT = 10**18  # tokens per sequence; 10^15 and beyond stay exact in Python ints
MAX_BATCH = 10**9
MAX_GPUS = 1 << 20
MAX_TP = 1 << 16
MAX_BLOCK = 1 << 30


def check_int(name: str, value, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Return `value` if it is an int in [minimum, maximum], else raise MLAError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MLAError(f"{name} must be a whole number, got {_short(value)}")
    if value < minimum:
        raise MLAError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise MLAError(f"{name} must be at most {maximum:,}, got {_short(value)}")
    return value


def check_real(name: str, value, *, minimum: float | None = None, maximum: float | None = None,
               exclusive_minimum: bool = False) -> float:
    """Return `value` as a finite float within bounds, else raise MLAError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MLAError(f"{name} must be a number, got {_short(value)}")
    try:
        x = float(value)
    except OverflowError:
        raise MLAError(f"{name} is too large") from None
    if not math.isfinite(x):
        raise MLAError(f"{name} must be a finite number, got {_short(value)}")
    if minimum is not None and (x <= minimum if exclusive_minimum else x < minimum):
        raise MLAError(f"{name} must be {'greater than' if exclusive_minimum else 'at least'} {_num(minimum)}, "
                       f"got {_num(x)}")
    if maximum is not None and x > maximum:
        raise MLAError(f"{name} must be at most {_num(maximum)}, got {_num(x)}")
    return x


def _num(x: float) -> str:
    """A number as a person reads it: 1000000001 -> '1,000,000,001', 0.9 -> '0.9'."""
    if x == int(x) and abs(x) < 1e21:
        return f"{int(x):,}"
    return f"{x:.6g}"


def check_choice(name: str, value, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise MLAError(f"{name} must be one of {', '.join(choices)}; got {_short(value)}")
    return value


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
