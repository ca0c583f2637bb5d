"""tools/fuzz_switch_core.py: 50k random and mutated frames through the C forwarding core built
with AddressSanitizer and UBSan, in a child process: no sanitizer report (a report aborts the
child), no leak of the core's, and every malformed frame counted by its drop reason."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _libasan() -> bool:
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True)
    return out.returncode == 0 and Path(out.stdout.strip()).is_absolute()


@pytest.mark.build
@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not found: no sanitized build")
def test_fifty_thousand_frames_under_asan_and_ubsan() -> None:
    if not _libasan():
        pytest.skip("gcc has no libasan.so")
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fuzz_switch_core.py"), "--frames", "50000"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    report = out.stderr[-4000:]
    assert "Sanitizer" not in out.stderr and "runtime error" not in out.stderr, report
    assert out.returncode == 0, report
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] >= 50000
    assert result["malformed"] > 10000  # the mix is a third malformed or more
    assert result["malformed_counted"] == result["malformed"]
    assert result["egress"] > 10000 and result["trims"] > 0
