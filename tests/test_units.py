"""The one formatting path: IEC bytes, decimal rates, token counts."""
import pytest

from mla_core.units import (format_bytes, format_count, format_rate, format_seconds, format_tokens,
                            floor_decimal_times, gib_to_bytes, row_bytes, weight_bytes)


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (656, "656 B"), (1023, "1,023 B"), (1024, "1.00 KiB"), (70272, "68.6 KiB"),
    (9210691584, "8.58 GiB"), (5996544, "5.72 MiB"), (2**40 * 5.72, "5.72 TiB"),
    (1048575, "1.000 MiB"), (-2048, "-2.00 KiB"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("n, text", [
    (1, "1 token"), (512, "512 tokens"), (131072, "131K tokens"), (1_500_000, "1.5M tokens"),
    (1_048_576, "1.05M tokens"), (10**9, "1B tokens"), (999_999, "1M tokens"), (2.5e12, "2.5T tokens"),
])
def test_format_tokens(n, text):
    assert format_tokens(n) == text


def test_format_count_never_uses_g():
    assert format_count(671_026_529_280) == "671B"
    assert "G" not in format_count(1.5e9)


def test_format_rate_and_seconds():
    assert format_rate(4.8e12, "B/s") == "4.8 TB/s"
    assert format_rate(989.4e12, "FLOP/s") == "989 TFLOP/s"
    assert format_seconds(0.0048011) == "4.80 ms"
    assert format_seconds(1.95e-5) == "19.5 µs"


def test_gib_to_bytes_is_decimal_exact():
    assert gib_to_bytes(46.80) == 50251117363
    assert gib_to_bytes(20) == 20 * 2**30
    assert gib_to_bytes(0.7) == 751619276  # floor(751619276.8)
    assert floor_decimal_times(0.7, 10 * 2**30) == 7 * 2**30  # 0.699999... in binary


def test_row_and_weight_bytes():
    assert row_bytes(576, "bf16") == 1152
    assert row_bytes(33, "q8_0") == 68
    assert weight_bytes(10, "fp4") == 6  # 10 * 9/16 = 5.625 -> 6
    assert weight_bytes(8030261248, "bf16") == 16060522496
