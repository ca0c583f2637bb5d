"""Byte sizes as people write them in scenario files: ``20MB``, ``1.5KB``, ``64KiB``, ``4096``.

Decimal units (B, KB, MB, GB) are powers of 1000 and binary units (KiB, MiB, GiB) powers of
1024, as docs/design.md's scenario format fixes them, because link rates are decimal (Mbps) and
buffer sizes are often binary; a scenario author must be able to say exactly which one they mean. Anything ambiguous -- a unit
we do not know, a fraction of a byte, a negative size -- is an error, never a guess.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

UNITS: dict[str, int] = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
}

_SIZE_RE = re.compile(
    r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*$"
)


class SizeError(ValueError):
    """A size string or number that is not a whole, non-negative number of bytes."""


def parse_size(value: object) -> int:
    """Return `value` in bytes; raise SizeError saying what is wrong and what is accepted.

    Units are case-insensitive (``20mb`` = ``20MB``) because nobody means millibits in a scenario
    file; ``b`` is bytes, not bits. A bare number is bytes.
    """
    if isinstance(value, bool):
        raise SizeError(f"expected a size such as 20MB or 4096, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise SizeError(f"size must not be negative, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise SizeError(f"size must be a whole number of bytes, got {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise SizeError(f"expected a size such as 20MB or 4096, got {type(value).__name__}")
    match = _SIZE_RE.match(value)
    if match is None:
        raise SizeError(f"cannot read {value!r} as a size (examples: 20MB, 1.5KB, 64KiB, 4096)")
    unit = match["unit"].upper() or "B"
    if unit not in UNITS:
        raise SizeError(
            f"unknown unit {match['unit']!r} in {value!r} (use B, KB, MB, GB, KiB, MiB or GiB)"
        )
    # Exact arithmetic: 1.1MB must be 1_100_000, not 1_100_000.0000000002.
    exact = Fraction(match["number"]) * UNITS[unit]
    if exact.denominator != 1:
        raise SizeError(f"{value!r} is not a whole number of bytes ({float(exact):g} B)")
    return int(exact)


def format_size(nbytes: float) -> str:
    """Human-readable decimal size (``20 MB``, ``1.5 kB``) for reports and logs."""
    for unit, factor in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:.4g} {unit}"
    return f"{nbytes:.0f} B"
