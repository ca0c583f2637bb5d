"""endpoint._burst fuzzed under AddressSanitizer and UBSan (tools/burst_fuzz.py), in a
subprocess: no sanitizer report, no mismatch with the Python twins. A canary extension with a
one-byte heap overrun proves the set-up does report (else a silent sanitizer would pass)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tools" / "burst_fuzz.py"
REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer")

pytestmark = [
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
    pytest.mark.build,  # sanitized builds: `make test` runs them, `make check` does not
]


def _libasan() -> str:
    out = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        pytest.skip("gcc has no libasan.so")
    return out


def _san_env() -> dict:
    return {
        **os.environ,
        "LD_PRELOAD": _libasan(),
        "ASAN_OPTIONS": "detect_leaks=0",
        "UBSAN_OPTIONS": "print_stacktrace=1",
        "PYTHONMALLOC": "malloc",
    }


def _run(args: list, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=_san_env(),
        timeout=timeout,
        cwd=ROOT,
    )


_CANARY = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
static PyObject *overrun(PyObject *self, PyObject *arg) {
    volatile char *p = malloc(8);
    p[8] = 1;  /* one byte past the end */
    free((void *)p);
    Py_RETURN_NONE;
}
static PyMethodDef m[] = {{"overrun", overrun, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "canary", "", -1, m,
                               NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_canary(void) { return PyModule_Create(&d); }
"""


def test_the_sanitizer_setup_reports_an_overrun(tmp_path):
    src = tmp_path / "canary.c"
    src.write_text(_CANARY)
    so = tmp_path / ("canary" + sysconfig.get_config_var("EXT_SUFFIX"))
    inc = sysconfig.get_paths()["include"]
    subprocess.run(
        ["gcc", "-O1", "-g", "-fsanitize=address,undefined", "-shared", "-fPIC", f"-I{inc}",
         str(src), "-o", str(so)],
        check=True,
    )  # fmt: skip
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import canary; canary.overrun(0)"
    r = _run(["-c", code], timeout=60)
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in r.stderr


def test_burst_fuzz_under_asan_and_ubsan_reports_nothing(tmp_path):
    b = subprocess.run(
        [sys.executable, str(FUZZ), "build", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert b.returncode == 0, b.stderr
    so = b.stdout.strip().splitlines()[-1]
    r = _run([str(FUZZ), "run", so, "--iterations", "3000", "--seed", "32"])
    reports = [line for line in r.stderr.splitlines() if any(k in line for k in REPORTS)]
    assert not reports, r.stderr[-4000:]
    assert r.returncode == 0, r.stderr[-4000:]
    assert "no mismatch" in r.stdout
