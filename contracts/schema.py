"""How this project's input schemas behave, and how their errors read.

Scenario files and endpoint job requests are both checked by pydantic models with these rules:
unknown keys are errors (a misspelt key must not be silently ignored), values are not coerced
(YAML and JSON already give typed values, so ``"2"`` for an integer or ``1`` for ``true`` is a
mistake worth reporting) and a parsed spec is immutable. An error is reported as one line that
starts with the key path (``workload.srcs[1]: ...``), the shape every caller shows to its user.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every input schema: unknown keys forbidden, no coercion, frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def format_loc(loc: Sequence[str | int], prefix: str = "") -> str:
    """``("events", 2, "link")`` -> ``events[2].link`` (after `prefix`, if any)."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def reason_of(error: dict[str, Any]) -> str:
    """The reason part of one pydantic error (``pydantic.ValidationError.errors()`` entry).

    A validator's own ValueError message is used as it is; pydantic's messages are lowercased
    and given the offending value, so the line reads ``key: input should be ..., got 'x'``.
    """
    msg = error["msg"]
    if msg.startswith("Value error, "):
        return msg[len("Value error, ") :]
    return f"{msg[:1].lower()}{msg[1:]}, got {error.get('input')!r}"
