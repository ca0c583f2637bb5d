"""Reading what iperf3 and ``ip mptcp monitor`` print, for the kernel baselines.

Pure functions over text, JSON and /proc (no process is started here), so that they can be
tested on recorded output: the receiver's intervals spread into 1 ms samples (`spread`), each
test's start from the server's timestamped lines (`server_anchors`), subflows per connection
(`monitor_subflows`), a namespace's TCP retransmissions (`retrans_segs`) and the per-test rows
added up per flow (`kernel_flow_records`). Why these readings and not iperf3's own summary is
testbed.harness.kernel_baseline's docstring.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.harness.records import FlowRecord

INTERVAL_S = 0.1
SAMPLE_S = 0.001
_GRID_TOLERANCE_S = 0.006  # an interval end this close to k x INTERVAL_S is a timer tick


def receiver_intervals(doc: Mapping[str, Any]) -> list[tuple[float, float, int]]:
    """(start, end, bytes) of the receiver's intervals in an iperf3 ``-J`` document."""
    out = []
    for iv in doc.get("intervals") or ():
        s = iv.get("sum") or {}
        if s.get("omitted"):
            continue
        out.append((float(s["start"]), float(s["end"]), int(s["bytes"])))
    return out


def spread(
    intervals: Iterable[tuple[float, float, int]],
    offset: float,
    limit: int,
    sample_s: float = SAMPLE_S,
) -> tuple[list[tuple[float, int]], float | None]:
    """Each interval's bytes spread uniformly over it, in `sample_s` samples, capped at `limit`.

    Returns the (time, bytes) samples, times shifted by `offset`, each sample stamped at the end
    of its slice, and the time at which `limit` bytes had arrived (None if they never did).
    """
    samples: list[tuple[float, int]] = []
    total = 0
    done: float | None = None
    for start, end, nbytes in intervals:
        if nbytes <= 0 or total >= limit:
            continue
        span = max(end - start, 0.0)
        n = max(1, round(span / sample_s))
        base, extra = divmod(nbytes, n)
        for j in range(n):
            chunk = min(base + (1 if j < extra else 0), limit - total)
            if chunk <= 0:
                continue
            total += chunk
            t = offset + start + span * (j + 1) / n
            samples.append((t, chunk))
            if total >= limit:
                done = t
                break
    return samples, done


_CONNECTED = re.compile(r"local \S+ port \d+ connected to \S+ port (\d+)")
_INTERVAL = re.compile(r"^\[\s*\d+\]\s+(\d+\.\d+)-(\d+\.\d+)\s+sec")


def server_anchors(lines: Iterable[tuple[float, str]]) -> dict[int, float]:
    """Test start time per client data port, from an iperf3 server's timestamped text output.

    iperf3 buffers its text and writes it out when an interval timer fires (test start + k x
    INTERVAL_S, never early) and when TEST_END arrives (the final partial interval, whose end it
    prints with two decimals). Each line thus gives an upper bound of the start: ``arrival -
    k x INTERVAL_S`` for a timer tick, ``arrival - end + 5 ms`` for the partial interval; the
    smallest is kept (a write that reached us late, say behind a busy interpreter, then costs
    nothing as long as one line of the test arrived promptly).
    """
    best: dict[int, float] = {}
    port: int | None = None
    for t, line in lines:
        m = _CONNECTED.search(line)
        if m:
            port = int(m.group(1))
            continue
        if line.startswith("- - -"):
            port = None  # the summary follows; its 0.00-D lines are written after the exchange
            continue
        m = _INTERVAL.match(line)
        if m is None or port is None:
            continue
        end = float(m.group(2))
        k = round(end / INTERVAL_S)
        if k >= 1 and abs(end - k * INTERVAL_S) <= _GRID_TOLERANCE_S:
            bound = t - k * INTERVAL_S
        else:
            bound = t - end + 0.005
        best[port] = min(best.get(port, math.inf), bound)
    return best


def monitor_subflows(lines: Iterable[str]) -> dict[int, int]:
    """Subflows per MPTCP connection (keyed by its first subflow's local port), from the output
    of ``ip mptcp monitor`` in the connecting host: 1 + the SF_ESTABLISHED events of its token
    - its SF_CLOSED events (the kernel closes the whole connection with one CLOSED event, so
    SF_CLOSED only counts subflows that went away while it lived)."""
    port_of: dict[str, int] = {}
    joins: dict[str, int] = {}
    for line in lines:
        token = re.search(r"token=([0-9a-f]+)", line)
        if token is None:
            continue
        tok = token.group(1)
        if re.search(r"\[\s*CREATED\]", line):
            sport = re.search(r"sport=(\d+)", line)
            if sport:
                port_of[tok] = int(sport.group(1))
        elif "SF_ESTABLISHED" in line:
            joins[tok] = joins.get(tok, 0) + 1
        elif "SF_CLOSED" in line:
            joins[tok] = joins.get(tok, 0) - 1
    return {port: 1 + joins.get(tok, 0) for tok, port in port_of.items()}


def load_json(path: Path) -> dict[str, Any] | None:
    """An iperf3 JSON document, or None if the file is missing, empty or cut short."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def file_size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path else None
    except OSError:
        return None


def file_tail(path: Path, chars: int = 300) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:].strip()
    except OSError:
        return ""


def retrans_segs(pid: int) -> int:
    """``Tcp: RetransSegs`` of the network namespace of `pid`."""
    rows = [
        line.split()
        for line in Path(f"/proc/{pid}/net/snmp").read_text().splitlines()
        if line.startswith("Tcp:")
    ]
    return int(rows[1][rows[0].index("RetransSegs")])


def kernel_flow_records(rows: Sequence[Mapping[str, Any]]) -> list[FlowRecord]:
    """One `FlowRecord` per (src, dst), from the per-test rows of `collect` (an all-reduce
    runs one iperf3 test per hop and step: they add up). A flow starts when its first test's
    data started (its launch if iperf3 left no output) and is done when its last test's
    receiver had every byte; retransmits are iperf3's own count for the sender ("tcp")."""
    by_pair: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_pair.setdefault((row["src"], row["dst"]), []).append(row)
    out = []
    for (src, dst), tests in by_pair.items():
        ends = [r.get("done_s") for r in tests]
        retrans = sum(int(r.get("json_retransmits") or 0) for r in tests)
        out.append(
            FlowRecord(
                src=src,
                dst=dst,
                bytes=sum(r["bytes"] for r in tests),
                acked_bytes=sum(int(r.get("received") or 0) for r in tests),
                start_s=min(r.get("test_start_s", r["launched_s"]) for r in tests),
                done_s=None if any(e is None for e in ends) else max(ends),
                retransmits={"tcp": retrans},
            )
        )
    return out
