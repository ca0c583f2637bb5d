"""24-bit packet sequence number (PSN) arithmetic.

The InfiniBand BTH carries a 24-bit PSN that wraps. Every comparison of PSNs anywhere in the
transport goes through these helpers (RFC 1982 serial-number arithmetic), so a connection that
starts near 2**24 behaves exactly like one that starts at 0. A distance of 2**23 or more is
ambiguous; the transport keeps its windows far below that (see ``MAX_WINDOW``).
"""

from __future__ import annotations

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
PSN_MASK = PSN_MOD - 1
_HALF = 1 << (PSN_BITS - 1)
# Largest window for which serial comparison stays unambiguous, with head-room for stale packets.
MAX_WINDOW = 1 << 20


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` modulo 2**24 (``n`` may be negative)."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed serial distance ``a - b`` in ``[-2**23, 2**23)``."""
    d = (a - b) & PSN_MASK
    return d - PSN_MOD if d >= _HALF else d


def psn_lt(a: int, b: int) -> bool:
    """True if ``a`` precedes ``b`` in serial order."""
    return psn_diff(a, b) < 0


def psn_le(a: int, b: int) -> bool:
    """True if ``a`` precedes or equals ``b`` in serial order."""
    return psn_diff(a, b) <= 0


def psn_in_window(psn: int, base: int, size: int) -> bool:
    """True if ``psn`` lies in ``[base, base + size)`` modulo 2**24."""
    return ((psn - base) & PSN_MASK) < size
