"""What a run measured, computed from plain time series: pure functions, no I/O, no fabric.

The runner hands over, per transport, when application bytes were delivered, which messages
were posted and finished, and the step boundaries of an all-reduce; everything in
`summary.json` is derived here, so every number has exactly one definition (this file) and
can be unit-tested without a fabric.

Definitions (times are seconds from the workload's start):

* goodput over time: newly delivered application bytes in `BIN_S` (10 ms) bins, in Mbps.
* goodput_mbps: all delivered bytes / the active period, which runs from the first message's
  post to the last message's completion (or to the end of the run if something is missing).
  Idle time after a workload finished does not dilute it; a straggler does.
* max_stall_ms: the longest interval in which no new bytes were delivered while data was
  outstanding (posted and not yet complete). Its resolution is that of the delivery samples,
  so endpoints should report deliveries at 1 ms granularity or finer.
* failover_ms: see `failover()`.
* step percentiles: nearest-rank (every reported value is a real step time, P100 = the max).
  A step that never finished counts as infinitely long, so P100 (and P99 if enough steps are
  missing) is reported as null: "never finished", not a made-up number.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from contracts.stats import percentile
from testbed.analysis.trace_report import trace_summary
from testbed.harness.endpoint_driver import reply_pairs
from testbed.harness.ev_controller import round_trip_links
from testbed.harness.records import Failure, FlowRecord, Message, TransportRun
from testbed.scenario import Event, Expect, Scenario, capacity_mbps, total_bytes
from topologies.timing import time_scale

BIN_S = 0.010
PRE_WINDOW_S = 0.5  # healthy goodput is the median over this long before the first failure
WARMUP_S = 0.1  # ... ignoring the workload's first 100 ms (connection set-up, slow start)
SUSTAIN_S = 0.05  # recovered = goodput held at the target for this long, not one lucky bin
RECOVERY_FRACTION = 0.9  # docs/design.md: "back at >= 90% of its pre-failure level"
OUTAGE_FRACTION = 0.5  # a window below this share of the healthy level is an outage
FALLBACK_EFFICIENCY = 0.85  # healthy level assumed when a failure leaves no pre-window


@dataclass(frozen=True)
class AppliedEvent:
    """An event of the timeline and when the runner really applied it (None = not applied)."""

    event: Event
    applied_at: float | None

    @property
    def time(self) -> float:
        return self.event.at if self.applied_at is None else self.applied_at


@dataclass(frozen=True)
class Emulation:
    """Health of the emulator itself during the run.

    cpu_util: mean busy fraction of all cores (0..1). timer_jitter_us_p99: P99 lateness of the
    switches' and endpoints' timers. kernel_drops: packets the kernel dropped because a switch or
    endpoint process did not read its socket in time -- losses of the machine, not the network.
    """

    cpu_util: float = 0.0
    timer_jitter_us_p99: float = 0.0
    kernel_drops: int = 0


@dataclass(frozen=True)
class Failover:
    """Failover outcome. status: recovered | not-recovered | not-exercised | no-failure.

    `ms` is a number only when recovered; "not-exercised" means every failure landed while no
    data was outstanding, so the run says nothing about failover.
    """

    ms: float | None
    status: str


@dataclass
class TransportMetrics:
    """Everything measured for one transport; `summary_entry` is its summary.json form."""

    transport: str
    delivered_bytes: int
    expected_bytes: int
    delivered_all: bool
    goodput_mbps: float
    bottleneck_mbps: float
    max_stall_ms: float
    failover: Failover
    retransmits: dict[str, int]
    trims: int
    step_ms: list[float]
    steps_unfinished: int
    step_percentiles: dict[str, float | None]
    bin_times: list[float]
    goodput_bins: list[float]
    expectations: dict[str, Any]
    ev_bytes: Mapping[str, Sequence[float]] = field(default_factory=dict)
    flows: list[dict[str, Any]] = field(default_factory=list)
    flow_bins: Mapping[str, Sequence[float]] = field(default_factory=dict)  # "h1->h3": Mbps
    trace: dict[str, Any] | None = None  # a trace workload's iterations and collectives
    # ... and the ranks' records it came from (trace_iter, trace_node), for the timeline plot.
    trace_records: tuple[Sequence[dict], Sequence[dict]] = ((), ())

    @property
    def lost_bytes(self) -> int:
        return max(0, self.expected_bytes - self.delivered_bytes)

    @property
    def p100_over_p50(self) -> float | None:
        p50, p100 = self.step_percentiles["p50"], self.step_percentiles["p100"]
        return None if p50 is None or p100 is None or p50 <= 0 else p100 / p50

    @property
    def goodput_fraction(self) -> float | None:
        b = self.bottleneck_mbps
        return self.goodput_mbps / b if 0 < b < math.inf else None

    def summary_entry(self) -> dict[str, Any]:
        return {
            "delivered_bytes": self.delivered_bytes,
            "lost_bytes": self.lost_bytes,
            "goodput_mbps": _r(self.goodput_mbps),
            # None on unshaped links (link_mbps 0): no rate bounds the workload.
            "bottleneck_mbps": _r(self.bottleneck_mbps)
            if self.bottleneck_mbps < math.inf
            else None,
            "max_stall_ms": _r(self.max_stall_ms),
            "failover_ms": _r(self.failover.ms),
            "retransmits": dict(self.retransmits),
            "trims": self.trims,
            "step_time_ms": {k: _r(v) for k, v in self.step_percentiles.items()},
            "flows": self.flows,
            "expectations": self.expectations,
            **({"trace": self.trace} if self.trace is not None else {}),
        }

    def flow_goodput_mbps(self) -> dict[str, float | None]:
        """Mean and min per-flow goodput: what a simulator's per-flow utilisation compares."""
        rates = [f["goodput_mbps"] for f in self.flows if f["goodput_mbps"] is not None]
        if not rates:
            return {"mean": None, "min": None}
        return {"mean": _r(statistics.fmean(rates)), "min": _r(min(rates))}


