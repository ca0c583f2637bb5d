"""24-bit PSN serial arithmetic agrees with plain integer arithmetic on unwrapped numbers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint.wire import PSN_MOD, psn_add, psn_diff, psn_in_window, psn_le, psn_lt

# An unwrapped sequence position and an offset well inside the unambiguous half-range.
base = st.integers(0, 4 * PSN_MOD)
offset = st.integers(-(2**23), 2**23 - 1)


@settings(max_examples=300, deadline=None)
@given(base, offset)
def test_serial_order_matches_unwrapped_order(x: int, d: int) -> None:
    a, b = (x + d) % PSN_MOD, x % PSN_MOD
    assert psn_diff(a, b) == d
    assert psn_lt(a, b) == (d < 0)
    assert psn_le(a, b) == (d <= 0)
    assert psn_add(b, d) == a


@settings(max_examples=300, deadline=None)
@given(base, st.integers(0, 2**20), st.integers(1, 2**20))
def test_window_membership_across_wrap(x: int, d: int, size: int) -> None:
    assert psn_in_window((x + d) % PSN_MOD, x % PSN_MOD, size) == (d < size)


def test_wrap_edges() -> None:
    assert psn_add(PSN_MOD - 1, 1) == 0
    assert psn_diff(0, PSN_MOD - 1) == 1
    assert psn_lt(PSN_MOD - 1, 0) and not psn_lt(0, PSN_MOD - 1)
    assert psn_in_window(2, PSN_MOD - 3, 6) and not psn_in_window(3, PSN_MOD - 3, 6)
