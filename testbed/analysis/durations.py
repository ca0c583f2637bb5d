"""Durations written in the unit that fits them: "750 µs", "17 ms", "2.5 s", "3 min 20 s".

Why: runs last from tens of microseconds of virtual time (a dilated 100 Gbps fabric) to
hours (a soak), and one fixed unit reads wrong at one end: a 17 ms run printed in seconds with
one decimal read `t=  0.0/0.017s` from start to end, and an event applied on time at 0.75 ms
read as late once rounded to the millisecond. The plots' captions and axes, the progress line
and the timeline's event lines all write times through here.
"""

from __future__ import annotations

import math

UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
"""Unit name and its length in seconds, largest first."""


def unit_for(span_s: float) -> tuple[str, float]:
    """(name, seconds) of the largest unit in which `span_s` is at least 1; seconds for 0,
    for anything that is not finite and for spans of a second or more."""
    span = abs(span_s)
    if not math.isfinite(span) or span == 0:
        return UNITS[0]
    for name, size in UNITS:
        if span >= size * (1 - 1e-9):
            return name, size
    return UNITS[-1]


def fmt_duration(seconds: float, digits: int = 3, unit: str | None = None) -> str:
    """`seconds` to `digits` significant digits in the unit that fits it (or in `unit`, one
    of UNITS' names). Past a minute, with no unit asked for: minutes and seconds, or hours and
    minutes (a real time left, a soak's length)."""
    if not math.isfinite(seconds):
        return "never" if seconds > 0 else "—"
    if unit is None and abs(seconds) >= 60:
        sign = "-" if seconds < 0 else ""
        total = round(abs(seconds))
        if total < 3600:
            return f"{sign}{total // 60} min {total % 60} s"
        return f"{sign}{total // 3600} h {total % 3600 // 60} min"
    name, size = unit_for(seconds) if unit is None else (unit, dict(UNITS)[unit])
    value = float(f"{seconds / size:.{digits}g}")
    if unit is None and abs(value) >= 1000 and size < 1.0:  # 999.7 µs rounds to 1 ms
        name, size = UNITS[[n for n, _ in UNITS].index(name) - 1]
        value = float(f"{seconds / size:.{digits}g}")
    text = f"{value:.0f}" if abs(value) >= 10 ** (digits - 1) else f"{value:.{digits}g}"
    return f"{text} {name}"


def decimals_for(span: float, digits: int = 3) -> int:
    """Decimal places that show `span` (already in its unit) to `digits` significant digits:
    the precision at which a count up to `span` visibly moves."""
    if span <= 0 or not math.isfinite(span):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(span)))
