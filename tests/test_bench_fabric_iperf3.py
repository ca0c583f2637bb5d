"""The fabric bench's iperf3 step: a test iperf3 reports as not run is retried, not a crash.

Why: a full `testbed bench fabric` died on a KeyError after iperf3 3.12 exited 0 with a JSON
document lacking `end.sum_received`; these tests pin the parse and the retry without a fabric.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from testbed.bench import fabric_bench
from testbed.bench.endpoint_bench import BenchError

GOOD = {"end": {"sum_received": {"bits_per_second": 93.5e6}}}
NO_END = {"start": {}, "intervals": [], "end": {}}
ERROR = {"error": "unable to receive control message: Connection reset by peer"}
PIDS = {"nodes": {"h1": 1, "h3": 2}, "switches": []}


def test_received_mbps_reads_the_receiver_sum() -> None:
    assert fabric_bench.iperf3_received_mbps(GOOD) == pytest.approx(93.5)


@pytest.mark.parametrize("doc", [NO_END, ERROR, {}, {**GOOD, **ERROR}])
def test_received_mbps_is_none_for_a_test_that_did_not_run(doc) -> None:
    assert fabric_bench.iperf3_received_mbps(doc) is None


class _Server:
    """A stand-in for the one-off iperf3 server process."""

    started = 0

    def __init__(self, *a, **kw) -> None:
        type(self).started += 1

    def poll(self):
        return 0

    def kill(self) -> None:  # pragma: no cover - poll says it has exited
        raise AssertionError("an exited server is not killed")

    def wait(self) -> int:
        return 0


def _clients(monkeypatch, docs: list[dict]) -> list[list[str]]:
    """Make each iperf3 client call return the next document (exit 0); record the calls."""
    calls: list[list[str]] = []
    _Server.started = 0
    monkeypatch.setattr(subprocess, "Popen", _Server)

    def run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, json.dumps(docs[len(calls) - 1]), "")

    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_a_document_without_a_result_is_retried_with_a_new_server(monkeypatch) -> None:
    calls = _clients(monkeypatch, [NO_END, ERROR, GOOD])
    assert fabric_bench._iperf3(PIDS, "10.1.2.2", 1.0, 5401) == pytest.approx(93.5)
    assert len(calls) == 3 and _Server.started == 3


def test_every_attempt_failing_raises_naming_iperf3s_error(monkeypatch) -> None:
    _clients(monkeypatch, [NO_END, NO_END, ERROR])
    with pytest.raises(BenchError, match="failed 3 times.*Connection reset by peer"):
        fabric_bench._iperf3(PIDS, "10.1.2.2", 1.0, 5401)
    assert _Server.started == fabric_bench.IPERF3_ATTEMPTS
