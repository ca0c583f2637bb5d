"""What the runner watches beside a running workload: the switches' queues, the machine's timers.

`Monitor` is the thread that reads every switch's counters every MONITOR_S (draining their
per-interval queue maxima), probes the machine's timer lateness with short sleeps and feeds the
live goodput, the time dilation and the lateness verdict so far to the progress line. `cpu_times` and `host_udp_drops` are the readings taken
around a run (the machine's CPU use, the hosts' kernels' UDP drops); the soak takes them too.
Each reading that cannot be taken says so, so that the verdict can fail closed.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from contracts.clock import Clock
from contracts.stats import LateHistogram, percentile
from testbed.analysis.durations import fmt_duration
from testbed.analysis.port_series import (
    QueueMaxima,
    merge_queue_maxima,
)
from testbed.experiment.progress import Progress
from testbed.fabric import client

MONITOR_S = 0.25  # switch counters read (draining the queue maxima) and progress refresh
JITTER_TICK_S = 0.002  # the jitter probe's sleep


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return float(sum(parts) - idle), float(sum(parts))


def host_udp_drops(name: str, hosts: Sequence[str]) -> tuple[int | None, list[str]]:
    """UDP datagrams the hosts' kernels dropped for a full receive or send buffer (per netns),
    and the hosts whose counters could not be read: a host that cannot be read is not a host
    with no drops (None then, and the verdict says what was missing)."""
    try:
        st = client.state(name)
    except (client.ClientError, OSError) as exc:
        return None, [f"kernel drops: the fabric's state is unreadable ({exc})"]
    total, missing = 0, []
    for h in hosts:
        try:
            out = subprocess.run(
                ["mnexec", "-a", str(st.nodes[h]["pid"]), "cat", "/proc/net/snmp"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            rows = [line.split() for line in out.splitlines() if line.startswith("Udp:")]
            stats = dict(zip(rows[0][1:], rows[1][1:], strict=False))
            total += int(stats["RcvbufErrors"]) + int(stats["SndbufErrors"])
        except (subprocess.SubprocessError, OSError, KeyError, IndexError, ValueError) as exc:
            missing.append(f"kernel drops: host {h}'s UDP counters unreadable ({exc!r})")
    return (None if missing else total), missing


class Monitor(threading.Thread):
    """Collects the switches' queue maxima, the machine's timer lateness and the live goodput.

    Every MONITOR_S it reads every switch's counters, which drains each port's per-interval
    queue maxima (switch.port.QueueMaxima): a queue that fills and empties between two reads is
    still seen, and the harness never polls at the queue's own time scale."""

    def __init__(
        self,
        name: str,
        t0: float,
        duration: float,
        progress: Progress,
        live_mbps: Callable[[], float | None] | None,
        next_event: Callable[[], str],
        clock: Clock,
        late_limit_us: float | None = None,
    ) -> None:
        """`late_limit_us`: the endpoint timer lateness the verdict allows (virtual µs,
        testbed.analysis.validity.Thresholds); given, the progress line says whether the
        probe's lateness so far is within it."""
        super().__init__(daemon=True, name="monitor")
        self.clock = clock  # t0 and every sample time are virtual; the probe's sleeps real
        self.fabric_name = name
        self.t0 = t0
        self.duration = duration
        self.progress = progress
        self.live_mbps = live_mbps  # the receivers' goodput over their latest bin
        self.next_event = next_event
        self.stop_flag = threading.Event()
        self.maxima: QueueMaxima = {}
        self.interval_s: float | None = None
        self.late_us: list[float] = []
        # The same samples counted for the live verdict: a percentile four times a second
        # without sorting a list that grows by hundreds a second.
        self.late_hist = LateHistogram()
        self.late_limit_us = late_limit_us
        self.errors = 0

    def run(self) -> None:
        clock = self.clock
        next_sample = time.monotonic()
        while not self.stop_flag.is_set():
            before = time.monotonic()
            time.sleep(JITTER_TICK_S)
            late_real = max(0.0, time.monotonic() - before - JITTER_TICK_S)
            late_us = clock.virtual(late_real) * 1e6
            self.late_us.append(late_us)
            self.late_hist.add(late_us)
            now = time.monotonic()
            if now < next_sample:
                continue
            next_sample = now + MONITOR_S
            now = clock.now()
            try:
                counters = client.call(
                    self.fabric_name, {"op": "counters", "node": None}, timeout=5
                )["counters"]
            except (client.ClientError, KeyError, OSError):
                self.errors += 1
                counters = {}
            t = now - self.t0
            self.collect(counters)
            mbps = None if self.live_mbps is None else self.live_mbps()
            self.progress.status(
                t,
                self.duration,
                self.next_event(),
                mbps,
                dilation=clock.dilation,
                verdict=self.verdict_so_far(),
            )

    def collect(self, counters: dict) -> None:
        """Merge one counters read's queue maxima (also the final read's, after the run)."""
        merge_queue_maxima(self.maxima, counters)
        for sw in counters.values():
            if sw.get("queue_max_interval_s"):
                self.interval_s = float(sw["queue_max_interval_s"])

    def verdict_so_far(self) -> str | None:
        """The probe's timer lateness so far against the verdict's limit, for the progress
        line; None without a limit or a sample. Only a sign: the verdict itself is judged at
        the end, on the switches' and the endpoints' own lateness (testbed.analysis.validity)."""
        p99 = self.late_hist.percentile(99)
        if self.late_limit_us is None or p99 is None:
            return None
        late = fmt_duration(p99 * 1e-6, 2)
        limit = fmt_duration(self.late_limit_us * 1e-6, 2)
        if p99 <= self.late_limit_us:
            return f"keeping up so far (timers late P99 {late} <= {limit})"
        return f"FALLING BEHIND (timers late P99 {late} > {limit})"

    def jitter_p99_us(self) -> float | None:
        """The probe's nearest-rank P99 (contracts.stats); None before its first sample."""
        return percentile(self.late_us, 99)