def flow_entries(flows: Iterable[FlowRecord], end_s: float) -> list[dict[str, Any]]:
    """summary.json's per-flow objects (docs/design.md "Results").

    goodput_mbps: acknowledged bytes over the flow's own active time, from its first post to
    its last acknowledgement, or to the end of the measurement if it did not finish (so an
    unfinished flow reads what it managed, not zero). What an unfinished flow managed is what
    its receiver placed, if it counted more than whole acknowledged messages: a sender sees a
    message acknowledged only whole, and a flow a few packets short of its last 1 MB message
    read half its rate. fct_ms: first post to completion, null if unfinished. A flow that
    never posted reads 0 Mbps. start_s / end_s: its first post and its completion (seconds
    from the workload's start; null if it never posted / finished)."""
    out = []
    for f in flows:
        if f.start_s is None:
            goodput, fct = 0.0, None
        else:
            until = f.done_s if f.done_s is not None else end_s
            managed = f.acked_bytes
            if f.done_s is None and f.placed_bytes is not None:
                managed = max(managed, min(f.placed_bytes, f.bytes))
            goodput = managed * 8 / max(until - f.start_s, 1e-9) / 1e6
            fct = None if f.done_s is None else (f.done_s - f.start_s) * 1000.0
        out.append(
            {
                "src": f.src,
                "dst": f.dst,
                "bytes": f.bytes,
                "acked_bytes": f.acked_bytes,
                "start_s": _r(f.start_s, 6),
                "end_s": _r(f.done_s, 6),
                "goodput_mbps": _r(goodput),
                "fct_ms": _r(fct),
                "retransmits": dict(f.retransmits),
            }
        )
    return out


# --------------------------------------------------------------------------- time series


def flow_name(src: str, dst: str) -> str:
    """A flow's name in goodput.csv and the tidy frames: ``h1->h3``."""
    return f"{src}->{dst}"


def goodput_series(
    deliveries: Iterable[tuple[float, float]], end_s: float, bin_s: float = BIN_S
) -> tuple[list[float], list[float]]:
    """(bin start times, Mbps per bin) over [0, end_s); samples outside are ignored."""
    nbins = max(1, math.ceil(end_s / bin_s - 1e-9))
    acc = [0.0] * nbins
    for t, nbytes in deliveries:
        k = int(t / bin_s)
        if 0 <= t and k < nbins:
            acc[k] += nbytes
    scale = 8 / (bin_s * 1e6)
    return [k * bin_s for k in range(nbins)], [b * scale for b in acc]


