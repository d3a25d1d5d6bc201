"""The one formatting path: IEC bytes, decimal rates, token counts."""
import pytest

from mla_core.units import (TOKENS_K, TOKENS_M, format_bytes, format_count, format_rate, format_seconds,
                            format_token_rate, format_tokens, format_tokens_exact, floor_decimal_times,
                            gib_to_bytes, row_bytes, short_tokens, token_label, token_ticks, weight_bytes)


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (656, "656 B"), (1023, "1,023 B"), (1024, "1.00 KiB"), (70272, "68.6 KiB"),
    (9210691584, "8.58 GiB"), (5996544, "5.72 MiB"), (2**40 * 5.72, "5.72 TiB"),
    (1048575, "1.000 MiB"), (-2048, "-2.00 KiB"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("n, text", [
    # The token rule (mla_core.units, docs/model.md "Units"): round binary sizes take K = 1,024 /
    # M = 1,048,576, exactly; every other count is written out.
    (1, "1 token"), (512, "512 tokens"), (1000, "1,000 tokens"), (4096, "4K tokens"),
    (32768, "32K tokens"), (131072, "128K tokens"), (163840, "160K tokens"), (1_048_576, "1M tokens"),
    (1_572_864, "1,536K tokens"), (128_000, "128,000 tokens"), (1_000_000, "1,000,000 tokens"),
    (1_490_752, "1,490,752 tokens"), (1_500_000, "1,500,000 tokens"), (10**9, "1,000,000,000 tokens"),
    (2**30, "1,024M tokens"), (2.0**20, "1M tokens"), (1234.6, "1,235 tokens"),
])
def test_format_tokens(n, text):
    assert format_tokens(n) == text


@pytest.mark.parametrize("n, short", [
    (1024, "1K"), (3072, "3K"), (98304, "96K"), (131072, "128K"), (204800, "200K"), (3 << 20, "3M"),
    (1023, None), (128_000, None), (1_000_000, None), (33 << 10, None), (1_490_752, None), (0, None), (-4096, None),
])
def test_short_tokens_is_exact_and_only_for_round_sizes(n, short):
    assert short_tokens(n) == short
    if short:  # the short form reads back to the count itself
        value = int(short[:-1].replace(",", "")) * (TOKENS_M if short[-1] == "M" else TOKENS_K)
        assert value == n


def test_exact_and_rate_and_label_forms():
    assert format_tokens_exact(131072) == "131,072 tokens (128K)"
    assert format_tokens_exact(1_490_752) == "1,490,752 tokens"
    assert format_tokens_exact(1) == "1 token"
    assert token_label(131072) == "128K" and token_label(1_000_000) == "1,000,000"
    assert format_token_rate(3456.7) == "3,457 tokens/s"
    assert format_token_rate(42.42) == "42.4 tokens/s"
    assert format_token_rate(6.83e-12) == "6.83e-12 tokens/s" and format_token_rate(0.0) == "0.000 tokens/s"
    assert "K" not in format_token_rate(1.5e6) and format_token_rate(1.5e6) == "1,500,000 tokens/s"


def test_token_ticks_are_powers_of_two_in_the_short_form():
    assert token_ticks(1024, 1 << 20) == ([1 << p for p in range(10, 21)],
                                         ["1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M"])
    values, labels = token_ticks(1000, 5_000_000)
    assert values == [1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20]
    assert labels == ["1K", "4K", "16K", "64K", "256K", "1M", "4M"]
    assert token_ticks(5000, 6000) == ([], [])


def test_format_count_never_uses_g():
    assert format_count(671_026_529_280) == "671B"
    assert "G" not in format_count(1.5e9)


def test_format_rate_and_seconds():
    assert format_rate(4.8e12, "B/s") == "4.8 TB/s"
    assert format_rate(989.4e12, "FLOP/s") == "989 TFLOP/s"
    assert format_seconds(0.0048011) == "4.80 ms"
    assert format_seconds(1.95e-5) == "19.5 µs"
    # A step of a 10^15-token context (the breaker's link): powers of ten, not 14 digits.
    assert format_seconds(1.464e13) == "1.46e13 s" and format_seconds(99_999.0) == "99999 s"


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
