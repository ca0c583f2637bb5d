"""Results belong to whoever asked for them, not to root.

The testbed runs under sudo (it creates namespaces), so everything it writes would be
root's: a user could not delete, move or re-plot their own results without sudo again. A run
therefore notes the first folder of its results path that did not exist yet, and when done
hands that tree -- only what this run created -- to the invoking user (SUDO_UID/SUDO_GID).
Without sudo, or as plain root, nothing changes hands.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (None if `path` exists)."""
    missing = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing = p
    return missing


def invoking_user(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(uid, gid) of the user behind sudo, or None when not running as root under sudo."""
    env = os.environ if env is None else env
    if os.geteuid() != 0 or "SUDO_UID" not in env:
        return None
    try:
        uid = int(env["SUDO_UID"])
        gid = int(env.get("SUDO_GID", uid))
    except ValueError:
        return None
    return None if uid == 0 else (uid, gid)


def hand_over(created: Path | None, owner: tuple[int, int] | None) -> int:
    """chown `created` and everything below it to `owner`; returns how many paths changed."""
    if created is None or owner is None or not created.exists():
        return 0
    uid, gid = owner
    n = 0
    for root, dirs, files in os.walk(created):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)
            n += 1
    os.chown(created, uid, gid, follow_symlinks=False)
    return n + 1