def outstanding_intervals(messages: Iterable[Message], end_s: float) -> list[tuple[float, float]]:
    """Merged intervals during which at least one message was posted and not complete."""
    spans = sorted(
        (m.start_s, min(end_s, m.done_s) if m.done_s is not None else end_s)
        for m in messages
        if m.start_s < end_s
    )
    merged: list[tuple[float, float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def max_stall_ms(
    delivery_times: Iterable[float], outstanding: Sequence[tuple[float, float]]
) -> float:
    """Longest gap between deliveries (or an interval's edges) inside the outstanding intervals."""
    times = sorted(delivery_times)
    worst = 0.0
    for a, b in outstanding:
        lo, hi = bisect.bisect_right(times, a), bisect.bisect_left(times, b)
        points = [a, *times[lo:hi], b]
        worst = max(worst, max(q - p for p, q in zip(points, points[1:], strict=False)))
    return worst * 1000.0


def failover(
    bin_times: Sequence[float],
    mbps: Sequence[float],
    outstanding: Sequence[tuple[float, float]],
    failure_times: Sequence[float],
    *,
    complete: bool,
    capacity_ratios: Sequence[float] | None = None,
    fallback_mbps: float | None = None,
    bin_s: float = BIN_S,
    rhythm_s: float | None = None,
    failure_ends: Sequence[float] | None = None,
    scale: float = 1.0,
) -> tuple[Failover, list[Failover]]:
    """Failover time of the run (the worst over its failures) and of each failure.

    Windows, chosen so that neither a slow start nor a retransmission burst fools it:
    - healthy level = median bin goodput over the `PRE_WINDOW_S` before the *first* failure
      (skipping the workload's first `WARMUP_S`); one baseline for all failures, so a second
      failure cannot hide behind the first one's dip. With fewer than 3 such bins it falls back
      to `fallback_mbps` (the runner passes FALLBACK_EFFICIENCY x bottleneck).
    - target = RECOVERY_FRACTION x healthy x capacity ratio, the ratio being what the damaged
      fabric can still carry over what the healthy one could (1 unless capacity was removed,
      e.g. 0.5 for one of two planes down).
    - recovered at the first bin, from the one holding the failure on, from which the mean over
      `SUSTAIN_S`, with every bin capped at the healthy level, reaches the target; the cap stops
      one burst of held-back bytes from counting as recovery. Finishing all outstanding data
      counts as recovered at that moment. Resolution: one bin (10 ms).
    - recovery only counts after the last *outage* -- a window whose mean is below
      OUTAGE_FRACTION of the healthy level -- that begins before the failure ends
      (`failure_ends`: its heal, or never): data already past the dead link keeps goodput up
      for a moment after the failure, and a transport that collapses 100 ms later has not
      recovered at 0 ms (mptcp read 0 ms in allreduce-under-failure with a 1.9 s stall).
    - a failure while nothing is outstanding is "not-exercised"; still no recovery when the run
      ended with data outstanding is "not-recovered".

    `rhythm_s` (a step workload's healthy step time) changes the time scale, not the
    definition: an all-reduce's goodput dips at every phase and barrier, so a 50 ms window and a
    median bin measured the workload's rhythm (57 ms to 1.5 s for one scenario). With it, the
    healthy level is the *mean* over the pre-window (at least two steps long), the sustain
    window is one step, and bins are capped at the pre-window's best bin instead of the mean:
    a step-long window at the healthy pace then averages the healthy level wherever it starts.

    `scale` is the fabric's time scale (topologies.timing.time_scale): the windows above were
    tuned on the reference fabric and shrink with the base RTT (a 10 Gbps, 1 µs fabric's
    pre-window is ~10 ms, not 0.5 s); the caller scales `bin_s` alike.
    """
    if not failure_times:
        return Failover(None, "no-failure"), []
    ratios = list(capacity_ratios) if capacity_ratios is not None else [1.0] * len(failure_times)
    first = min(failure_times)
    warmup = WARMUP_S * scale
    pre_window = PRE_WINDOW_S * scale
    pre_window = pre_window if rhythm_s is None else max(pre_window, 2 * rhythm_s)
    pre = [
        v
        for t, v in zip(bin_times, mbps, strict=True)
        if first - pre_window <= t
        and t + bin_s <= first + 1e-9
        and _warm(t, bin_s, outstanding, warmup)
    ]
    cap = None
    if len(pre) >= 3:
        if rhythm_s is None:
            healthy = statistics.median(pre)
        else:
            healthy, cap = statistics.fmean(pre), max(pre)
    elif fallback_mbps is not None:
        healthy = fallback_mbps
    else:
        healthy = None
    if cap is None:
        cap = healthy
    last_end = outstanding[-1][1] if outstanding else 0.0
    sustain_s = SUSTAIN_S * scale if rhythm_s is None else max(SUSTAIN_S * scale, rhythm_s)
    sustain = max(1, round(sustain_s / bin_s))
    each: list[Failover] = []
    if failure_ends is None:  # each failure lasts until the next one (or the end of the run)
        later = sorted(failure_times)
        failure_ends = [next((t for t in later if t > f), math.inf) for f in failure_times]
    ends = list(failure_ends)
    for t_fail, ratio, t_end in zip(failure_times, ratios, ends, strict=True):
        span = next(((a, b) for a, b in outstanding if a <= t_fail < b), None)
        if span is None or healthy is None or healthy <= 0:
            each.append(Failover(None, "not-exercised"))
            continue
        # The run's data is done at `last_end` only if everything completed; otherwise the
        # outstanding interval ending at `last_end` was cut by the end of the run.
        span_done = complete or span[1] < last_end
        target = RECOVERY_FRACTION * healthy * min(1.0, max(0.0, ratio))

        span_end = span[1]

        def mean_at(k: int, full: bool = False) -> float | None:
            window = [
                min(mbps[j], cap)
                for j in range(k, min(k + sustain, len(mbps)))
                if bin_times[j] + bin_s <= span_end + 1e-9  # noqa: B023 - used within the turn
            ]
            if not window or (full and len(window) < sustain):
                return None
            return sum(window) / len(window)

        # Start with the bin holding the failure: a failure that costs nothing reads 0 ms --
        # unless an outage still begins while the failure lasts (data already past the dead
        # link kept goodput up for a moment), then recovery is looked for after the last one.
        k = k_fail = int(t_fail / bin_s + 1e-9)
        k_end = min(len(mbps), int(min(t_end, span[1]) / bin_s + 1e-9))
        outage = OUTAGE_FRACTION * target / RECOVERY_FRACTION
        for j in range(k_fail, k_end - sustain + 1):  # windows that end before the failure does
            m = mean_at(j, full=True)
            if m is not None and m < outage:
                k = j + 1
        result: Failover | None = None
        while True:
            m = mean_at(k)
            if m is None:
                if span_done:
                    result = Failover(max(0.0, span[1] - t_fail) * 1000.0, "recovered")
                else:
                    result = Failover(None, "not-recovered")
                break
            if m >= target:
                result = Failover(max(0.0, bin_times[k] - t_fail) * 1000.0, "recovered")
                break
            k += 1
        each.append(result)
    if any(f.status == "not-recovered" for f in each):
        return Failover(None, "not-recovered"), each
    done = [f.ms for f in each if f.ms is not None]
    if not done:
        return Failover(None, "not-exercised"), each
    return Failover(max(done), "recovered"), each


def _warm(
    t: float, bin_s: float, intervals: Sequence[tuple[float, float]], warmup: float = WARMUP_S
) -> bool:
    """The bin [t, t+bin_s) lies inside one outstanding interval, past its first `warmup`."""
    return any(lo + warmup <= t + 1e-9 and t + bin_s <= hi + 1e-9 for lo, hi in intervals)


def percentiles(values: Iterable[float]) -> dict[str, float | None]:
    """Nearest-rank P50/P99/P100 (contracts.stats, the project's one rule); infinite values
    (unfinished steps) come out as None."""
    data = sorted(values)
    out: dict[str, float | None] = {}
    for name, p in (("p50", 50), ("p99", 99), ("p100", 100)):
        v = percentile(data, p, presorted=True)
        out[name] = None if v is None or math.isinf(v) else v
    return out


def step_rhythm_s(steps: Iterable[tuple[float, float | None]], before: float) -> float | None:
    """Median duration of the steps that finished before `before` (None unless at least two)."""
    done = [end - start for start, end in steps if end is not None and end <= before]
    return statistics.median(done) if len(done) >= 2 else None


def step_times_ms(steps: Iterable[tuple[float, float | None]]) -> tuple[list[float], int]:
    """Durations of finished steps in ms, and how many steps never finished."""
    finished, unfinished = [], 0
    for start, end in steps:
        if end is None:
            unfinished += 1
        else:
            finished.append((end - start) * 1000.0)
    return finished, unfinished


# --------------------------------------------------------------------------- expectations


def check_expectations(expect: Expect, measured: Mapping[str, Any]) -> dict[str, Any]:
    """Compare measured values with the scenario's `expect`; absent expectations are skipped.

    `measured` maps expectation names to values: delivered_all (bool), max_stall_ms,
    min_goodput_fraction (goodput / bottleneck), max_failover_ms and max_p100_over_p50 (None when
    not measurable, e.g. never recovered or a step never finished, which fails the check).
    """
    checks = []
    for name, limit in expect.model_dump(exclude={"statistic"}).items():
        if limit is None:
            continue
        value = measured.get(name)
        if name == "delivered_all":
            passed = (value is True) if limit else True
        elif value is None:
            passed = False
        elif name.startswith("max_"):
            passed = value <= limit
        else:
            passed = value >= limit
        shown = _r(value) if isinstance(value, float) else value
        checks.append({"name": name, "limit": limit, "value": shown, "passed": bool(passed)})
    return {"passed": all(c["passed"] for c in checks), "checks": checks}


# --------------------------------------------------------------------------- assembly


def measure(
    run: TransportRun, scenario: Scenario, applied: Sequence[AppliedEvent]
) -> TransportMetrics:
    """All metrics and expectation checks of one transport's run."""
    delivered = sum(n for _, n in run.deliveries)
    expected = total_bytes(scenario)
    complete = delivered >= expected and all(m.done_s is not None for m in run.messages)
    outstanding = outstanding_intervals(run.messages, run.end_s)
    start = min((m.start_s for m in run.messages), default=0.0)
    if complete and run.messages:
        active_end = max(m.done_s for m in run.messages if m.done_s is not None)
    else:
        active_end = run.end_s
    active = max(active_end - start, 1e-9)
    goodput = delivered * 8 / active / 1e6
    bottleneck = capacity_mbps(scenario)  # math.inf on unshaped links (link_mbps 0)
    shaped = bottleneck < math.inf

    scale = time_scale(scenario.topology.params())  # windows follow the fabric's base RTT
    bin_s = BIN_S * scale
    times, mbps = goodput_series(run.deliveries, run.end_s, bin_s)
    ordered = sorted(applied, key=lambda a: a.time)
    fail_times, ratios, so_far = [], [], []
    applied_times = [a.time for a in ordered if a.applied_at is not None]
    ends = []
    for a in ordered:
        if a.applied_at is None:  # never applied: it did not happen to this run
            continue
        so_far.append(a.event)
        if a.event.is_failure:
            fail_times.append(a.time)
            after = capacity_mbps(scenario, so_far)
            ratios.append(after / bottleneck if shaped and bottleneck > 0 else 1.0)
            # The failure lasts until the next event changes the fabric (a heal, usually).
            ends.append(next((t for t in applied_times if t > a.time), math.inf))
    fo, _ = failover(
        times,
        mbps,
        outstanding,
        fail_times,
        complete=complete,
        capacity_ratios=ratios,
        fallback_mbps=FALLBACK_EFFICIENCY * bottleneck if shaped else None,
        rhythm_s=step_rhythm_s(run.steps, min(fail_times, default=math.inf)),
        failure_ends=ends,
        bin_s=bin_s,
        scale=scale,
    )
    step_ms, unfinished = step_times_ms(run.steps)
    pct = percentiles([*step_ms, *([math.inf] * unfinished)])
    metrics = TransportMetrics(
        transport=run.transport,
        delivered_bytes=delivered,
        expected_bytes=expected,
        delivered_all=complete,
        goodput_mbps=goodput,
        bottleneck_mbps=bottleneck,
        max_stall_ms=max_stall_ms((t for t, n in run.deliveries if n > 0), outstanding),
        failover=fo,
        retransmits=dict(run.retransmits),
        trims=run.trims,
        step_ms=step_ms,
        steps_unfinished=unfinished,
        step_percentiles=pct,
        bin_times=times,
        goodput_bins=mbps,
        expectations={},
        ev_bytes=run.ev_bytes,
        flows=flow_entries(run.flows, run.end_s),
        flow_bins={
            flow_name(src, dst): goodput_series(samples, run.end_s, bin_s)[1]
            for (src, dst), samples in run.flow_deliveries.items()
        },
        trace=_trace(run, scenario) if run.trace_iters else None,
        trace_records=(run.trace_iters, run.trace_nodes),
    )
    metrics.expectations = check_expectations(
        scenario.expect,
        {
            "delivered_all": metrics.delivered_all,
            "max_stall_ms": metrics.max_stall_ms,
            "min_goodput_fraction": metrics.goodput_fraction,
            "max_failover_ms": metrics.failover.ms,
            "max_p100_over_p50": metrics.p100_over_p50,
        },
    )
    return metrics


def _trace(run: TransportRun, scenario: Scenario) -> dict[str, Any]:
    """summary.json's `trace`, its network-held iterations blamed on a link from the run's EV
    failures and the paths the fabric's static routes give them."""
    fab, reply_of = scenario.fabric(), reply_pairs(scenario, run.transport)

    def links_of(f: Failure) -> set[tuple[str, str]]:
        return round_trip_links(fab, f, scenario.seed, reply_of)

    return trace_summary(run.trace_iters, run.trace_nodes, run.ev_failures, links_of)


def emulation_warning(emulation: Emulation) -> str | None:
    """The loud line every output carries when the machine, not the network, lost packets."""
    if emulation.kernel_drops <= 0:
        return None
    return (
        f"EMULATION OVERLOADED: the kernel dropped {emulation.kernel_drops} packets that switch or "
        "endpoint processes did not read in time; losses and stalls in this run may be the "
        "machine's, not the protocol's. Lower link_mbps or the workload and run again."
    )


def event_entry(applied: AppliedEvent) -> dict[str, Any]:
    """One `events` item of summary.json: at, applied_at, action, then the action's fields."""
    fields = applied.event.model_dump(exclude_none=True)
    entry: dict[str, Any] = {
        "at": fields.pop("at"),
        "applied_at": _r(applied.applied_at, 4),
        "action": fields.pop("action"),
    }
    entry.update(fields)
    return entry


def build_summary(
    scenario: Scenario,
    *,
    events: Sequence[AppliedEvent],
    transports: Mapping[str, TransportMetrics],
    emulation: Emulation,
    started: datetime | str | None = None,
) -> dict[str, Any]:
    """summary.json exactly as docs/design.md fixes it.

    Numbers are null where they do not exist (failover_ms without a recovered failure, step
    times without an all-reduce, P100 when a step never finished). When kernel_drops > 0,
    `emulation` also carries a `warning` sentence (see `emulation_warning`): the one addition
    to the fixed shape, present only then, so nobody reads such a run as a protocol result.
    """
    if started is None:
        started = datetime.now(timezone.utc)
    if isinstance(started, datetime):
        started = started.isoformat(timespec="seconds")
    emu: dict[str, Any] = {
        "cpu_util": _r(emulation.cpu_util),
        "timer_jitter_us_p99": _r(emulation.timer_jitter_us_p99),
        "kernel_drops": int(emulation.kernel_drops),
    }
    warning = emulation_warning(emulation)
    if warning:
        emu["warning"] = warning
    return {
        "scenario": scenario.name,
        "started": started,
        "seed": scenario.seed,
        "topology": scenario.topology.model_dump(exclude_none=True),
        "events": [event_entry(a) for a in sorted(events, key=lambda a: a.event.at)],
        "transports": {name: m.summary_entry() for name, m in transports.items()},
        "emulation": emu,
    }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)
