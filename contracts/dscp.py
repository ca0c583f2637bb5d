"""DSCP and ECN codepoints: how a packet tells a switch what it may do with it.

The fabric's parameters (`topologies.TopologyParams.trimmable_dscp`, ...) choose the DSCPs; the
switches read them from their config and the endpoints from theirs, both built from those
parameters, so a fabric with other DSCPs changes both sides at once. The numbers below are only
the defaults every one of those starts from (UEC-style: AF11/AF12-like values for trimmable and
trimmed data, EF for control, which the priority queue must never hold back).

The ECN codepoints are RFC 3168's (the two low bits of the IP TOS byte).
"""

from __future__ import annotations

TRIMMABLE_DSCP = 10
"""Data a congested switch may cut to its headers instead of dropping."""
TRIMMED_DSCP = 11
"""A header a switch has already trimmed: it goes to the priority queue and is never cut again."""
CONTROL_DSCP = 46
"""ACKs, NACKs and probes: priority queue, never trimmed."""

ECN_NOT_ECT = 0b00
ECN_ECT1 = 0b01
ECN_ECT0 = 0b10
ECN_CE = 0b11
ECN_MASK = 0b11


def tos(dscp: int, ecn: int = ECN_NOT_ECT) -> int:
    """The IP TOS byte of a DSCP and an ECN codepoint."""
    return (dscp << 2) | ecn


def dscp_of(tos_byte: int) -> int:
    """The DSCP of an IP TOS byte."""
    return tos_byte >> 2


def check_dscps(trimmable: int, trimmed: int, control: int) -> str | None:
    """Why these three DSCPs cannot work together (``"key: reason"``), or None if they can.

    Each must fit the 6-bit field, and all three must differ: a switch tells them apart by
    value alone, so trimmed == trimmable would trim a header twice and control == either would
    put data in the priority queue.
    """
    named = {"trimmable_dscp": trimmable, "trimmed_dscp": trimmed, "control_dscp": control}
    for name, value in named.items():
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{name}: must be an integer, got {value!r}"
        if not 0 <= value <= 63:
            return f"{name}: must be between 0 and 63, got {value}"
    if trimmable == trimmed:
        return "trimmed_dscp: must differ from trimmable_dscp"
    if control in (trimmable, trimmed):
        return "control_dscp: must differ from trimmable_dscp and trimmed_dscp"
    return None
