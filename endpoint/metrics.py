"""JSON-lines metrics of one endpoint process: one record per line, appended, flushed often.

Every record has ``type`` and ``t`` (seconds of CLOCK_MONOTONIC, which every namespace of the
machine shares, so records of different hosts line up without clock sync). Records:

``start``    host, pid, wall-clock ``wall`` at ``t``, config summary
``job``      job, event (``prepared`` | ``go`` | ``done``), role summary
``bin``      job, ``t`` = bin start (a multiple of ``dt`` = 10 ms on the monotonic clock),
             ``placed`` = payload bytes newly placed at this receiver in the bin (packet by
             packet, as RDMA writes land), ``delivered`` = bytes of messages completed in the
             bin, ``ms`` = ``placed`` per 1 ms sub-bin (for stall detection), ``by_peer``.
             Bins with nothing placed or delivered are not written: a missing bin is zero.
``counters`` job, peer, qp: cumulative counters, ``retransmits`` by reason, receiver
             ``drops``; every ``stats_interval`` while the job is active and once at its end.
             NACKs are ``counters.nack_tx`` / ``nack_rx``, trims seen ``counters.trimmed_rx``.
``ev``       job, peer, ev, ``old`` -> ``new`` state (good / congested / failed), at ``t``.
``evtx``     ``t`` = bin start, ``bytes`` = UDP payload bytes sent in the bin per
             ``"DST_ADDR:EV"`` (every job together): the traffic share of each path.
``rtt``      job, peer, per bin: ``n`` samples, ``min``/``p50``/``max`` and a few raw samples.
``msg``      job, peer, side ``tx`` (posted, acked: the sender saw every byte acknowledged) or
             ``rx`` (delivered), msg_id, bytes.
``rank_step`` / ``step``  all-reduce: one rank's step (start, end), and the whole step at
             rank 0 (start = its release, end = the slowest rank's finish).
``end``      reason, final process counters.

Flushed every ``flush_interval`` seconds, on every job event, and on exit (clean stop or
SIGTERM).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from typing import IO, Any

BIN_S = 0.010
SUB_BINS = 10  # 1 ms resolution inside a bin


class DeliveryBins:
    """Placed/delivered bytes accumulated into fixed bins of the monotonic clock (pure)."""

    def __init__(self, bin_s: float = BIN_S, sub_bins: int = SUB_BINS) -> None:
        self.bin_s = bin_s
        self.sub_bins = sub_bins
        self._bins: dict[tuple[int, int], dict] = {}  # (job, bin index) -> accumulator

    def _acc(self, job: int, t: float) -> tuple[dict, int]:
        k = math.floor(t / self.bin_s)
        acc = self._bins.get((job, k))
        if acc is None:
            acc = {"placed": 0, "delivered": 0, "ms": [0] * self.sub_bins, "by_peer": {}}
            self._bins[(job, k)] = acc
        sub = min(self.sub_bins - 1, int((t / self.bin_s - k) * self.sub_bins))
        return acc, sub

    def placed(self, job: int, peer: str, t: float, nbytes: int) -> None:
        if nbytes <= 0:
            return
        acc, sub = self._acc(job, t)
        acc["placed"] += nbytes
        acc["ms"][sub] += nbytes
        acc["by_peer"][peer] = acc["by_peer"].get(peer, 0) + nbytes

    def delivered(self, job: int, t: float, nbytes: int) -> None:
        acc, _ = self._acc(job, t)
        acc["delivered"] += nbytes

    def take(self, now: float | None = None) -> list[dict]:
        """Records of bins that ended before ``now`` (all bins if ``now`` is None)."""
        out = []
        for job, k in sorted(self._bins):
            if now is not None and (k + 1) * self.bin_s > now:
                continue
            acc = self._bins.pop((job, k))
            out.append(
                {
                    "type": "bin",
                    "job": job,
                    "t": round(k * self.bin_s, 6),
                    "dt": self.bin_s,
                    **acc,
                }
            )
        return out


def rtt_summary(samples: list[float], keep: int = 4) -> dict[str, Any]:
    """n, min, p50, max and ``keep`` evenly spaced raw samples (seconds) of one bin."""
    s = sorted(samples)
    n = len(s)
    step = max(1, n // keep)
    return {
        "n": n,
        "min": s[0],
        "p50": s[n // 2],
        "max": s[-1],
        "samples": [round(x, 7) for x in samples[::step][:keep]],
    }


class MetricsWriter:
    """Buffered JSON-lines file; ``flush`` writes and fsyncs nothing fancier than a flush."""

    def __init__(self, path: str | os.PathLike | None, stream: IO[str] | None = None) -> None:
        self.path = path
        self._f: IO[str] | None = stream
        if stream is None and path is not None:
            self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._buf: list[str] = []
        self.records = 0

    def write(self, record: dict) -> None:
        self._buf.append(json.dumps(record, separators=(",", ":")))
        self.records += 1

    def write_all(self, records: Iterable[dict]) -> None:
        for r in records:
            self.write(r)

    def flush(self) -> None:
        if self._f is None:
            self._buf.clear()
            return
        if self._buf:
            self._f.write("\n".join(self._buf) + "\n")
            self._buf.clear()
        self._f.flush()

    def close(self) -> None:
        self.flush()
        if self._f is not None and self.path is not None:
            self._f.close()
        self._f = None


def read_records(path: str | os.PathLike) -> list[dict]:
    """All records of a metrics file (a torn last line from a killed process is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def placed_samples(records: Iterable[dict], job: int | None = None) -> list[tuple[float, int]]:
    """(time, bytes placed) at 1 ms resolution from ``bin`` records (sub-bin start times)."""
    out = []
    for r in records:
        if r.get("type") != "bin" or (job is not None and r.get("job") != job):
            continue
        sub = r["dt"] / len(r["ms"])
        for i, n in enumerate(r["ms"]):
            if n:
                out.append((r["t"] + i * sub, n))
    out.sort()
    return out
