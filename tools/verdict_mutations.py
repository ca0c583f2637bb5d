"""Mutations of the validity verdict, each applied alone, and the test that must catch it (issue 31).

Run from the checkout: `.venv/bin/python tools/verdict_mutations.py [NAME ...]`. Each mutation
rewrites one line, runs the named test file, restores the file, and prints CAUGHT (with the
first failing test) or NOT CAUGHT. docs/measurements/2026-12-06-verdict.md lists the results.
"""

from __future__ import annotations

import subprocess
import sys

M = [
    (
        "switch lateness always 0, on a real fabric (netns, root)",
        "switch/loop.py",
        "        _record_late(switches, (now - deadline) * 1e6)",
        "        _record_late(switches, 0.0)",
        "tests/test_verdict_netns.py::test_an_overloaded_run_is_invalid_and_exits_3_with_its_reasons",
    ),
    (
        "judge always valid",
        "testbed/analysis/validity.py",
        "    return Verdict(not reasons, reasons)\n",
        "    return Verdict(True, [])\n",
        "tests/test_verdict.py",
    ),
    (
        "switch limit off by one (>=)",
        "testbed/analysis/validity.py",
        "        if timing.switch_late_us_p99 > limits.switch_late_us:",
        "        if timing.switch_late_us_p99 >= limits.switch_late_us:",
        "tests/test_verdict.py",
    ),
    (
        "CPU limit off (> 0.96)",
        "testbed/analysis/validity.py",
        "        if timing.cpu_util > limits.max_cpu_util:",
        "        if timing.cpu_util > limits.max_cpu_util + 0.01:",
        "tests/test_verdict.py",
    ),
    (
        "kernel drops limit off by one",
        "testbed/analysis/validity.py",
        "        if timing.kernel_drops > limits.max_kernel_drops:",
        "        if timing.kernel_drops > limits.max_kernel_drops + 1:",
        "tests/test_verdict.py",
    ),
    (
        "missing input counts as measured",
        "testbed/analysis/validity.py",
        "        if value is None:\n",
        "        if False:\n",
        "tests/test_verdict.py",
    ),
    (
        "is_valid defaults to valid",
        "testbed/analysis/validity.py",
        'emulation.get("valid") is True',
        'emulation.get("valid", True) is True',
        "tests/test_verdict.py",
    ),
    (
        "overall verdict always valid",
        "testbed/experiment/runner.py",
        '        "valid": not reasons,\n',
        '        "valid": True,\n',
        "tests/test_verdict.py",
    ),
    (
        "unreadable histogram read as zero",
        "testbed/analysis/emulator_timing.py",
        '            out.missing.append(f"{what} lateness: {name} reported no lateness histogram")\n            continue',
        "            continue",
        "tests/test_verdict.py",
    ),
    (
        "unreadable host drops read as zero",
        "testbed/analysis/emulator_timing.py",
        '        missing.append(f"kernel drops: switch {name} reported none")',
        "        pass",
        "tests/test_verdict.py",
    ),
    (
        "switch lateness always 0 (loop)",
        "switch/loop.py",
        "        _record_late(switches, (now - deadline) * 1e6)",
        "        _record_late(switches, 0.0)",
        "tests/test_switch_egress_timers.py",
    ),
    (
        "switch samples only after an empty wait (old rule)",
        "switch/loop.py",
        "    if deadline is not None and now >= deadline:\n        _record_late",
        "    if False:\n        _record_late",
        "tests/test_switch_egress_timers.py",
    ),
    (
        "histogram percentile: bucket lower edge",
        "contracts/stats.py",
        "                return min(_upper_edge(b), self.max_us)",
        "                return min(_upper_edge(b - 1), self.max_us)",
        "tests/test_verdict.py",
    ),
    (
        "percentile rule int(0.99*(n-1))",
        "contracts/stats.py",
        "    return max(0, math.ceil(p / 100.0 * n) - 1)",
        "    return int(p / 100.0 * (n - 1))",
        "tests/test_verdict.py",
    ),
    (
        "runner default verdict valid",
        "testbed/experiment/transport_run.py",
        'Verdict(False, ["not judged"])',
        "Verdict(True)",
        "tests/test_verdict.py",
    ),
    (
        "dilated run with no switch sample passes",
        "testbed/experiment/transport_run.py",
        "    need = shaped and clock.dilation > 1\n",
        "    need = False\n",
        "tests/test_verdict.py",
    ),
]


def main(only: list[str]) -> int:
    missed = 0
    for name, path, old, new, test in M:
        if only and name not in only:
            continue
        src = open(path).read()
        assert src.count(old) == 1, (name, src.count(old))
        open(path, "w").write(src.replace(old, new))
        try:
            r = subprocess.run(
                [".venv/bin/python", "-m", "pytest", "-q", "-x", "-p", "no:randomly", test],
                capture_output=True,
                text=True,
            )
            failed = [x for x in r.stdout.splitlines() if x.startswith("FAILED")]
            print(
                f"{name}: {'CAUGHT by ' + failed[0].split()[1] if r.returncode else 'NOT CAUGHT'}",
                flush=True,
            )
            missed += r.returncode == 0
        finally:
            open(path, "w").write(src)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
