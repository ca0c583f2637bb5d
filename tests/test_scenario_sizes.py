"""Sizes as scenario files write them: decimal and binary units, and loud errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.sizes import SizeError, format_size, parse_size


@pytest.mark.parametrize(
    "text,expected",
    [
        ("20MB", 20_000_000),
        ("1.5KB", 1500),
        ("64KiB", 65536),
        ("1MiB", 1 << 20),
        ("2GiB", 2 << 30),
        ("1GB", 10**9),
        ("4096", 4096),
        ("4096B", 4096),
        (" 20 mb ", 20_000_000),
        ("1.1MB", 1_100_000),
        ("0.5KiB", 512),
        (4096, 4096),
        (2048.0, 2048),
    ],
)
def test_parses(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "bad,fragment",
    [
        ("20XB", "unknown unit 'XB'"),
        ("1.5B", "not a whole number of bytes"),
        ("0.3KiB", "not a whole number of bytes"),
        ("-5MB", "cannot read"),
        (-1, "must not be negative"),
        ("MB", "cannot read"),
        ("", "cannot read"),
        (True, "expected a size"),
        (1.5, "whole number"),
        ([1], "expected a size"),
        (float("inf"), "whole number"),
    ],
)
def test_rejects_with_a_reason(bad, fragment):
    with pytest.raises(SizeError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        parse_size(bad)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["B", "KB", "MB", "KiB", "MiB"]))
def test_integer_with_unit_is_exact(n, unit):
    factor = {"B": 1, "KB": 1000, "MB": 10**6, "KiB": 1024, "MiB": 1 << 20}[unit]
    assert parse_size(f"{n}{unit}") == n * factor


def test_format_size_is_decimal():
    assert format_size(20_000_000) == "20 MB"
    assert format_size(1500) == "1.5 kB"
    assert format_size(12) == "12 B"
